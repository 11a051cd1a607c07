package fencing

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
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
	tenantNS = "annex-tenant-alpha"
	remoteNS = "shop-alpha"
	fence    = 30 // seconds
)

func testScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = corev1alpha1.AddToScheme(s)
	_ = offloadingv1alpha1.AddToScheme(s)
	return s
}

// replica is consumer alpha's RemoteNamespace as replicated into its tenant
// namespace here, Ready, asking for a fence of f seconds (none when nil).
func replica(f *int32) *offloadingv1alpha1.RemoteNamespace {
	return &offloadingv1alpha1.RemoteNamespace{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: tenantNS,
			Labels:      map[string]string{corev1alpha1.LabelRemoteClusterID: "beta", corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex, corev1alpha1.LabelSourceNamespace: "shop"},
			Annotations: map[string]string{replicator.AnnotationOriginNamespace: "annex-peer-beta"}},
		Spec:   offloadingv1alpha1.RemoteNamespaceSpec{SourceNamespace: "shop", RemoteNamespace: remoteNS, FenceAfterSeconds: f},
		Status: offloadingv1alpha1.RemoteNamespaceStatus{Phase: offloadingv1alpha1.RemoteNamespaceReady},
	}
}

// remoteNamespaceOf is the remote namespace, belonging to consumer.
func remoteNamespaceOf(consumer string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: remoteNS,
		Labels: map[string]string{corev1alpha1.LabelRemoteClusterID: consumer, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}}}
}

// heartbeat is alpha's heartbeat Lease, last renewed at renewed.
func heartbeat(renewed time.Time) *coordinationv1.Lease {
	rt := metav1.NewMicroTime(renewed)
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: corev1alpha1.HeartbeatLeaseName, CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("alpha"), RenewTime: &rt}}
}

// shadowPod is a ShadowPod made at created.
func shadowPod(name string, created time.Time) *offloadingv1alpha1.ShadowPod {
	return &offloadingv1alpha1.ShadowPod{ObjectMeta: metav1.ObjectMeta{Namespace: remoteNS, Name: name, UID: types.UID("sp-" + name), CreationTimestamp: metav1.NewTime(created)}}
}

// pod is the pod of a ShadowPod named name, controlled by owner (a UID), in
// phase, with its own grace period (none when nil), made long ago.
func pod(name string, owner types.UID, phase corev1.PodPhase, grace *int64) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: remoteNS, Name: name, UID: types.UID("pod-" + name),
			Labels:          map[string]string{offloadingv1alpha1.LabelShadowPod: name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: offloadingv1alpha1.GroupVersion.String(), Kind: "ShadowPod", Name: name, UID: owner, Controller: ptr.To(true)}}},
		Spec:   corev1.PodSpec{TerminationGracePeriodSeconds: grace, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		Status: corev1.PodStatus{Phase: phase},
	}
}

// shadowed is a ShadowPod made at created and its running pod.
func shadowed(name string, created time.Time, grace *int64) []client.Object {
	return []client.Object{shadowPod(name, created), pod(name, types.UID("sp-"+name), corev1.PodRunning, grace)}
}

// deletes records the grace period of every pod deleted through a client
// and the names of the ShadowPods deleted.
type deletes struct {
	pods map[string]*int64
	sps  []string
}

func (d *deletes) funcs() interceptor.Funcs {
	return interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
		do := &client.DeleteOptions{}
		do.ApplyOptions(opts)
		switch o.(type) {
		case *corev1.Pod:
			if d.pods == nil {
				d.pods = map[string]*int64{}
			}
			d.pods[o.GetName()] = do.GracePeriodSeconds
		case *offloadingv1alpha1.ShadowPod:
			d.sps = append(d.sps, o.GetName())
		}
		return c.Delete(ctx, o, opts...)
	}}
}

func names[T client.ObjectList](t *testing.T, c client.Reader, list T, items func(T) []string) []string {
	t.Helper()
	if err := c.List(context.Background(), list, client.InNamespace(remoteNS)); err != nil {
		t.Fatal(err)
	}
	got := items(list)
	sort.Strings(got)
	return got
}

func podNames(t *testing.T, c client.Reader) []string {
	return names(t, c, &corev1.PodList{}, func(l *corev1.PodList) []string {
		out := []string{}
		for _, p := range l.Items {
			out = append(out, p.Name)
		}
		return out
	})
}

func shadowPodNames(t *testing.T, c client.Reader) []string {
	return names(t, c, &offloadingv1alpha1.ShadowPodList{}, func(l *offloadingv1alpha1.ShadowPodList) []string {
		out := []string{}
		for _, p := range l.Items {
			out = append(out, p.Name)
		}
		return out
	})
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
	fenceAfter := fence * time.Second
	// A workload running long before any silence: old, and its pods.
	workload := func() []client.Object {
		var objs []client.Object
		objs = append(objs, shadowed("web-0", now.Add(-time.Hour), ptr.To[int64](30))...)
		objs = append(objs, shadowed("web-1", now.Add(-time.Hour), ptr.To[int64](2))...)
		objs = append(objs, shadowed("web-2", now.Add(-time.Hour), nil)...)
		return objs
	}
	all := []string{"web-0", "web-1", "web-2"}
	for _, tc := range []struct {
		name string
		rn   *offloadingv1alpha1.RemoteNamespace
		objs []client.Object
		// wantArmed is the status.fenceAfterSeconds afterwards.
		wantArmed   *int32
		wantRequeue time.Duration
		wantPods    []string // left in the remote namespace
		wantSPs     []string // ShadowPods left
		// wantGrace are the grace periods the deleted pods were given.
		wantGrace map[string]*int64
		// wantEvent is a substring of the only Event expected; none when empty.
		wantEvent string
		// owner is the consumer the remote namespace belongs to; alpha when empty.
		owner string
	}{
		{name: "a past lapse longer than the fence, unseen here (agent or API server down): what existed when it fell is stopped now",
			rn: replica(ptr.To[int32](fence)),
			objs: append(workload(), func() *coordinationv1.Lease {
				l := heartbeat(now.Add(-time.Second)) // renewed again since
				l.Annotations = map[string]string{
					corev1alpha1.AnnotationHeartbeatLapseFrom: now.Add(-2 * time.Minute).Format(time.RFC3339Nano),
					corev1alpha1.AnnotationHeartbeatLapseTo:   now.Add(-time.Minute).Format(time.RFC3339Nano)}
				return l
			}(),
				// Made after the fence fell (the consumer was heard again): kept.
				shadowPod("late", now.Add(-30*time.Second)), func() *corev1.Pod {
					p := pod("late", "sp-late", corev1.PodRunning, nil)
					p.CreationTimestamp = metav1.NewTime(now.Add(-30 * time.Second))
					return p
				}()),
			wantArmed: ptr.To[int32](fence), wantRequeue: 29*time.Second + 100*time.Millisecond,
			wantPods: []string{"late"}, wantSPs: []string{"late"},
			wantGrace: map[string]*int64{"web-0": ptr.To[int64](5), "web-1": ptr.To[int64](2), "web-2": ptr.To[int64](5)},
			wantEvent: "lapsed"},
		{name: "a past lapse shorter than the fence: nothing stopped",
			rn: replica(ptr.To[int32](fence)),
			objs: append(workload(), func() *coordinationv1.Lease {
				l := heartbeat(now.Add(-time.Second))
				l.Annotations = map[string]string{
					corev1alpha1.AnnotationHeartbeatLapseFrom: now.Add(-time.Minute).Format(time.RFC3339Nano),
					corev1alpha1.AnnotationHeartbeatLapseTo:   now.Add(-time.Minute + 20*time.Second).Format(time.RFC3339Nano)}
				return l
			}()),
			wantArmed: ptr.To[int32](fence), wantRequeue: 29*time.Second + 100*time.Millisecond,
			wantPods: all, wantSPs: all},
		{name: "attack: a RemoteNamespace naming another consumer's namespace (its Ready status forged or stale) fences nothing there",
			rn:        replica(ptr.To[int32](fence)),
			objs:      append(workload(), heartbeat(now.Add(-time.Hour))),
			owner:     "delta",
			wantArmed: ptr.To[int32](fence),
			wantPods:  all, wantSPs: all},
		{name: "no fence asked: nothing armed, nothing stopped although the heartbeat is stale",
			rn:       replica(nil),
			objs:     append(workload(), heartbeat(now.Add(-time.Hour))),
			wantPods: all, wantSPs: all},
		{name: "no fence asked any more: the armed fence is withdrawn",
			rn: func() *offloadingv1alpha1.RemoteNamespace {
				rn := replica(nil)
				rn.Status.FenceAfterSeconds = ptr.To[int32](fence)
				return rn
			}(),
			objs:     append(workload(), heartbeat(now.Add(-time.Hour))),
			wantPods: all, wantSPs: all},
		{name: "fresh heartbeat: armed, nothing stopped, back just after the deadline",
			rn:        replica(ptr.To[int32](fence)),
			objs:      append(workload(), heartbeat(now.Add(-10*time.Second))),
			wantArmed: ptr.To[int32](fence), wantRequeue: 20*time.Second + 100*time.Millisecond,
			wantPods: all, wantSPs: all},
		{name: "no heartbeat yet: armed, nothing stopped, counted from now (when this agent first found none)",
			rn:        replica(ptr.To[int32](fence)),
			objs:      workload(),
			wantArmed: ptr.To[int32](fence), wantRequeue: fenceAfter + 100*time.Millisecond,
			wantPods: all, wantSPs: all},
		{name: "remote namespace not Ready yet: armed, nothing stopped",
			rn: func() *offloadingv1alpha1.RemoteNamespace {
				rn := replica(ptr.To[int32](fence))
				rn.Status.Phase = offloadingv1alpha1.RemoteNamespacePending
				return rn
			}(),
			objs:      append(workload(), heartbeat(now.Add(-time.Hour))),
			wantArmed: ptr.To[int32](fence),
			wantPods:  all, wantSPs: all},
		{name: "stale heartbeat: the ShadowPods that existed at the deadline and their pods go, each pod with at most 5 s",
			rn: replica(ptr.To[int32](fence)),
			objs: append(workload(),
				heartbeat(now.Add(-time.Minute)),
				// Made after the deadline (the consumer was heard again meanwhile): kept.
				shadowPod("late", now.Add(-10*time.Second)), func() *corev1.Pod {
					p := pod("late", "sp-late", corev1.PodRunning, nil)
					p.CreationTimestamp = metav1.NewTime(now.Add(-9 * time.Second))
					return p
				}(),
				// Made exactly at the deadline: it existed then.
				shadowPod("edge", now.Add(-time.Minute).Add(fenceAfter)), pod("edge", "sp-edge", corev1.PodPending, ptr.To[int64](0)),
				// A pod made before the deadline whose ShadowPod is another
				// (or gone: the consumer deleted it as an orphan): stopped too.
				shadowPod("impostor", now.Add(-time.Hour)), pod("impostor", "someone-else", corev1.PodRunning, nil),
				pod("orphan", "sp-gone", corev1.PodRunning, ptr.To[int64](30)),
				// Finished pods: not stopped, not counted.
				shadowPod("done", now.Add(-time.Hour)), pod("done", "sp-done", corev1.PodSucceeded, nil),
				shadowPod("crashed", now.Add(-time.Hour)), pod("crashed", "sp-crashed", corev1.PodFailed, nil),
				// A ShadowPod whose pod is gone already.
				shadowPod("podless", now.Add(-time.Hour)),
			),
			wantArmed: ptr.To[int32](fence),
			wantPods:  []string{"crashed", "done", "late"},
			wantSPs:   []string{"late"},
			wantGrace: map[string]*int64{"web-0": ptr.To[int64](5), "web-1": ptr.To[int64](2), "web-2": ptr.To[int64](5), "edge": ptr.To[int64](0), "impostor": ptr.To[int64](5), "orphan": ptr.To[int64](5)},
			wantEvent: "stopped 6 of its pod(s) in namespace shop-alpha"},
		{name: "already armed, heartbeat exactly at the deadline: fenced",
			rn: func() *offloadingv1alpha1.RemoteNamespace {
				rn := replica(ptr.To[int32](fence))
				rn.Status.FenceAfterSeconds = ptr.To[int32](fence)
				return rn
			}(),
			objs:      append(workload(), heartbeat(now.Add(-fenceAfter))), // exactly at the deadline
			wantArmed: ptr.To[int32](fence),
			wantPods:  []string{}, wantSPs: []string{},
			wantGrace: map[string]*int64{"web-0": ptr.To[int64](5), "web-1": ptr.To[int64](2), "web-2": ptr.To[int64](5)},
			wantEvent: "stopped 3 of its pod(s)"},
		{name: "a pod already stopping within the bound is not deleted again (and not counted: no Event again)",
			rn: replica(ptr.To[int32](fence)),
			objs: []client.Object{heartbeat(now.Add(-time.Minute)), shadowPod("web-0", now.Add(-time.Hour)),
				func() *corev1.Pod {
					p := pod("web-0", "sp-web-0", corev1.PodRunning, ptr.To[int64](30))
					p.DeletionTimestamp = &metav1.Time{Time: now.Add(-time.Second)}
					p.DeletionGracePeriodSeconds = ptr.To[int64](3)
					p.Finalizers = []string{"example.com/hold"}
					return p
				}()},
			wantArmed: ptr.To[int32](fence),
			wantPods:  []string{"web-0"}, wantSPs: []string{}},
		{name: "a pod stopping with a longer grace period is deleted again within the bound",
			rn: replica(ptr.To[int32](fence)),
			objs: []client.Object{heartbeat(now.Add(-time.Minute)), shadowPod("web-0", now.Add(-time.Hour)),
				func() *corev1.Pod {
					p := pod("web-0", "sp-web-0", corev1.PodRunning, ptr.To[int64](30))
					p.DeletionTimestamp = &metav1.Time{Time: now.Add(-time.Second)}
					p.DeletionGracePeriodSeconds = ptr.To[int64](30)
					p.Finalizers = []string{"example.com/hold"}
					return p
				}()},
			wantArmed: ptr.To[int32](fence),
			wantPods:  []string{"web-0"}, wantSPs: []string{}, // its finalizer holds it
			wantGrace: map[string]*int64{"web-0": ptr.To[int64](5)},
			wantEvent: "stopped 1 of its pod(s)"},
		{name: "released heartbeat (graceful unpeer): fenced at once",
			rn:        replica(ptr.To[int32](fence)),
			objs:      append(workload(), heartbeat(time.Unix(corev1alpha1.HeartbeatReleasedUnix, 0))),
			wantArmed: ptr.To[int32](fence),
			wantPods:  []string{}, wantSPs: []string{},
			wantGrace: map[string]*int64{"web-0": ptr.To[int64](5), "web-1": ptr.To[int64](2), "web-2": ptr.To[int64](5)},
			wantEvent: "stopped 3 of its pod(s)"},
		{name: "never renewed: counted from the Lease's creation",
			rn: replica(ptr.To[int32](fence)),
			objs: append(workload(), func() *coordinationv1.Lease {
				l := heartbeat(now)
				l.Spec.RenewTime = nil
				l.CreationTimestamp = metav1.NewTime(now.Add(-10 * time.Second))
				return l
			}()),
			wantArmed: ptr.To[int32](fence), wantRequeue: 20*time.Second + 100*time.Millisecond,
			wantPods: all, wantSPs: all},
		{name: "not a replica: this cluster's own request is not fenced here",
			rn: func() *offloadingv1alpha1.RemoteNamespace {
				rn := replica(ptr.To[int32](fence))
				rn.Annotations = nil
				return rn
			}(),
			objs:     append(workload(), heartbeat(now.Add(-time.Hour))),
			wantPods: all, wantSPs: all},
		{name: "not in a tenant namespace: ignored",
			rn: func() *offloadingv1alpha1.RemoteNamespace {
				rn := replica(ptr.To[int32](fence))
				rn.Namespace = "annex-peer-alpha"
				return rn
			}(),
			objs: append(workload(), heartbeat(now.Add(-time.Hour)), func() *coordinationv1.Lease {
				l := heartbeat(now.Add(-time.Hour))
				l.Namespace = "annex-peer-alpha"
				return l
			}()),
			wantPods: all, wantSPs: all},
		{name: "a tenant namespace without a consumer: ignored",
			rn: func() *offloadingv1alpha1.RemoteNamespace {
				rn := replica(ptr.To[int32](fence))
				rn.Namespace = corev1alpha1.TenantNamespacePrefix
				return rn
			}(),
			objs: append(workload(), func() *coordinationv1.Lease {
				l := heartbeat(now.Add(-time.Hour))
				l.Namespace = corev1alpha1.TenantNamespacePrefix
				return l
			}()),
			wantPods: all, wantSPs: all},
		{name: "being deleted: ignored",
			rn: func() *offloadingv1alpha1.RemoteNamespace {
				rn := replica(ptr.To[int32](fence))
				rn.DeletionTimestamp = &metav1.Time{Time: now}
				rn.Finalizers = []string{"annex.dev/remote-namespace"}
				return rn
			}(),
			objs:     append(workload(), heartbeat(now.Add(-time.Hour))),
			wantPods: all, wantSPs: all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &deletes{}
			owner := tc.owner
			if owner == "" {
				owner = "alpha"
			}
			base := fake.NewClientBuilder().WithScheme(testScheme()).WithStatusSubresource(&offloadingv1alpha1.RemoteNamespace{}).
				WithObjects(append(tc.objs, tc.rn, remoteNamespaceOf(owner))...).Build()
			c := interceptor.NewClient(base, d.funcs())
			rec := events.NewFakeRecorder(10)
			r := &Reconciler{Client: c, APIReader: base, Recorder: rec, Clock: clocktesting.NewFakePassiveClock(now)}
			res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(tc.rn)})
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter != tc.wantRequeue {
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, tc.wantRequeue)
			}
			got := &offloadingv1alpha1.RemoteNamespace{}
			if err := base.Get(context.Background(), client.ObjectKeyFromObject(tc.rn), got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantArmed, got.Status.FenceAfterSeconds); diff != "" {
				t.Errorf("status.fenceAfterSeconds (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantPods, podNames(t, base)); diff != "" {
				t.Errorf("pods left (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantSPs, shadowPodNames(t, base)); diff != "" {
				t.Errorf("ShadowPods left (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantGrace, d.pods); diff != "" {
				t.Errorf("pod deletions' grace periods (-want +got):\n%s", diff)
			}
			evs := drain(rec)
			switch {
			case tc.wantEvent == "" && len(evs) > 0:
				t.Errorf("unexpected events: %q", evs)
			case tc.wantEvent != "" && (len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning Fenced ") || !strings.Contains(evs[0], tc.wantEvent)):
				t.Errorf("events = %q, want one Warning Fenced containing %q", evs, tc.wantEvent)
			}
		})
	}
}

// TestReconcileConfirmsWithTheAPIServer: a cache that says the heartbeat is
// stale is not enough; the API server, which may already know a renewal,
// decides.
func TestReconcileConfirmsWithTheAPIServer(t *testing.T) {
	workload := func() []client.Object {
		return append(shadowed("web-0", now.Add(-time.Hour), nil), shadowed("web-1", now.Add(-time.Hour), nil)...)
	}
	for _, tc := range []struct {
		name        string
		cached      *coordinationv1.Lease
		live        *coordinationv1.Lease // none when nil
		wantRequeue time.Duration
		wantStopped bool
	}{
		{name: "the API server knows a fresh renewal: nothing stopped, back at its deadline",
			cached: heartbeat(now.Add(-time.Minute)), live: heartbeat(now.Add(-5 * time.Second)),
			wantRequeue: 25*time.Second + 100*time.Millisecond},
		{name: "the API server knows no heartbeat (the tenant deleted it): fenced all the same, from the last renewal seen",
			cached: heartbeat(now.Add(-time.Minute)), wantStopped: true},
		{name: "the API server agrees: fenced",
			cached: heartbeat(now.Add(-time.Minute)), live: heartbeat(now.Add(-time.Minute)),
			wantStopped: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			liveObjs := append(workload(), remoteNamespaceOf("alpha"))
			if tc.live != nil {
				liveObjs = append(liveObjs, tc.live)
			}
			rn := replica(ptr.To[int32](fence))
			cached := fake.NewClientBuilder().WithScheme(testScheme()).WithStatusSubresource(&offloadingv1alpha1.RemoteNamespace{}).
				WithObjects(append(workload(), tc.cached, rn.DeepCopy())...).Build()
			live := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(liveObjs...).Build()
			d := &deletes{}
			r := &Reconciler{Client: interceptor.NewClient(cached, d.funcs()), APIReader: live, Recorder: events.NewFakeRecorder(10),
				Clock: clocktesting.NewFakePassiveClock(now)}
			res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rn)})
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter != tc.wantRequeue {
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, tc.wantRequeue)
			}
			var want *deletes
			if tc.wantStopped {
				want = &deletes{pods: map[string]*int64{"web-0": ptr.To[int64](5), "web-1": ptr.To[int64](5)}, sps: []string{"web-0", "web-1"}}
			} else {
				want = &deletes{}
			}
			sort.Strings(d.sps)
			if diff := cmp.Diff(want, d, cmp.AllowUnexported(deletes{})); diff != "" {
				t.Errorf("deletions (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReconcileRetriesWhileTheAPIServerFails: a stale heartbeat that the API
// server cannot confirm is looked at again a second later, not with the
// work queue's growing backoff.
func TestReconcileRetriesWhileTheAPIServerFails(t *testing.T) {
	objs := append(shadowed("web-0", now.Add(-time.Hour), nil), heartbeat(now.Add(-time.Minute)), replica(ptr.To[int32](fence)), remoteNamespaceOf("alpha"))
	base := fake.NewClientBuilder().WithScheme(testScheme()).WithStatusSubresource(&offloadingv1alpha1.RemoteNamespace{}).WithObjects(objs...).Build()
	for _, tc := range []struct {
		name  string
		funcs interceptor.Funcs
	}{
		{name: "the Lease cannot be read", funcs: interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
			if _, ok := o.(*coordinationv1.Lease); ok {
				return context.DeadlineExceeded
			}
			return c.Get(ctx, key, o, opts...)
		}}},
		{name: "the ShadowPods cannot be listed", funcs: interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			return context.DeadlineExceeded
		}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reconciler{Client: base, APIReader: interceptor.NewClient(base, tc.funcs), Recorder: events.NewFakeRecorder(10),
				Clock: clocktesting.NewFakePassiveClock(now)}
			res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: tenantNS, Name: "shop"}})
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter != retry {
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, retry)
			}
			if diff := cmp.Diff([]string{"web-0"}, podNames(t, base)); diff != "" {
				t.Errorf("pods left (-want +got):\n%s", diff)
			}
		})
	}
}
