// Package localcluster owns real local Kubernetes clusters for tests, the
// sandbox and benchmarks: it starts etcd, kube-apiserver (TLS with its own
// CA, service-account signing keys, Node+RBAC authorization),
// kube-controller-manager, kube-scheduler and kwok (simulated nodes whose
// pods go Running with IPs, and serve a log line, KwokLogLine, and exec
// through a kubelet endpoint the API server verifies with the cluster CA)
// from the binaries tools/kube builds, all on free loopback ports, and stops
// them again without leaving a process behind. It can also run real nodes
// (Options.RealNodes: kubelet, containerd and kube-proxy in namespaces of
// their own, running real containers; see realnode.go), beside or instead
// of kwok's.
//
// It also injects the faults failure tests need: killing the API server (a
// dead peer), pausing it with SIGSTOP (a hung peer), resuming and restarting
// it. A cluster records its processes in <dir>/state.json, so another process
// (annexctl sandbox) can re-attach with Load and do the same.
package localcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// KubeVersion is the Kubernetes version of the binaries this package runs;
// the default binary directory is named after it.
const KubeVersion = "v1.37.2"

// Defaults of Options.
const (
	DefaultPodCIDR     = "10.244.0.0/16"
	DefaultServiceCIDR = "10.96.0.0/16"
)

// Timing bounds.
const (
	// stopGrace is how long a component gets to exit after SIGTERM before
	// it is sent SIGKILL.
	stopGrace = 5 * time.Second
	// stepTimeout bounds each wait of Start (and of ResumeAPIServer) when
	// the caller's context has no earlier deadline.
	stepTimeout = 2 * time.Minute
	// portAttempts is how often a component is restarted on new ports
	// after losing a race for a port.
	portAttempts = 3
	// checkTimeout bounds one readiness check.
	checkTimeout = 5 * time.Second
	// tailLinesOnError is how much of a component's log an error quotes.
	tailLinesOnError = 20
)

// ErrMissingBinaries is wrapped by the errors of Start, CheckBinaries and
// CheckRealNodeBinaries when a Kubernetes binary or the kwok stage
// configurations are missing.
var ErrMissingBinaries = errors.New("missing Kubernetes binaries")

// requiredBinaries are the binaries Start runs. In tools/kube's cache all but
// kwok are symlinks to one multi-call binary, kube.
var requiredBinaries = []string{Etcd, APIServer, ControllerManager, Scheduler, Kwok}

// realNodeBinaries are the binaries a real node runs besides its container
// runtime (symlinks to kube in tools/kube's cache, like requiredBinaries):
// kubelet, kube-proxy and the helper localcluster-proxy.
var realNodeBinaries = []string{Kubelet, KubeProxy, ProxyCommand}

// DefaultBinDir is where tools/kube puts the binaries: $ANNEX_KUBE_DIR/bin, or
// ${XDG_CACHE_HOME:-$HOME/.cache}/annex/kube-<KubeVersion>/bin.
func DefaultBinDir() string {
	return filepath.Join(defaultCacheDir(), "bin")
}

// defaultCacheDir mirrors tools/kube's defaultDir.
func defaultCacheDir() string {
	if d := os.Getenv("ANNEX_KUBE_DIR"); d != "" {
		return d
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "annex", "kube-"+KubeVersion)
}

// stagesDir is where tools/kube puts kwok's stage configurations: next to
// the bin directory.
func stagesDir(binDir string) string {
	return filepath.Join(filepath.Dir(filepath.Clean(binDir)), "kwok-stages")
}

// kwokStageFiles lists the stage configurations kwok is started with.
func kwokStageFiles(binDir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(stagesDir(binDir), "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	return files, nil
}

// CheckBinaries returns an error wrapping ErrMissingBinaries, telling the
// reader to run `make tools`, unless every binary Start runs and kwok's stage
// configurations are present for binDir. It does not ask for the binaries of
// real nodes: see CheckRealNodeBinaries.
func CheckBinaries(binDir string) error {
	missing := missingExecutables(binDir, requiredBinaries)
	if stages, err := kwokStageFiles(binDir); err != nil || len(stages) == 0 {
		missing = append(missing, "kwok stage configurations ("+stagesDir(binDir)+"/*.yaml)")
	}
	return missingError(binDir, missing)
}

// CheckRealNodeBinaries is CheckBinaries for the binaries a real node runs
// (kubelet, kube-proxy, localcluster-proxy). CheckRealNodes checks them
// with everything else real nodes need (root, the container runtime).
func CheckRealNodeBinaries(binDir string) error {
	return missingError(binDir, missingExecutables(binDir, realNodeBinaries))
}

// missingExecutables returns those of names that are not executable files
// (or symlinks to one) in binDir.
func missingExecutables(binDir string, names []string) []string {
	var missing []string
	for _, b := range names {
		fi, err := os.Stat(filepath.Join(binDir, b))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	return missing
}

// missingError is nil when nothing is missing, else an error wrapping
// ErrMissingBinaries that lists what and says how to build it.
func missingError(binDir string, missing []string) error {
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w in %s: %v; run `make tools` to build them (tools/kube builds them into the cache directory, the first time in 6 to 11 minutes on 2 idle CPUs)", ErrMissingBinaries, binDir, missing)
}

// Options configure Start.
type Options struct {
	// Name names the cluster: kubeconfig cluster/context/user names, node
	// names, progress lines. Required; a DNS label.
	Name string
	// Dir is the cluster's state directory (pki/, etcd/, logs/,
	// kubeconfig, state.json). Created if missing; nothing in it is ever
	// deleted by this package. Required.
	Dir string
	// BinDir holds the binaries; default DefaultBinDir().
	BinDir string
	// PodCIDR is the IPv4 range pod IPs come from (kwok assigns them) and
	// nodes' spec.podCIDR are sliced from; default DefaultPodCIDR.
	PodCIDR string
	// ServiceCIDR is the IPv4 ClusterIP range; default DefaultServiceCIDR.
	ServiceCIDR string
	// Nodes is the number of kwok nodes, named <name>-worker-<i> and
	// labelled type=kwok; default 1 when RealNodes is 0, else 0.
	Nodes int
	// RealNodes is the number of real nodes, named <name>-node-<i> and
	// labelled type=real: each a kubelet, containerd and kube-proxy in
	// namespaces of its own running real containers (see realnode.go).
	// They need root and a container runtime (CheckRealNodes), Images and
	// PauseImage. Their pod CIDRs follow the kwok nodes'.
	RealNodes int
	// Images are image tarballs (OCI or docker archives, absolute paths)
	// imported into every real node's containerd before its kubelet
	// starts, the pause image's among them. Pods use them with a pull
	// policy of IfNotPresent or Never: real nodes reach no registry.
	Images []string
	// PauseImage is the reference of the CRI sandbox (pause) image of the
	// real nodes; required with RealNodes.
	PauseImage string
	// NodeNetworkCIDR is the IPv4 network of the real nodes (inside
	// namespaces of the cluster's own; see realnode.go); default
	// DefaultNodeNetworkCIDR. Its last usable address is the cluster's API
	// address on every node.
	NodeNetworkCIDR string
	// MetricsServer runs metrics-server (the metrics.k8s.io API of
	// `kubectl top` and the HorizontalPodAutoscaler) inside real node 0,
	// registered with the API server's aggregator; Start returns once its
	// APIService is Available. It needs RealNodes and the metrics-server
	// binary that tools/kube builds (see metricsserver.go).
	MetricsServer bool
	// NetworkPolicies runs a NetworkPolicy enforcer, kube-router's
	// firewall, on every real node; Start returns once each node
	// enforces them. It needs RealNodes, the kube-router binary that
	// tools/kube builds and br_netfilter (CheckNetworkPolicies; see
	// networkpolicy.go). Without it, real nodes ignore NetworkPolicies,
	// as a CNI without policy support does.
	NetworkPolicies bool
	// BeforeControllers, if set, runs once the API server is ready and
	// before the controller-manager, the scheduler and kwok start: for
	// objects those must find at their start. Annex's CRDs, for one: the
	// quota controller otherwise learns of new kinds only at its next
	// discovery, 30 s later.
	BeforeControllers func(ctx context.Context, c *Cluster) error
	// Detach lets the processes outlive this Go process (the sandbox).
	// Otherwise each gets SIGKILL when this process dies, even on a panic.
	Detach bool
	// AuditWrites makes the API server record every write request
	// (create, update, patch, delete, deletecollection: who, what, the
	// response code; no bodies) as JSON lines in AuditLogPath. For
	// measurements: it costs the API server a line per write.
	AuditWrites bool
	// Profiling serves the API server's /debug/pprof (to cluster admins)
	// instead of turning it off. For measurements.
	Profiling bool
	// Progress, if set, gets one line per startup step with the time
	// elapsed since Start was called.
	Progress io.Writer
}

// withDefaults validates o and fills in defaults.
func (o Options) withDefaults() (Options, error) {
	if o.Name == "" {
		return o, errors.New("options: Name is required")
	}
	if errs := validation.IsDNS1123Label(o.Name); len(errs) > 0 {
		return o, fmt.Errorf("options: Name %q: %v", o.Name, errs)
	}
	if o.Dir == "" {
		return o, errors.New("options: Dir is required")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return o, err
	}
	o.Dir = dir
	if o.BinDir == "" {
		o.BinDir = DefaultBinDir()
	}
	if o.PodCIDR == "" {
		o.PodCIDR = DefaultPodCIDR
	}
	if o.ServiceCIDR == "" {
		o.ServiceCIDR = DefaultServiceCIDR
	}
	if o.Nodes == 0 && o.RealNodes == 0 {
		o.Nodes = 1
	}
	if o.Nodes < 0 {
		return o, fmt.Errorf("options: Nodes %d < 0", o.Nodes)
	}
	if o.RealNodes > 0 && o.NodeNetworkCIDR == "" {
		o.NodeNetworkCIDR = DefaultNodeNetworkCIDR
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	pod, err := parseIPv4CIDR("PodCIDR", o.PodCIDR, 8, 24)
	if err != nil {
		return o, err
	}
	svc, err := parseIPv4CIDR("ServiceCIDR", o.ServiceCIDR, 12, 28)
	if err != nil {
		return o, err
	}
	if pod.Contains(svc.IP) || svc.Contains(pod.IP) {
		return o, fmt.Errorf("options: PodCIDR %s and ServiceCIDR %s overlap", o.PodCIDR, o.ServiceCIDR)
	}
	if err := validateRealNodeOptions(o); err != nil {
		return o, err
	}
	if _, err := nodeCIDR(o.PodCIDR, o.Nodes+o.RealNodes-1); err != nil {
		return o, fmt.Errorf("options: %w", err)
	}
	return o, nil
}

// parseIPv4CIDR parses a CIDR in canonical form with a prefix length in
// [minOnes, maxOnes].
func parseIPv4CIDR(field, s string, minOnes, maxOnes int) (*net.IPNet, error) {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		return nil, fmt.Errorf("options: %s: %w", field, err)
	}
	if ip.To4() == nil {
		return nil, fmt.Errorf("options: %s %s: only IPv4 is supported", field, s)
	}
	if !ip.Equal(n.IP) {
		return nil, fmt.Errorf("options: %s %s: host bits set (did you mean %s?)", field, s, n)
	}
	if ones, _ := n.Mask.Size(); ones < minOnes || ones > maxOnes {
		return nil, fmt.Errorf("options: %s %s: prefix length must be between /%d and /%d", field, s, minOnes, maxOnes)
	}
	return n, nil
}

// Cluster is a running (or stopped) local cluster.
type Cluster struct {
	dir string

	mu       sync.Mutex
	st       state
	children map[string]*process // processes this Go process started, by component
}

// ComponentState is the state of a component's process.
type ComponentState string

// Component states.
const (
	Running ComponentState = "running"
	Paused  ComponentState = "paused" // stopped with SIGSTOP
	Dead    ComponentState = "dead"
)

// ComponentStatus is one component's process as Status sees it.
type ComponentStatus struct {
	Name  string         `json:"name"`
	PID   int            `json:"pid"`
	State ComponentState `json:"state"`
}

// exitError says a component exited while Start (or a resume) waited for it.
type exitError struct {
	name, log, tail string
}

func (e *exitError) Error() string {
	return fmt.Sprintf("%s exited; last lines of %s:\n%s", e.name, e.log, e.tail)
}

// progress prints Start's step lines.
type progress struct {
	w     io.Writer
	name  string
	start time.Time
}

func (p *progress) step(format string, args ...any) {
	fmt.Fprintf(p.w, "%s: %s (%.1fs)\n", p.name, fmt.Sprintf(format, args...), time.Since(p.start).Seconds())
}

// launchSpec is how Start launches one component and knows it is ready.
type launchSpec struct {
	name   string
	args   func() []string
	repick func() error // picks new ports after a bind conflict; nil: no retry
	ready  func(ctx context.Context) error
}

// Start starts a cluster and returns once it can run pods: the API server is
// ready, controller-manager and scheduler are healthy, every node is Ready
// and the default ServiceAccount of namespace default exists. On any error
// it stops whatever it started and returns one error saying what went wrong
// (a missing binary, a port conflict, a component that exited, with the last
// lines of its log). ctx bounds the startup only: the cluster runs until
// Stop (or, unless Options.Detach, until this process exits).
func Start(ctx context.Context, o Options) (_ *Cluster, err error) {
	p := &progress{start: time.Now()}
	o, err = o.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	p.w, p.name = o.Progress, o.Name
	defer func() {
		if err != nil {
			err = fmt.Errorf("localcluster %s: %w", o.Name, err)
		}
	}()
	if err := CheckBinaries(o.BinDir); err != nil {
		return nil, err
	}
	stageFiles, err := kwokStageFiles(o.BinDir)
	if err != nil {
		return nil, err
	}
	var cniBinDir string
	if o.RealNodes > 0 {
		if err := CheckRealNodes(o.BinDir); err != nil {
			return nil, err
		}
		if o.MetricsServer {
			if err := CheckMetricsServer(o.BinDir); err != nil {
				return nil, err
			}
		}
		if o.NetworkPolicies {
			if err := CheckNetworkPolicies(o.BinDir); err != nil {
				return nil, err
			}
		}
		if cniBinDir, err = findCNIBinDir(); err != nil {
			return nil, err
		}
	}
	l := layout{dir: o.Dir}
	for _, d := range []string{l.dir, l.logs(), l.kubeconfigs()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if prev, err := readState(l.dir); err == nil {
		for _, cs := range prev.Components {
			if stateOf(cs.PID, cs.StartTime) != procDead {
				return nil, fmt.Errorf("a cluster is already running in %s (%s pid %d); stop it first", l.dir, cs.Name, cs.PID)
			}
		}
	}

	c := &Cluster{
		dir: l.dir,
		st: state{
			Version:     stateVersion,
			Name:        o.Name,
			BinDir:      o.BinDir,
			PodCIDR:     o.PodCIDR,
			ServiceCIDR: o.ServiceCIDR,
			Nodes:       o.Nodes,
			Detach:      o.Detach,
			AuditWrites: o.AuditWrites,
			Profiling:   o.Profiling,
		},
		children: map[string]*process{},
	}
	if o.RealNodes > 0 {
		c.st.RealNodes = o.RealNodes
		c.st.NodeNetworkCIDR = o.NodeNetworkCIDR
		c.st.CgroupParent = cgroupParent(l.dir)
		c.st.PauseImage = o.PauseImage
		c.st.Images = slices.Clone(o.Images)
		c.st.MetricsServer = o.MetricsServer
		c.st.NetworkPolicies = o.NetworkPolicies
	}
	// From here on state.json describes this run, so that whatever is
	// started can be found and stopped.
	if err := writeState(l.dir, &c.st); err != nil {
		return nil, err
	}
	// What a crashed earlier run in this directory may have left (its
	// processes are gone, checked above).
	if err := c.cleanupRealNodes(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			stopCtx, cancel := context.WithTimeout(context.Background(), 3*stopGrace)
			defer cancel()
			if stopErr := c.Stop(stopCtx); stopErr != nil {
				err = errors.Join(err, fmt.Errorf("clean up: %w", stopErr))
			}
		}
	}()

	if err := c.issueCertificates(time.Now()); err != nil {
		return nil, err
	}
	if err := writeKwokDebugging(l, o.Name, time.Now()); err != nil {
		return nil, err
	}
	if err := writeKwokOptions(l); err != nil {
		return nil, err
	}
	if o.AuditWrites {
		if err := writeFileAtomic(l.auditPolicy(), []byte(auditWritesPolicy), 0o644); err != nil {
			return nil, err
		}
	}
	p.step("certificates ready")

	pp, err := freePorts(6)
	if err != nil {
		return nil, err
	}
	c.st.Ports = ports{
		EtcdClient: pp[0], EtcdPeer: pp[1], APIServer: pp[2],
		ControllerManager: pp[3], Scheduler: pp[4], Kwok: pp[5],
	}

	probe, err := c.probeClient()
	if err != nil {
		return nil, err
	}

	// etcd.
	etcd := launchSpec{
		name: Etcd,
		args: func() []string { return etcdArgs(l, o.Name, c.st.Ports) },
		repick: func() error {
			pp, err := freePorts(2)
			if err != nil {
				return err
			}
			c.st.Ports.EtcdClient, c.st.Ports.EtcdPeer = pp[0], pp[1]
			return nil
		},
		ready: func(ctx context.Context) error {
			return probeGet(ctx, probe, loopbackURL("http", c.st.Ports.EtcdClient)+"/health")
		},
	}
	if err := c.launchAndAwait(ctx, etcd); err != nil {
		return nil, err
	}
	p.step("etcd ready")

	if o.RealNodes > 0 {
		if err := c.startNodeNetwork(ctx); err != nil {
			return nil, err
		}
		p.step("node network ready")
	}

	// kube-apiserver.
	apiserver := launchSpec{
		name:   APIServer,
		args:   func() []string { return apiServerArgs(l, &c.st) },
		repick: c.repickOne(&c.st.Ports.APIServer),
		ready:  func(ctx context.Context) error { return probeGet(ctx, probe, c.APIServerURL()+"/readyz") },
	}
	if err := c.launchAndAwait(ctx, apiserver); err != nil {
		return nil, err
	}
	if err := c.writeKubeconfigs(); err != nil {
		return nil, err
	}
	p.step("kube-apiserver ready at %s", c.APIServerURL())
	if o.BeforeControllers != nil {
		if err := o.BeforeControllers(ctx, c); err != nil {
			return nil, fmt.Errorf("before the controllers start: %w", err)
		}
	}

	// The rest start together.
	others := []launchSpec{
		{
			name:   ControllerManager,
			args:   func() []string { return controllerManagerArgs(l, &c.st) },
			repick: c.repickOne(&c.st.Ports.ControllerManager),
			ready: func(ctx context.Context) error {
				return probeGet(ctx, probe, loopbackURL("https", c.st.Ports.ControllerManager)+"/healthz")
			},
		},
		{
			name:   Scheduler,
			args:   func() []string { return schedulerArgs(l, &c.st) },
			repick: c.repickOne(&c.st.Ports.Scheduler),
			ready: func(ctx context.Context) error {
				return probeGet(ctx, probe, loopbackURL("https", c.st.Ports.Scheduler)+"/healthz")
			},
		},
	}
	if o.Nodes > 0 {
		others = append(others, launchSpec{
			name:   Kwok,
			args:   func() []string { return kwokArgs(l, &c.st, stageFiles) },
			repick: c.repickOne(&c.st.Ports.Kwok),
			ready: func(ctx context.Context) error {
				// Over HTTPS: this also checks kwok's serving certificate.
				return probeGet(ctx, probe, loopbackURL("https", c.st.Ports.Kwok)+"/healthz")
			},
		})
	}
	for _, s := range others {
		if err := c.launch(s); err != nil {
			return nil, err
		}
	}
	cfg, err := c.RESTConfig()
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	if err := bindKubeletClient(ctx, cs); err != nil {
		return nil, err
	}
	if err := c.createNodes(ctx, cs); err != nil {
		return nil, err
	}
	realNodesSince := time.Now()
	if o.RealNodes > 0 {
		nodes, err := c.st.realNodes()
		if err != nil {
			return nil, err
		}
		if err := c.createRealNodes(ctx, cs, nodes); err != nil {
			return nil, err
		}
		for _, n := range nodes {
			if err := c.startRealNode(ctx, n, nodes, cniBinDir); err != nil {
				return nil, err
			}
			p.step("real node %s started (%s)", n.Name, n.IP)
		}
	}
	for _, s := range others {
		if err := c.awaitRetrying(ctx, s); err != nil {
			return nil, err
		}
		p.step("%s ready", s.name)
	}
	if err := c.await(ctx, fmt.Sprintf("%d node(s) Ready", o.Nodes), nil, func(ctx context.Context) error {
		return c.nodesReady(ctx, cs)
	}); err != nil {
		return nil, err
	}
	p.step("%d node(s) Ready", o.Nodes)
	if o.RealNodes > 0 {
		if err := c.await(ctx, fmt.Sprintf("%d real node(s) Ready", o.RealNodes), nil, func(ctx context.Context) error {
			return c.realNodesReady(ctx, cs, realNodesSince)
		}); err != nil {
			return nil, err
		}
		p.step("%d real node(s) Ready", o.RealNodes)
		nodes, err := c.st.realNodes()
		if err != nil {
			return nil, err
		}
		if o.NetworkPolicies {
			if err := c.startNetworkPolicies(ctx, cs, nodes); err != nil {
				return nil, fmt.Errorf("kube-router: %w", err)
			}
			p.step("kube-router enforces NetworkPolicies on %d real node(s)", len(nodes))
		}
		if o.MetricsServer {
			if err := c.startMetricsServer(ctx, cfg, cs, nodes[0]); err != nil {
				return nil, fmt.Errorf("metrics-server: %w", err)
			}
			p.step("metrics-server ready on %s (APIService %s Available)", nodes[0].Name, metricsAPIService)
		}
	}
	if err := c.await(ctx, "default ServiceAccount", nil, func(ctx context.Context) error {
		if _, err := cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return err
		}
		_, err := cs.CoreV1().ConfigMaps(metav1.NamespaceDefault).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	p.step("cluster ready at %s, kubeconfig %s", c.APIServerURL(), c.KubeconfigPath())
	return c, nil
}

// Load re-attaches to the cluster Start recorded in dir/state.json, from
// this or another process. The components need not be running.
func Load(dir string) (*Cluster, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	st, err := readState(dir)
	if err != nil {
		return nil, fmt.Errorf("localcluster: load %s: %w", dir, err)
	}
	return &Cluster{dir: dir, st: *st, children: map[string]*process{}}, nil
}

// Name is the cluster's name.
func (c *Cluster) Name() string { return c.st.Name }

// Dir is the cluster's state directory.
func (c *Cluster) Dir() string { return c.dir }

// AuditLogPath is the API server's audit log of write requests (JSON lines
// of audit.k8s.io/v1 Events), "" unless started with Options.AuditWrites.
func (c *Cluster) AuditLogPath() string {
	if !c.st.AuditWrites {
		return ""
	}
	return layout{dir: c.dir}.auditLog()
}

// KubeconfigPath is the admin kubeconfig (user in group system:masters),
// which verifies the API server's certificate with the cluster CA.
func (c *Cluster) KubeconfigPath() string { return layout{dir: c.dir}.adminKubeconfig() }

// RESTConfig is the admin client configuration (see KubeconfigPath).
func (c *Cluster) RESTConfig() (*rest.Config, error) {
	return clientcmd.BuildConfigFromFlags("", c.KubeconfigPath())
}

// APIServerURL is https://127.0.0.1:<port>.
func (c *Cluster) APIServerURL() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return loopbackURL("https", c.st.Ports.APIServer)
}

// PodCIDR is the range pod IPs come from.
func (c *Cluster) PodCIDR() string { return c.st.PodCIDR }

// ServiceCIDR is the ClusterIP range.
func (c *Cluster) ServiceCIDR() string { return c.st.ServiceCIDR }

// NodeNames are the names of the cluster's kwok nodes.
func (c *Cluster) NodeNames() []string {
	out := make([]string, c.st.Nodes)
	for i := range out {
		out[i] = nodeName(c.st.Name, i)
	}
	return out
}

// LogPath is the log file of a component (stdout and stderr of every run,
// appended).
func (c *Cluster) LogPath(component string) string { return layout{dir: c.dir}.log(component) }

// CA is the cluster CA certificate (PEM): it signs the API server's serving
// certificate and every client certificate the cluster accepts.
func (c *Cluster) CA() []byte {
	data, _ := os.ReadFile(layout{dir: c.dir}.pki().caCert())
	return data
}

// ClientCert mints a client certificate (and key), both PEM, that
// authenticates as user with the given groups, e.g. ("jane",
// "system:masters").
func (c *Cluster) ClientCert(user string, groups ...string) (certPEM, keyPEM []byte, err error) {
	files := layout{dir: c.dir}.pki()
	caCert, err := os.ReadFile(files.caCert())
	if err != nil {
		return nil, nil, err
	}
	caKey, err := os.ReadFile(files.caKey())
	if err != nil {
		return nil, nil, err
	}
	ca, err := parseAuthority(caCert, caKey)
	if err != nil {
		return nil, nil, err
	}
	return ca.issue(clientCert(user, groups...), time.Now())
}

// ClientConfig is a client configuration authenticating with a fresh client
// certificate for user and groups (see ClientCert).
func (c *Cluster) ClientConfig(user string, groups ...string) (*rest.Config, error) {
	certPEM, keyPEM, err := c.ClientCert(user, groups...)
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host: c.APIServerURL(),
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   c.CA(),
			CertData: certPEM,
			KeyData:  keyPEM,
		},
	}, nil
}

// record remembers a started process and persists the state.
func (c *Cluster) record(cs componentState, p *process) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.children[cs.Name] = p
	c.st.setComponent(cs)
	return writeState(c.dir, &c.st)
}

// launch starts a component described by spec.
func (c *Cluster) launch(spec launchSpec) error {
	l := layout{dir: c.dir}
	c.mu.Lock()
	args := spec.args()
	detach := c.st.Detach
	bin := filepath.Join(c.st.BinDir, spec.name)
	c.mu.Unlock()
	p, err := spawn(spawnSpec{name: spec.name, binary: bin, args: args, logPath: l.log(spec.name), detach: detach})
	if err != nil {
		return err
	}
	return c.record(componentState{
		Name: spec.name, Binary: bin, Args: args, Log: l.log(spec.name),
		PID: p.pid, StartTime: p.startTime,
	}, p)
}

// launchAndAwait launches a component and waits until it is ready.
func (c *Cluster) launchAndAwait(ctx context.Context, spec launchSpec) error {
	if err := c.launch(spec); err != nil {
		return err
	}
	return c.awaitRetrying(ctx, spec)
}

// awaitRetrying waits until a launched component is ready; when it exited
// because one of its ports was taken meanwhile, it is relaunched on new
// ports. It watches that component only: components launched together
// (the controller-manager, the scheduler and kwok) are each awaited in
// turn, so that the one that lost a port race is the one relaunched, not
// reported as the failure of another's wait.
func (c *Cluster) awaitRetrying(ctx context.Context, spec launchSpec) error {
	for attempt := 1; ; attempt++ {
		err := c.await(ctx, spec.name, []string{spec.name}, spec.ready)
		var ee *exitError
		if !errors.As(err, &ee) || ee.name != spec.name || !addrInUse(ee.tail) || spec.repick == nil {
			return err
		}
		if attempt == portAttempts {
			return fmt.Errorf("%s: port in use (tried %d times): %w", spec.name, attempt, err)
		}
		c.mu.Lock()
		err = spec.repick()
		c.mu.Unlock()
		if err != nil {
			return err
		}
		if err := c.launch(spec); err != nil {
			return err
		}
	}
}

// repickOne returns a launchSpec.repick that replaces one port.
func (c *Cluster) repickOne(port *int) func() error {
	return func() error {
		pp, err := freePorts(1)
		if err != nil {
			return err
		}
		*port = pp[0]
		return nil
	}
}

// await polls check until it succeeds, failing early when one of the
// watched components (nil: all started ones) exits and late when ctx or
// stepTimeout ends.
func (c *Cluster) await(ctx context.Context, what string, watch []string, check func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	var last error
	for {
		if ee := c.exited(watch); ee != nil {
			return ee
		}
		if last = checkOnce(ctx, check); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last error: %v)", what, ctx.Err(), last)
		case <-t.C:
		}
	}
}

// checkOnce runs one readiness check with its own deadline, so a check that
// hangs cannot keep await from noticing that a component exited.
func checkOnce(ctx context.Context, check func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	return check(ctx)
}

// exited reports the first watched component (nil: any) whose process is
// gone.
func (c *Cluster) exited(watch []string) *exitError {
	c.mu.Lock()
	comps := slices.Clone(c.st.Components)
	c.mu.Unlock()
	for _, cs := range comps {
		if watch != nil && !slices.Contains(watch, cs.Name) {
			continue
		}
		if stateOf(cs.PID, cs.StartTime) == procDead {
			return &exitError{name: cs.Name, log: cs.Log, tail: logTail(cs.Log, tailLinesOnError)}
		}
	}
	return nil
}

// issueCertificates creates (or reuses) the CA and service-account key and
// issues every component's certificate.
func (c *Cluster) issueCertificates(now time.Time) error {
	files := layout{dir: c.dir}.pki()
	ca, err := loadOrCreateAuthority(files, c.st.Name, now)
	if err != nil {
		return err
	}
	serving, err := apiServerServing(c.st.ServiceCIDR)
	if err != nil {
		return err
	}
	nodes, err := c.st.realNodes()
	if err != nil {
		return err
	}
	if len(nodes) > 0 {
		// Real nodes and their pods reach the API server at the API
		// address.
		nn, err := newNodeNetwork(c.st.NodeNetworkCIDR)
		if err != nil {
			return err
		}
		serving.ips = append(serving.ips, net.IP(nn.API.AsSlice()))
	}
	certs := []struct {
		name string
		req  certRequest
	}{
		{"apiserver", serving},
		{"admin", clientCert(c.st.Name+"-admin", "system:masters")},
		{ControllerManager, loopbackServing("system:kube-controller-manager")},
		{Scheduler, loopbackServing("system:kube-scheduler")},
		{Kwok, clientCert("kwok", "system:masters")},
		{"front-proxy-client", clientCert(frontProxyUser)},
		{kubeletClientCertName, clientCert(kubeletClientUser)},
		{kwokServingCertName, loopbackServing("kwok")},
	}
	reqs := realNodeCerts(nodes)
	if c.st.MetricsServer && len(nodes) > 0 {
		for name, req := range metricsServerCerts(nodes[0]) {
			reqs[name] = req
		}
	}
	if c.st.NetworkPolicies && len(nodes) > 0 {
		reqs[kubeRouterCertName] = clientCert(kubeRouterUser)
	}
	for name, req := range reqs {
		certs = append(certs, struct {
			name string
			req  certRequest
		}{name, req})
	}
	for _, ct := range certs {
		if _, _, err := ca.issueToFiles(files, ct.name, ct.req, now); err != nil {
			return err
		}
	}
	return nil
}

// writeKubeconfigs writes the admin kubeconfig and one per component, for
// the API server's current port. Those of real nodes use the API address.
func (c *Cluster) writeKubeconfigs() error {
	l := layout{dir: c.dir}
	files := l.pki()
	caPEM, err := os.ReadFile(files.caCert())
	if err != nil {
		return err
	}
	server := c.APIServerURL()
	type kubeconfig struct{ certName, user, path, server string }
	kubeconfigs := []kubeconfig{
		{"admin", c.st.Name + "-admin", l.adminKubeconfig(), server},
		{ControllerManager, "system:kube-controller-manager", l.kubeconfig(ControllerManager), server},
		{Scheduler, "system:kube-scheduler", l.kubeconfig(Scheduler), server},
		{Kwok, "kwok", l.kubeconfig(Kwok), server},
	}
	c.mu.Lock()
	nodes, err := c.st.realNodes()
	nodeServer := "https://" + c.st.apiAddress()
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if len(nodes) > 0 {
		kubeconfigs = append(kubeconfigs, kubeconfig{kubeProxyCertName, "system:kube-proxy", l.kubeconfig(KubeProxy), nodeServer})
	}
	for _, n := range nodes {
		kubeconfigs = append(kubeconfigs, kubeconfig{kubeletClientCertFor(n.Name), "system:node:" + n.Name, l.kubeconfig(NodeComponent(Kubelet, n.Name)), nodeServer})
	}
	for _, k := range kubeconfigs {
		certPEM, err := os.ReadFile(files.cert(k.certName))
		if err != nil {
			return err
		}
		keyPEM, err := os.ReadFile(files.key(k.certName))
		if err != nil {
			return err
		}
		if err := writeKubeconfig(k.path, kubeconfigFor(c.st.Name, k.user, k.server, caPEM, certPEM, keyPEM)); err != nil {
			return err
		}
	}
	return nil
}

// probeClient is an HTTP client for readiness probes: it trusts only the
// cluster CA and presents the admin certificate.
func (c *Cluster) probeClient() (*http.Client, error) {
	files := layout{dir: c.dir}.pki()
	caPEM, err := os.ReadFile(files.caCert())
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s: no certificate", files.caCert())
	}
	admin, err := tls.LoadX509KeyPair(files.cert("admin"), files.key("admin"))
	if err != nil {
		return nil, err
	}
	return &http.Client{
		Timeout: 2 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{admin}, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true,
			Proxy:             nil,
		},
	}, nil
}

// probeGet succeeds when url answers 200.
func probeGet(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return nil
}

// createNodes creates the kwok nodes (existing ones, from an earlier run in
// the same directory, are kept).
func (c *Cluster) createNodes(ctx context.Context, cs kubernetes.Interface) error {
	for i := range c.st.Nodes {
		cidr, err := nodeCIDR(c.st.PodCIDR, i)
		if err != nil {
			return err
		}
		_, err = cs.CoreV1().Nodes().Create(ctx, kwokNode(nodeName(c.st.Name, i), cidr), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create node %s: %w", nodeName(c.st.Name, i), err)
		}
	}
	return nil
}

// nodesReady succeeds once every kwok node is Ready. One List, not a Get
// per node: with client-go's default rate limit (5 requests/s) a check of
// 48 nodes outlasted its checkTimeout, so such a cluster never came up.
func (c *Cluster) nodesReady(ctx context.Context, cs kubernetes.Interface) error {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	ready := map[string]bool{}
	for i := range nodes.Items {
		ready[nodes.Items[i].Name] = nodeReady(&nodes.Items[i])
	}
	var notReady []string
	for _, name := range c.NodeNames() {
		if !ready[name] {
			notReady = append(notReady, name)
		}
	}
	if len(notReady) > 0 {
		return fmt.Errorf("nodes not Ready: %v", notReady)
	}
	return nil
}
