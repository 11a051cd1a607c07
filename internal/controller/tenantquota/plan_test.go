package tenantquota

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// quota is a share with spec.hard, status.hard and status.used of
// ConfigMaps (a negative status value leaves it out: not counted yet).
func quota(spec, statusHard, used int64) *corev1.ResourceQuota {
	q := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: ShareQuotaName},
		Spec:       corev1.ResourceQuotaSpec{Hard: cms(spec)},
		Status:     corev1.ResourceQuotaStatus{Hard: corev1.ResourceList{}, Used: corev1.ResourceList{}},
	}
	if statusHard >= 0 {
		q.Status.Hard = cms(statusHard)
	}
	if used >= 0 {
		q.Status.Used = cms(used)
	}
	return q
}

func cms(n int64) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceConfigMaps: *resource.NewQuantity(n, resource.DecimalSI)}
}

func TestPlan(t *testing.T) {
	budget := cms(100)
	tests := []struct {
		name      string
		budget    corev1.ResourceList
		shares    []Share
		want      []Change
		wantRetry bool
	}{{
		name:   "the first namespace gets the whole budget",
		shares: []Share{{Namespace: "a", Active: true}},
		want:   []Change{{Namespace: "a", Hard: cms(100)}},
	}, {
		name:   "a namespace being deleted gets no share",
		shares: []Share{{Namespace: "a"}},
	}, {
		name:   "steady: nothing to write",
		shares: []Share{{Namespace: "a", Active: true, Quota: quota(100, 100, 10)}},
	}, {
		name: "a second namespace: the first is lowered, the second waits for it",
		shares: []Share{
			{Namespace: "a", Active: true, Quota: quota(100, 100, 10)},
			{Namespace: "b", Active: true},
		},
		want:      []Change{{Namespace: "a", Hard: cms(55)}, {Namespace: "b", Hard: cms(0)}},
		wantRetry: true,
	}, {
		name: "once the lowering is counted, the second is raised",
		shares: []Share{
			{Namespace: "b", Active: true, Quota: quota(0, 0, 0)},
			{Namespace: "a", Active: true, Quota: quota(55, 55, 10)},
		},
		want: []Change{{Namespace: "b", Hard: cms(45)}},
	}, {
		name: "a raise that fits only in part is made in part",
		shares: []Share{
			{Namespace: "a", Active: true, Quota: quota(55, 70, 10)},
			{Namespace: "b", Active: true, Quota: quota(0, 0, 0)},
		},
		want:      []Change{{Namespace: "b", Hard: cms(30)}},
		wantRetry: true,
	}, {
		name: "headroom at half an even split: nothing moves",
		shares: []Share{
			{Namespace: "a", Active: true, Quota: quota(55, 55, 40)},
			{Namespace: "b", Active: true, Quota: quota(45, 45, 0)},
		},
	}, {
		name: "headroom under half an even split: divided again",
		shares: []Share{
			{Namespace: "a", Active: true, Quota: quota(55, 55, 41)},
			{Namespace: "b", Active: true, Quota: quota(45, 45, 0)},
		},
		want:      []Change{{Namespace: "b", Hard: cms(29)}},
		wantRetry: true,
	}, {
		name: "the budget used up: nothing moves",
		shares: []Share{
			{Namespace: "a", Active: true, Quota: quota(60, 60, 60)},
			{Namespace: "b", Active: true, Quota: quota(40, 40, 40)},
		},
	}, {
		name:   "a budget lowered below what is used: lowered to the usage",
		budget: cms(50),
		shares: []Share{{Namespace: "a", Active: true, Quota: quota(100, 100, 80)}},
		want:   []Change{{Namespace: "a", Hard: cms(80)}},
	}, {
		name: "a namespace being deleted keeps what it uses, no more",
		shares: []Share{
			{Namespace: "a", Quota: quota(100, 100, 30)},
			{Namespace: "b", Active: true},
		},
		want:      []Change{{Namespace: "a", Hard: cms(30)}, {Namespace: "b", Hard: cms(0)}},
		wantRetry: true,
	}, {
		name: "a share not counted yet counts at its limit",
		shares: []Share{
			{Namespace: "a", Active: true, Quota: quota(100, -1, -1)},
			{Namespace: "b", Active: true},
		},
		want:      []Change{{Namespace: "a", Hard: cms(50)}, {Namespace: "b", Hard: cms(0)}},
		wantRetry: true,
	}, {
		name: "the remainder goes to the first namespaces by name",
		shares: []Share{
			{Namespace: "c", Active: true, Quota: quota(0, 0, 0)},
			{Namespace: "b", Active: true, Quota: quota(0, 0, 0)},
			{Namespace: "a", Active: true, Quota: quota(0, 0, 0)},
		},
		want: []Change{{Namespace: "a", Hard: cms(34)}, {Namespace: "b", Hard: cms(33)}, {Namespace: "c", Hard: cms(33)}},
	}, {
		name:   "a resource added to the budget is divided too",
		budget: corev1.ResourceList{corev1.ResourceConfigMaps: resource.MustParse("100"), corev1.ResourceSecrets: resource.MustParse("10")},
		shares: []Share{{Namespace: "a", Active: true, Quota: quota(100, 100, 0)}},
		want: []Change{{Namespace: "a", Hard: corev1.ResourceList{
			corev1.ResourceConfigMaps: *resource.NewQuantity(100, resource.DecimalSI),
			corev1.ResourceSecrets:    *resource.NewQuantity(10, resource.DecimalSI),
		}}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := budget
			if tt.budget != nil {
				b = tt.budget
			}
			got, retry := Plan(b, tt.shares)
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
			if retry != tt.wantRetry {
				t.Errorf("retry %v, want %v", retry, tt.wantRetry)
			}
		})
	}
}

// TestPlanNeverOvercommits runs namespaces that create and delete objects
// as fast as the API server's quota admission lets them (it checks
// status.hard), a quota controller that copies spec.hard to status.hard
// late, namespaces that come and go, and Plan applied now and then: at no
// step do the namespaces use more than the budget, or does the admission
// enforce limits that add up to more than the budget.
func TestPlanNeverOvercommits(t *testing.T) {
	const total = 20
	rng := rand.New(rand.NewPCG(1, 2)) //nolint:gosec // G404: a reproducible simulation, not a secret
	type ns struct {
		active                 bool
		spec, statusHard, used int64
		exists                 bool // has a share
	}
	spaces := map[string]*ns{"a": {active: true}, "b": {active: true}}
	names := []string{"a", "b", "c", "d"}
	for step := range 20000 {
		n := names[rng.IntN(len(names))]
		s := spaces[n]
		switch rng.IntN(6) {
		case 0: // create an object
			if s != nil && s.active && s.exists && s.used < s.statusHard {
				s.used++
			}
		case 1: // delete one
			if s != nil && s.used > 0 {
				s.used--
			}
		case 2: // the quota controller
			if s != nil && s.exists {
				s.statusHard = s.spec
			}
		case 3: // a namespace comes, starts its deletion, or is gone
			switch {
			case s == nil:
				spaces[n] = &ns{active: true}
			case s.active:
				s.active = false
			case s.used == 0:
				delete(spaces, n)
			}
		default:
			var shares []Share
			for name, s := range spaces {
				sh := Share{Namespace: name, Active: s.active}
				if s.exists {
					sh.Quota = quota(s.spec, s.statusHard, s.used)
				}
				shares = append(shares, sh)
			}
			changes, _ := Plan(cms(total), shares)
			for _, c := range changes {
				s := spaces[c.Namespace]
				q := c.Hard[corev1.ResourceConfigMaps]
				s.spec = q.Value()
				if !s.exists {
					s.exists, s.statusHard = true, s.spec
				}
			}
		}
		var used, enforced int64
		for _, s := range spaces {
			used += s.used
			if s.exists {
				enforced += max(s.statusHard, s.used)
			}
		}
		if used > total || enforced > total {
			t.Fatalf("step %d: %d used, limits enforced add up to %d, budget %d", step, used, enforced, total)
		}
	}
}
