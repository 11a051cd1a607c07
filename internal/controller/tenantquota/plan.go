package tenantquota

import (
	"cmp"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Share is one remote namespace of a tenant and its ResourceQuota
// ShareQuotaName as the API server has it.
type Share struct {
	// Namespace is the remote namespace.
	Namespace string
	// Active is false while the namespace is being deleted (or the cache
	// does not show it): it gets no headroom (its limits are lowered to what
	// it uses when the budget is divided again), and what it holds still
	// counts until it is gone.
	Active bool
	// Quota is the namespace's ResourceQuota ShareQuotaName; nil when it has
	// none yet.
	Quota *corev1.ResourceQuota
}

// Change is a ResourceQuota ShareQuotaName to create (Quota of the Share is
// nil) or whose spec.hard to set.
type Change struct {
	Namespace string
	Hard      corev1.ResourceList
}

// Plan divides budget among the shares of one tenant. For each resource of
// the budget, the free part (budget minus what every namespace uses) is
// split evenly among the active namespaces, and a namespace's hard limit is
// what it uses plus its part of the free budget. So that a namespace that
// writes does not make every write rebalance every namespace, the limits
// are recomputed only when an active namespace has no quota (or no limit
// for the resource) yet, when one has less than half the headroom an even
// split would give it, or when the limits add up to more than the budget.
//
// The limits never add up to more than the budget, counting each namespace
// at cap = the largest of its spec.hard, its status.hard (what the API
// server's quota admission enforces until the quota controller has copied
// a new spec there) and its status.used. A limit is lowered at once; one is
// raised only when it fits beside every other namespace's cap, so a raise
// that needs another namespace's lowering to reach the quota controller
// first waits: retry is true then, and Plan is to be run again from fresh
// reads once it has.
func Plan(budget corev1.ResourceList, shares []Share) (changes []Change, retry bool) {
	shares = slices.Clone(shares)
	slices.SortFunc(shares, func(a, b Share) int { return cmp.Compare(a.Namespace, b.Namespace) })
	hard := make([]corev1.ResourceList, len(shares))
	changed := make([]bool, len(shares))
	for i, s := range shares {
		hard[i] = corev1.ResourceList{}
		if s.Quota != nil {
			hard[i] = s.Quota.Spec.Hard.DeepCopy()
		}
		changed[i] = s.Quota == nil && s.Active
	}
	for _, name := range slices.Sorted(maps.Keys(budget)) {
		limit := budget[name]
		total := limit.Value()
		used := make([]int64, len(shares))
		capOf := make([]int64, len(shares))
		var usedSum, capSum int64
		var active []int
		for i, s := range shares {
			used[i], capOf[i] = usage(s.Quota, name)
			usedSum += used[i]
			capSum += capOf[i]
			if s.Active {
				active = append(active, i)
			}
		}
		if len(active) == 0 {
			continue
		}
		free := max(total-usedSum, 0)
		want := make(map[int]int64, len(active))
		rebalance := capSum > total
		for k, i := range active {
			part := free / int64(len(active))
			if int64(k) < free%int64(len(active)) {
				part++
			}
			want[i] = used[i] + part
			spec, ok := specOf(shares[i].Quota, name)
			if !ok || 2*(spec-used[i]) < part {
				rebalance = true
			}
		}
		if !rebalance {
			continue
		}
		// Lower first: it frees nothing until the quota controller has
		// copied it, but it stops further use at once. A namespace being
		// deleted keeps what it uses until it is gone.
		for i, s := range shares {
			if !s.Active {
				want[i] = used[i]
			}
		}
		for i := range shares {
			if spec, ok := specOf(shares[i].Quota, name); ok && want[i] < spec {
				hard[i][name] = *resource.NewQuantity(want[i], resource.DecimalSI)
				changed[i] = true
			}
		}
		for _, i := range active {
			spec, ok := specOf(shares[i].Quota, name)
			if ok && want[i] <= spec {
				continue
			}
			// What fits beside every other namespace's cap.
			fit := min(want[i], total-(capSum-capOf[i]))
			if fit < want[i] {
				retry = true
			}
			if ok && fit <= spec {
				continue
			}
			fit = max(fit, 0)
			if ok {
				fit = max(fit, spec)
			}
			hard[i][name] = *resource.NewQuantity(fit, resource.DecimalSI)
			changed[i] = true
			if fit > capOf[i] {
				capSum += fit - capOf[i]
				capOf[i] = fit
			}
		}
	}
	for i, s := range shares {
		if changed[i] {
			changes = append(changes, Change{Namespace: s.Namespace, Hard: hard[i]})
		}
	}
	return changes, retry
}

// usage is what q's namespace uses of name and its cap (see Plan); both 0
// without a quota.
func usage(q *corev1.ResourceQuota, name corev1.ResourceName) (used, capacity int64) {
	if q == nil {
		return 0, 0
	}
	if v, ok := q.Status.Used[name]; ok {
		used = max(v.Value(), 0)
	}
	capacity = used
	for _, list := range []corev1.ResourceList{q.Spec.Hard, q.Status.Hard} {
		if v, ok := list[name]; ok {
			capacity = max(capacity, v.Value())
		}
	}
	return used, capacity
}

// specOf is q's spec.hard for name, if it has one.
func specOf(q *corev1.ResourceQuota, name corev1.ResourceName) (int64, bool) {
	if q == nil {
		return 0, false
	}
	v, ok := q.Spec.Hard[name]
	return v.Value(), ok
}
