package namespaceoffloading

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

func withFailover(fence, release int32) *offloadingv1alpha1.NamespaceOffloading {
	nso := &offloadingv1alpha1.NamespaceOffloading{ObjectMeta: metav1.ObjectMeta{Name: offloadingv1alpha1.NamespaceOffloadingName, Namespace: "shop", Generation: 3}}
	if fence != 0 || release != 0 {
		nso.Spec.Failover = &offloadingv1alpha1.Failover{FenceAfterSeconds: fence, ReleaseAfterSeconds: release}
	}
	return nso
}

func TestFenceFor(t *testing.T) {
	r := &Reconciler{HeartbeatInterval: 10 * time.Second}
	for _, tc := range []struct {
		name    string
		nso     *offloadingv1alpha1.NamespaceOffloading
		want    *int32
		wantMsg string // a substring; the message must be empty when unset
	}{
		{name: "failover off", nso: withFailover(0, 0)},
		{name: "shorter than 3 heartbeats: off, and why", nso: withFailover(29, 60),
			wantMsg: "fenceAfterSeconds 29 is less than 3 heartbeats of this cluster (--consumer-heartbeat-interval 10s): failover is off"},
		{name: "exactly 3 heartbeats", nso: withFailover(30, 60), want: ptr.To[int32](30)},
		{name: "longer", nso: withFailover(120, 300), want: ptr.To[int32](120)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, msg := r.FenceFor(tc.nso)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("fence (-want +got):\n%s", diff)
			}
			if (tc.wantMsg == "") != (msg == "") || !strings.Contains(msg, tc.wantMsg) {
				t.Errorf("message = %q, want %q", msg, tc.wantMsg)
			}
		})
	}
}

func TestArmed(t *testing.T) {
	rn := func(asked, armed *int32) *offloadingv1alpha1.RemoteNamespace {
		return &offloadingv1alpha1.RemoteNamespace{Spec: offloadingv1alpha1.RemoteNamespaceSpec{FenceAfterSeconds: asked},
			Status: offloadingv1alpha1.RemoteNamespaceStatus{FenceAfterSeconds: armed}}
	}
	for _, tc := range []struct {
		name string
		rn   *offloadingv1alpha1.RemoteNamespace
		want bool
	}{
		{name: "asked and armed", rn: rn(ptr.To[int32](30), ptr.To[int32](30)), want: true},
		{name: "asked, not armed yet", rn: rn(ptr.To[int32](30), nil)},
		{name: "asked, an older fence armed", rn: rn(ptr.To[int32](30), ptr.To[int32](20))},
		{name: "armed, but another fence asked (not replicated yet)", rn: rn(ptr.To[int32](20), ptr.To[int32](30))},
		{name: "armed, no longer asked", rn: rn(nil, ptr.To[int32](30))},
		{name: "another fence asked and armed", rn: rn(ptr.To[int32](20), ptr.To[int32](20))},
		{name: "nothing", rn: rn(nil, nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Armed(tc.rn, 30); got != tc.want {
				t.Errorf("Armed(30) = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFailoverCondition(t *testing.T) {
	r := &Reconciler{HeartbeatInterval: 10 * time.Second}
	for _, tc := range []struct {
		name    string
		nso     *offloadingv1alpha1.NamespaceOffloading
		unarmed []string
		want    *metav1.Condition
	}{
		{name: "failover off: no condition", nso: withFailover(0, 0), unarmed: []string{"beta"}},
		{name: "fence too short", nso: withFailover(20, 60), want: &metav1.Condition{Type: offloadingv1alpha1.ConditionFailover, Status: metav1.ConditionFalse,
			Reason: offloadingv1alpha1.ReasonFenceTooShort, ObservedGeneration: 3,
			Message: "fenceAfterSeconds 20 is less than 3 heartbeats of this cluster (--consumer-heartbeat-interval 10s): failover is off"}},
		{name: "fence too short wins over the providers that have not armed it", nso: withFailover(20, 60), unarmed: []string{"beta"},
			want: &metav1.Condition{Type: offloadingv1alpha1.ConditionFailover, Status: metav1.ConditionFalse,
				Reason: offloadingv1alpha1.ReasonFenceTooShort, ObservedGeneration: 3,
				Message: "fenceAfterSeconds 20 is less than 3 heartbeats of this cluster (--consumer-heartbeat-interval 10s): failover is off"}},
		{name: "not armed by some providers: named, sorted", nso: withFailover(30, 60), unarmed: []string{"gamma", "beta"},
			want: &metav1.Condition{Type: offloadingv1alpha1.ConditionFailover, Status: metav1.ConditionFalse,
				Reason: offloadingv1alpha1.ReasonFenceNotArmed, ObservedGeneration: 3,
				Message: "provider(s) beta, gamma have not armed the fence yet: their pods are never released"}},
		{name: "armed by every provider", nso: withFailover(30, 60),
			want: &metav1.Condition{Type: offloadingv1alpha1.ConditionFailover, Status: metav1.ConditionTrue,
				Reason: offloadingv1alpha1.ReasonFenceArmed, ObservedGeneration: 3,
				Message: "pods are fenced on a provider whose heartbeat is 30 s old and released here after 60 s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, r.failoverCondition(tc.nso, tc.unarmed)); diff != "" {
				t.Errorf("condition (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReconcileFailover: the fence is asked of every selected provider, the
// Failover condition follows the providers' answers, and the fence is
// withdrawn when failover is turned off.
func TestReconcileFailover(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = corev1alpha1.AddToScheme(s)
	_ = offloadingv1alpha1.AddToScheme(s)
	vn := func(id string) *corev1alpha1.VirtualNode {
		return &corev1alpha1.VirtualNode{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: corev1alpha1.PeerNamespaceName(id)},
			Spec: corev1alpha1.VirtualNodeSpec{ClusterID: id}}
	}
	nso := withFailover(30, 60)
	nso.Spec.PodOffloadingStrategy = offloadingv1alpha1.PodOffloadingRemote
	c := fake.NewClientBuilder().WithScheme(s).
		WithObjects(nso, vn("beta"), vn("gamma"), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}).
		WithStatusSubresource(&offloadingv1alpha1.NamespaceOffloading{}, &offloadingv1alpha1.RemoteNamespace{}).Build()
	r := &Reconciler{Client: c, LocalClusterID: "alpha", HeartbeatInterval: 10 * time.Second}
	ctx := context.Background()
	reconcileOnce := func() {
		t.Helper()
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(nso)}); err != nil {
			t.Fatal(err)
		}
	}
	asked := func(p string) *int32 {
		t.Helper()
		rn := &offloadingv1alpha1.RemoteNamespace{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: corev1alpha1.PeerNamespaceName(p), Name: "shop"}, rn); err != nil {
			t.Fatalf("no RemoteNamespace for %s: %v", p, err)
		}
		return rn.Spec.FenceAfterSeconds
	}
	arm := func(p string, f *int32) {
		t.Helper()
		rn := &offloadingv1alpha1.RemoteNamespace{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: corev1alpha1.PeerNamespaceName(p), Name: "shop"}, rn); err != nil {
			t.Fatal(err)
		}
		rn.Status.FenceAfterSeconds = f
		if err := c.Status().Update(ctx, rn); err != nil {
			t.Fatal(err)
		}
	}
	condition := func() *metav1.Condition {
		t.Helper()
		got := &offloadingv1alpha1.NamespaceOffloading{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(nso), got); err != nil {
			t.Fatal(err)
		}
		return meta.FindStatusCondition(got.Status.Conditions, offloadingv1alpha1.ConditionFailover)
	}
	expect := func(step string, status metav1.ConditionStatus, reason, msg string) {
		t.Helper()
		cond := condition()
		if cond == nil {
			if reason != "" {
				t.Errorf("%s: no Failover condition, want %s", step, reason)
			}
			return
		}
		if reason == "" {
			t.Errorf("%s: Failover condition %+v, want none", step, *cond)
			return
		}
		if cond.Status != status || cond.Reason != reason || !strings.Contains(cond.Message, msg) {
			t.Errorf("%s: Failover condition %s/%s %q, want %s/%s containing %q", step, cond.Status, cond.Reason, cond.Message, status, reason, msg)
		}
	}

	reconcileOnce()
	for _, p := range []string{"beta", "gamma"} {
		if diff := cmp.Diff(ptr.To[int32](30), asked(p)); diff != "" {
			t.Errorf("fence asked of %s (-want +got):\n%s", p, diff)
		}
	}
	expect("nothing armed", metav1.ConditionFalse, offloadingv1alpha1.ReasonFenceNotArmed, "provider(s) beta, gamma have not")

	arm("beta", ptr.To[int32](30))
	arm("gamma", ptr.To[int32](20)) // an older fence
	reconcileOnce()
	expect("gamma armed another fence", metav1.ConditionFalse, offloadingv1alpha1.ReasonFenceNotArmed, "provider(s) gamma have not")

	arm("gamma", ptr.To[int32](30))
	reconcileOnce()
	expect("all armed", metav1.ConditionTrue, offloadingv1alpha1.ReasonFenceArmed, "30 s old and released here after 60 s")

	// A heartbeat interval that makes the fence too short: withdrawn.
	r.HeartbeatInterval = 11 * time.Second
	reconcileOnce()
	for _, p := range []string{"beta", "gamma"} {
		if got := asked(p); got != nil {
			t.Errorf("fence still asked of %s with a too short fence: %d", p, *got)
		}
	}
	expect("too short", metav1.ConditionFalse, offloadingv1alpha1.ReasonFenceTooShort, "fenceAfterSeconds 30 is less than 3 heartbeats")
	r.HeartbeatInterval = 10 * time.Second

	// Failover turned off: the fence is withdrawn, the condition removed.
	cur := &offloadingv1alpha1.NamespaceOffloading{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(nso), cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.Failover = nil
	if err := c.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	reconcileOnce()
	for _, p := range []string{"beta", "gamma"} {
		if got := asked(p); got != nil {
			t.Errorf("fence still asked of %s with failover off: %d", p, *got)
		}
	}
	expect("off", "", "", "")
}
