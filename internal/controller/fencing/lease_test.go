package fencing

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/charts"
	"github.com/annexhq/annex/internal/controller/tenantgc"
)

// TestReconcileJudgesTheLeaseOnItsOwnClock: nothing the tenant writes on
// its heartbeat Lease turns the fence off or makes it fall later than F
// after this provider last heard it, on its own clock, also across a
// restart of the agent; F itself is bounded here.
func TestReconcileJudgesTheLeaseOnItsOwnClock(t *testing.T) {
	fenceAfter := fence * time.Second
	year := 365 * 24 * time.Hour
	tenYears := int32(10 * 365 * 24 * 3600)
	hostile := func(renewed time.Time, mutate func(*coordinationv1.Lease)) *coordinationv1.Lease {
		l := heartbeat(renewed)
		l.UID = "lease"
		if mutate != nil {
			mutate(l)
		}
		return l
	}
	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease
		f     int32 // spec.fenceAfterSeconds; fence when 0
		// restartAfter: the agent restarts (a new Reconciler and Heard) this
		// long after the first look, and looks again.
		restartAfter time.Duration
		// between runs after those looks, as the tenant.
		between func(c client.Client) error
		// then: the last look, this long after the previous one.
		then        time.Duration
		wantArmed   int32
		wantFenced  bool
		wantRequeue time.Duration // of the last look
	}{
		{name: "attack: renewTime a year ahead, silent for F on this clock: fenced",
			lease: hostile(now.Add(year), nil), then: fenceAfter, wantArmed: fence, wantFenced: true},
		{name: "attack: renewTime a year ahead, within F on this clock: not yet, back at the deadline",
			lease: hostile(now.Add(year), nil), then: fenceAfter - time.Second, wantArmed: fence, wantRequeue: time.Second + 100*time.Millisecond},
		{name: "attack: leaseDurationSeconds of ten years: fenced after F",
			lease: hostile(now, func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To(tenYears) }), then: fenceAfter, wantArmed: fence, wantFenced: true},
		{name: "attack: holderIdentity of another cluster, acquireTime ahead, annotations saying no fence: fenced after F",
			lease: hostile(now, func(l *coordinationv1.Lease) {
				l.Spec.HolderIdentity = ptr.To("someone-else")
				l.Spec.AcquireTime = &metav1.MicroTime{Time: now.Add(year)}
				l.Annotations = map[string]string{"annex.dev/fence": "off", "annex.dev/fence-after-seconds": "999999999",
					corev1alpha1.AnnotationHeartbeatLapseFrom: "never", corev1alpha1.AnnotationHeartbeatLapseTo: now.Add(year).Format(time.RFC3339Nano)}
			}), then: fenceAfter, wantArmed: fence, wantFenced: true},
		{name: "attack: the tenant deletes its Lease after it was heard: fenced F after its last renewal seen",
			lease:   hostile(now, nil),
			between: func(c client.Client) error { return c.Delete(context.Background(), heartbeat(now)) },
			then:    fenceAfter, wantArmed: fence, wantFenced: true},
		{name: "attack: a fence longer than the CRD allows (its bound lost) is armed and carried out at the bound",
			lease: hostile(now.Add(-MaxFenceAfterSeconds*time.Second), nil), f: 1 << 30, then: time.Second,
			wantArmed: MaxFenceAfterSeconds, wantFenced: true},
		{name: "restart: an honest renewTime keeps its instant, the deadline does not move",
			lease: hostile(now, nil), restartAfter: fenceAfter / 2, then: fenceAfter / 2, wantArmed: fence, wantFenced: true},
		{name: "attack and restart: a renewTime a year ahead counts from the restart, never from itself",
			lease: hostile(now.Add(year), nil), restartAfter: 20 * time.Second, then: fenceAfter, wantArmed: fence, wantFenced: true},
		{name: "attack and restart: within F of the restart, not yet",
			lease: hostile(now.Add(year), nil), restartAfter: 20 * time.Second, then: fenceAfter - time.Second, wantArmed: fence,
			wantRequeue: time.Second + 100*time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.f
			if f == 0 {
				f = fence
			}
			rn := replica(ptr.To(f))
			c := fake.NewClientBuilder().WithScheme(testScheme()).WithStatusSubresource(&offloadingv1alpha1.RemoteNamespace{}).
				WithObjects(append(shadowed("web-0", now.Add(-2*year), nil), tc.lease, rn, remoteNamespaceOf("alpha"))...).Build()
			clk := clocktesting.NewFakeClock(now)
			rec := events.NewFakeRecorder(10)
			start := func() *Reconciler {
				return &Reconciler{Client: c, APIReader: c, Recorder: rec, Clock: clk, Heard: tenantgc.NewHeard(clk)}
			}
			req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rn)}
			r := start()
			look := func() ctrl.Result {
				t.Helper()
				res, err := r.Reconcile(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			look()
			if tc.restartAfter > 0 {
				clk.Step(tc.restartAfter)
				r = start()
				look()
			}
			if tc.between != nil {
				if err := tc.between(c); err != nil {
					t.Fatal(err)
				}
			}
			clk.Step(tc.then)
			res := look()
			if res.RequeueAfter != tc.wantRequeue {
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, tc.wantRequeue)
			}
			got := &offloadingv1alpha1.RemoteNamespace{}
			if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(ptr.To(tc.wantArmed), got.Status.FenceAfterSeconds); diff != "" {
				t.Errorf("status.fenceAfterSeconds (-want +got):\n%s", diff)
			}
			want := []string{"web-0"}
			if tc.wantFenced {
				want = []string{}
			}
			if diff := cmp.Diff(want, podNames(t, c)); diff != "" {
				t.Errorf("pods left (-want +got):\n%s", diff)
			}
			evs := drain(rec)
			if fenced := len(evs) == 1 && strings.HasPrefix(evs[0], "Warning Fenced "); fenced != tc.wantFenced || len(evs) > 1 {
				t.Errorf("events = %q, want a Fenced one: %v", evs, tc.wantFenced)
			}
		})
	}
}

// TestFenceAfter: what the consumer asks for, within the CRD's bounds.
func TestFenceAfter(t *testing.T) {
	for _, tc := range []struct {
		asked *int32
		want  *int32
	}{
		{asked: nil, want: nil},
		{asked: ptr.To[int32](30), want: ptr.To[int32](30)},
		{asked: ptr.To[int32](1), want: ptr.To[int32](MinFenceAfterSeconds)},
		{asked: ptr.To[int32](-5), want: ptr.To[int32](MinFenceAfterSeconds)},
		{asked: ptr.To[int32](MaxFenceAfterSeconds), want: ptr.To[int32](MaxFenceAfterSeconds)},
		{asked: ptr.To[int32](1 << 30), want: ptr.To[int32](MaxFenceAfterSeconds)},
	} {
		rn := replica(tc.asked)
		if diff := cmp.Diff(tc.want, FenceAfter(rn)); diff != "" {
			t.Errorf("FenceAfter(%v) (-want +got):\n%s", ptr.Deref(tc.asked, -1), diff)
		}
	}
}

// TestFenceBoundsAreTheCRDs: the bounds this agent applies are the ones
// the API server enforces on spec.fenceAfterSeconds.
func TestFenceBoundsAreTheCRDs(t *testing.T) {
	raw, err := charts.FS.ReadFile("annex/crds/offloading.annex.dev_remotenamespaces.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(raw, crd); err != nil {
		t.Fatal(err)
	}
	var got [2]float64
	for _, v := range crd.Spec.Versions {
		p := v.Schema.OpenAPIV3Schema.Properties["spec"].Properties["fenceAfterSeconds"]
		got = [2]float64{ptr.Deref(p.Minimum, -1), ptr.Deref(p.Maximum, -1)}
	}
	if diff := cmp.Diff([2]float64{MinFenceAfterSeconds, MaxFenceAfterSeconds}, got); diff != "" {
		t.Errorf("CRD bounds of spec.fenceAfterSeconds (-agent's +CRD's):\n%s", diff)
	}
}

// TestReconcileWithoutALeaseCountsFromTheRemoteNamespace: a tenant
// namespace made again for a new peering (its RemoteNamespace new, its
// Lease not there yet) does not inherit the silence of the previous
// peering's Lease, which this agent remembers.
func TestReconcileWithoutALeaseCountsFromTheRemoteNamespace(t *testing.T) {
	rn := replica(ptr.To[int32](fence))
	rn.CreationTimestamp = metav1.NewTime(now.Add(-10 * time.Second))
	c := fake.NewClientBuilder().WithScheme(testScheme()).WithStatusSubresource(&offloadingv1alpha1.RemoteNamespace{}).
		WithObjects(append(shadowed("web-0", now.Add(-5*time.Second), nil), rn, remoteNamespaceOf("alpha"))...).Build()
	clk := clocktesting.NewFakeClock(now)
	heard := tenantgc.NewHeard(clk)
	heard.Observe(heartbeat(now.Add(-time.Hour))) // the previous peering's, long silent
	r := &Reconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(10), Clock: clk, Heard: heard}
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rn)})
	if err != nil {
		t.Fatal(err)
	}
	if want := 20*time.Second + 100*time.Millisecond; res.RequeueAfter != want {
		t.Errorf("requeue after %s, want %s", res.RequeueAfter, want)
	}
	if diff := cmp.Diff([]string{"web-0"}, podNames(t, c)); diff != "" {
		t.Errorf("pods left (-want +got):\n%s", diff)
	}
}
