package cli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const notReadyBody = "[+]ping ok\n[-]informer-sync failed: reason withheld\n[+]etcd ok\n[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\nreadyz check failed"

func TestFailedChecks(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{notReadyBody, "informer-sync failed: reason withheld, poststarthook/rbac/bootstrap-roles failed: reason withheld"},
		{`an error on the server ("[-]etcd failed: reason withheld\n[+]log ok\nreadyz check failed") has prevented the request from succeeding`, "etcd failed: reason withheld"},
		{"ok", ""},
	} {
		if got := failedChecks(tc.in); got != tc.want {
			t.Errorf("failedChecks(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// readyzServer answers /readyz with 500 and notReadyBody the first
// notReadyFor times, then ok.
func readyzServer(t *testing.T, notReadyFor int32) (*Cluster, *atomic.Int32) {
	t.Helper()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		if calls.Add(1) <= notReadyFor {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(notReadyBody))
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return &Cluster{Kubeconfig: "kc", Host: srv.URL, Clientset: cs}, &calls
}

func TestWaitReadyWaitsForAStartingAPIServer(t *testing.T) {
	c, calls := readyzServer(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.waitReady(ctx, time.Millisecond); err != nil {
		t.Fatalf("waitReady: %v", err)
	}
	if got := calls.Load(); got != 3 {
		t.Errorf("asked /readyz %d times, want 3", got)
	}
}

func TestWaitReadyNamesTheFailedChecks(t *testing.T) {
	c, _ := readyzServer(t, 1<<30)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := c.waitReady(ctx, time.Millisecond)
	if err == nil {
		t.Fatal("waitReady: no error from an API server that is never ready")
	}
	msg := c.Unreachable(err).Error()
	for _, want := range []string{"not ready: informer-sync failed", "poststarthook/rbac/bootstrap-roles failed"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "[+]ping") {
		t.Errorf("error %q lists the checks that passed", msg)
	}
}
