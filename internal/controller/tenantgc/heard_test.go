package tenantgc

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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

// tenLeaseYears is what a hostile tenant writes as leaseDurationSeconds:
// ten years.
const tenLeaseYears = int32(10 * 365 * 24 * 3600)

// hostileLease is alpha's heartbeat Lease renewed at renewed, made at
// created, then changed by mutate (what the tenant may write).
func hostileLease(created, renewed time.Time, mutate func(*coordinationv1.Lease)) *coordinationv1.Lease {
	rt := metav1.NewMicroTime(renewed)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "annex-tenant-alpha", Name: corev1alpha1.HeartbeatLeaseName, UID: "lease",
		CreationTimestamp: metav1.NewTime(created)},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("alpha"), RenewTime: &rt, LeaseDurationSeconds: ptr.To[int32](10)}}
	if mutate != nil {
		mutate(l)
	}
	return l
}

// TestHeardJudgesOnTheProvidersClock: when a consumer was last heard is
// its renewTime, never later than when this agent first saw that renewal;
// nothing else on the Lease counts.
func TestHeardJudgesOnTheProvidersClock(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	created := now.Add(-time.Hour)
	year := 365 * 24 * time.Hour
	type sight struct {
		after time.Duration // since now, on the provider's clock
		lease *coordinationv1.Lease
	}
	for _, tc := range []struct {
		name   string
		sights []sight
		// restart: a new Heard (the agent restarted) before the last sight.
		restart bool
		want    Observation // of the last sight
	}{
		{name: "honest renewal: its renewTime",
			sights: []sight{{0, hostileLease(created, now.Add(-time.Second), nil)}},
			want:   Observation{Last: now.Add(-time.Second)}},
		{name: "attack: renewTime a year ahead is counted from when it was seen",
			sights: []sight{{0, hostileLease(created, now.Add(year), nil)}},
			want:   Observation{Last: now, Ahead: year}},
		{name: "attack: the same future renewTime seen again later is not heard again",
			sights: []sight{{0, hostileLease(created, now.Add(year), nil)}, {10 * time.Minute, hostileLease(created, now.Add(year), nil)}},
			want:   Observation{Last: now, Ahead: year}},
		{name: "attack: the future renewTime with everything else changed (holderIdentity, acquireTime, leaseDurationSeconds, annotations) is not heard again",
			sights: []sight{{0, hostileLease(created, now.Add(year), nil)}, {10 * time.Minute, hostileLease(created, now.Add(year), func(l *coordinationv1.Lease) {
				l.Spec.HolderIdentity = ptr.To("beta")
				l.Spec.AcquireTime = &metav1.MicroTime{Time: now.Add(2 * year)}
				l.Spec.LeaseDurationSeconds = ptr.To(tenLeaseYears)
				l.Spec.LeaseTransitions = ptr.To[int32](1 << 30)
				l.Annotations = map[string]string{"annex.dev/fence": "off", "annex.dev/grace-period": "87600h"}
			})}},
			want: Observation{Last: now, Ahead: year}},
		{name: "attack: leaseDurationSeconds of ten years changes nothing",
			sights: []sight{{0, hostileLease(created, now.Add(-time.Minute), func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To(tenLeaseYears) })}},
			want:   Observation{Last: now.Add(-time.Minute)}},
		{name: "a consumer clock a little ahead: counted from the sight, not reported",
			sights: []sight{{0, hostileLease(created, now.Add(5*time.Second), nil)}},
			want:   Observation{Last: now, Ahead: 5 * time.Second}},
		{name: "a new renewal is heard when seen",
			sights: []sight{{0, hostileLease(created, now.Add(year), nil)}, {time.Minute, hostileLease(created, now.Add(year+time.Second), nil)}},
			want:   Observation{Last: now.Add(time.Minute), Ahead: year - time.Minute + time.Second}},
		{name: "a lagging cache showing the previous renewal again keeps its first sight",
			sights: []sight{{0, hostileLease(created, now.Add(year), nil)}, {time.Minute, hostileLease(created, now.Add(year+time.Second), nil)},
				{2 * time.Minute, hostileLease(created, now.Add(year), nil)}},
			want: Observation{Last: now, Ahead: year}},
		{name: "restart: an honest renewTime keeps its instant",
			sights:  []sight{{0, hostileLease(created, now.Add(-time.Second), nil)}, {10 * time.Minute, hostileLease(created, now.Add(-time.Second), nil)}},
			restart: true,
			want:    Observation{Last: now.Add(-time.Second)}},
		{name: "restart: a future renewTime counts from the restart, never from itself",
			sights:  []sight{{0, hostileLease(created, now.Add(year), nil)}, {10 * time.Minute, hostileLease(created, now.Add(year), nil)}},
			restart: true,
			want:    Observation{Last: now.Add(10 * time.Minute), Ahead: year - 10*time.Minute}},
		{name: "never renewed: its creation, which the API server sets",
			sights: []sight{{0, hostileLease(created, now, func(l *coordinationv1.Lease) { l.Spec.RenewTime = nil })}},
			want:   Observation{Last: created}},
		{name: "made again (a new UID) with the same future renewTime: heard when the new one is seen",
			sights: []sight{{0, hostileLease(created, now.Add(year), nil)}, {time.Minute, hostileLease(now, now.Add(year), func(l *coordinationv1.Lease) { l.UID = "again" })}},
			want:   Observation{Last: now.Add(time.Minute), Ahead: year - time.Minute}},
		{name: "released (renewTime at the epoch): the epoch",
			sights: []sight{{0, hostileLease(created, time.Unix(corev1alpha1.HeartbeatReleasedUnix, 0), nil)}},
			want:   Observation{Last: time.Unix(corev1alpha1.HeartbeatReleasedUnix, 0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(now)
			h := NewHeard(clk)
			var got Observation
			for i, s := range tc.sights {
				clk.SetTime(now.Add(s.after))
				if tc.restart && i == len(tc.sights)-1 {
					h = NewHeard(clk)
				}
				got = h.Observe(s.lease)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("observation (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHeardMissing: a Lease the tenant deletes ends nothing: silence counts
// from its last renewal seen, or from when none was first found.
func TestHeardMissing(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	key := types.NamespacedName{Namespace: "annex-tenant-alpha", Name: corev1alpha1.HeartbeatLeaseName}
	clk := clocktesting.NewFakePassiveClock(now)
	h := NewHeard(clk)
	h.Observe(hostileLease(now.Add(-time.Hour), now.Add(365*24*time.Hour), nil))
	clk.SetTime(now.Add(time.Hour))
	if got := h.Missing(key); !got.Equal(now) {
		t.Errorf("deleted after a future renewal seen at %s: last heard %s, want %s", now, got, now)
	}
	h = NewHeard(clk) // a restart: none ever seen
	if got := h.Missing(key); !got.Equal(now.Add(time.Hour)) {
		t.Errorf("none ever seen: last heard %s, want the first time none was found, %s", got, now.Add(time.Hour))
	}
	clk.SetTime(now.Add(2 * time.Hour))
	if got := h.Missing(key); !got.Equal(now.Add(time.Hour)) {
		t.Errorf("still none: last heard %s, want %s", got, now.Add(time.Hour))
	}
}

// TestReconcileJudgesTheLeaseOnItsOwnClock: nothing a tenant writes on its
// heartbeat Lease keeps its namespaces past the grace period, counted on
// this provider's clock, also across a restart of the agent.
func TestReconcileJudgesTheLeaseOnItsOwnClock(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	grace := 15 * time.Minute
	year := 365 * 24 * time.Hour
	created := now.Add(-time.Hour)
	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease
		// restartAfter: the agent restarts (a new Reconciler and Heard) this
		// long after the first look, and looks again.
		restartAfter time.Duration
		// then: the last look, this long after the first (or the restart).
		then        time.Duration
		wantRemoved bool
		wantRequeue time.Duration // of the last look
		wantEvents  []string      // prefixes, of every look
	}{
		{name: "attack: renewTime a year ahead, silent for the grace period on this clock: removed",
			lease: hostileLease(created, now.Add(year), nil), then: grace, wantRemoved: true,
			wantEvents: []string{"Warning HeartbeatRenewTimeAhead ", "Warning TenantRemoved "}},
		{name: "attack: renewTime a year ahead, within the grace period on this clock: kept, back at its end",
			lease: hostileLease(created, now.Add(year), nil), then: grace - time.Minute, wantRequeue: time.Minute + time.Second,
			wantEvents: []string{"Warning HeartbeatRenewTimeAhead "}},
		{name: "attack: leaseDurationSeconds of ten years: removed after the grace period",
			lease: hostileLease(created, now, func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To(tenLeaseYears) }), then: grace, wantRemoved: true,
			wantEvents: []string{"Warning TenantRemoved "}},
		{name: "attack: holderIdentity of another cluster, acquireTime ahead, annotations asking for more grace: removed after the grace period",
			lease: hostileLease(created, now, func(l *coordinationv1.Lease) {
				l.Spec.HolderIdentity = ptr.To("someone-else")
				l.Spec.AcquireTime = &metav1.MicroTime{Time: now.Add(year)}
				l.Annotations = map[string]string{"annex.dev/grace-period": "87600h", "annex.dev/keep": "true",
					corev1alpha1.AnnotationHeartbeatLapseTo: now.Add(year).Format(time.RFC3339Nano)}
			}), then: grace, wantRemoved: true,
			wantEvents: []string{"Warning TenantRemoved "}},
		{name: "attack and restart: a renewTime a year ahead counts from the restart, not from itself: removed a grace period after it",
			lease: hostileLease(created, now.Add(year), nil), restartAfter: 10 * time.Minute, then: grace, wantRemoved: true,
			wantEvents: []string{"Warning HeartbeatRenewTimeAhead ", "Warning HeartbeatRenewTimeAhead ", "Warning TenantRemoved "}},
		{name: "restart: an honest consumer silent since before it keeps its count from the restart (the agent's start restarts every count)",
			lease: hostileLease(created, now, nil), restartAfter: 10 * time.Minute, then: grace - time.Second, wantRequeue: 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(testScheme()).WithStatusSubresource(&corev1alpha1.ForeignCluster{}).WithObjects(tenantObjects("u", created, now)[0], tc.lease,
				&corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha"}, Spec: corev1alpha1.ForeignClusterSpec{ClusterID: "alpha"}, Status: corev1alpha1.ForeignClusterStatus{Role: corev1alpha1.RoleConsumer}}).Build()
			clk := clocktesting.NewFakeClock(now)
			rec := events.NewFakeRecorder(10)
			start := func() *Reconciler {
				// What SetupWithManager does at the agent's start.
				r := &Reconciler{Client: c, APIReader: c, Recorder: rec, Clock: clk, GracePeriod: grace, Heard: NewHeard(clk)}
				r.answering = clk.Now()
				return r
			}
			req := ctrl.Request{NamespacedName: client.ObjectKey{Name: "annex-tenant-alpha"}}
			r := start()
			if _, err := r.Reconcile(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			if tc.restartAfter > 0 {
				clk.Step(tc.restartAfter)
				r = start()
				if _, err := r.Reconcile(context.Background(), req); err != nil {
					t.Fatal(err)
				}
			}
			clk.Step(tc.then)
			res, err := r.Reconcile(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter != tc.wantRequeue {
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, tc.wantRequeue)
			}
			removed := c.Get(context.Background(), req.NamespacedName, &corev1.Namespace{}) != nil
			if removed != tc.wantRemoved {
				t.Errorf("tenant removed = %v, want %v", removed, tc.wantRemoved)
			}
			var got []string
			for _, e := range drainEvents(rec) {
				for _, p := range tc.wantEvents {
					if strings.HasPrefix(e, p) {
						e = p
					}
				}
				got = append(got, e)
			}
			sort.Strings(got)
			want := append([]string(nil), tc.wantEvents...)
			sort.Strings(want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

func drainEvents(r *events.FakeRecorder) []string {
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

// TestLeaseHandlerStampsWhenTheInformerDelivers: a renewal counts from when
// the informer delivered it, not from when a reconcile got to it later.
func TestLeaseHandlerStampsWhenTheInformerDelivers(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	year := 365 * 24 * time.Hour
	clk := clocktesting.NewFakeClock(now)
	lease := hostileLease(now.Add(-time.Hour), now.Add(year), nil)
	r := &Reconciler{Clock: clk, Heard: NewHeard(clk)}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	h := r.leaseHandler()
	h.Update(context.Background(), event.UpdateEvent{ObjectOld: hostileLease(now.Add(-time.Hour), now.Add(-10*time.Second), nil), ObjectNew: lease}, q)
	h.Create(context.Background(), event.CreateEvent{Object: hostileLease(now, now, func(l *coordinationv1.Lease) { l.Name = "something-else" })}, q)
	clk.Step(5 * time.Minute) // the reconcile comes late
	if diff := cmp.Diff(Observation{Last: now, Ahead: year}, r.Heard.Observe(lease)); diff != "" {
		t.Errorf("observation (-want +got):\n%s", diff)
	}
	var got []reconcile.Request
	for q.Len() > 0 {
		req, _ := q.Get()
		got = append(got, req)
		q.Done(req)
	}
	if diff := cmp.Diff([]reconcile.Request{{NamespacedName: client.ObjectKey{Name: "annex-tenant-alpha"}}}, got); diff != "" {
		t.Errorf("queued (-want +got):\n%s", diff)
	}
}
