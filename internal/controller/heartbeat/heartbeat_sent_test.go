package heartbeat

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

func TestSent(t *testing.T) {
	start := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	type renewal struct {
		to string
		at time.Time
	}
	for _, tc := range []struct {
		name     string
		before   []renewal // recorded before Start
		started  bool
		after    []renewal // recorded after Start
		provider string
		want     time.Time
		wantOK   bool
	}{
		{name: "before Start: unknown", provider: "beta"},
		{name: "before Start, even with a renewal recorded", before: []renewal{{"beta", start.Add(-time.Second)}}, provider: "beta"},
		{name: "after Start, an unknown provider: Start", started: true, provider: "beta", want: start, wantOK: true},
		{name: "after Start, a renewal to another provider does not count", started: true,
			after: []renewal{{"gamma", start.Add(5 * time.Second)}}, provider: "beta", want: start, wantOK: true},
		{name: "after Start, the last renewal", started: true,
			after: []renewal{{"beta", start.Add(5 * time.Second)}, {"beta", start.Add(15 * time.Second)}}, provider: "beta", want: start.Add(15 * time.Second), wantOK: true},
		{name: "a renewal made before Start (by an earlier leader) does not count", started: true,
			before: []renewal{{"beta", start.Add(-10 * time.Second)}}, provider: "beta", want: start, wantOK: true},
		{name: "a renewal at Start itself: Start", started: true,
			after: []renewal{{"beta", start}}, provider: "beta", want: start, wantOK: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Sent{}
			for _, r := range tc.before {
				s.record(r.to, r.at)
			}
			if tc.started {
				s.Start(start)
			}
			for _, r := range tc.after {
				s.record(r.to, r.at)
			}
			got, ok := s.Last(tc.provider)
			if ok != tc.wantOK || !got.Equal(tc.want) {
				t.Errorf("Last(%q) = %s, %v; want %s, %v", tc.provider, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// TestSentRestart: a later Start (this agent lost the leadership and won it
// again) hides the renewals recorded before it.
func TestSentRestart(t *testing.T) {
	start := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	s := &Sent{}
	s.Start(start)
	s.record("beta", start.Add(10*time.Second))
	s.Start(start.Add(time.Minute))
	if got, ok := s.Last("beta"); !ok || !got.Equal(start.Add(time.Minute)) {
		t.Errorf("Last = %s, %v; want %s, true", got, ok, start.Add(time.Minute))
	}
}

type fakeRemotes struct {
	c   client.Client
	err error
}

func (f fakeRemotes) Client(string) (client.Client, error) { return f.c, f.err }

// TestReconcileRecordsSent: every renewal sent is recorded, one that cannot
// be sent (no client for the provider, or a provider marked unreachable) is
// not.
func TestReconcileRecordsSent(t *testing.T) {
	start := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	now := start.Add(time.Minute)
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = corev1alpha1.AddToScheme(s)
	fc := func(unreachable bool) *corev1alpha1.ForeignCluster {
		return &corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "beta"},
			Spec: corev1alpha1.ForeignClusterSpec{ClusterID: "beta", Unreachable: unreachable, CredentialsSecretRef: &corev1alpha1.SecretReference{Name: "beta"}}}
	}
	for _, tc := range []struct {
		name       string
		fc         *corev1alpha1.ForeignCluster
		remoteErr  error
		wantLast   time.Time
		wantLeases int
	}{
		{name: "sent: recorded", fc: fc(false), wantLast: now, wantLeases: 1},
		{name: "no client for the provider: not recorded", fc: fc(false), remoteErr: errors.New("unreachable"), wantLast: start},
		{name: "marked unreachable: not recorded", fc: fc(true), wantLast: start},
	} {
		t.Run(tc.name, func(t *testing.T) {
			local := fake.NewClientBuilder().WithScheme(s).WithObjects(tc.fc).Build()
			remote := fake.NewClientBuilder().WithScheme(s).Build()
			sent := &Sent{}
			sent.Start(start)
			r := &Reconciler{Client: local, Remotes: fakeRemotes{c: remote, err: tc.remoteErr}, LocalClusterID: "alpha",
				Clock: clocktesting.NewFakePassiveClock(now), Interval: 10 * time.Second, Sent: sent}
			if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: "beta"}}); err != nil {
				t.Fatal(err)
			}
			if got, ok := sent.Last("beta"); !ok || !got.Equal(tc.wantLast) {
				t.Errorf("Last = %s, %v; want %s, true", got, ok, tc.wantLast)
			}
			leases := &coordinationv1.LeaseList{}
			if err := remote.List(context.Background(), leases); err != nil {
				t.Fatal(err)
			}
			if len(leases.Items) != tc.wantLeases {
				t.Fatalf("%d leases on the provider, want %d", len(leases.Items), tc.wantLeases)
			}
			if tc.wantLeases == 1 {
				if rt := leases.Items[0].Spec.RenewTime; rt == nil || !rt.Time.Equal(now) {
					t.Errorf("renewTime = %v, want %s (what Sent recorded)", rt, now)
				}
			}
		})
	}
}

// TestReconcileRecordsALapse: a renewal that finds the last one more than
// two intervals old records the lapse on the Lease for the provider.
func TestReconcileRecordsALapse(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = corev1alpha1.AddToScheme(s)
	fc := &corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "beta"},
		Spec: corev1alpha1.ForeignClusterSpec{ClusterID: "beta", CredentialsSecretRef: &corev1alpha1.SecretReference{Name: "beta"}}}
	for _, tc := range []struct {
		name      string
		lastRenew time.Time
		want      map[string]string
	}{
		{name: "on time: nothing recorded", lastRenew: now.Add(-10 * time.Second)},
		{name: "a lapse: recorded", lastRenew: now.Add(-time.Minute), want: map[string]string{
			corev1alpha1.AnnotationHeartbeatLapseFrom: now.Add(-time.Minute).Format(time.RFC3339Nano),
			corev1alpha1.AnnotationHeartbeatLapseTo:   now.Format(time.RFC3339Nano)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := metav1.NewMicroTime(tc.lastRenew)
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1alpha1.TenantNamespaceName("alpha"), Name: corev1alpha1.HeartbeatLeaseName},
				Spec: coordinationv1.LeaseSpec{RenewTime: &rt}}
			local := fake.NewClientBuilder().WithScheme(s).WithObjects(fc).Build()
			remote := fake.NewClientBuilder().WithScheme(s).WithObjects(lease).Build()
			r := &Reconciler{Client: local, Remotes: fakeRemotes{c: remote}, LocalClusterID: "alpha",
				Clock: clocktesting.NewFakePassiveClock(now), Interval: 10 * time.Second}
			if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: "beta"}}); err != nil {
				t.Fatal(err)
			}
			got := &coordinationv1.Lease{}
			if err := remote.Get(context.Background(), client.ObjectKeyFromObject(lease), got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.Annotations, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("annotations (-want +got):\n%s", diff)
			}
			if !got.Spec.RenewTime.Time.Equal(now) {
				t.Errorf("renewTime %s, want %s", got.Spec.RenewTime, now)
			}
		})
	}
}
