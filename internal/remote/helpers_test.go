package remote

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

func TestMain(m *testing.M) {
	// client.New logs through controller-runtime's global logger.
	ctrllog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

// How the fake API server answers /readyz.
type mode int32

const (
	modeOK mode = iota
	modeHang
	modeUnauthorized
	modeForbidden
	modeUnavailable
)

// apiServer is an httptest TLS server standing in for a peer's API server.
// Its /readyz answer can be switched; it can be killed (connections refused)
// and revived on the same address.
type apiServer struct {
	t         *testing.T
	mode      atomic.Int32
	readyz    atomic.Int64 // /readyz requests received
	token     string       // when set, any other bearer token gets 401
	script    func(n int64) mode
	hangAll   bool // every path but /readyz hangs
	release   chan struct{}
	mu        sync.Mutex
	srv       *httptest.Server
	addr      string
	caPEM     []byte
	tlsConfig *tls.Config
}

type serverOption func(*apiServer)

// withToken makes the server accept only this bearer token.
func withToken(tok string) serverOption { return func(s *apiServer) { s.token = tok } }

// withScript makes the answer to the n-th /readyz request (from 1) script(n).
func withScript(f func(n int64) mode) serverOption { return func(s *apiServer) { s.script = f } }

// withHungAPI makes every path except /readyz hang.
func withHungAPI() serverOption { return func(s *apiServer) { s.hangAll = true } }

func newAPIServer(t *testing.T, opts ...serverOption) *apiServer {
	t.Helper()
	s := &apiServer{t: t, release: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	srv.StartTLS()
	s.srv, s.addr, s.tlsConfig = srv, srv.Listener.Addr().String(), srv.TLS
	s.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	t.Cleanup(func() {
		close(s.release)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.srv != nil {
			s.srv.Close()
		}
	})
	return s
}

func (s *apiServer) serve(w http.ResponseWriter, r *http.Request) {
	if s.token != "" && r.Header.Get("Authorization") != "Bearer "+s.token {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	if r.URL.Path != "/readyz" {
		if s.hangAll {
			s.hang(r)
			return
		}
		http.NotFound(w, r)
		return
	}
	n := s.readyz.Add(1)
	m := mode(s.mode.Load())
	if s.script != nil {
		m = s.script(n)
	}
	switch m {
	case modeOK:
		_, _ = w.Write([]byte("ok"))
	case modeHang:
		s.hang(r)
	case modeUnauthorized:
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
	case modeForbidden:
		http.Error(w, "Forbidden", http.StatusForbidden)
	case modeUnavailable:
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("[+]ping ok\n[-]etcd failed: reason withheld\nreadyz check failed\n"))
	}
}

// hang never answers: when the request ends (client gone, or test over) it
// aborts the connection instead of letting net/http write an empty 200,
// which a client could still read if the server noticed the end first.
func (s *apiServer) hang(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-s.release:
	}
	panic(http.ErrAbortHandler)
}

func (s *apiServer) set(m mode) { s.mode.Store(int32(m)) }

func (s *apiServer) url() string { return "https://" + s.addr }

// config is a rest.Config for the server with the given token.
func (s *apiServer) config(token string) *rest.Config {
	return &rest.Config{
		Host:            s.url(),
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.caPEM},
	}
}

// kill closes the listener and every connection: the next probes get
// "connection refused".
func (s *apiServer) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.srv.CloseClientConnections()
	s.srv.Close()
	s.srv = nil
}

// revive serves again on the same address.
func (s *apiServer) revive() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	l, err := net.Listen("tcp", s.addr)
	if err != nil {
		s.t.Fatalf("revive: %v", err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	srv.Listener.Close()
	srv.Listener = l
	srv.TLS = s.tlsConfig
	srv.StartTLS()
	s.srv = srv
}

// configForURL is a rest.Config for host without credentials.
func configForURL(host string) *rest.Config {
	return &rest.Config{Host: host, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
}

// closedPortURL is an https URL on which nothing listens.
func closedPortURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return "https://" + addr
}

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := corev1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// testOptions probe every 20ms with a timeout long enough for a TLS
// handshake on a loaded machine under -race.
func testOptions() Options {
	return Options{
		ProbeInterval:    20 * time.Millisecond,
		ProbeTimeout:     500 * time.Millisecond,
		CallTimeout:      time.Second,
		StatusRefresh:    time.Hour,
		FailureThreshold: 3,
		SuccessThreshold: 2,
	}
}

func foreignCluster(id string) *corev1alpha1.ForeignCluster {
	return &corev1alpha1.ForeignCluster{
		ObjectMeta: metav1.ObjectMeta{Name: id},
		Spec:       corev1alpha1.ForeignClusterSpec{ClusterID: id},
	}
}

// env is a Manager under test with a fake local cluster.
type env struct {
	m       *Manager
	local   client.Client
	patches atomic.Int64 // status patches of ForeignClusters
}

// newEnv builds a Manager over a fake local cluster holding objs.
func newEnv(t *testing.T, o Options, objs ...client.Object) *env {
	t.Helper()
	e := &env{}
	scheme := testScheme(t)
	e.local = fake.NewClientBuilder().
		WithScheme(scheme).
		WithObjects(objs...).
		WithStatusSubresource(&corev1alpha1.ForeignCluster{}).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if _, ok := obj.(*corev1alpha1.ForeignCluster); ok && sub == "status" {
					e.patches.Add(1)
				}
				return c.Status().Patch(ctx, obj, patch, opts...)
			},
		}).
		Build()
	e.m = NewManager(e.local, scheme, o, clock.RealClock{}, testr.New(t))
	return e
}

// start runs the Manager until the test ends, then checks that Start
// returned (and so every goroutine of the Manager is gone).
func (e *env) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.m.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
}

// transitions records OnTransition calls.
type transitions struct {
	mu    sync.Mutex
	calls []bool
}

func (e *env) recordTransitions(id string) *transitions {
	tr := &transitions{}
	e.m.OnTransition(func(clusterID string, reachable bool) {
		if clusterID != id {
			return
		}
		tr.mu.Lock()
		defer tr.mu.Unlock()
		tr.calls = append(tr.calls, reachable)
	})
	return tr
}

// wait waits for n calls: transitions are coalesced, so tests wait for one
// to be delivered before causing the next.
func (tr *transitions) wait(t *testing.T, n int) {
	t.Helper()
	eventually(t, func() bool { return len(tr.get()) >= n }, say("%d OnTransition calls", n))
}

func (tr *transitions) get() []bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]bool(nil), tr.calls...)
}

// fc reads a ForeignCluster from the fake local cluster.
func (e *env) fc(t *testing.T, id string) *corev1alpha1.ForeignCluster {
	t.Helper()
	fc := &corev1alpha1.ForeignCluster{}
	if err := e.local.Get(context.Background(), client.ObjectKey{Name: id}, fc); err != nil {
		t.Fatalf("get ForeignCluster %s: %v", id, err)
	}
	return fc
}

// cond returns a condition of a ForeignCluster without its transition time,
// nil when absent.
func (e *env) cond(t *testing.T, id, typ string) *metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(e.fc(t, id).Status.Conditions, typ)
	if c == nil {
		return nil
	}
	out := *c
	out.LastTransitionTime = metav1.Time{}
	return &out
}

// waitCond waits until the condition has the given status and reason.
func (e *env) waitCond(t *testing.T, id, typ string, status metav1.ConditionStatus, reason string) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	eventually(t, func() bool {
		c = e.cond(t, id, typ)
		return c != nil && c.Status == status && c.Reason == reason
	}, func() string { return fmt.Sprintf("%s %s=%s/%s, last seen %+v", id, typ, status, reason, c) })
	return c
}

// eventually polls f until it is true or 10s pass; what describes the wait.
func eventually(t *testing.T, f func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func say(format string, args ...any) func() string {
	return func() string { return fmt.Sprintf(format, args...) }
}

// probesPass waits until the server received n more /readyz requests.
func probesPass(t *testing.T, s *apiServer, n int64) {
	t.Helper()
	target := s.readyz.Load() + n
	eventually(t, func() bool { return s.readyz.Load() >= target }, say("%d more probes", n))
}
