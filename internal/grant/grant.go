// Package grant decides what a consumer advertises of the resources a
// provider granted it. A provider writes the granted amounts
// (ResourceSlice status.resources) itself, so they are its word: a
// consumer's virtual node never advertises more of a resource than the
// consumer asked for (ResourceSlice spec.resources), never a resource it
// did not ask for, and never an amount that is not positive (nor a
// fraction of a pod). Every granted amount that is cut or ignored is a
// Problem naming its field, for an Event.
//
// The functions are pure: `annexctl peer` uses them when it writes the
// VirtualNode, the agent's virtual nodes when they build their Node
// (internal/virtualnode).
package grant

import (
	"fmt"
	"math"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

// EventReason is the reason of the Warning Event that reports the granted
// amounts a consumer cut or ignored.
const EventReason = "ProviderGrantRefused"

// Problem is one granted amount that is not advertised as the provider
// wrote it.
type Problem struct {
	// Field is where the amount was, e.g. "status.resources[cpu]".
	Field string
	// Message says what is wrong and what is advertised instead.
	Message string
}

func (p Problem) String() string { return p.Field + " " + p.Message }

// Describe joins problems into one sentence for an Event or a log line.
func Describe(problems []Problem) string {
	parts := make([]string, len(problems))
	for i, p := range problems {
		parts[i] = p.String()
	}
	return strings.Join(parts, "; ")
}

func field(name corev1.ResourceName) string {
	return fmt.Sprintf("status.resources[%s]", name)
}

// Advertise returns what may be advertised of one grant: for each resource
// that requested names and granted gives a valid amount, the smaller of
// the two. A granted amount is valid when it is positive and, for pods, a
// whole number. Resources granted but not requested, invalid amounts and
// amounts above the request are reported, sorted by resource name; a
// resource requested but not granted is simply not advertised (a provider
// may grant less).
func Advertise(requested, granted corev1.ResourceList) (corev1.ResourceList, []Problem) {
	out := corev1.ResourceList{}
	var problems []Problem
	names := make([]corev1.ResourceName, 0, len(granted))
	for name := range granted {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		g := granted[name]
		want, asked := requested[name]
		switch {
		case !asked:
			problems = append(problems, Problem{field(name), fmt.Sprintf("= %s was not requested: not advertised", g.String())})
		case g.Sign() <= 0:
			problems = append(problems, Problem{field(name), fmt.Sprintf("= %s is not a positive amount: ignored, %s is not advertised", g.String(), name)})
		case name == corev1.ResourcePods && !whole(g):
			problems = append(problems, Problem{field(name), fmt.Sprintf("= %s is not a whole number of pods: ignored, pods is not advertised", g.String())})
		case g.Cmp(want) > 0:
			problems = append(problems, Problem{field(name), fmt.Sprintf("= %s is more than the %s requested: %s advertised", g.String(), want.String(), want.String())})
			out[name] = want.DeepCopy()
		default:
			out[name] = g.DeepCopy()
		}
	}
	return out, problems
}

// maxInt64 is the largest amount an int64 holds.
var maxInt64 = *resource.NewQuantity(math.MaxInt64, resource.DecimalSI)

// whole reports whether q is a whole number (amounts beyond an int64 count
// as whole: they are cut to the request anyway).
func whole(q resource.Quantity) bool {
	if _, ok := q.AsInt64(); ok {
		return true
	}
	return q.Cmp(maxInt64) > 0
}

// SliceProblems are the problems of one ResourceSlice's grant.
type SliceProblems struct {
	Slice    *corev1alpha1.ResourceSlice
	Problems []Problem
}

// FromSlices returns what the consumer may advertise of provider's
// grants: the sum, over the ResourceSlices that provider Accepted (being
// deleted or naming another provider: left out), of Advertise of each.
// found is false when no slice names provider at all. problems lists the
// slices with problems, in the order given.
func FromSlices(provider string, list []corev1alpha1.ResourceSlice) (out corev1.ResourceList, found bool, problems []SliceProblems) {
	out = corev1.ResourceList{}
	for i := range list {
		rs := &list[i]
		if rs.Spec.ProviderClusterID != provider || !rs.DeletionTimestamp.IsZero() {
			continue
		}
		found = true
		if rs.Status.Phase != corev1alpha1.ResourceSliceAccepted {
			continue
		}
		adv, p := Advertise(rs.Spec.Resources, rs.Status.Resources)
		if len(p) > 0 {
			problems = append(problems, SliceProblems{Slice: rs, Problems: p})
		}
		for name, q := range adv {
			sum := out[name]
			sum.Add(q)
			out[name] = sum
		}
	}
	return out, found, problems
}

// Cap returns, for each resource in both a and b, the smaller amount; a
// resource in only one of them is left out.
func Cap(a, b corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	for name, qa := range a {
		qb, ok := b[name]
		if !ok {
			continue
		}
		if qb.Cmp(qa) < 0 {
			out[name] = qb.DeepCopy()
		} else {
			out[name] = qa.DeepCopy()
		}
	}
	return out
}
