package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/agent"
	"github.com/annexhq/annex/internal/cli/sandbox"
	"github.com/annexhq/annex/internal/localcluster"
)

// Names of what the benchmark creates.
const (
	consumerName = "alpha"
	providerName = "beta"
	// offloadNS is offloaded to the provider (strategy Remote); directNS
	// is a plain namespace on the provider.
	offloadNS = "bench-offload"
	directNS  = "bench-direct"
	// kwokPodsPerNode is the pod capacity of a kwok node (localcluster).
	kwokPodsPerNode = 110
	// spareProviderPods is room on the provider beyond the largest
	// Deployment (the failure-reaction pods, stragglers of a clean-up).
	spareProviderPods = 200
)

// remoteNS is the provider-side name of a namespace offloaded by the
// consumer (mapping strategy DefaultName).
func remoteNS(ns string) string { return ns + "-" + consumerName }

// kube is one cluster with admin clients.
type kube struct {
	*localcluster.Cluster
	cs  kubernetes.Interface
	cr  client.Client
	cfg *rest.Config
}

// agentProc is one annex-agent process and how it was started.
type agentProc struct {
	*sandbox.Agent
	cluster   *kube
	args      []string
	pprofAddr string
}

// env is the benchmark's clusters and agents.
type env struct {
	dir      string // temporary: the clusters' state and logs
	bin      string // annexctl and annex-agent
	kubeBin  string // the Kubernetes binaries
	consumer *kube
	provider *kube
	agents   map[string]*agentProc // by cluster name
	log      *logger
	// pinCPUs are the CPUs of each cluster's processes in pinned burst
	// trials, by cluster; allowedCPUs what they get back after each.
	pinCPUs     map[string][]int
	allowedCPUs []int
	// agentArgs are Config.AgentArgs: extra flags of every agent.
	agentArgs []string
}

// providerNodes is how many kwok nodes the provider needs for pods pods.
func providerNodes(pods int) int {
	return (pods + spareProviderPods + kwokPodsPerNode - 1) / kwokPodsPerNode
}

// startEnv starts the consumer and the provider (CIDRs of the sandbox's
// alpha and beta), installs Annex in both, runs their agents and peers them
// with room for the largest Deployment. On error, whatever was started is
// stopped again.
func startEnv(ctx context.Context, l *logger, dir, bin, kubeBin string, cfg Config) (_ *env, err error) {
	e := &env{dir: dir, bin: bin, kubeBin: kubeBin, agents: map[string]*agentProc{}, log: l, agentArgs: cfg.AgentArgs}
	defer func() {
		if err != nil {
			e.stop()
		}
	}()
	specs := map[string]sandbox.Spec{}
	for _, s := range sandbox.Clusters {
		specs[s.Name] = s
	}
	nodes := map[string]int{consumerName: 1, providerName: providerNodes(cfg.maxPods())}
	names := []string{consumerName, providerName}
	clusters := make([]*kube, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	l.printf("starting clusters %s (1 kwok node) and %s (%d kwok nodes of %d pods) in %s", consumerName, providerName, nodes[providerName], kwokPodsPerNode, dir)
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			spec := specs[name]
			c, err := localcluster.Start(ctx, localcluster.Options{
				Name: name, Dir: filepath.Join(dir, name), BinDir: kubeBin,
				PodCIDR: spec.PodCIDR, ServiceCIDR: spec.ServiceCIDR, Nodes: nodes[name],
				BeforeControllers: sandbox.ApplyCRDs,
				// The bursts count writes per pod from the audit log.
				AuditWrites: true,
				// pprof of the API servers, for finding where a burst's
				// time goes (kubectl get --raw /debug/pprof/profile).
				Profiling: true,
			})
			if err != nil {
				errs[i] = err
				return
			}
			clusters[i], errs[i] = newKube(c)
		}()
	}
	wg.Wait()
	e.consumer, e.provider = clusters[0], clusters[1]
	if err := errors.Join(errs...); err != nil {
		return e, err
	}
	l.printf("clusters ready")
	for _, k := range []*kube{e.consumer, e.provider} {
		spec := specs[k.Name()]
		if _, err := e.annexctl(ctx, "install", "--kubeconfig", k.KubeconfigPath(), "--cluster-id", k.Name(),
			"--pod-cidr", spec.PodCIDR, "--service-cidr", spec.ServiceCIDR, "--external-cidr", spec.ExternalCIDR, "--local-agent"); err != nil {
			return e, err
		}
		if err := e.startAgent(ctx, k); err != nil {
			return e, err
		}
	}
	l.printf("Annex installed, agents ready")
	if err := e.peer(ctx); err != nil {
		return e, err
	}
	return e, nil
}

func newKube(c *localcluster.Cluster) (*kube, error) {
	cfg, err := c.RESTConfig()
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 200, 400
	cfg.Timeout = 30 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	scheme, err := agent.Scheme()
	if err != nil {
		return nil, err
	}
	cr, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	return &kube{Cluster: c, cs: cs, cr: cr, cfg: cfg}, nil
}

// startAgent starts the agent of k with extra flags (besides a pprof
// endpoint) and waits until it is ready.
func (e *env) startAgent(ctx context.Context, k *kube, args ...string) error {
	pprofAddr, err := localcluster.FreeAddr()
	if err != nil {
		return err
	}
	all := append(append([]string{"--pprof-bind-address=" + pprofAddr}, e.agentArgs...), args...)
	a, err := sandbox.StartAgent(ctx, k.Cluster, sandbox.AgentOptions{
		Binary: filepath.Join(e.bin, "annex-agent"), TokenTTL: 24 * time.Hour, Args: all})
	if err != nil {
		return fmt.Errorf("agent of %s: %w", k.Name(), err)
	}
	e.agents[k.Name()] = &agentProc{Agent: a, cluster: k, args: args, pprofAddr: pprofAddr}
	return nil
}

// restartAgent stops the agent of k and starts it with other flags.
func (e *env) restartAgent(ctx context.Context, k *kube, args ...string) error {
	if a := e.agents[k.Name()]; a != nil {
		if err := a.Stop(); err != nil {
			return err
		}
		for a.Running() {
			time.Sleep(50 * time.Millisecond)
		}
	}
	return e.startAgent(ctx, k, args...)
}

// peerArgs asks for every pod the provider's kwok nodes can hold, and half
// of their CPU and memory (32 CPUs and 256Gi each): far more than the pods
// request (10m and 16Mi each).
func (e *env) peerArgs() []string {
	nodes := len(e.provider.NodeNames())
	return []string{"peer", "--kubeconfig", e.consumer.KubeconfigPath(), "--remote-kubeconfig", e.provider.KubeconfigPath(),
		"--cpu", strconv.Itoa(16 * nodes), "--memory", strconv.Itoa(128*nodes) + "Gi", "--pods", strconv.Itoa(kwokPodsPerNode * nodes)}
}

// peer peers the consumer with the provider and waits for the virtual node.
// waitVirtualNodeReady waits up to timeout until the provider's virtual
// node is Ready on the consumer.
func (e *env) waitVirtualNodeReady(ctx context.Context, timeout time.Duration) error {
	node := corev1alpha1.VirtualNodeNamePrefix + providerName
	return poll(ctx, 200*time.Millisecond, timeout, "virtual node "+node+" Ready", func(ctx context.Context) error {
		n, err := e.consumer.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !nodeReady(n) {
			return errors.New("not Ready")
		}
		return nil
	})
}

func (e *env) peer(ctx context.Context) error {
	if _, err := e.annexctl(ctx, e.peerArgs()...); err != nil {
		return err
	}
	if err := e.waitVirtualNodeReady(ctx, 2*time.Minute); err != nil {
		return err
	}
	e.log.printf("peered %s with %s: virtual node %s Ready", consumerName, providerName, corev1alpha1.VirtualNodeNamePrefix+providerName)
	return nil
}

// offload creates namespace ns on the consumer and offloads it to the
// provider (pods run remotely only).
func (e *env) offload(ctx context.Context, ns string) error {
	if err := createNamespace(ctx, e.consumer, ns); err != nil {
		return err
	}
	_, err := e.annexctl(ctx, "offload", "namespace", ns, "--kubeconfig", e.consumer.KubeconfigPath(), "--pod-strategy", "Remote")
	return err
}

func createNamespace(ctx context.Context, k *kube, ns string) error {
	_, err := k.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// annexctl runs the annexctl of -bin; its output goes to the run's log
// file, and into the error when it fails.
func (e *env) annexctl(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(e.bin, "annexctl"), args...)
	out, err := cmd.CombinedOutput()
	e.log.detail("annexctl %s\n%s", strings.Join(args, " "), out)
	if err != nil {
		return string(out), fmt.Errorf("annexctl %s: %w\n%s", args[0], err, out)
	}
	return string(out), nil
}

// stop stops the agents and the clusters; it is safe to call on a
// partly started env and more than once.
func (e *env) stop() {
	for _, a := range e.agents {
		_ = a.Stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, k := range []*kube{e.consumer, e.provider} {
		if k != nil {
			if err := k.Stop(ctx); err != nil {
				e.log.printf("stop %s: %v", k.Name(), err)
			}
		}
	}
}

// providerReady reports whether the provider's API server answers /readyz
// within timeout.
func (e *env) providerReady(ctx context.Context, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := e.provider.cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	return err == nil
}

// poll calls cond every interval until it succeeds or timeout passes.
func poll(ctx context.Context, interval, timeout time.Duration, what string, cond func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		err := cond(cctx)
		ccancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not true after %s: %w", what, timeout, err)
		case <-time.After(interval):
		}
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// countPods counts the pods of namespace ns cheaply: a list of one item
// reports how many remain.
func countPods(ctx context.Context, k *kube, ns string) (int, error) {
	l, err := k.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return 0, err
	}
	n := len(l.Items)
	if l.RemainingItemCount != nil {
		n += int(*l.RemainingItemCount)
	}
	return n, nil
}

// logger prints progress lines with the time since the start, and keeps
// details (annexctl output) in a log file only.
type logger struct {
	start time.Time
	mu    sync.Mutex
	file  *os.File
}

func (l *logger) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := fmt.Sprintf("[%s] %s\n", fmtElapsed(time.Since(l.start)), fmt.Sprintf(format, args...))
	// Best effort, like every log line: a failed write does not stop the run.
	_, _ = os.Stdout.WriteString(line)
	if l.file != nil {
		_, _ = l.file.WriteString(line)
	}
}

func (l *logger) detail(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file != nil {
		fmt.Fprintf(l.file, "[%s] %s\n", fmtElapsed(time.Since(l.start)), fmt.Sprintf(format, args...))
	}
}

func fmtElapsed(d time.Duration) string {
	d = d.Round(time.Second)
	return fmt.Sprintf("%02d:%02d", int(d.Minutes()), int(d.Seconds())%60)
}
