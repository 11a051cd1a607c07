package resourceslice

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

var cmpOpts = []cmp.Option{cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })}

// rl builds a ResourceList from "name=quantity,..." and fails the test on error.
func rl(t *testing.T, s string) corev1.ResourceList {
	t.Helper()
	l, err := ParseResourceList(s)
	if err != nil {
		t.Fatalf("ParseResourceList(%q): %v", s, err)
	}
	return l
}

func slice(consumer string, res corev1.ResourceList) *corev1alpha1.ResourceSlice {
	return &corev1alpha1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: corev1alpha1.TenantNamespaceName("alpha"), Name: "alpha"},
		Spec:       corev1alpha1.ResourceSliceSpec{ConsumerClusterID: consumer, ProviderClusterID: "beta", Resources: res},
	}
}

func TestDecide(t *testing.T) {
	capacity := "cpu=32,memory=128Gi,pods=500"
	tests := []struct {
		name      string
		consumer  string // spec.consumerClusterID
		nsLabel   string
		request   string
		limit     string
		granted   string
		capacity  string
		accepted  bool
		want      Decision
		wantGrant string
	}{
		{
			name: "under limit", consumer: "alpha", nsLabel: "alpha",
			request: "cpu=4,memory=8Gi", limit: "cpu=16,memory=64Gi,pods=200", capacity: capacity,
			want: Decision{Accepted: true, Reason: corev1alpha1.ReasonResourcesGranted, Message: "granted cpu=4,memory=8Gi"}, wantGrant: "cpu=4,memory=8Gi",
		},
		{
			name: "over cpu limit", consumer: "alpha", nsLabel: "alpha",
			request: "cpu=64,memory=8Gi", limit: "cpu=16,memory=64Gi", capacity: "cpu=128,memory=128Gi",
			want: Decision{Reason: corev1alpha1.ReasonPolicyDenied, Message: "requested cpu 64 exceeds this provider's per-consumer limit 16"},
		},
		{
			name: "over memory limit", consumer: "alpha", nsLabel: "alpha",
			request: "cpu=1,memory=100Gi", limit: "cpu=16,memory=64Gi", capacity: capacity,
			want: Decision{Reason: corev1alpha1.ReasonPolicyDenied, Message: "requested memory 100Gi exceeds this provider's per-consumer limit 64Gi"},
		},
		{
			name: "over the limit together with earlier grants", consumer: "alpha", nsLabel: "alpha",
			request: "cpu=10", limit: "cpu=16", granted: "cpu=8", capacity: capacity,
			want: Decision{Reason: corev1alpha1.ReasonPolicyDenied, Message: "requested cpu 10 plus 8 already granted to consumer alpha exceeds this provider's per-consumer limit 16"},
		},
		{
			name: "no limit", consumer: "alpha", nsLabel: "alpha",
			request: "cpu=30,memory=100Gi,pods=400", capacity: capacity,
			want: Decision{Accepted: true, Reason: corev1alpha1.ReasonResourcesGranted, Message: "granted cpu=30,memory=100Gi,pods=400"}, wantGrant: "cpu=30,memory=100Gi,pods=400",
		},
		{
			name: "resource not in the limit is limited by capacity only", consumer: "alpha", nsLabel: "alpha",
			request: "cpu=2,pods=300", limit: "cpu=16", capacity: capacity,
			want: Decision{Accepted: true, Reason: corev1alpha1.ReasonResourcesGranted, Message: "granted cpu=2,pods=300"}, wantGrant: "cpu=2,pods=300",
		},
		{
			name: "over capacity", consumer: "alpha", nsLabel: "alpha",
			request: "cpu=40,memory=8Gi", capacity: capacity,
			want: Decision{Reason: corev1alpha1.ReasonInsufficientResources, Message: "requested cpu 40 exceeds this provider's allocatable capacity 32"},
		},
		{
			name: "over capacity together with earlier grants", consumer: "alpha", nsLabel: "alpha",
			request: "cpu=10,memory=8Gi", granted: "cpu=24,memory=8Gi", capacity: capacity,
			want: Decision{Reason: corev1alpha1.ReasonInsufficientResources, Message: "requested cpu 10 plus 24 already granted to consumer alpha exceeds this provider's allocatable capacity 32"},
		},
		{
			name: "every resource over capacity is named", consumer: "alpha", nsLabel: "alpha",
			request: "cpu=10,memory=100Gi,pods=1", granted: "cpu=24,memory=100Gi,pods=1", capacity: capacity,
			want: Decision{Reason: corev1alpha1.ReasonInsufficientResources, Message: "requested cpu 10 plus 24 already granted to consumer alpha exceeds this provider's allocatable capacity 32; " +
				"requested memory 100Gi plus 100Gi already granted to consumer alpha exceeds this provider's allocatable capacity 128Gi"},
		},
		{
			name: "fits capacity together with earlier grants exactly", consumer: "alpha", nsLabel: "alpha",
			request: "cpu=8", granted: "cpu=24,memory=128Gi", capacity: capacity,
			want: Decision{Accepted: true, Reason: corev1alpha1.ReasonResourcesGranted, Message: "granted cpu=8"}, wantGrant: "cpu=8",
		},
		{
			name: "limit and capacity both exceeded with earlier grants: the limit is reported", consumer: "alpha", nsLabel: "alpha",
			request: "cpu=10", limit: "cpu=30", granted: "cpu=24", capacity: capacity,
			want: Decision{Reason: corev1alpha1.ReasonPolicyDenied, Message: "requested cpu 10 plus 24 already granted to consumer alpha exceeds this provider's per-consumer limit 30"},
		},
		{
			name: "resource the provider does not have", consumer: "alpha", nsLabel: "alpha",
			request: "cpu=1,nvidia.com/gpu=1", capacity: capacity,
			want: Decision{Reason: corev1alpha1.ReasonInsufficientResources, Message: "requested nvidia.com/gpu 1 exceeds this provider's allocatable capacity 0"},
		},
		{
			name: "limit and capacity both exceeded: the limit is reported", consumer: "alpha", nsLabel: "alpha",
			request: "cpu=64,memory=256Gi", limit: "cpu=16", capacity: capacity,
			want: Decision{Reason: corev1alpha1.ReasonPolicyDenied, Message: "requested cpu 64 exceeds this provider's per-consumer limit 16"},
		},
		{
			name: "consumer ID mismatch", consumer: "gamma", nsLabel: "alpha",
			request: "cpu=1", capacity: capacity,
			want: Decision{Reason: corev1alpha1.ReasonPolicyDenied, Message: `spec.consumerClusterID is "gamma" but namespace annex-tenant-alpha belongs to consumer "alpha": a consumer may not ask for resources on behalf of another`},
		},
		{
			name: "namespace without consumer label", consumer: "alpha", nsLabel: "",
			request: "cpu=1", capacity: capacity,
			want: Decision{Reason: corev1alpha1.ReasonUnknownConsumer, Message: "namespace annex-tenant-alpha has no annex.dev/remote-cluster-id label: it is not the tenant namespace of a peered consumer"},
		},
		{
			name: "accepted grant is kept when capacity shrinks", consumer: "alpha", nsLabel: "alpha",
			request: "cpu=40", capacity: capacity, accepted: true,
			want: Decision{Accepted: true, Reason: corev1alpha1.ReasonResourcesGranted, Message: "granted cpu=40"}, wantGrant: "cpu=40",
		},
		{
			name: "accepted grant is revoked when the consumer does not match", consumer: "gamma", nsLabel: "alpha",
			request: "cpu=1", capacity: capacity, accepted: true,
			want: Decision{Reason: corev1alpha1.ReasonPolicyDenied, Message: `spec.consumerClusterID is "gamma" but namespace annex-tenant-alpha belongs to consumer "alpha": a consumer may not ask for resources on behalf of another`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(Request{
				Slice:             slice(tc.consumer, rl(t, tc.request)),
				NamespaceConsumer: tc.nsLabel,
				AlreadyAccepted:   tc.accepted,
				Limit:             rl(t, tc.limit),
				GrantedToConsumer: rl(t, tc.granted),
				Capacity:          rl(t, tc.capacity),
			})
			if tc.wantGrant != "" {
				tc.want.Granted = rl(t, tc.wantGrant)
			}
			if diff := cmp.Diff(tc.want, got, cmpOpts...); diff != "" {
				t.Errorf("Decide() (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecideRefusesQuantities: a quantity a tenant may not ask for is
// denied before anything is summed, whatever else the slice asks and
// whether or not it was accepted before (a grant written by an older agent).
func TestDecideRefusesQuantities(t *testing.T) {
	for _, tc := range []struct {
		name     string
		res      corev1.ResourceList
		accepted bool
		want     string
	}{
		{name: "negative cpu", res: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("-100")},
			want: "spec.resources: cpu -100 is negative"},
		{name: "negative beside a valid one", res: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("-1Ki")},
			want: "spec.resources: memory -1Ki is negative"},
		{name: "over 1P", res: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("2E")},
			want: "spec.resources: pods 2E is over 1P, the most any quantity may be"},
		{name: "not a resource name", res: corev1.ResourceList{"cpu ": resource.MustParse("1")},
			want: `spec.resources: "cpu " is not a resource name: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`},
		{name: "negative, already accepted", res: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("-1")}, accepted: true,
			want: "spec.resources: cpu -1 is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(Request{Slice: slice("alpha", tc.res), NamespaceConsumer: "alpha", AlreadyAccepted: tc.accepted,
				Capacity: rl(t, "cpu=32,memory=128Gi,pods=500")})
			want := Decision{Reason: corev1alpha1.ReasonPolicyDenied, Message: tc.want}
			if diff := cmp.Diff(want, got, cmpOpts...); diff != "" {
				t.Errorf("Decide() (-want +got):\n%s", diff)
			}
		})
	}
	// At the bound and zero are quantities a tenant may ask for.
	got := Decide(Request{Slice: slice("alpha", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1P"), corev1.ResourceMemory: resource.MustParse("0")}),
		NamespaceConsumer: "alpha", Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2P"), corev1.ResourceMemory: resource.MustParse("1")}})
	if !got.Accepted {
		t.Errorf("cpu=1P,memory=0 denied: %s", got.Message)
	}
}

func TestParseResourceList(t *testing.T) {
	tests := []struct {
		in      string
		want    string // FormatResourceList of the result
		wantErr bool
	}{
		{in: "", want: ""},
		{in: "  ", want: ""},
		{in: "cpu=16,memory=64Gi,pods=200", want: "cpu=16,memory=64Gi,pods=200"},
		{in: " memory = 64Gi , cpu=500m ", want: "cpu=500m,memory=64Gi"},
		{in: "nvidia.com/gpu=2", want: "nvidia.com/gpu=2"},
		{in: "cpu", wantErr: true},
		{in: "cpu=", wantErr: true},
		{in: "=4", wantErr: true},
		{in: "cpu=lots", wantErr: true},
		{in: "cpu=-1", wantErr: true},
		{in: "cpu=1,cpu=2", wantErr: true},
		{in: "cpu=1,", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseResourceList(tc.in)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("ParseResourceList(%q) = %v, want an error", tc.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseResourceList(%q): %v", tc.in, err)
			}
			if diff := cmp.Diff(tc.want, FormatResourceList(got)); diff != "" {
				t.Errorf("ParseResourceList(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestBindFlags(t *testing.T) {
	var o Options
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.BindFlags(fs)
	if err := fs.Parse([]string{"--max-resources-per-consumer=cpu=16,memory=64Gi,pods=200"}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rl(t, "cpu=16,memory=64Gi,pods=200"), o.MaxPerConsumer, cmpOpts...); diff != "" {
		t.Errorf("MaxPerConsumer (-want +got):\n%s", diff)
	}
	if got := fs.Lookup("max-resources-per-consumer").Value.String(); got != "cpu=16,memory=64Gi,pods=200" {
		t.Errorf("flag value = %q", got)
	}
	if err := fs.Parse([]string{"--max-resources-per-consumer=cpu"}); err == nil {
		t.Error("a malformed value was accepted")
	}
}
