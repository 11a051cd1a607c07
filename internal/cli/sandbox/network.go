package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/annexhq/annex/internal/cli"
	"github.com/annexhq/annex/internal/localcluster"
	"github.com/annexhq/annex/internal/sandboxnet"
)

// The sandbox's real-packet network (`up --network`, internal/sandboxnet):
// a router namespace per cluster running annex-gateway, and a background
// `annexctl sandbox pod-network` giving labelled pods namespaces of their own.

// Files of the network, in the sandbox directory and each cluster's.
const (
	networkFile    = "network.json"     // <dir>: the network is on
	podNetworkFile = "pod-network.json" // <dir>: the pod-network process
	podNetworkLog  = "pod-network.log"  // <dir>
	gatewayFile    = "gateway.json"     // <clusterDir>: the gateway process
	gatewayLog     = "gateway.log"      // <clusterDir>
	gatewayDir     = "gateway"          // <clusterDir>: config.json and status.json
)

// startCheck is how long a started background process must keep running
// before it counts as started.
const startCheck = time.Second

// DefaultGatewayBinary is annex-gateway next to the running executable, if
// there is one.
func DefaultGatewayBinary() string {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "annex-gateway")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "annex-gateway"
}

// GatewayConfig is the gateway configuration file of a cluster (the agent
// writes it, the gateway reads it).
func (o Options) GatewayConfig(name string) string {
	return filepath.Join(o.ClusterDir(name), gatewayDir, "config.json")
}

// GatewayStatus is the gateway status file of a cluster (the gateway writes
// it, the agent reads it).
func (o Options) GatewayStatus(name string) string {
	return filepath.Join(o.ClusterDir(name), gatewayDir, "status.json")
}

// networkState is <dir>/network.json.
type networkState struct {
	Enabled bool `json:"enabled"`
}

// NetworkEnabled reports whether the sandbox in o.Dir was started with
// --network.
func NetworkEnabled(o Options) bool {
	data, err := os.ReadFile(filepath.Join(o.Dir, networkFile))
	if err != nil {
		return false
	}
	var st networkState
	return json.Unmarshal(data, &st) == nil && st.Enabled
}

// sandboxClusters are the sandbox's clusters as sandboxnet sees them.
func sandboxClusters(o Options) []sandboxnet.Cluster {
	out := make([]sandboxnet.Cluster, len(Clusters))
	for i, spec := range Clusters {
		out[i] = sandboxnet.Cluster{Name: spec.Name, Kubeconfig: filepath.Join(o.ClusterDir(spec.Name), "kubeconfig"), Index: i}
	}
	return out
}

// clusterIndex is the position of cluster name in Clusters, -1 if unknown.
func clusterIndex(name string) int {
	for i, spec := range Clusters {
		if spec.Name == name {
			return i
		}
	}
	return -1
}

// gatewayAgentArgs are the agent flags that hand the cluster's gateway to
// the agent.
func gatewayAgentArgs(o Options, name string) []string {
	return []string{
		"--gateway-config", o.GatewayConfig(name),
		"--gateway-status", o.GatewayStatus(name),
		"--gateway-endpoint", sandboxnet.UnderlayAddr(clusterIndex(name)).String(),
	}
}

// checkNetwork fails, before anything starts, if --network cannot work:
// not root, no annex-gateway, or another sandbox's network running.
func checkNetwork(o Options) error {
	if os.Geteuid() != 0 {
		return errors.New("--network needs root (it makes network namespaces, veth devices and bind mounts in /run/netns): run as root, or leave out --network")
	}
	if _, err := exec.LookPath(o.GatewayBinary); err != nil {
		return fmt.Errorf("--network runs annex-gateway: %w (build it with `make build`, or pass --gateway-binary)", err)
	}
	if NetworkEnabled(o) {
		return nil
	}
	for _, spec := range Clusters {
		if pid := netnsUser(sandboxnet.RouterNetns(spec.Name)); pid != 0 {
			return fmt.Errorf("network namespace %s is in use by process %d: another sandbox runs with --network (only one can); stop it with `annexctl sandbox down --dir DIR`", sandboxnet.RouterNetns(spec.Name), pid)
		}
	}
	return nil
}

// netnsUser returns a process running in the named namespace, 0 if none (or
// the namespace does not exist).
func netnsUser(name string) int {
	var want syscall.Stat_t
	if err := syscall.Stat(filepath.Join("/run/netns", name), &want); err != nil {
		return 0
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/proc", e.Name(), "ns", "net"), &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino {
			return pid
		}
	}
	return 0
}

// writeGatewayConfig creates <clusterDir>/gateway/ and, unless it exists, a
// config.json without links (the agent replaces it).
func writeGatewayConfig(o Options, name string) error {
	path := o.GatewayConfig(name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	return os.WriteFile(path, []byte(`{"links":[]}`+"\n"), 0o644)
}

// Process is a background process of the network (a gateway, pod-network).
type Process struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"startTime"`
	Log       string `json:"log"`
	// Netns is the network namespace it runs in; empty for the host's.
	Netns string `json:"netns,omitempty"`
}

// ProcessStatus is the health of a background process.
type ProcessStatus struct {
	PID     int    `json:"pid"`
	Running bool   `json:"running"`
	Log     string `json:"log"`
	Netns   string `json:"netns,omitempty"`
}

// Running reports whether the recorded process still runs.
func (p *Process) Running() bool { return localcluster.ProcessAlive(p.PID, p.StartTime) }

// Status is the process's health.
func (p *Process) Status() ProcessStatus {
	return ProcessStatus{PID: p.PID, Running: p.Running(), Log: p.Log, Netns: p.Netns}
}

// Stop terminates the process: SIGTERM, then SIGKILL after 10 s.
func (p *Process) Stop() error {
	if !p.Running() {
		return nil
	}
	_ = syscall.Kill(p.PID, syscall.SIGTERM)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if !p.Running() {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return syscall.Kill(p.PID, syscall.SIGKILL)
}

func loadProcess(path string) (*Process, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p := &Process{}
	return p, json.Unmarshal(data, p)
}

// startProcess starts cmd detached (its own session), with output appended
// to logPath, in namespace netnsName if set; it records it in recordPath
// once it has kept running for startCheck.
func startProcess(cmd *exec.Cmd, logPath, netnsName, recordPath string) (*Process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer func() { _ = logf.Close() }() // the child has its own descriptor
	fmt.Fprintf(logf, "--- %s starting %s\n", time.Now().Format(time.RFC3339), strings.Join(cmd.Args, " "))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if netnsName != "" {
		err = sandboxnet.StartInNetns(netnsName, cmd)
	} else {
		err = cmd.Start()
	}
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	start, _ := localcluster.ProcessStartTime(cmd.Process.Pid)
	p := &Process{PID: cmd.Process.Pid, StartTime: start, Log: logPath, Netns: netnsName}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		return nil, fmt.Errorf("%s exited at once (%v); see %s", filepath.Base(cmd.Path), err, logPath)
	case <-time.After(startCheck):
	}
	if err := writeJSON(recordPath, p); err != nil {
		_ = p.Stop()
		return nil, err
	}
	return p, nil
}

// startGateway runs annex-gateway in cluster name's router namespace.
func startGateway(o Options, name string) (*Process, error) {
	if err := writeGatewayConfig(o, name); err != nil {
		return nil, err
	}
	dir := o.ClusterDir(name)
	cmd := exec.Command(o.GatewayBinary, "--config", o.GatewayConfig(name), "--status", o.GatewayStatus(name))
	p, err := startProcess(cmd, filepath.Join(dir, gatewayLog), sandboxnet.RouterNetns(name), filepath.Join(dir, gatewayFile))
	if err != nil {
		return nil, fmt.Errorf("%s gateway: %w", name, err)
	}
	return p, nil
}

// startPodNetwork runs `annexctl sandbox pod-network` in the background.
func startPodNetwork(o Options) (*Process, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "sandbox", "pod-network", "--dir", dir)
	p, err := startProcess(cmd, filepath.Join(o.Dir, podNetworkLog), "", filepath.Join(o.Dir, podNetworkFile))
	if err != nil {
		return nil, fmt.Errorf("pod network: %w", err)
	}
	return p, nil
}

// ensureNetwork makes the namespaces (idempotently) and starts every
// gateway and the pod-network process that is not running. It changes
// nothing, and needs no root, when all of them run.
func ensureNetwork(ctx context.Context, s cli.IOStreams, o Options) error {
	var missing []string
	for _, spec := range Clusters {
		if p, err := loadProcess(filepath.Join(o.ClusterDir(spec.Name), gatewayFile)); err != nil || !p.Running() {
			missing = append(missing, spec.Name+" gateway")
		}
	}
	if p, err := loadProcess(filepath.Join(o.Dir, podNetworkFile)); err != nil || !p.Running() {
		missing = append(missing, "pod network")
	}
	if len(missing) == 0 && allRoutersExist() {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("the sandbox's network needs a restart of %s, which needs root: run as root", strings.Join(missing, ", "))
	}
	fresh := !allRoutersExist()
	if err := sandboxnet.Setup(ctx, sandboxClusters(o)); err != nil {
		return err
	}
	if fresh {
		s.Step("network namespaces ready (routers %s, underlay %s)", strings.Join(routerNames(), ", "), sandboxnet.UnderlayNetns())
	}
	for _, spec := range Clusters {
		if p, err := loadProcess(filepath.Join(o.ClusterDir(spec.Name), gatewayFile)); err == nil && p.Running() {
			continue
		}
		p, err := startGateway(o, spec.Name)
		if err != nil {
			return err
		}
		s.Step("%s: annex-gateway running in %s on %s (pid %d)", spec.Name, p.Netns, sandboxnet.UnderlayAddr(clusterIndex(spec.Name)), p.PID)
	}
	if p, err := loadProcess(filepath.Join(o.Dir, podNetworkFile)); err != nil || !p.Running() {
		p, err := startPodNetwork(o)
		if err != nil {
			return err
		}
		s.Step("pod network running (pid %d): pods labelled %s=true get a namespace", p.PID, sandboxnet.LabelSandboxNetns)
	}
	return nil
}

func routerNames() []string {
	var out []string
	for _, spec := range Clusters {
		out = append(out, sandboxnet.RouterNetns(spec.Name))
	}
	return out
}

func allRoutersExist() bool {
	for _, name := range append(routerNames(), sandboxnet.UnderlayNetns()) {
		if !sandboxnet.NetnsExists(name) {
			return false
		}
	}
	return true
}

// stopNetwork stops the pod-network process and the gateways.
func stopNetwork(s cli.IOStreams, o Options) []error {
	var errs []error
	if p, err := loadProcess(filepath.Join(o.Dir, podNetworkFile)); err == nil {
		if err := p.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("pod network: %w", err))
		} else {
			s.Step("pod network stopped")
		}
	}
	for _, spec := range Clusters {
		if p, err := loadProcess(filepath.Join(o.ClusterDir(spec.Name), gatewayFile)); err == nil {
			if err := p.Stop(); err != nil {
				errs = append(errs, fmt.Errorf("%s gateway: %w", spec.Name, err))
			}
		}
	}
	return errs
}

// NetworkStatus is the state of the sandbox's network.
type NetworkStatus struct {
	Enabled    bool          `json:"enabled"`
	Underlay   string        `json:"underlay"`
	PodNetwork ProcessStatus `json:"podNetwork"`
}

// GetNetworkStatus reports the network of the sandbox in o.Dir; nil if it
// was started without --network.
func GetNetworkStatus(o Options) *NetworkStatus {
	if !NetworkEnabled(o) {
		return nil
	}
	st := &NetworkStatus{Enabled: true, Underlay: sandboxnet.UnderlayNetns()}
	if p, err := loadProcess(filepath.Join(o.Dir, podNetworkFile)); err == nil {
		st.PodNetwork = p.Status()
	} else {
		st.PodNetwork.Log = filepath.Join(o.Dir, podNetworkLog)
	}
	return st
}

// gatewayStatus reports cluster name's gateway; nil without --network.
func gatewayStatus(o Options, name string) *GatewayStatus {
	if !NetworkEnabled(o) {
		return nil
	}
	st := &GatewayStatus{
		Netns:   sandboxnet.RouterNetns(name),
		Address: sandboxnet.UnderlayAddr(clusterIndex(name)).String(),
		Config:  o.GatewayConfig(name),
		Log:     filepath.Join(o.ClusterDir(name), gatewayLog),
	}
	if p, err := loadProcess(filepath.Join(o.ClusterDir(name), gatewayFile)); err == nil {
		st.PID, st.Running = p.PID, p.Running()
	}
	return st
}

// GatewayStatus is the health of a cluster's annex-gateway.
type GatewayStatus struct {
	PID     int    `json:"pid"`
	Running bool   `json:"running"`
	Netns   string `json:"netns"`
	Address string `json:"address"`
	Config  string `json:"config"`
	Log     string `json:"log"`
}

// RunPodNetwork is `annexctl sandbox pod-network`: sandboxnet.RunPods for
// the sandbox's clusters until ctx ends.
func RunPodNetwork(ctx context.Context, log logr.Logger, o Options) error {
	return sandboxnet.RunPods(ctx, log, sandboxClusters(o))
}

// Curl GETs url from inside the network namespace of pod ref
// ("namespace/name", or a name in "default") of cluster name and writes the
// body to s.Out.
func Curl(ctx context.Context, s cli.IOStreams, o Options, name, ref, url string, timeout time.Duration) error {
	if clusterIndex(name) < 0 {
		return fmt.Errorf("unknown sandbox cluster %q (the sandbox has alpha, beta and gamma)", name)
	}
	ns, pod, ok := strings.Cut(ref, "/")
	if !ok {
		ns, pod = "default", ref
	}
	if ns == "" || pod == "" {
		return fmt.Errorf("pod %q: want NAMESPACE/NAME", ref)
	}
	kubeconfig := filepath.Join(o.ClusterDir(name), "kubeconfig")
	if _, err := os.Stat(kubeconfig); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w (no state for %s in %s)", errNotUp, name, o.Dir)
	}
	if os.Geteuid() != 0 {
		return errors.New("curl enters the pod's network namespace, which needs root: run as root")
	}
	conn, err := cli.Connect(ctx, kubeconfig, 15*time.Second)
	if err != nil {
		return err
	}
	p, err := conn.Clientset.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("pod %s/%s not found in %s", ns, pod, name)
	}
	if err != nil {
		return fmt.Errorf("%s: get pod %s/%s: %w", name, ns, pod, err)
	}
	netnsName := sandboxnet.PodNetns(name, p.UID)
	if !sandboxnet.NetnsExists(netnsName) {
		return fmt.Errorf("pod %s/%s of %s has no network namespace (%s): %s", ns, pod, name, netnsName, whyNoNetns(o, p.Labels, p.Spec.NodeName, p.Status.PodIP, func() (bool, error) {
			n, err := conn.Clientset.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			_, kwok := n.Annotations[sandboxnet.KwokNodeAnnotation]
			return kwok, nil
		}))
	}
	body, err := sandboxnet.Get(ctx, netnsName, url, timeout)
	if len(body) > 0 {
		_, _ = s.Out.Write(body)
		if body[len(body)-1] != '\n' {
			_, _ = io.WriteString(s.Out, "\n")
		}
	}
	return err
}

// whyNoNetns guesses why a pod has no namespace; kwokNode tells whether its
// node is a kwok node.
func whyNoNetns(o Options, labels map[string]string, node, podIP string, kwokNode func() (bool, error)) string {
	switch {
	case !NetworkEnabled(o):
		return fmt.Sprintf("the sandbox in %s runs without the network; `annexctl sandbox down` and `annexctl sandbox up --network`", o.Dir)
	case labels[sandboxnet.LabelSandboxNetns] != "true":
		return fmt.Sprintf("it does not carry the label %s=true (kubectl label pod ... %s=true)", sandboxnet.LabelSandboxNetns, sandboxnet.LabelSandboxNetns)
	case node == "":
		return "it is not scheduled yet"
	case podIP == "":
		return "it has no IP yet"
	}
	if kwok, err := kwokNode(); err == nil && !kwok {
		return fmt.Sprintf("it runs on node %s, which is not a kwok node (an offloaded pod runs on its provider cluster: curl its copy there)", node)
	}
	return fmt.Sprintf("the pod-network process has not made it (yet): see `annexctl sandbox status` and %s", filepath.Join(o.Dir, podNetworkLog))
}
