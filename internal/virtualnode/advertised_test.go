package virtualnode

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

func resources(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func quantities(rl corev1.ResourceList) map[string]string {
	out := map[string]string{}
	for n, q := range rl {
		out[string(n)] = q.String()
	}
	return out
}

// TestAdvertised: the Node of a virtual node advertises, per resource, at
// most what the VirtualNode says, what the consumer's ResourceSlices for the
// provider requested and what the provider granted them; granted amounts
// cut or ignored give one Warning Event per change.
func TestAdvertised(t *testing.T) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, corev1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	const ns = "annex-peer-beta"
	vn := &corev1alpha1.VirtualNode{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "beta"},
		Spec: corev1alpha1.VirtualNodeSpec{ClusterID: "beta", Resources: resources("cpu", "8", "memory", "16Gi", "pods", "50")}}
	slice := func(name, provider string, phase corev1alpha1.ResourceSlicePhase, spec, status corev1.ResourceList) *corev1alpha1.ResourceSlice {
		return &corev1alpha1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:   corev1alpha1.ResourceSliceSpec{ConsumerClusterID: "alpha", ProviderClusterID: provider, Resources: spec},
			Status: corev1alpha1.ResourceSliceStatus{Phase: phase, Resources: status}}
	}
	asked := resources("cpu", "8", "memory", "16Gi", "pods", "50")
	for _, tc := range []struct {
		name   string
		slices []client.Object
		want   map[string]string
		events []string // substrings of the Events, in order
	}{
		{name: "no ResourceSlice: the VirtualNode as it is", want: map[string]string{"cpu": "8", "memory": "16Gi", "pods": "50"}},
		{name: "honest grant", slices: []client.Object{slice("peering", "beta", corev1alpha1.ResourceSliceAccepted, asked, asked)},
			want: map[string]string{"cpu": "8", "memory": "16Gi", "pods": "50"}},
		{name: "a smaller grant than the VirtualNode says", slices: []client.Object{slice("peering", "beta", corev1alpha1.ResourceSliceAccepted, asked, resources("cpu", "2", "memory", "16Gi", "pods", "50"))},
			want: map[string]string{"cpu": "2", "memory": "16Gi", "pods": "50"}},
		{name: "inflated, negative and unasked amounts",
			slices: []client.Object{slice("peering", "beta", corev1alpha1.ResourceSliceAccepted, asked,
				resources("cpu", "1000", "memory", "-1Gi", "pods", "50", "nvidia.com/gpu", "8"))},
			want: map[string]string{"cpu": "8", "pods": "50"},
			events: []string{"Warning ProviderGrantRefused provider beta: status.resources[cpu] = 1k is more than the 8 requested: 8 advertised; " +
				"status.resources[memory] = -1Gi is not a positive amount: ignored, memory is not advertised; " +
				"status.resources[nvidia.com/gpu] = 8 was not requested: not advertised"}},
		{name: "denied: nothing advertised", slices: []client.Object{slice("peering", "beta", corev1alpha1.ResourceSliceDenied, asked, nil)},
			want: map[string]string{}},
		{name: "another provider's slice does not count", slices: []client.Object{slice("other", "gamma", corev1alpha1.ResourceSliceAccepted, asked, resources("cpu", "1"))},
			want: map[string]string{"cpu": "8", "memory": "16Gi", "pods": "50"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(tc.slices...).Build()
			rec := events.NewFakeRecorder(10)
			r := &Reconciler{client: c, deps: &nodeDeps{recorder: rec}, grantReported: map[types.NamespacedName]string{}}
			ctx := context.Background()
			for range 2 { // the second time reports nothing new
				got, err := r.advertised(ctx, vn)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.want, quantities(got.Spec.Resources)); diff != "" {
					t.Errorf("advertised (-want +got):\n%s", diff)
				}
			}
			if got := vn.Spec.Resources.Cpu().String(); got != "8" {
				t.Errorf("the VirtualNode itself was changed: cpu %s", got)
			}
			var got []string
			for len(rec.Events) > 0 {
				got = append(got, <-rec.Events)
			}
			if len(got) != len(tc.events) {
				t.Fatalf("events %q, want %d", got, len(tc.events))
			}
			for i, want := range tc.events {
				if !strings.Contains(got[i], want) {
					t.Errorf("event %q, want it to contain %q", got[i], want)
				}
			}
		})
	}
}
