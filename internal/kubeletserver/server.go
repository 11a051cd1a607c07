package kubeletserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	vkapi "github.com/virtual-kubelet/virtual-kubelet/node/api"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The cluster's client CA: where the API server publishes the CA its
// clients' certificates (its kubelet client's among them) are signed by.
const (
	clientCANamespace = "kube-system"
	clientCAConfigMap = "extension-apiserver-authentication"
	clientCAKey       = "client-ca-file"
)

// Timeouts of the server.
const (
	// defaultConnectTimeout bounds the wait for a provider's answer when
	// Config.ConnectTimeout is zero.
	defaultConnectTimeout = 10 * time.Second
	// streamIdleTimeout ends an exec session without traffic (a kubelet's
	// default --streaming-connection-idle-timeout).
	streamIdleTimeout = 4 * time.Hour
	// streamCreationTimeout bounds the set-up of an exec session's streams.
	streamCreationTimeout = 30 * time.Second
	// SubjectAccessReview results are cached this long.
	authzAllowTTL, authzDenyTTL = 5 * time.Minute, 30 * time.Second
)

// Remotes gives access to the providers.
type Remotes interface {
	// RESTConfig returns a config without a call timeout (for streams),
	// or an error when the provider cannot be used now.
	RESTConfig(clusterID string) (*rest.Config, error)
}

// Config is what a Server is built from.
type Config struct {
	Options Options
	// NodeIP is the virtual nodes' InternalIP: the server listens on it and
	// its requested certificate is valid for it.
	NodeIP string
	// Local reads pods, Nodes and NamespaceOffloadings of this cluster; it
	// should not be a cache (see resolve).
	Local client.Reader
	// Clientset of this cluster: CertificateSigningRequests,
	// SubjectAccessReviews and the client CA ConfigMap.
	Clientset kubernetes.Interface
	Remotes   Remotes
	// ConnectTimeout bounds the wait for a provider's answer to a log or
	// exec request (not the stream that follows); zero means 10s.
	ConnectTimeout time.Duration
	// Clock times connect timeouts and certificate renewal; nil means the
	// real clock.
	Clock clock.WithDelayedExecution
	Log   logr.Logger
}

// Server is the kubelet endpoint of every virtual node of the agent. It is a
// manager.Runnable that runs on the leader only.
type Server struct {
	opts           Options
	nodeIP         net.IP
	local          client.Reader
	cs             kubernetes.Interface
	remotes        Remotes
	connectTimeout time.Duration
	clock          clock.WithDelayedExecution
	log            logr.Logger

	authn authenticator.Request
	authz authorizing
	// clientCA keeps the client CA up to date (Start runs it).
	clientCA *dynamiccertificates.ConfigMapCAController
	certs    *certHolder

	// counters turn the providers' CPU rates into kubelet counters;
	// listPodMetrics reads a provider's PodMetrics.
	counters       *counters
	listPodMetrics listPodMetrics
}

// authorizing decides whether a request's user may do what its attributes
// say (sarAuthorizer; tests give a function).
type authorizing interface {
	Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error)
}

// New returns a Server for cfg.
func New(cfg Config) (*Server, error) {
	if err := cfg.Options.Validate(); err != nil {
		return nil, err
	}
	ip := net.ParseIP(cfg.NodeIP)
	if ip == nil {
		return nil, fmt.Errorf("kubelet endpoint: node IP %q is not an IP address", cfg.NodeIP)
	}
	s := &Server{
		opts: cfg.Options, nodeIP: ip, local: cfg.Local, cs: cfg.Clientset, remotes: cfg.Remotes,
		connectTimeout: cfg.ConnectTimeout, clock: cfg.Clock, log: cfg.Log, certs: &certHolder{},
		counters: newCounters(), listPodMetrics: listFromProvider,
	}
	if s.connectTimeout == 0 {
		s.connectTimeout = defaultConnectTimeout
	}
	if s.clock == nil {
		s.clock = clock.RealClock{}
	}
	var err error
	s.clientCA, err = dynamiccertificates.NewDynamicCAFromConfigMapController("kubelet-client-ca", clientCANamespace, clientCAConfigMap, clientCAKey, cfg.Clientset)
	if err != nil {
		return nil, err
	}
	s.authn = x509request.NewDynamic(s.clientCA.VerifyOptions, x509request.CommonNameUserConversion)
	s.authz = newSARAuthorizer(cfg.Clientset.AuthorizationV1().SubjectAccessReviews(), s.clock)
	return s, nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: only the
// leader hosts virtual nodes and has clients of the providers.
func (s *Server) NeedLeaderElection() bool { return true }

// Start serves until ctx ends. It obtains (or loads) the serving
// certificate first, then listens on NodeIP:Port.
func (s *Server) Start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.clientCA.Run(ctx, 1)
	if s.opts.CertFile != "" {
		f, err := newFileCerts(s.opts.CertFile, s.opts.KeyFile, s.certs, s.log)
		if err != nil {
			return err
		}
		go f.run(ctx)
	} else {
		ready := make(chan struct{})
		c := &csrCerts{holder: s.certs, cs: s.cs, ip: s.nodeIP, clock: s.clock, log: s.log}
		go c.run(ctx, ready)
		select {
		case <-ready:
		case <-ctx.Done():
			return nil
		}
	}
	addr := net.JoinHostPort(s.nodeIP.String(), strconv.Itoa(s.opts.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("kubelet endpoint: %w", err)
	}
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		TLSConfig: &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: s.certs.GetCertificate,
			// The client's certificate is verified by the authenticator,
			// against the client CA of the moment.
			ClientAuth: tls.RequestClientCert,
		},
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		// Streams (follow, exec) end with ctx through BaseContext.
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	s.log.Info("Serving the virtual nodes' kubelet endpoint", "address", addr)
	err = srv.ServeTLS(ln, "", "")
	cancel()
	<-done
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Handler is the endpoint's HTTP handler: authentication, authorization,
// then virtual-kubelet's kubelet API routes (containerLogs, exec, attach,
// portForward) and the resource metrics of each virtual node
// (/metrics/resource/<node>).
func (s *Server) Handler() http.Handler {
	routes := vkapi.PodHandler(vkapi.PodHandlerConfig{
		GetContainerLogs:      s.containerLogs,
		RunInContainer:        s.runInContainer,
		AttachToContainer:     s.attachToContainer,
		PortForward:           s.forwardPort,
		StreamIdleTimeout:     streamIdleTimeout,
		StreamCreationTimeout: streamCreationTimeout,
	}, false)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.serve(w, r, routes)
	})
}

// serve authenticates the request by its client certificate, resolves the
// pod it is about, and authorizes it as a kubelet does: verb by HTTP
// method on nodes/proxy of the pod's node (of every node when the pod has
// none), with a SubjectAccessReview. Only then are resolution errors told
// (so that only those allowed learn whether a pod exists).
func (s *Server) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	ctx := r.Context()
	resp, ok, err := s.authn.AuthenticateRequest(r)
	if err != nil || !ok {
		s.log.V(1).Info("Unauthenticated kubelet request", "path", r.URL.Path, "error", fmt.Sprint(err))
		http.Error(w, "Unauthorized: a client certificate signed by the cluster's client CA is required", http.StatusUnauthorized)
		return
	}
	user := resp.User
	if node, ok := metricsNode(r.URL.Path); ok {
		// As a kubelet: get on nodes/metrics of the node.
		attrs := authorizer.AttributesRecord{
			User: user, Verb: verbOf(r.Method), APIVersion: "v1", Resource: "nodes", Subresource: "metrics",
			Name: node, ResourceRequest: true, Path: r.URL.Path,
		}
		if s.allowed(w, r, attrs) {
			s.serveMetrics(w, r, user.GetName(), node)
		}
		return
	}
	var t *target
	var resolveErr error
	if namespace, pod, ok := podOf(r.URL.Path); ok {
		t, resolveErr = s.resolve(ctx, namespace, pod)
	}
	node := ""
	if t != nil {
		node = t.Node
	}
	attrs := authorizer.AttributesRecord{
		User: user, Verb: verbOf(r.Method), APIVersion: "v1", Resource: "nodes", Subresource: "proxy",
		Name: node, ResourceRequest: true, Path: r.URL.Path,
	}
	if !s.allowed(w, r, attrs) {
		return
	}
	if resolveErr != nil {
		code, msg := statusOf(resolveErr)
		s.log.V(1).Info("Kubelet request not served", "user", user.GetName(), "path", r.URL.Path, "status", code, "reason", msg)
		http.Error(w, msg, code)
		return
	}
	if t != nil {
		s.log.V(1).Info("Kubelet request", "user", user.GetName(), "path", r.URL.Path, "pod", t.Namespace+"/"+t.Pod,
			"provider", t.ProviderID, "remoteNamespace", t.RemoteNamespace)
		r = r.WithContext(withTarget(ctx, t))
	}
	next.ServeHTTP(w, r)
}

// allowed authorizes attrs with a SubjectAccessReview and answers 403 when
// they are not allowed.
func (s *Server) allowed(w http.ResponseWriter, r *http.Request, attrs authorizer.AttributesRecord) bool {
	decision, reason, err := s.authz.Authorize(r.Context(), attrs)
	if decision == authorizer.DecisionAllow {
		return true
	}
	if err != nil {
		reason = err.Error()
	}
	s.log.V(1).Info("Forbidden kubelet request", "user", attrs.User.GetName(), "path", r.URL.Path, "reason", reason)
	http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=%s, subresource=%s, name=%q): %s",
		attrs.User.GetName(), attrs.Verb, attrs.Resource, attrs.Subresource, attrs.Name, reason), http.StatusForbidden)
	return false
}

// podOf returns the pod a kubelet API path is about:
// /{containerLogs,exec,attach}/<namespace>/<pod>/<container> and
// /portForward/<namespace>/<pod>.
func podOf(path string) (namespace, pod string, ok bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if len(parts) < 3 || parts[1] == "" || parts[2] == "" {
		return "", "", false
	}
	switch parts[0] {
	case "containerLogs", "exec", "attach", "portForward":
		return parts[1], parts[2], true
	}
	return "", "", false
}

// verbOf maps an HTTP method to an authorization verb, as a kubelet does.
func verbOf(method string) string {
	switch method {
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	default:
		return "get"
	}
}

type targetKey struct{}

func withTarget(ctx context.Context, t *target) context.Context {
	return context.WithValue(ctx, targetKey{}, t)
}

// targetFrom returns the target serve resolved for the request.
func targetFrom(ctx context.Context) (*target, error) {
	if t, ok := ctx.Value(targetKey{}).(*target); ok {
		return t, nil
	}
	return nil, errors.New("kubelet endpoint: request without a resolved pod")
}
