package resourceslice

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func node(t *testing.T, name, allocatable string, ready bool, mutate ...func(*corev1.Node)) *corev1.Node {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{
			Allocatable: rl(t, allocatable),
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}},
		},
	}
	for _, m := range mutate {
		m(n)
	}
	return n
}

func tenantNamespace(name, consumer string) *corev1.Namespace {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if consumer != "" {
		ns.Labels = map[string]string{corev1alpha1.LabelRemoteClusterID: consumer}
	}
	return ns
}

func newSlice(t *testing.T, ns, name, consumer, provider, res string) *corev1alpha1.ResourceSlice {
	return &corev1alpha1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 1},
		Spec:       corev1alpha1.ResourceSliceSpec{ConsumerClusterID: consumer, ProviderClusterID: provider, Resources: rl(t, res)},
	}
}

func answer(t *testing.T, phase corev1alpha1.ResourceSlicePhase, granted, reason, msg string, gen int64) corev1alpha1.ResourceSliceStatus {
	status := metav1.ConditionFalse
	if phase == corev1alpha1.ResourceSliceAccepted {
		status = metav1.ConditionTrue
	}
	var res corev1.ResourceList
	if granted != "" {
		res = rl(t, granted)
	}
	cond := func(typ string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(now), Reason: reason, Message: msg}
	}
	return corev1alpha1.ResourceSliceStatus{
		Phase:      phase,
		Resources:  res,
		Conditions: []metav1.Condition{cond(corev1alpha1.ConditionAccepted), cond(corev1alpha1.ConditionReady)},
	}
}

func TestReconcile(t *testing.T) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, corev1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	// Capacity: cpu 16, memory 64Gi, pods 220 from the two Ready real nodes.
	nodes := []client.Object{
		node(t, "n1", "cpu=8,memory=32Gi,pods=110", true),
		node(t, "n2", "cpu=8,memory=32Gi,pods=110", true),
		node(t, "down", "cpu=64,memory=256Gi,pods=110", false),
		node(t, "cordoned", "cpu=64,memory=256Gi,pods=110", true, func(n *corev1.Node) { n.Spec.Unschedulable = true }),
		node(t, "virtual", "cpu=64,memory=256Gi,pods=110", true, func(n *corev1.Node) { n.Labels = map[string]string{LabelNodeType: NodeTypeVirtual} }),
		node(t, "annex-gamma", "cpu=64,memory=256Gi,pods=110", true, func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: corev1alpha1.TaintKeyVirtualNode, Effect: corev1.TaintEffectNoSchedule}}
		}),
	}
	const ns = "annex-tenant-alpha"

	tests := []struct {
		name       string
		objs       []client.Object
		limit      string
		slice      *corev1alpha1.ResourceSlice
		want       corev1alpha1.ResourceSliceStatus
		wantEvents []string
	}{
		{
			name:       "accepted",
			objs:       []client.Object{tenantNamespace(ns, "alpha")},
			limit:      "cpu=16,memory=64Gi",
			slice:      newSlice(t, ns, "alpha", "alpha", "beta", "cpu=4,memory=8Gi"),
			want:       answer(t, corev1alpha1.ResourceSliceAccepted, "cpu=4,memory=8Gi", corev1alpha1.ReasonResourcesGranted, "granted cpu=4,memory=8Gi", 1),
			wantEvents: []string{"Normal ResourcesGranted granted cpu=4,memory=8Gi"},
		},
		{
			name:  "denied by the per-consumer limit",
			objs:  []client.Object{tenantNamespace(ns, "alpha")},
			limit: "cpu=2",
			slice: newSlice(t, ns, "alpha", "alpha", "beta", "cpu=4"),
			want: answer(t, corev1alpha1.ResourceSliceDenied, "", corev1alpha1.ReasonPolicyDenied,
				"requested cpu 4 exceeds this provider's per-consumer limit 2", 1),
			wantEvents: []string{"Warning PolicyDenied requested cpu 4 exceeds this provider's per-consumer limit 2"},
		},
		{
			name:  "denied: only Ready, schedulable, real nodes count",
			objs:  []client.Object{tenantNamespace(ns, "alpha")},
			slice: newSlice(t, ns, "alpha", "alpha", "beta", "cpu=17"),
			want: answer(t, corev1alpha1.ResourceSliceDenied, "", corev1alpha1.ReasonInsufficientResources,
				"requested cpu 17 exceeds this provider's allocatable capacity 16", 1),
			wantEvents: []string{"Warning InsufficientResources requested cpu 17 exceeds this provider's allocatable capacity 16"},
		},
		{
			name:  "denied: other accepted slices of the consumer count against the limit",
			limit: "cpu=6",
			objs: []client.Object{tenantNamespace(ns, "alpha"), func() client.Object {
				o := newSlice(t, ns, "first", "alpha", "beta", "cpu=4")
				o.Status = answer(t, corev1alpha1.ResourceSliceAccepted, "cpu=4", corev1alpha1.ReasonResourcesGranted, "granted cpu=4", 1)
				return o
			}()},
			slice: newSlice(t, ns, "alpha", "alpha", "beta", "cpu=4"),
			want: answer(t, corev1alpha1.ResourceSliceDenied, "", corev1alpha1.ReasonPolicyDenied,
				"requested cpu 4 plus 4 already granted to consumer alpha exceeds this provider's per-consumer limit 6", 1),
			wantEvents: []string{"Warning PolicyDenied requested cpu 4 plus 4 already granted to consumer alpha exceeds this provider's per-consumer limit 6"},
		},
		{
			name:  "denied: consumer speaking for another",
			objs:  []client.Object{tenantNamespace(ns, "alpha")},
			slice: newSlice(t, ns, "alpha", "gamma", "beta", "cpu=1"),
			want: answer(t, corev1alpha1.ResourceSliceDenied, "", corev1alpha1.ReasonPolicyDenied,
				`spec.consumerClusterID is "gamma" but namespace annex-tenant-alpha belongs to consumer "alpha": a consumer may not ask for resources on behalf of another`, 1),
			wantEvents: []string{`Warning PolicyDenied spec.consumerClusterID is "gamma" but namespace annex-tenant-alpha belongs to consumer "alpha": a consumer may not ask for resources on behalf of another`},
		},
		{
			name: "spec change is re-evaluated",
			objs: []client.Object{tenantNamespace(ns, "alpha")},
			slice: func() *corev1alpha1.ResourceSlice {
				o := newSlice(t, ns, "alpha", "alpha", "beta", "cpu=32")
				o.Generation = 2
				o.Status = answer(t, corev1alpha1.ResourceSliceAccepted, "cpu=4", corev1alpha1.ReasonResourcesGranted, "granted cpu=4", 1)
				return o
			}(),
			want: answer(t, corev1alpha1.ResourceSliceDenied, "", corev1alpha1.ReasonInsufficientResources,
				"requested cpu 32 exceeds this provider's allocatable capacity 16", 2),
			wantEvents: []string{"Warning InsufficientResources requested cpu 32 exceeds this provider's allocatable capacity 16"},
		},
		{
			name:  "a request to another provider is left alone",
			objs:  []client.Object{tenantNamespace("annex-tenant-gamma", "gamma")},
			slice: newSlice(t, "annex-tenant-gamma", "gamma", "beta", "gamma", "cpu=1"),
			want:  corev1alpha1.ResourceSliceStatus{},
		},
		{
			name:  "a slice outside tenant namespaces is left alone",
			objs:  []client.Object{tenantNamespace("default", "alpha")},
			slice: newSlice(t, "default", "alpha", "alpha", "beta", "cpu=1"),
			want:  corev1alpha1.ResourceSliceStatus{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			objs := append(append(append([]client.Object{}, nodes...), tc.objs...), tc.slice)
			c := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&corev1alpha1.ResourceSlice{}).WithObjects(objs...).Build()
			rec := events.NewFakeRecorder(10)
			r := New(c, rec, "beta", Options{MaxPerConsumer: rl(t, tc.limit), Clock: clocktesting.NewFakePassiveClock(now)})
			req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tc.slice)}

			// Twice: the second pass must change nothing and record no Event.
			for range 2 {
				res, err := r.Reconcile(ctx, req)
				if err != nil {
					t.Fatalf("Reconcile() error = %v", err)
				}
				if !res.IsZero() {
					t.Errorf("Reconcile() = %+v, want no requeue", res)
				}
			}
			got := &corev1alpha1.ResourceSlice{}
			if err := c.Get(ctx, req.NamespacedName, got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.Status, cmpOpts...); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			close(rec.Events)
			var gotEvents []string
			for e := range rec.Events {
				gotEvents = append(gotEvents, e)
			}
			if diff := cmp.Diff(tc.wantEvents, gotEvents); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}
