package failover

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/controller/replicator"
)

var now = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

const (
	fence   = 30 // seconds
	release = 60 // seconds
)

func testScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = corev1alpha1.AddToScheme(s)
	_ = offloadingv1alpha1.AddToScheme(s)
	return s
}

// remotes answers for the providers that are reachable.
type remotes map[string]bool

func (r remotes) Reachable(id string) bool { return r[id] }

// heartbeats knows when the last heartbeat went to each provider.
type heartbeats map[string]time.Time

func (h heartbeats) Last(id string) (time.Time, bool) {
	t, ok := h[id]
	return t, ok
}

func offloading(f *offloadingv1alpha1.Failover) *offloadingv1alpha1.NamespaceOffloading {
	return &offloadingv1alpha1.NamespaceOffloading{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: offloadingv1alpha1.NamespaceOffloadingName, Generation: 1},
		Spec: offloadingv1alpha1.NamespaceOffloadingSpec{PodOffloadingStrategy: offloadingv1alpha1.PodOffloadingRemote, Failover: f}}
}

func failover() *offloadingv1alpha1.Failover {
	return &offloadingv1alpha1.Failover{FenceAfterSeconds: fence, ReleaseAfterSeconds: release}
}

// remoteNamespace is this cluster's request to provider for namespace shop,
// asking for the fence asked and armed by the provider with armed.
func remoteNamespace(provider string, asked, armed *int32) *offloadingv1alpha1.RemoteNamespace {
	return &offloadingv1alpha1.RemoteNamespace{
		ObjectMeta: metav1.ObjectMeta{Namespace: corev1alpha1.PeerNamespaceName(provider), Name: "shop",
			Labels: map[string]string{corev1alpha1.LabelRemoteClusterID: provider, corev1alpha1.LabelSourceNamespace: "shop", corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}},
		Spec:   offloadingv1alpha1.RemoteNamespaceSpec{SourceNamespace: "shop", RemoteNamespace: "shop-alpha", FenceAfterSeconds: asked},
		Status: offloadingv1alpha1.RemoteNamespaceStatus{Phase: offloadingv1alpha1.RemoteNamespaceReady, FenceAfterSeconds: armed},
	}
}

func armed(provider string) *offloadingv1alpha1.RemoteNamespace {
	return remoteNamespace(provider, ptr.To[int32](fence), ptr.To[int32](fence))
}

func virtualNode(provider string) *corev1alpha1.VirtualNode {
	return &corev1alpha1.VirtualNode{ObjectMeta: metav1.ObjectMeta{Namespace: corev1alpha1.PeerNamespaceName(provider), Name: provider},
		Spec: corev1alpha1.VirtualNodeSpec{ClusterID: provider}}
}

func pod(ns, name, node string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		Status: corev1.PodStatus{Phase: phase}}
}

// world is namespace shop offloaded to beta and gamma, with pods on both
// virtual nodes and locally, and a pod of another namespace on beta.
func world() []client.Object {
	beta, gamma := corev1alpha1.VirtualNodeName("beta"), corev1alpha1.VirtualNodeName("gamma")
	return []client.Object{
		virtualNode("beta"), virtualNode("gamma"),
		pod("shop", "web-0", beta, corev1.PodRunning),
		pod("shop", "web-1", beta, corev1.PodPending),
		pod("shop", "job-done", beta, corev1.PodSucceeded),
		pod("shop", "job-failed", beta, corev1.PodFailed),
		pod("shop", "web-2", gamma, corev1.PodRunning),
		pod("shop", "web-3", "worker-1", corev1.PodRunning),
		pod("shop", "unscheduled", "", corev1.PodPending),
		pod("blog", "blog-0", beta, corev1.PodRunning),
	}
}

var allPods = []string{"blog/blog-0", "shop/job-done", "shop/job-failed", "shop/unscheduled", "shop/web-0", "shop/web-1", "shop/web-2", "shop/web-3"}

func podsLeft(t *testing.T, c client.Reader) []string {
	t.Helper()
	list := &corev1.PodList{}
	if err := c.List(context.Background(), list); err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, p := range list.Items {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	sort.Strings(out)
	return out
}

func without(all []string, gone ...string) []string {
	out := []string{}
	for _, p := range all {
		keep := true
		for _, g := range gone {
			keep = keep && p != g
		}
		if keep {
			out = append(out, p)
		}
	}
	return out
}

func drain(r *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func TestReconcile(t *testing.T) {
	lost := now.Add(-release * time.Second) // the last heartbeat to a provider lost for T exactly
	for _, tc := range []struct {
		name        string
		nso         *offloadingv1alpha1.NamespaceOffloading
		rns         []client.Object
		reachable   remotes
		sent        heartbeats
		wantRequeue time.Duration
		// wantReleased are the pods deleted (all with grace 0).
		wantReleased []string
	}{
		{name: "failover off: nothing released, not polled",
			nso: offloading(nil), rns: []client.Object{remoteNamespace("beta", nil, nil), remoteNamespace("gamma", nil, nil)},
			sent: heartbeats{"beta": lost.Add(-time.Hour), "gamma": lost.Add(-time.Hour)}},
		{name: "failover off although the fences are still armed: nothing released",
			nso: offloading(nil), rns: []client.Object{armed("beta"), armed("gamma")},
			sent: heartbeats{"beta": lost.Add(-time.Hour), "gamma": lost.Add(-time.Hour)}},
		{name: "providers reachable: nothing released, polled",
			nso: offloading(failover()), rns: []client.Object{armed("beta"), armed("gamma")},
			reachable: remotes{"beta": true, "gamma": true}, sent: heartbeats{"beta": lost.Add(-time.Hour), "gamma": lost.Add(-time.Hour)},
			wantRequeue: Poll},
		{name: "beta unreachable, not due yet: back just after it falls due",
			nso: offloading(failover()), rns: []client.Object{armed("beta"), armed("gamma")},
			reachable: remotes{"gamma": true}, sent: heartbeats{"beta": now.Add(-58 * time.Second), "gamma": now},
			wantRequeue: 2*time.Second + 100*time.Millisecond},
		{name: "beta unreachable, due later than the next poll: polled",
			nso: offloading(failover()), rns: []client.Object{armed("beta"), armed("gamma")},
			reachable: remotes{"gamma": true}, sent: heartbeats{"beta": now.Add(-10 * time.Second), "gamma": now},
			wantRequeue: Poll},
		{name: "beta unreachable and due: its running and pending pods in the namespace released",
			nso: offloading(failover()), rns: []client.Object{armed("beta"), armed("gamma")},
			reachable: remotes{"gamma": true}, sent: heartbeats{"beta": lost, "gamma": now},
			wantRequeue: Poll, wantReleased: []string{"shop/web-0", "shop/web-1"}},
		{name: "both unreachable, beta due, gamma not yet: beta's pods released, back when gamma's fall due",
			nso: offloading(failover()), rns: []client.Object{armed("beta"), armed("gamma")},
			sent:        heartbeats{"beta": lost.Add(-time.Hour), "gamma": now.Add(-57 * time.Second)},
			wantRequeue: 3*time.Second + 100*time.Millisecond, wantReleased: []string{"shop/web-0", "shop/web-1"}},
		{name: "both unreachable and due",
			nso: offloading(failover()), rns: []client.Object{armed("beta"), armed("gamma")},
			sent:        heartbeats{"beta": lost, "gamma": lost},
			wantRequeue: Poll, wantReleased: []string{"shop/web-0", "shop/web-1", "shop/web-2"}},
		{name: "due, but beta never armed the fence: nothing released",
			nso: offloading(failover()), rns: []client.Object{remoteNamespace("beta", ptr.To[int32](fence), nil), armed("gamma")},
			reachable: remotes{"gamma": true}, sent: heartbeats{"beta": lost, "gamma": now},
			wantRequeue: Poll},
		{name: "due, but beta armed another fence: nothing released",
			nso: offloading(failover()), rns: []client.Object{remoteNamespace("beta", ptr.To[int32](fence), ptr.To[int32](fence+10)), armed("gamma")},
			reachable: remotes{"gamma": true}, sent: heartbeats{"beta": lost, "gamma": now},
			wantRequeue: Poll},
		{name: "due, but the fence is no longer asked of beta (its fence is too short here): nothing released",
			nso: offloading(failover()), rns: []client.Object{remoteNamespace("beta", nil, ptr.To[int32](fence)), armed("gamma")},
			reachable: remotes{"gamma": true}, sent: heartbeats{"beta": lost, "gamma": now},
			wantRequeue: Poll},
		{name: "due, but beta's fence was asked for another fenceAfterSeconds: nothing released",
			nso: offloading(&offloadingv1alpha1.Failover{FenceAfterSeconds: fence + 10, ReleaseAfterSeconds: release}),
			rns: []client.Object{armed("beta"), armed("gamma")}, reachable: remotes{"gamma": true}, sent: heartbeats{"beta": lost.Add(-time.Hour), "gamma": now},
			wantRequeue: Poll},
		{name: "unreachable, but no heartbeat known (the agent has not started them): nothing released",
			nso: offloading(failover()), rns: []client.Object{armed("beta"), armed("gamma")},
			reachable: remotes{"gamma": true}, sent: heartbeats{"gamma": now},
			wantRequeue: Poll},
		{name: "a RemoteNamespace outside the provider's peer namespace (a replica) is not a provider of this namespace",
			nso: offloading(failover()), rns: []client.Object{func() client.Object {
				rn := armed("beta")
				rn.Namespace = corev1alpha1.TenantNamespaceName("beta")
				rn.Annotations = map[string]string{replicator.AnnotationOriginNamespace: "annex-peer-alpha"}
				return rn
			}()},
			sent:        heartbeats{"beta": lost.Add(-time.Hour)},
			wantRequeue: Poll},
		{name: "a RemoteNamespace for another source namespace is ignored",
			nso: offloading(failover()), rns: []client.Object{func() client.Object {
				rn := armed("beta")
				rn.Spec.SourceNamespace = "blog"
				return rn
			}()},
			sent:        heartbeats{"beta": lost.Add(-time.Hour)},
			wantRequeue: Poll},
		{name: "being deleted: nothing released",
			nso: func() *offloadingv1alpha1.NamespaceOffloading {
				nso := offloading(failover())
				nso.DeletionTimestamp = &metav1.Time{Time: now}
				nso.Finalizers = []string{"annex.dev/namespace-offloading"}
				return nso
			}(),
			rns: []client.Object{armed("beta"), armed("gamma")}, sent: heartbeats{"beta": lost, "gamma": lost}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := fake.NewClientBuilder().WithScheme(testScheme()).
				WithStatusSubresource(&offloadingv1alpha1.RemoteNamespace{}, &offloadingv1alpha1.NamespaceOffloading{}).
				WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
				WithObjects(append(append(world(), tc.rns...), tc.nso)...).Build()
			grace := map[string]*int64{}
			c := interceptor.NewClient(base, interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
				do := &client.DeleteOptions{}
				do.ApplyOptions(opts)
				grace[o.GetNamespace()+"/"+o.GetName()] = do.GracePeriodSeconds
				return c.Delete(ctx, o, opts...)
			}})
			rec := events.NewFakeRecorder(20)
			r := &Reconciler{Client: c, APIReader: base, Remotes: tc.reachable, Heartbeats: tc.sent, Recorder: rec, Clock: clocktesting.NewFakePassiveClock(now)}
			res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(tc.nso)})
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter != tc.wantRequeue {
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, tc.wantRequeue)
			}
			if diff := cmp.Diff(without(allPods, tc.wantReleased...), podsLeft(t, base)); diff != "" {
				t.Errorf("pods left (-want +got):\n%s", diff)
			}
			wantGrace := map[string]*int64{}
			for _, p := range tc.wantReleased {
				wantGrace[p] = ptr.To[int64](0)
			}
			if diff := cmp.Diff(wantGrace, grace); diff != "" {
				t.Errorf("deletions' grace periods (-want +got):\n%s", diff)
			}
			evs := drain(rec)
			released := 0
			for _, e := range evs {
				if !strings.HasPrefix(e, "Warning ReleasedFromLostProvider ") {
					t.Errorf("unexpected event %q", e)
				}
				if strings.HasPrefix(e, "Warning ReleasedFromLostProvider provider ") {
					released++
				}
			}
			if released != len(tc.wantReleased) {
				t.Errorf("%d pod release events, want %d: %q", released, len(tc.wantReleased), evs)
			}
		})
	}
}

// TestReconcileReleasesOnlyFromTheProvidersVirtualNodes: a VirtualNode kept
// in a provider's peer namespace for another cluster, or named explicitly,
// is looked up by what it says.
func TestReconcileReleasesOnlyFromTheProvidersVirtualNodes(t *testing.T) {
	named := virtualNode("beta")
	named.Name = "beta-gpu"
	named.Spec.NodeName = "gpu-pool"
	stray := virtualNode("gamma")
	stray.Namespace = corev1alpha1.PeerNamespaceName("beta")
	stray.Name = "stray"
	objs := []client.Object{offloading(failover()), armed("beta"), named, stray,
		pod("shop", "gpu-0", "gpu-pool", corev1.PodRunning),
		pod("shop", "web-0", corev1alpha1.VirtualNodeName("beta"), corev1.PodRunning), // no VirtualNode names it
		pod("shop", "web-2", corev1alpha1.VirtualNodeName("gamma"), corev1.PodRunning),
	}
	c := fake.NewClientBuilder().WithScheme(testScheme()).
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		WithObjects(objs...).Build()
	r := &Reconciler{Client: c, APIReader: c, Remotes: remotes{}, Heartbeats: heartbeats{"beta": now.Add(-time.Hour)},
		Recorder: events.NewFakeRecorder(20), Clock: clocktesting.NewFakePassiveClock(now)}
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "shop", Name: offloadingv1alpha1.NamespaceOffloadingName}}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"shop/web-0", "shop/web-2"}, podsLeft(t, c)); diff != "" {
		t.Errorf("pods left (-want +got):\n%s", diff)
	}
}
