package kubeletserver

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	vkapi "github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/remote"
	"github.com/annexhq/annex/internal/virtualnode"
)

// The API server's user on kubelets; the test authorizer lets only it in.
const apiserverUser = "kube-apiserver-kubelet-client"

// userHeader carries the caller's name to the test authenticator.
const userHeader = "X-Test-User"

// fakeRemotes gives each provider a config or an error.
type fakeRemotes map[string]any

func (f fakeRemotes) RESTConfig(id string) (*rest.Config, error) {
	switch v := f[id].(type) {
	case *rest.Config:
		return rest.CopyConfig(v), nil
	case error:
		return nil, v
	}
	return nil, fmt.Errorf("remote: peer %q: %w", id, remote.ErrUnknownPeer)
}

// localObjects: namespace shop is offloaded to beta as shop-alpha, with
// pod web on the virtual node annex-beta; pod local runs on a regular node;
// namespace plain is not offloaded but has pod stray on annex-beta.
func localObjects() []client.Object {
	node := func(name string, labels map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	pod := func(ns, name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{NodeName: node}}
	}
	nso := &offloadingv1alpha1.NamespaceOffloading{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: offloadingv1alpha1.NamespaceOffloadingName},
		Status: offloadingv1alpha1.NamespaceOffloadingStatus{RemoteNamespaces: []offloadingv1alpha1.ProviderNamespaceStatus{
			{ClusterID: "gamma", RemoteNamespace: "shop-alpha", Phase: offloadingv1alpha1.RemoteNamespaceReady},
			{ClusterID: "beta", RemoteNamespace: "shop-alpha", Phase: offloadingv1alpha1.RemoteNamespaceReady},
			{ClusterID: "down", RemoteNamespace: "shop-alpha", Phase: offloadingv1alpha1.RemoteNamespaceReady},
		}},
	}
	return []client.Object{
		node("annex-beta", map[string]string{virtualnode.LabelNodeType: virtualnode.NodeTypeVirtual, corev1alpha1.LabelRemoteClusterID: "beta"}),
		node("annex-down", map[string]string{virtualnode.LabelNodeType: virtualnode.NodeTypeVirtual, corev1alpha1.LabelRemoteClusterID: "down"}),
		node("worker-0", map[string]string{"type": "kwok"}),
		pod("shop", "web", "annex-beta"),
		pod("shop", "gone", "annex-down"),
		pod("shop", "local", "worker-0"),
		pod("shop", "pending", ""),
		pod("plain", "stray", "annex-beta"),
		nso,
	}
}

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := offloadingv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// newTestServer returns a Server over the local objects whose callers are
// named by userHeader and whose authorizer records every decision.
func newTestServer(t *testing.T, remotes fakeRemotes) (*Server, *[]authorizer.Attributes) {
	t.Helper()
	var mu sync.Mutex
	var seen []authorizer.Attributes
	s := &Server{
		local:          fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(localObjects()...).Build(),
		remotes:        remotes,
		connectTimeout: 5 * time.Second,
		clock:          clock.RealClock{},
		log:            testr.New(t),
		certs:          &certHolder{},
		authn: authenticator.RequestFunc(func(r *http.Request) (*authenticator.Response, bool, error) {
			if u := r.Header.Get(userHeader); u != "" {
				return &authenticator.Response{User: &user.DefaultInfo{Name: u}}, true, nil
			}
			return nil, false, nil
		}),
		authz: authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
			mu.Lock()
			seen = append(seen, a)
			mu.Unlock()
			if a.GetUser().GetName() == apiserverUser && a.GetResource() == "nodes" && a.GetSubresource() == "proxy" {
				return authorizer.DecisionAllow, "", nil
			}
			return authorizer.DecisionDeny, "not a kubelet API user", nil
		}),
	}
	return s, &seen
}

// fakeProvider is a provider's API server: pods/log of shop-alpha/web
// answers with its log and, when following, holds the stream open until
// the client goes away (reported on followEnded); pods/exec runs a fake
// command through virtual-kubelet's own exec handler; a GET of the pod
// answers it exists.
type fakeProvider struct {
	srv         *httptest.Server
	mu          sync.Mutex
	logQueries  []url.Values
	followEnded chan struct{}
}

func newFakeProvider(t *testing.T) *fakeProvider {
	p := &fakeProvider{followEnded: make(chan struct{}, 1)}
	execRoutes := vkapi.PodHandler(vkapi.PodHandlerConfig{RunInContainer: fakeExec, AttachToContainer: fakeAttach, PortForward: fakePortForward}, false)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/namespaces/shop-alpha/pods/web/log", func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.logQueries = append(p.logQueries, r.URL.Query())
		p.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintln(w, "hello from beta")
		if r.URL.Query().Get("follow") == "true" {
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			p.followEnded <- struct{}{}
		}
	})
	mux.HandleFunc("GET /api/v1/namespaces/shop-alpha/pods/web", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop-alpha", Name: "web"}})
	})
	// pods/exec: translate the API's options into the kubelet API's, as an
	// API server does, and let virtual-kubelet's handler serve it.
	mux.HandleFunc("/api/v1/namespaces/shop-alpha/pods/web/exec", func(w http.ResponseWriter, r *http.Request) {
		in := r.URL.Query()
		out := url.Values{"command": in["command"]}
		for api, kubelet := range map[string]string{"stdin": "input", "stdout": "output", "stderr": "error", "tty": "tty"} {
			if in.Get(api) == "true" {
				out.Set(kubelet, "1")
			}
		}
		r = r.Clone(r.Context())
		r.URL.Path = "/exec/shop-alpha/web/" + in.Get("container")
		r.URL.RawQuery = out.Encode()
		r.RequestURI = r.URL.RequestURI()
		execRoutes.ServeHTTP(w, r)
	})
	// pods/attach and pods/portforward, translated the same way.
	mux.HandleFunc("/api/v1/namespaces/shop-alpha/pods/web/attach", func(w http.ResponseWriter, r *http.Request) {
		in := r.URL.Query()
		out := url.Values{}
		for api, kubelet := range map[string]string{"stdin": "input", "stdout": "output", "stderr": "error", "tty": "tty"} {
			if in.Get(api) == "true" {
				out.Set(kubelet, "1")
			}
		}
		r = r.Clone(r.Context())
		r.URL.Path = "/attach/shop-alpha/web/" + in.Get("container")
		r.URL.RawQuery = out.Encode()
		r.RequestURI = r.URL.RequestURI()
		execRoutes.ServeHTTP(w, r)
	})
	mux.HandleFunc("/api/v1/namespaces/shop-alpha/pods/web/portforward", func(w http.ResponseWriter, r *http.Request) {
		r = r.Clone(r.Context())
		r.URL.Path = "/portForward/shop-alpha/web"
		r.URL.RawQuery = ""
		r.RequestURI = r.URL.RequestURI()
		execRoutes.ServeHTTP(w, r)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, &apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "x").ErrStatus)
	})
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *fakeProvider) config() *rest.Config { return &rest.Config{Host: p.srv.URL} }

func writeJSON(w http.ResponseWriter, code int, obj runtime.Object) {
	data, _ := runtime.Encode(clientgoscheme.Codecs.LegacyCodec(corev1.SchemeGroupVersion), obj)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(data)
}

// fakeExec is the provider's "container": echo prints its arguments,
// fail exits with 3.
func fakeExec(_ context.Context, namespace, pod, container string, cmd []string, attach vkapi.AttachIO) error {
	switch cmd[0] {
	case "echo":
		fmt.Fprintf(attach.Stdout(), "%s in %s/%s[%s]\n", strings.Join(cmd[1:], " "), namespace, pod, container)
		return nil
	case "fail":
		return utilexec.CodeExitError{Err: fmt.Errorf("command failed"), Code: 3}
	}
	return fmt.Errorf("unknown command %q", cmd[0])
}

// fakeAttach is the provider's running container: it greets, then echoes
// stdin back in upper case until stdin ends.
func fakeAttach(_ context.Context, namespace, pod, container string, attach vkapi.AttachIO) error {
	fmt.Fprintf(attach.Stdout(), "attached to %s/%s[%s]\n", namespace, pod, container)
	if attach.Stdin() == nil {
		return nil
	}
	sc := bufio.NewScanner(attach.Stdin())
	for sc.Scan() {
		fmt.Fprintln(attach.Stdout(), strings.ToUpper(sc.Text()))
	}
	return nil
}

// fakePortForward is the provider's pod: port 8080 answers each line with
// "8080 says <line>"; nothing listens on any other port.
func fakePortForward(_ context.Context, _, _ string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	if port != 8080 {
		return fmt.Errorf("nothing listens on port %d", port)
	}
	sc := bufio.NewScanner(stream)
	for sc.Scan() {
		fmt.Fprintf(stream, "%d says %s\n", port, sc.Text())
	}
	return nil
}

// get sends a GET to the server as user and returns the status and body.
func get(t *testing.T, h http.Handler, userName, path string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	if userName != "" {
		r.Header.Set(userHeader, userName)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

func TestContainerLogs(t *testing.T) {
	provider := newFakeProvider(t)
	s, seen := newTestServer(t, fakeRemotes{
		"beta": provider.config(),
		"down": fmt.Errorf("remote: peer %q: %w: 3 consecutive failures", "down", remote.ErrPeerUnreachable),
	})
	h := s.Handler()
	tests := []struct {
		name     string
		user     string
		path     string
		wantCode int
		wantBody string // substring
	}{
		{"offloaded pod", apiserverUser, "/containerLogs/shop/web/c1", 200, "hello from beta\n"},
		{"options passed on", apiserverUser, "/containerLogs/shop/web/c1?tailLines=5&timestamps=true&limitBytes=100&sinceSeconds=60&previous=true", 200, "hello from beta"},
		{"no client certificate", "", "/containerLogs/shop/web/c1", 401, "Unauthorized"},
		{"caller not allowed", "jane", "/containerLogs/shop/web/c1", 403, "Forbidden (user=jane"},
		{"caller not allowed, unknown pod", "jane", "/containerLogs/shop/nope/c1", 403, "Forbidden"},
		{"unknown pod", apiserverUser, "/containerLogs/shop/nope/c1", 404, "pod shop/nope not found"},
		{"pod on a regular node", apiserverUser, "/containerLogs/shop/local/c1", 404, "not an Annex virtual node"},
		{"pod not scheduled", apiserverUser, "/containerLogs/shop/pending/c1", 404, "not scheduled"},
		{"namespace not offloaded", apiserverUser, "/containerLogs/plain/stray/c1", 404, "no Ready remote namespace on provider beta"},
		{"provider unreachable", apiserverUser, "/containerLogs/shop/gone/c1", 502, "provider down, which cannot be reached now"},
		{"no remote pod", apiserverUser, "/containerLogs/shop/pending2/c1", 404, "not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := get(t, h, tt.user, tt.path)
			if code != tt.wantCode || !strings.Contains(body, tt.wantBody) {
				t.Errorf("GET %s as %q = %d %q, want %d containing %q", tt.path, tt.user, code, body, tt.wantCode, tt.wantBody)
			}
		})
	}
	provider.mu.Lock()
	defer provider.mu.Unlock()
	if len(provider.logQueries) != 2 {
		t.Fatalf("provider got %d log requests, want 2", len(provider.logQueries))
	}
	want := url.Values{"container": {"c1"}, "tailLines": {"5"}, "timestamps": {"true"}, "limitBytes": {"100"}, "sinceSeconds": {"60"}, "previous": {"true"}}
	if diff := cmp.Diff(want, provider.logQueries[1]); diff != "" {
		t.Errorf("log options at the provider (-want +got):\n%s", diff)
	}
	// Authorization is a kubelet's: get on nodes/proxy of the pod's node.
	a := (*seen)[0]
	got := fmt.Sprintf("%s %s %s/%s %s", a.GetUser().GetName(), a.GetVerb(), a.GetResource(), a.GetSubresource(), a.GetName())
	if want := apiserverUser + " get nodes/proxy annex-beta"; got != want {
		t.Errorf("authorized %q, want %q", got, want)
	}
}

func TestContainerLogsFollowEndsWithTheClient(t *testing.T) {
	provider := newFakeProvider(t)
	s, _ := newTestServer(t, fakeRemotes{"beta": provider.config()})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/containerLogs/shop/web/c1?follow=true", nil)
	req.Header.Set(userHeader, apiserverUser)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "hello from beta\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	cancel() // the client goes away
	select {
	case <-provider.followEnded:
	case <-time.After(30 * time.Second):
		t.Fatal("the provider's log stream is still open after the client went away")
	}
}

func TestContainerLogsHungProvider(t *testing.T) {
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hung.Close()
	defer close(release)
	s, _ := newTestServer(t, fakeRemotes{"beta": &rest.Config{Host: hung.URL}})
	s.connectTimeout = 200 * time.Millisecond
	code, body := get(t, s.Handler(), apiserverUser, "/containerLogs/shop/web/c1")
	if code != http.StatusInternalServerError || !strings.Contains(body, "provider beta did not answer within 200ms") {
		t.Errorf("hung provider: %d %q", code, body)
	}
}

func TestExec(t *testing.T) {
	provider := newFakeProvider(t)
	s, seen := newTestServer(t, fakeRemotes{"beta": provider.config()})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	// The API server calls the kubelet API with the kubelet's parameters.
	exec := func(userName, path string, cmd ...string) (string, error) {
		q := url.Values{"command": cmd, "output": {"1"}, "error": {"1"}}
		u, _ := url.Parse(srv.URL + path + "?" + q.Encode())
		cfg := &rest.Config{Host: srv.URL, WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
				r.Header.Set(userHeader, userName)
				return rt.RoundTrip(r)
			})
		}}
		e, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
		if err != nil {
			return "", err
		}
		var stdout, stderr bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = e.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
		return stdout.String() + stderr.String(), err
	}
	out, err := exec(apiserverUser, "/exec/shop/web/c1", "echo", "hi")
	if err != nil || out != "hi in shop-alpha/web[c1]\n" {
		t.Errorf("exec echo = %q, %v", out, err)
	}
	a := (*seen)[len(*seen)-1]
	if a.GetVerb() != "create" || a.GetName() != "annex-beta" {
		t.Errorf("exec authorized as %s on %s, want create on annex-beta", a.GetVerb(), a.GetName())
	}
	_, err = exec(apiserverUser, "/exec/shop/web/c1", "fail")
	var exit utilexec.ExitError
	if ee, ok := err.(utilexec.ExitError); ok {
		exit = ee
	}
	if exit == nil || exit.ExitStatus() != 3 {
		t.Errorf("exec fail = %v, want exit code 3", err)
	}
	if _, err := exec("jane", "/exec/shop/web/c1", "echo"); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("exec as jane = %v, want Forbidden", err)
	}
	if _, err := exec(apiserverUser, "/exec/shop/local/c1", "echo"); err == nil || !strings.Contains(err.Error(), "not an Annex virtual node") {
		t.Errorf("exec in a pod on a regular node = %v, want a clear refusal", err)
	}
}

// asUser is a rest.Config for the test server whose requests carry user.
func asUser(host, userName string) *rest.Config {
	return &rest.Config{Host: host, WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			r.Header.Set(userHeader, userName)
			return rt.RoundTrip(r)
		})
	}}
}

func TestAttach(t *testing.T) {
	provider := newFakeProvider(t)
	s, seen := newTestServer(t, fakeRemotes{"beta": provider.config()})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	attach := func(userName, path, stdin string) (string, error) {
		q := url.Values{"output": {"1"}, "error": {"1"}, "input": {"1"}}
		u, _ := url.Parse(srv.URL + path + "?" + q.Encode())
		e, err := remotecommand.NewSPDYExecutor(asUser(srv.URL, userName), http.MethodPost, u)
		if err != nil {
			return "", err
		}
		var stdout bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = e.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader(stdin), Stdout: &stdout, Stderr: io.Discard})
		return stdout.String(), err
	}
	out, err := attach(apiserverUser, "/attach/shop/web/c1", "hello\nworld\n")
	if want := "attached to shop-alpha/web[c1]\nHELLO\nWORLD\n"; err != nil || out != want {
		t.Errorf("attach = %q, %v; want %q", out, err, want)
	}
	a := (*seen)[len(*seen)-1]
	if a.GetVerb() != "create" || a.GetName() != "annex-beta" {
		t.Errorf("attach authorized as %s on %s, want create on annex-beta", a.GetVerb(), a.GetName())
	}
	if _, err := attach("jane", "/attach/shop/web/c1", ""); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("attach as jane = %v, want Forbidden", err)
	}
}

func TestPortForward(t *testing.T) {
	provider := newFakeProvider(t)
	s, _ := newTestServer(t, fakeRemotes{"beta": provider.config()})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	// forward listens on a local port forwarded, as the API server asks
	// the kubelet, to remotePort of pod shop/web.
	forward := func(t *testing.T, userName string, remotePort int) int {
		t.Helper()
		u, _ := url.Parse(srv.URL + "/portForward/shop/web")
		rt, upgrader, err := spdy.RoundTripperFor(asUser(srv.URL, userName))
		if err != nil {
			t.Fatal(err)
		}
		dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
		stop, ready := make(chan struct{}), make(chan struct{})
		pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", remotePort)}, stop, ready, io.Discard, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		var err2 error
		go func() { err2 = pf.ForwardPorts(); close(done) }()
		t.Cleanup(func() { close(stop); <-done })
		select {
		case <-ready:
		case <-done:
			t.Fatalf("port-forward as %s: %v", userName, err2)
		case <-time.After(30 * time.Second):
			t.Fatal("port-forward not ready after 30s")
		}
		ports, err := pf.GetPorts()
		if err != nil {
			t.Fatal(err)
		}
		return int(ports[0].Local)
	}
	talk := func(local int, lines ...string) (string, error) {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", local), 5*time.Second)
		if err != nil {
			return "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		var got strings.Builder
		r := bufio.NewReader(c)
		for _, l := range lines {
			if _, err := fmt.Fprintln(c, l); err != nil {
				return got.String(), err
			}
			answer, err := r.ReadString('\n')
			got.WriteString(answer)
			if err != nil {
				return got.String(), err
			}
		}
		return got.String(), nil
	}

	local := forward(t, apiserverUser, 8080)
	// Two connections, each its own connection to the provider.
	for i := range 2 {
		got, err := talk(local, "hi", fmt.Sprint("again ", i))
		if want := fmt.Sprintf("8080 says hi\n8080 says again %d\n", i); err != nil || got != want {
			t.Errorf("connection %d: got %q, %v; want %q", i, got, err, want)
		}
	}

	// What the provider says of a port nothing listens on reaches the
	// caller on the error stream, as a kubelet's answer would.
	u, _ := url.Parse(srv.URL + "/portForward/shop/web")
	rt, upgrader, err := spdy.RoundTripperFor(asUser(srv.URL, apiserverUser))
	if err != nil {
		t.Fatal(err)
	}
	conn, _, err := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u).Dial(portforward.PortForwardProtocolV1Name)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	h := http.Header{}
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	h.Set(corev1.PortHeader, "9")
	h.Set(corev1.PortForwardRequestIDHeader, "1")
	errStream, err := conn.CreateStream(h)
	if err != nil {
		t.Fatal(err)
	}
	h.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := conn.CreateStream(h)
	if err != nil {
		t.Fatal(err)
	}
	_ = data.Close()
	msg, err := io.ReadAll(errStream)
	if err != nil || !strings.Contains(string(msg), "nothing listens on port 9") {
		t.Errorf("port 9: error stream %q, %v; want the provider's error", msg, err)
	}

	rt, upgrader, _ = spdy.RoundTripperFor(asUser(srv.URL, "jane"))
	if _, _, err := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u).Dial(portforward.PortForwardProtocolV1Name); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("port-forward as jane = %v, want Forbidden", err)
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestPodOf(t *testing.T) {
	tests := []struct {
		path    string
		ns, pod string
		ok      bool
	}{
		{"/containerLogs/shop/web/c", "shop", "web", true},
		{"/exec/shop/web/c", "shop", "web", true},
		{"/attach/shop/web/c", "shop", "web", true},
		{"/portForward/shop/web", "shop", "web", true},
		{"/containerLogs/shop", "", "", false},
		{"/pods", "", "", false},
		{"/stats/summary/x", "", "", false},
		{"/containerLogs//web/c", "", "", false},
	}
	for _, tt := range tests {
		ns, pod, ok := podOf(tt.path)
		if ns != tt.ns || pod != tt.pod || ok != tt.ok {
			t.Errorf("podOf(%q) = %q %q %v, want %q %q %v", tt.path, ns, pod, ok, tt.ns, tt.pod, tt.ok)
		}
	}
}
