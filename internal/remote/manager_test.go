package remote

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

func TestTracker(t *testing.T) {
	// probes: '+' success, '-' failure. want: state after each probe,
	// 'U' unknown, 'R' reachable, 'X' unreachable.
	tests := []struct {
		name   string
		probes string
		want   string
	}{
		{name: "first success is enough", probes: "+", want: "R"},
		{name: "one lost probe changes nothing", probes: "+-+", want: "RRR"},
		{name: "two lost probes change nothing", probes: "+--+", want: "RRRR"},
		{name: "threshold failures", probes: "+---", want: "RRRX"},
		{name: "no verdict before threshold failures", probes: "--", want: "UU"},
		{name: "threshold failures without a success", probes: "---", want: "UUX"},
		{name: "one success does not recover", probes: "---+-", want: "UUXXX"},
		{name: "threshold successes recover", probes: "---++", want: "UUXXR"},
		{name: "flapping never flips a reachable peer", probes: "+-+-+-+-+-+-", want: "RRRRRRRRRRRR"},
		{name: "flapping never flips an unreachable peer", probes: "----+-+-+-+-", want: "UUXXXXXXXXXX"},
		{name: "successes reset the failure streak", probes: "+--+--+--", want: "RRRRRRRRR"},
	}
	letter := map[reachability]byte{unknown: 'U', reachable: 'R', unreachable: 'X'}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := tracker{failureThreshold: 3, successThreshold: 2}
			var got []byte
			for _, p := range tc.probes {
				prev := tr.state
				changed := tr.observe(p == '+')
				if changed != (prev != tr.state) {
					t.Errorf("observe reported changed=%v going %s -> %s", changed, prev, tr.state)
				}
				got = append(got, letter[tr.state])
			}
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("states (-want +got):\n%s", diff)
			}
		})
	}
}

func TestProbeFailures(t *testing.T) {
	o := testOptions()
	tests := []struct {
		name string
		// setup returns the config to Set.
		setup      func(t *testing.T) *rest.Config
		wantReason string
		wantDetail string
		wantAuth   *metav1.Condition // nil: no Authenticated condition
	}{
		{
			name:       "dead API server: connection refused",
			setup:      func(t *testing.T) *rest.Config { return configForURL(closedPortURL(t)) },
			wantReason: corev1alpha1.ReasonProbeFailed,
			wantDetail: "connection refused",
		},
		{
			name: "hung API server: accepts connections, never answers",
			setup: func(t *testing.T) *rest.Config {
				s := newAPIServer(t)
				s.set(modeHang)
				return s.config("")
			},
			wantReason: corev1alpha1.ReasonProbeTimeout,
			wantDetail: fmt.Sprintf("no answer within %s (API server hung or overloaded)", o.ProbeTimeout),
		},
		{
			name:       "401: credentials rejected",
			setup:      func(t *testing.T) *rest.Config { return newAPIServer(t, withToken("good")).config("expired") },
			wantReason: corev1alpha1.ReasonCredentialsRejected,
			wantDetail: "401 Unauthorized: the API server rejected the credentials (token expired or revoked?); renew the credentials Secret or peer again",
			wantAuth: &metav1.Condition{
				Type: corev1alpha1.ConditionAuthenticated, Status: metav1.ConditionFalse, Reason: corev1alpha1.ReasonCredentialsRejected,
			},
		},
		{
			name: "403: permission denied",
			setup: func(t *testing.T) *rest.Config {
				s := newAPIServer(t)
				s.set(modeForbidden)
				return s.config("tok")
			},
			wantReason: corev1alpha1.ReasonPermissionDenied,
			wantDetail: "403 Forbidden: the credentials were accepted but may not read /readyz, which any authenticated user normally can; check the RBAC on the remote cluster",
			wantAuth: &metav1.Condition{
				Type: corev1alpha1.ConditionAuthenticated, Status: metav1.ConditionFalse, Reason: corev1alpha1.ReasonPermissionDenied,
			},
		},
		{
			name: "503: not ready",
			setup: func(t *testing.T) *rest.Config {
				s := newAPIServer(t)
				s.set(modeUnavailable)
				return s.config("tok")
			},
			wantReason: corev1alpha1.ReasonProbeFailed,
			wantDetail: "HTTP 503 Service Unavailable: [-]etcd failed: reason withheld",
			wantAuth: &metav1.Condition{
				Type: corev1alpha1.ConditionAuthenticated, Status: metav1.ConditionTrue, Reason: corev1alpha1.ReasonCredentialsValid,
				Message: "the remote API server accepted the credentials",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := tc.setup(t)
			e := newEnv(t, o, foreignCluster("beta"))
			e.start(t)
			if err := e.m.Set("beta", cfg); err != nil {
				t.Fatal(err)
			}
			got := e.waitCond(t, "beta", corev1alpha1.ConditionAPIServerReachable, metav1.ConditionFalse, tc.wantReason)
			want := &metav1.Condition{
				Type:    corev1alpha1.ConditionAPIServerReachable,
				Status:  metav1.ConditionFalse,
				Reason:  tc.wantReason,
				Message: fmt.Sprintf("GET %s/readyz: %s (3 consecutive failures)", cfg.Host, tc.wantDetail),
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("APIServerReachable (-want +got):\n%s", diff)
			}
			if tc.wantAuth != nil && tc.wantAuth.Message == "" {
				tc.wantAuth.Message = fmt.Sprintf("GET %s/readyz: %s", cfg.Host, tc.wantDetail)
			}
			if diff := cmp.Diff(tc.wantAuth, e.cond(t, "beta", corev1alpha1.ConditionAuthenticated)); diff != "" {
				t.Errorf("Authenticated (-want +got):\n%s", diff)
			}
			if e.m.Reachable("beta") {
				t.Error("Reachable() = true, want false")
			}
			_, err := e.m.Client("beta")
			if !errors.Is(err, ErrPeerUnreachable) || !strings.Contains(err.Error(), want.Message) {
				t.Errorf("Client() error = %v, want ErrPeerUnreachable with %q", err, want.Message)
			}
			fc := e.fc(t, "beta")
			if fc.Status.LastProbeTime == nil {
				t.Error("status.lastProbeTime not set")
			}
		})
	}
}

func TestDeadAndHungThenBack(t *testing.T) {
	s := newAPIServer(t)
	e := newEnv(t, testOptions(), foreignCluster("beta"))
	tr := e.recordTransitions("beta")
	events := e.m.Subscribe()
	e.start(t)
	if err := e.m.Set("beta", s.config("tok")); err != nil {
		t.Fatal(err)
	}
	waitEvent := func(wantReachable bool) {
		t.Helper()
		select {
		case ev := <-events:
			if ev.Object.Name != "beta" {
				t.Errorf("event for %q, want beta", ev.Object.Name)
			}
			if got := e.m.Reachable("beta"); got != wantReachable {
				t.Errorf("Reachable() after event = %v, want %v", got, wantReachable)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event (want reachable=%v)", wantReachable)
		}
	}

	e.waitCond(t, "beta", corev1alpha1.ConditionAPIServerReachable, metav1.ConditionTrue, corev1alpha1.ReasonProbeSucceeded)
	waitEvent(true)
	tr.wait(t, 1)
	if _, err := e.m.Client("beta"); err != nil {
		t.Errorf("Client() while reachable: %v", err)
	}
	if got := e.fc(t, "beta").Status.ProbeLatency; got == nil || got.Duration <= 0 {
		t.Errorf("status.probeLatency = %v, want a positive duration", got)
	}

	s.kill()
	c := e.waitCond(t, "beta", corev1alpha1.ConditionAPIServerReachable, metav1.ConditionFalse, corev1alpha1.ReasonProbeFailed)
	waitEvent(false)
	tr.wait(t, 2)
	if want := "connection refused (3 consecutive failures)"; !strings.HasSuffix(c.Message, want) {
		t.Errorf("message %q, want suffix %q", c.Message, want)
	}

	s.revive()
	e.waitCond(t, "beta", corev1alpha1.ConditionAPIServerReachable, metav1.ConditionTrue, corev1alpha1.ReasonProbeSucceeded)
	waitEvent(true)
	tr.wait(t, 3)

	s.set(modeHang)
	e.waitCond(t, "beta", corev1alpha1.ConditionAPIServerReachable, metav1.ConditionFalse, corev1alpha1.ReasonProbeTimeout)
	waitEvent(false)
	tr.wait(t, 4)

	s.set(modeOK)
	e.waitCond(t, "beta", corev1alpha1.ConditionAPIServerReachable, metav1.ConditionTrue, corev1alpha1.ReasonProbeSucceeded)
	waitEvent(true)

	tr.wait(t, 5)
	if diff := cmp.Diff([]bool{true, false, true, false, true}, tr.get()); diff != "" {
		t.Errorf("OnTransition calls (-want +got):\n%s", diff)
	}
}

// A peer whose /readyz times out while it answers the calls of its clients
// is overloaded, not hung: it stays reachable. Once the calls go
// unanswered too, the timeouts count again.
func TestOverloadedIsNotHung(t *testing.T) {
	s := newAPIServer(t)
	e := newEnv(t, testOptions(), foreignCluster("beta"))
	e.start(t)
	mustSet(t, e.m, s.config("tok"))
	e.waitCond(t, "beta", corev1alpha1.ConditionAPIServerReachable, metav1.ConditionTrue, corev1alpha1.ReasonProbeSucceeded)
	cs, err := e.m.Clientset("beta")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	calls := make(chan struct{})
	go func() { // a busy client: an answer (404) every 20ms
		defer close(calls)
		for ctx.Err() == nil {
			_, _ = cs.CoreV1().ConfigMaps("x").Get(ctx, "y", metav1.GetOptions{})
			time.Sleep(20 * time.Millisecond)
		}
	}()
	s.set(modeHang)
	probesPass(t, s, 8) // more than FailureThreshold timeouts
	if !e.m.Reachable("beta") {
		t.Error("unreachable while it answered calls")
	}
	stop()
	<-calls
	e.waitCond(t, "beta", corev1alpha1.ConditionAPIServerReachable, metav1.ConditionFalse, corev1alpha1.ReasonProbeTimeout)
}

func TestHysteresis(t *testing.T) {
	fail := func(n int64) bool { return false }
	tests := []struct {
		name      string
		failing   func(n int64) bool // whether the n-th probe fails
		probes    int64
		wantCalls []bool
	}{
		{name: "healthy", failing: fail, probes: 10, wantCalls: []bool{true}},
		{name: "one lost probe", failing: func(n int64) bool { return n == 4 }, probes: 15, wantCalls: []bool{true}},
		{name: "two lost probes in a row", failing: func(n int64) bool { return n == 4 || n == 5 }, probes: 15, wantCalls: []bool{true}},
		{name: "flapping link while reachable", failing: func(n int64) bool { return n%2 == 0 }, probes: 30, wantCalls: []bool{true}},
		{name: "flapping link while unreachable", failing: func(n int64) bool { return n <= 3 || n%2 == 0 }, probes: 30, wantCalls: []bool{false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newAPIServer(t, withScript(func(n int64) mode {
				if tc.failing(n) {
					return modeUnavailable
				}
				return modeOK
			}))
			e := newEnv(t, testOptions(), foreignCluster("beta"))
			tr := e.recordTransitions("beta")
			e.start(t)
			if err := e.m.Set("beta", s.config("tok")); err != nil {
				t.Fatal(err)
			}
			probesPass(t, s, tc.probes)
			tr.wait(t, len(tc.wantCalls))
			probesPass(t, s, 2) // let a wrong late transition show up
			if diff := cmp.Diff(tc.wantCalls, tr.get()); diff != "" {
				t.Errorf("OnTransition calls (-want +got):\n%s", diff)
			}
		})
	}
}

func TestClientErrors(t *testing.T) {
	cfg := configForURL("https://127.0.0.1:1")
	tests := []struct {
		name    string
		setup   func(m *Manager)
		wantErr error
	}{
		{name: "never set", setup: func(m *Manager) {}, wantErr: ErrUnknownPeer},
		{name: "set, not probed yet", setup: func(m *Manager) { mustSet(t, m, cfg) }, wantErr: ErrPeerUnreachable},
		{name: "removed", setup: func(m *Manager) { mustSet(t, m, cfg); m.Remove("beta") }, wantErr: ErrUnknownPeer},
		{name: "marked", setup: func(m *Manager) { mustSet(t, m, cfg); m.SetPermanentlyUnreachable("beta", true) }, wantErr: ErrPermanentlyUnreachable},
		{name: "marked before set", setup: func(m *Manager) { m.SetPermanentlyUnreachable("beta", true) }, wantErr: ErrPermanentlyUnreachable},
		{name: "marked then set", setup: func(m *Manager) { m.SetPermanentlyUnreachable("beta", true); mustSet(t, m, cfg) }, wantErr: ErrPermanentlyUnreachable},
		{name: "mark cleared", setup: func(m *Manager) {
			mustSet(t, m, cfg)
			m.SetPermanentlyUnreachable("beta", true)
			m.SetPermanentlyUnreachable("beta", false)
		}, wantErr: ErrPeerUnreachable},
		{name: "mark cleared on an unknown peer", setup: func(m *Manager) { m.SetPermanentlyUnreachable("beta", false) }, wantErr: ErrUnknownPeer},
	}
	sentinels := []error{ErrUnknownPeer, ErrPeerUnreachable, ErrPermanentlyUnreachable}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, testOptions()) // not started: nothing is probed
			tc.setup(e.m)
			_, err := e.m.Client("beta")
			_, csErr := e.m.Clientset("beta")
			_, cfgErr := e.m.RESTConfig("beta")
			for _, got := range []error{err, csErr, cfgErr} {
				for _, s := range sentinels {
					if errors.Is(got, s) != (s == tc.wantErr) {
						t.Errorf("error %v: errors.Is(%v) = %v", got, s, !(s == tc.wantErr))
					}
				}
			}
			if e.m.Reachable("beta") {
				t.Error("Reachable() = true")
			}
		})
	}
}

func mustSet(t *testing.T, m *Manager, cfg *rest.Config) {
	t.Helper()
	if err := m.Set("beta", cfg); err != nil {
		t.Fatal(err)
	}
}

func TestSetPermanentlyUnreachable(t *testing.T) {
	s := newAPIServer(t)
	e := newEnv(t, testOptions(), foreignCluster("beta"))
	tr := e.recordTransitions("beta")
	e.start(t)
	mustSet(t, e.m, s.config("tok"))
	e.waitCond(t, "beta", corev1alpha1.ConditionAPIServerReachable, metav1.ConditionTrue, corev1alpha1.ReasonProbeSucceeded)
	tr.wait(t, 1)

	e.m.SetPermanentlyUnreachable("beta", true)
	got := e.waitCond(t, "beta", corev1alpha1.ConditionAPIServerReachable, metav1.ConditionFalse, corev1alpha1.ReasonMarkedUnreachable)
	want := &metav1.Condition{
		Type: corev1alpha1.ConditionAPIServerReachable, Status: metav1.ConditionFalse, Reason: corev1alpha1.ReasonMarkedUnreachable,
		Message: "spec.unreachable is set (forced unpeer): the peer is not probed and no remote call is made",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("APIServerReachable (-want +got):\n%s", diff)
	}
	if _, err := e.m.Client("beta"); !errors.Is(err, ErrPermanentlyUnreachable) {
		t.Errorf("Client() error = %v, want ErrPermanentlyUnreachable", err)
	}
	tr.wait(t, 2)
	// A probe may have been in flight; after that, nothing.
	time.Sleep(50 * time.Millisecond)
	before := s.readyz.Load()
	time.Sleep(10 * testOptions().ProbeInterval)
	if after := s.readyz.Load(); after != before {
		t.Errorf("%d probes while marked permanently unreachable", after-before)
	}
	// Setting the same config again does not resume probing.
	mustSet(t, e.m, s.config("tok"))
	mustSet(t, e.m, s.config("other-token"))
	time.Sleep(5 * testOptions().ProbeInterval)
	if after := s.readyz.Load(); after != before {
		t.Errorf("Set resumed probing of a peer marked permanently unreachable")
	}

	e.m.SetPermanentlyUnreachable("beta", false)
	e.waitCond(t, "beta", corev1alpha1.ConditionAPIServerReachable, metav1.ConditionTrue, corev1alpha1.ReasonProbeSucceeded)
	if _, err := e.m.Client("beta"); err != nil {
		t.Errorf("Client() after clearing the mark: %v", err)
	}
	tr.wait(t, 3)
	if diff := cmp.Diff([]bool{true, false, true}, tr.get()); diff != "" {
		t.Errorf("OnTransition calls (-want +got):\n%s", diff)
	}
}

func TestRemove(t *testing.T) {
	s := newAPIServer(t)
	e := newEnv(t, testOptions(), foreignCluster("beta"))
	tr := e.recordTransitions("beta")
	e.start(t)
	mustSet(t, e.m, s.config("tok"))
	tr.wait(t, 1)

	e.m.Remove("beta")
	if _, err := e.m.Client("beta"); !errors.Is(err, ErrUnknownPeer) {
		t.Errorf("Client() error = %v, want ErrUnknownPeer", err)
	}
	time.Sleep(50 * time.Millisecond)
	before := s.readyz.Load()
	time.Sleep(10 * testOptions().ProbeInterval)
	if after := s.readyz.Load(); after != before {
		t.Errorf("%d probes after Remove", after-before)
	}
	tr.wait(t, 2)
	if diff := cmp.Diff([]bool{true, false}, tr.get()); diff != "" {
		t.Errorf("OnTransition calls (-want +got):\n%s", diff)
	}
	e.m.Remove("beta") // idempotent
}

func TestSetReconfigures(t *testing.T) {
	s := newAPIServer(t, withToken("renewed"))
	e := newEnv(t, testOptions(), foreignCluster("beta"))
	e.start(t)
	mustSet(t, e.m, s.config("expired"))
	e.waitCond(t, "beta", corev1alpha1.ConditionAuthenticated, metav1.ConditionFalse, corev1alpha1.ReasonCredentialsRejected)
	e.waitCond(t, "beta", corev1alpha1.ConditionAPIServerReachable, metav1.ConditionFalse, corev1alpha1.ReasonCredentialsRejected)

	// An equal config is a no-op: the clients are kept.
	e.m.mu.Lock()
	before := e.m.peers["beta"].client
	e.m.mu.Unlock()
	mustSet(t, e.m, s.config("expired"))
	e.m.mu.Lock()
	same := e.m.peers["beta"].client == before
	e.m.mu.Unlock()
	if !same {
		t.Error("Set with an equal config rebuilt the clients")
	}

	mustSet(t, e.m, s.config("renewed"))
	e.waitCond(t, "beta", corev1alpha1.ConditionAPIServerReachable, metav1.ConditionTrue, corev1alpha1.ReasonProbeSucceeded)
	e.waitCond(t, "beta", corev1alpha1.ConditionAuthenticated, metav1.ConditionTrue, corev1alpha1.ReasonCredentialsValid)
}

func TestSetRejectsBadConfig(t *testing.T) {
	e := newEnv(t, testOptions())
	for _, tc := range []struct {
		name string
		id   string
		cfg  *rest.Config
	}{
		{name: "empty ID", cfg: configForURL("https://127.0.0.1:1")},
		{name: "nil config", id: "beta"},
		{name: "no host", id: "beta", cfg: configForURL("")},
		{name: "bad URL", id: "beta", cfg: configForURL("https://[::1")},
	} {
		if err := e.m.Set(tc.id, tc.cfg); err == nil {
			t.Errorf("%s: Set succeeded, want an error", tc.name)
		}
	}
}

func TestStatusWrites(t *testing.T) {
	t.Run("no write at steady state", func(t *testing.T) {
		t.Parallel()
		s := newAPIServer(t)
		e := newEnv(t, testOptions(), foreignCluster("beta"))
		e.start(t)
		mustSet(t, e.m, s.config("tok"))
		e.waitCond(t, "beta", corev1alpha1.ConditionAPIServerReachable, metav1.ConditionTrue, corev1alpha1.ReasonProbeSucceeded)
		probesPass(t, s, 30)
		if got := e.patches.Load(); got != 1 {
			t.Errorf("%d status patches for one transition and 30 probes, want 1", got)
		}
	})
	t.Run("no write for a long outage", func(t *testing.T) {
		t.Parallel()
		s := newAPIServer(t)
		e := newEnv(t, testOptions(), foreignCluster("beta"))
		e.start(t)
		mustSet(t, e.m, s.config("tok"))
		e.waitCond(t, "beta", corev1alpha1.ConditionAPIServerReachable, metav1.ConditionTrue, corev1alpha1.ReasonProbeSucceeded)
		s.set(modeUnavailable)
		e.waitCond(t, "beta", corev1alpha1.ConditionAPIServerReachable, metav1.ConditionFalse, corev1alpha1.ReasonProbeFailed)
		probesPass(t, s, 30)
		if got := e.patches.Load(); got != 2 {
			t.Errorf("%d status patches for two transitions and 30 probes, want 2", got)
		}
	})
	t.Run("periodic refresh of lastProbeTime", func(t *testing.T) {
		t.Parallel()
		o := testOptions()
		o.StatusRefresh = 200 * time.Millisecond
		s := newAPIServer(t)
		e := newEnv(t, o, foreignCluster("beta"))
		e.start(t)
		mustSet(t, e.m, s.config("tok"))
		e.waitCond(t, "beta", corev1alpha1.ConditionAPIServerReachable, metav1.ConditionTrue, corev1alpha1.ReasonProbeSucceeded)
		first := e.fc(t, "beta").Status.LastProbeTime
		start := s.readyz.Load()
		eventually(t, func() bool { return e.patches.Load() >= 3 }, say("two refreshes"))
		probes := s.readyz.Load() - start
		if got := e.patches.Load(); got > 1+probes/5 {
			t.Errorf("%d status patches for %d probes with a refresh every 10 probes", got, probes)
		}
		if last := e.fc(t, "beta").Status.LastProbeTime; !first.Before(last) && !first.Equal(last) {
			t.Errorf("lastProbeTime went from %v to %v", first, last)
		}
	})
	t.Run("no refresh of lastProbeTime by default", func(t *testing.T) {
		t.Parallel()
		o := testOptions()
		o.StatusRefresh = 0
		s := newAPIServer(t)
		e := newEnv(t, o, foreignCluster("beta"))
		e.start(t)
		mustSet(t, e.m, s.config("tok"))
		e.waitCond(t, "beta", corev1alpha1.ConditionAPIServerReachable, metav1.ConditionTrue, corev1alpha1.ReasonProbeSucceeded)
		probesPass(t, s, 30)
		if got := e.patches.Load(); got != 1 {
			t.Errorf("%d status patches for one transition and 30 probes, want 1", got)
		}
		if fc := e.fc(t, "beta"); fc.Status.LastProbeTime == nil || fc.Status.ProbeLatency == nil {
			t.Errorf("lastProbeTime %v, probeLatency %v: want both written with the condition", fc.Status.LastProbeTime, fc.Status.ProbeLatency)
		}
	})
	t.Run("restart finds the status already written", func(t *testing.T) {
		t.Parallel()
		s := newAPIServer(t)
		fc := foreignCluster("beta")
		fc.Status = corev1alpha1.ForeignClusterStatus{
			LastProbeTime: &metav1.Time{Time: time.Now()},
			Conditions: []metav1.Condition{
				{
					Type: corev1alpha1.ConditionAPIServerReachable, Status: metav1.ConditionTrue, Reason: corev1alpha1.ReasonProbeSucceeded,
					Message: fmt.Sprintf("GET %s/readyz answered 200 OK", s.url()), LastTransitionTime: metav1.Now(),
				},
				{
					Type: corev1alpha1.ConditionAuthenticated, Status: metav1.ConditionTrue, Reason: corev1alpha1.ReasonCredentialsValid,
					Message: "the remote API server accepted the credentials", LastTransitionTime: metav1.Now(),
				},
			},
		}
		e := newEnv(t, testOptions(), fc)
		e.start(t)
		mustSet(t, e.m, s.config("tok"))
		eventually(t, func() bool { return e.m.Reachable("beta") }, say("reachable"))
		probesPass(t, s, 10)
		if got := e.patches.Load(); got != 0 {
			t.Errorf("%d status patches, want 0", got)
		}
	})
	t.Run("conditions of other controllers are kept", func(t *testing.T) {
		t.Parallel()
		s := newAPIServer(t)
		fc := foreignCluster("beta")
		network := metav1.Condition{
			Type: corev1alpha1.ConditionNetworkConnected, Status: metav1.ConditionTrue, Reason: corev1alpha1.ReasonNetworkReady,
			Message: "ok",
		}
		fc.Status.Conditions = []metav1.Condition{network}
		fc.Status.Conditions[0].LastTransitionTime = metav1.Now()
		e := newEnv(t, testOptions(), fc)
		e.start(t)
		mustSet(t, e.m, s.config("tok"))
		e.waitCond(t, "beta", corev1alpha1.ConditionAPIServerReachable, metav1.ConditionTrue, corev1alpha1.ReasonProbeSucceeded)
		if diff := cmp.Diff(&network, e.cond(t, "beta", corev1alpha1.ConditionNetworkConnected)); diff != "" {
			t.Errorf("NetworkConnected (-want +got):\n%s", diff)
		}
	})
	t.Run("transition time moves only with the status", func(t *testing.T) {
		t.Parallel()
		s := newAPIServer(t)
		e := newEnv(t, testOptions(), foreignCluster("beta"))
		e.start(t)
		mustSet(t, e.m, s.config("tok"))
		e.waitCond(t, "beta", corev1alpha1.ConditionAPIServerReachable, metav1.ConditionTrue, corev1alpha1.ReasonProbeSucceeded)
		s.set(modeUnavailable)
		e.waitCond(t, "beta", corev1alpha1.ConditionAPIServerReachable, metav1.ConditionFalse, corev1alpha1.ReasonProbeFailed)
		ltt := func() metav1.Time {
			for _, c := range e.fc(t, "beta").Status.Conditions {
				if c.Type == corev1alpha1.ConditionAPIServerReachable {
					return c.LastTransitionTime
				}
			}
			return metav1.Time{}
		}
		fellAt := ltt()
		time.Sleep(1100 * time.Millisecond) // transition times have a 1s resolution
		s.set(modeHang)                     // another reason, same status
		e.waitCond(t, "beta", corev1alpha1.ConditionAPIServerReachable, metav1.ConditionFalse, corev1alpha1.ReasonProbeTimeout)
		if got := ltt(); !got.Equal(&fellAt) {
			t.Errorf("lastTransitionTime moved from %v to %v on a reason change", fellAt, got)
		}
	})
	t.Run("ForeignCluster missing", func(t *testing.T) {
		t.Parallel()
		s := newAPIServer(t)
		e := newEnv(t, testOptions())
		e.start(t)
		mustSet(t, e.m, s.config("tok"))
		eventually(t, func() bool { return e.m.Reachable("beta") }, say("reachable"))
		probesPass(t, s, 5)
		if got := e.patches.Load(); got != 0 {
			t.Errorf("%d status patches without a ForeignCluster", got)
		}
	})
}

func TestCallTimeout(t *testing.T) {
	s := newAPIServer(t, withHungAPI())
	o := testOptions()
	o.CallTimeout = 200 * time.Millisecond
	e := newEnv(t, o, foreignCluster("beta"))
	e.start(t)
	mustSet(t, e.m, s.config("tok"))
	eventually(t, func() bool { return e.m.Reachable("beta") }, say("reachable"))
	c, err := e.m.Client("beta")
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "default"}, ns); err == nil {
		t.Error("Get on a hung API server succeeded")
	}
	cs, err := e.m.Clientset("beta")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err == nil {
		t.Error("clientset Get on a hung API server succeeded")
	}
	rc, err := e.m.RESTConfig("beta")
	if err != nil {
		t.Fatal(err)
	}
	if rc.Timeout != 0 {
		t.Errorf("RESTConfig().Timeout = %s, want none", rc.Timeout)
	}
}

func TestStartTwice(t *testing.T) {
	e := newEnv(t, testOptions())
	e.start(t)
	eventually(t, func() bool {
		e.m.mu.Lock()
		defer e.m.mu.Unlock()
		return e.m.ctx != nil
	}, say("started"))
	if err := e.m.Start(context.Background()); err == nil {
		t.Error("second Start succeeded")
	}
	if !e.m.NeedLeaderElection() {
		t.Error("NeedLeaderElection() = false")
	}
}

func TestMarkedBeforeStart(t *testing.T) {
	e := newEnv(t, testOptions(), foreignCluster("beta"))
	events := e.m.Subscribe() // as controllers do in SetupWithManager
	e.m.SetPermanentlyUnreachable("beta", true)
	e.start(t)
	e.waitCond(t, "beta", corev1alpha1.ConditionAPIServerReachable, metav1.ConditionFalse, corev1alpha1.ReasonMarkedUnreachable)
	select {
	case ev := <-events:
		if ev.Object.Name != "beta" {
			t.Errorf("event for %q, want beta", ev.Object.Name)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the event queued before Start was not delivered")
	}
}
