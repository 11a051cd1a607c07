package grant

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

// list builds a ResourceList from name=quantity pairs.
func list(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

// strs is a ResourceList as comparable strings (each amount's value, in
// canonical form).
func strs(rl corev1.ResourceList) map[string]string {
	out := map[string]string{}
	for n, q := range rl {
		c := resource.MustParse(q.String())
		out[string(n)] = c.String()
	}
	return out
}

func TestAdvertise(t *testing.T) {
	asked := list("cpu", "8", "memory", "16Gi", "pods", "50")
	for _, tc := range []struct {
		name      string
		requested corev1.ResourceList
		granted   corev1.ResourceList
		want      map[string]string
		problems  []Problem
	}{
		{name: "granted as asked", requested: asked, granted: list("cpu", "8", "memory", "16Gi", "pods", "50"),
			want: map[string]string{"cpu": "8", "memory": "16Gi", "pods": "50"}},
		{name: "granted less", requested: asked, granted: list("cpu", "4", "memory", "8Gi", "pods", "50"),
			want: map[string]string{"cpu": "4", "memory": "8Gi", "pods": "50"}},
		{name: "granted more: cut to the request", requested: asked, granted: list("cpu", "1000", "memory", "1Ei", "pods", "50"),
			want: map[string]string{"cpu": "8", "memory": "16Gi", "pods": "50"},
			problems: []Problem{
				{"status.resources[cpu]", "= 1k is more than the 8 requested: 8 advertised"},
				{"status.resources[memory]", "= 1Ei is more than the 16Gi requested: 16Gi advertised"},
			}},
		{name: "not requested: not advertised", requested: asked, granted: list("cpu", "8", "nvidia.com/gpu", "8"),
			want:     map[string]string{"cpu": "8"},
			problems: []Problem{{"status.resources[nvidia.com/gpu]", "= 8 was not requested: not advertised"}}},
		{name: "requested, not granted: not advertised", requested: asked, granted: list("cpu", "2"),
			want: map[string]string{"cpu": "2"}},
		{name: "negative and zero ignored", requested: asked, granted: list("cpu", "-1", "memory", "0", "pods", "50"),
			want: map[string]string{"pods": "50"},
			problems: []Problem{
				{"status.resources[cpu]", "= -1 is not a positive amount: ignored, cpu is not advertised"},
				{"status.resources[memory]", "= 0 is not a positive amount: ignored, memory is not advertised"},
			}},
		{name: "a fraction of a pod ignored", requested: asked, granted: list("pods", "1500m"),
			want:     map[string]string{},
			problems: []Problem{{"status.resources[pods]", "= 1500m is not a whole number of pods: ignored, pods is not advertised"}}},
		{name: "an absurd amount is cut", requested: asked, granted: list("pods", "1e999999"),
			want:     map[string]string{"pods": "50"},
			problems: []Problem{{"status.resources[pods]", "= 1e999999 is more than the 50 requested: 50 advertised"}}},
		{name: "fractional cpu is fine", requested: asked, granted: list("cpu", "1500m"),
			want: map[string]string{"cpu": "1500m"}},
		{name: "nothing granted", requested: asked, granted: nil, want: map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, problems := Advertise(tc.requested, tc.granted)
			if diff := cmp.Diff(tc.want, strs(got)); diff != "" {
				t.Errorf("advertised (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.problems, problems); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFromSlices(t *testing.T) {
	slice := func(name, provider string, phase corev1alpha1.ResourceSlicePhase, spec, status corev1.ResourceList) corev1alpha1.ResourceSlice {
		return corev1alpha1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "annex-peer-beta", Name: name},
			Spec:   corev1alpha1.ResourceSliceSpec{ProviderClusterID: provider, Resources: spec},
			Status: corev1alpha1.ResourceSliceStatus{Phase: phase, Resources: status}}
	}
	deleting := slice("gone", "beta", corev1alpha1.ResourceSliceAccepted, list("cpu", "4"), list("cpu", "4"))
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	for _, tc := range []struct {
		name     string
		slices   []corev1alpha1.ResourceSlice
		want     map[string]string
		found    bool
		problems map[string]string // slice name → Describe
	}{
		{name: "no slice", want: map[string]string{}},
		{name: "another provider's slice", slices: []corev1alpha1.ResourceSlice{
			slice("peering", "gamma", corev1alpha1.ResourceSliceAccepted, list("cpu", "4"), list("cpu", "4"))},
			want: map[string]string{}},
		{name: "pending: found, nothing advertised", slices: []corev1alpha1.ResourceSlice{
			slice("peering", "beta", "", list("cpu", "4"), nil)},
			want: map[string]string{}, found: true},
		{name: "denied: nothing advertised", slices: []corev1alpha1.ResourceSlice{
			slice("peering", "beta", corev1alpha1.ResourceSliceDenied, list("cpu", "4"), list("cpu", "4"))},
			want: map[string]string{}, found: true},
		{name: "being deleted: left out", slices: []corev1alpha1.ResourceSlice{deleting}, want: map[string]string{}},
		{name: "two slices add up, each cut to its own request", slices: []corev1alpha1.ResourceSlice{
			slice("peering", "beta", corev1alpha1.ResourceSliceAccepted, list("cpu", "4", "pods", "10"), list("cpu", "400", "pods", "10")),
			slice("more", "beta", corev1alpha1.ResourceSliceAccepted, list("cpu", "2"), list("cpu", "2", "memory", "1Ti"))},
			want: map[string]string{"cpu": "6", "pods": "10"}, found: true,
			problems: map[string]string{
				"peering": "status.resources[cpu] = 400 is more than the 4 requested: 4 advertised",
				"more":    "status.resources[memory] = 1Ti was not requested: not advertised",
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, found, problems := FromSlices("beta", tc.slices)
			if diff := cmp.Diff(tc.want, strs(got)); diff != "" {
				t.Errorf("advertised (-want +got):\n%s", diff)
			}
			if found != tc.found {
				t.Errorf("found = %v, want %v", found, tc.found)
			}
			gotProblems := map[string]string{}
			for _, p := range problems {
				gotProblems[p.Slice.Name] = Describe(p.Problems)
			}
			if tc.problems == nil {
				tc.problems = map[string]string{}
			}
			if diff := cmp.Diff(tc.problems, gotProblems); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCap(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b corev1.ResourceList
		want map[string]string
	}{
		{name: "smaller of each", a: list("cpu", "8", "memory", "1Gi"), b: list("cpu", "4", "memory", "2Gi"),
			want: map[string]string{"cpu": "4", "memory": "1Gi"}},
		{name: "only in one: left out", a: list("cpu", "8", "pods", "10"), b: list("cpu", "8", "memory", "1Gi"),
			want: map[string]string{"cpu": "8"}},
		{name: "empty", a: nil, b: list("cpu", "1"), want: map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, strs(Cap(tc.a, tc.b))); diff != "" {
				t.Errorf("Cap (-want +got):\n%s", diff)
			}
		})
	}
}
