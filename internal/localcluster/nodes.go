package localcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Starting and stopping real nodes (see realnode.go).

// nodePath is the PATH of the processes of real nodes (containerd finds
// runc and its shim there, kube-proxy iptables).
const nodePath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// imageImportTimeout bounds the import of one image into a node.
const imageImportTimeout = 2 * time.Minute

// kubeProxyHealthz is kube-proxy's health endpoint inside its node.
const kubeProxyHealthz = "http://127.0.0.1:10256/healthz"

// RealNode describes a running real node.
type RealNode struct {
	// Name is the node's name (also the Node object's).
	Name string
	// IP is the node's address on its eth0 (its InternalIP).
	IP string
	// PodCIDR is the range its pods' IPs come from.
	PodCIDR string
	// Netns is a path to the node's network namespace
	// (/proc/<pid>/ns/net of its init), valid while the node runs: enter
	// it to reach the node's pods and Services as the node does.
	Netns string
	// CgroupRoot is the kubelet's cgroupRoot (in every hierarchy).
	CgroupRoot string
}

// RealNodeNames are the names of the cluster's real nodes.
func (c *Cluster) RealNodeNames() []string {
	out := make([]string, c.st.RealNodes)
	for i := range out {
		out[i] = realNodeName(c.st.Name, i)
	}
	return out
}

// RealNodes describes the cluster's real nodes.
func (c *Cluster) RealNodes() []RealNode {
	c.refresh()
	c.mu.Lock()
	defer c.mu.Unlock()
	nodes, err := c.st.realNodes()
	if err != nil {
		return nil
	}
	out := make([]RealNode, len(nodes))
	for i, n := range nodes {
		out[i] = RealNode{Name: n.Name, IP: n.IP.String(), PodCIDR: n.PodCIDR, CgroupRoot: n.CgroupRoot}
		if cs := c.st.component(NodeComponent(NodeInit, n.Name)); cs != nil && stateOf(cs.PID, cs.StartTime) != procDead {
			out[i].Netns = "/proc/" + strconv.Itoa(cs.PID) + "/ns/net"
		}
	}
	return out
}

// APIAddress is the address:port the cluster's real nodes (and their pods,
// through the `kubernetes` Service) reach the API server at, or "" without
// real nodes.
func (c *Cluster) APIAddress() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.apiAddress()
}

func (s *state) apiAddress() string {
	if s.RealNodes == 0 || s.Ports.APIServer == 0 {
		return ""
	}
	nn, err := newNodeNetwork(s.NodeNetworkCIDR)
	if err != nil {
		return ""
	}
	return net.JoinHostPort(nn.API.String(), strconv.Itoa(s.Ports.APIServer))
}

// openHostNetns opens this process's network namespace, which the
// processes of real nodes inherit to reach the host's loopback.
func openHostNetns() (*os.File, error) {
	return os.Open("/proc/self/ns/net")
}

// startNodeNetwork starts the cluster's network process in a network
// namespace of its own and prepares that namespace.
func (c *Cluster) startNodeNetwork(ctx context.Context) error {
	l := layout{dir: c.dir}
	if err := os.MkdirAll(l.nodesDir(), 0o755); err != nil {
		return err
	}
	if err := removeIfExists(l.networkReady()); err != nil {
		return err
	}
	cfg, err := marshalYAML(egressSelectorConfig(l.egressSocket()))
	if err != nil {
		return err
	}
	if err := writeFileAtomic(l.egressConfig(), cfg, 0o644); err != nil {
		return err
	}
	host, err := openHostNetns()
	if err != nil {
		return err
	}
	defer func() { _ = host.Close() }() // read only
	c.mu.Lock()
	bin := filepath.Join(c.st.BinDir, ProxyCommand)
	args := networkArgs(l, &c.st)
	nn, err := newNodeNetwork(c.st.NodeNetworkCIDR)
	detach := c.st.Detach
	c.mu.Unlock()
	if err != nil {
		return err
	}
	p, err := spawn(spawnSpec{
		name: NodeNetwork, binary: bin, args: args, logPath: l.log(NodeNetwork), detach: detach,
		cloneflags: syscall.CLONE_NEWNET, extraFiles: []*os.File{host},
	})
	if err != nil {
		return err
	}
	if err := c.record(componentState{Name: NodeNetwork, Binary: bin, Args: args, Log: l.log(NodeNetwork), PID: p.pid, StartTime: p.startTime}, p); err != nil {
		return err
	}
	if err := c.await(ctx, NodeNetwork, []string{NodeNetwork}, fileExists(l.networkReady())); err != nil {
		return err
	}
	if err := setupNetworkNamespace(p.pid, nn); err != nil {
		return fmt.Errorf("node network: %w", err)
	}
	return nil
}

// fileExists is a readiness check that succeeds once path exists.
func fileExists(path string) func(context.Context) error {
	return func(context.Context) error {
		_, err := os.Stat(path)
		return err
	}
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// writeNodeFiles writes a real node's configuration and makes its
// directories.
func (c *Cluster) writeNodeFiles(n realNode, cniBinDir string) error {
	l := layout{dir: c.dir}
	nl := l.node(n.Name)
	for _, d := range []string{nl.dir, nl.sysctlDir(), nl.cniConfDir(), nl.podLogs(), nl.containerdRoot(), nl.containerdOpt()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for k, v := range kernelDefaults {
		if err := writeFileAtomic(nl.sysctlFile(k), []byte(v+"\n"), 0o444); err != nil {
			return err
		}
	}
	if err := writeFileAtomic(nl.resolvConf(), []byte(resolvConf), 0o644); err != nil {
		return err
	}
	c.mu.Lock()
	pause, podCIDR := c.st.PauseImage, c.st.PodCIDR
	c.mu.Unlock()
	if err := writeFileAtomic(nl.containerdConfig(), []byte(containerdConfig(nl, pause, cniBinDir)), 0o644); err != nil {
		return err
	}
	cni, err := json.MarshalIndent(cniConfig(n.PodCIDR), "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(nl.cniConfig(), append(cni, '\n'), 0o644); err != nil {
		return err
	}
	docs := []struct {
		path string
		doc  map[string]any
	}{
		{nl.kubeletConfig(), kubeletConfig(n, nl, l.pki())},
		{nl.kubeProxyConfig(), kubeProxyConfig(n, l.kubeconfig(KubeProxy), podCIDR)},
	}
	for _, d := range docs {
		data, err := marshalYAML(d.doc)
		if err != nil {
			return err
		}
		if err := writeFileAtomic(d.path, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// startRealNode starts node n: its init (namespaces, mounts, API address),
// its wiring to the cluster's bridge, its cgroup, containerd (with the
// images imported), kubelet and kube-proxy. It returns once they all run;
// Start waits for the node to be Ready.
func (c *Cluster) startRealNode(ctx context.Context, n realNode, all []realNode, cniBinDir string) error {
	l := layout{dir: c.dir}
	nl := l.node(n.Name)
	if err := c.writeNodeFiles(n, cniBinDir); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	if err := createCgroup(mounts, n.CgroupRoot); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	c.mu.Lock()
	bin := filepath.Join(c.st.BinDir, ProxyCommand)
	nn, err := newNodeNetwork(c.st.NodeNetworkCIDR)
	apiPort := c.st.Ports.APIServer
	detach := c.st.Detach
	images := c.st.Images
	netPID := 0
	if cs := c.st.component(NodeNetwork); cs != nil {
		netPID = cs.PID
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}

	// init: PID 1 of the node's namespaces.
	if err := removeIfExists(nl.ready()); err != nil {
		return err
	}
	host, err := openHostNetns()
	if err != nil {
		return err
	}
	defer func() { _ = host.Close() }() // read only
	initName := NodeComponent(NodeInit, n.Name)
	args := nodeInitArgs(nn, nl, apiPort)
	p, err := spawn(spawnSpec{
		name: initName, binary: bin, args: args, logPath: l.log(initName), detach: detach,
		cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWNET, extraFiles: []*os.File{host},
	})
	if err != nil {
		return err
	}
	if err := c.record(componentState{Name: initName, Binary: bin, Args: args, Log: l.log(initName), PID: p.pid, StartTime: p.startTime}, p); err != nil {
		return err
	}
	if err := c.await(ctx, initName, []string{initName}, fileExists(nl.ready())); err != nil {
		return err
	}
	if err := wireNode(netPID, p.pid, nn, n, all); err != nil {
		return err
	}
	if err := masqueradeOutside(p.pid, c.st.PodCIDR); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	c.mu.Lock()
	policies := c.st.NetworkPolicies
	c.mu.Unlock()
	if policies {
		if err := filterBridgedTraffic(p.pid); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}

	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return err
	}
	inNode := func(argv ...string) []string { return nsenterArgs(p.pid, nl.dir, argv...) }

	// containerd, then the images.
	containerdBin, err := exec.LookPath("containerd")
	if err != nil {
		return err
	}
	ctrd := NodeComponent(Containerd, n.Name)
	if err := c.launchInNode(componentState{Name: ctrd, Binary: nsenter, Args: inNode(append([]string{containerdBin}, containerdArgs(nl)...)...), Log: l.log(ctrd)}); err != nil {
		return err
	}
	socket := "/proc/" + strconv.Itoa(p.pid) + "/root" + nodeContainerdSocket
	if err := c.await(ctx, ctrd, []string{initName, ctrd}, func(ctx context.Context) error {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", socket)
		if err != nil {
			return err
		}
		return conn.Close()
	}); err != nil {
		return err
	}
	ctr, err := exec.LookPath("ctr")
	if err != nil {
		return err
	}
	for _, img := range images {
		if err := importImage(ctx, nsenter, inNode(ctr, "--address="+nodeContainerdSocket, "--namespace=k8s.io", "images", "import", img)); err != nil {
			return fmt.Errorf("node %s: import %s: %w", n.Name, img, err)
		}
	}

	for _, comp := range []struct {
		kind string
		args []string
	}{
		{Kubelet, kubeletArgs(n, nl, l.kubeconfig(NodeComponent(Kubelet, n.Name)))},
		{KubeProxy, kubeProxyArgs(nl)},
	} {
		c.mu.Lock()
		b := filepath.Join(c.st.BinDir, comp.kind)
		c.mu.Unlock()
		name := NodeComponent(comp.kind, n.Name)
		if err := c.launchInNode(componentState{Name: name, Binary: nsenter, Args: inNode(append([]string{b}, comp.args...)...), Log: l.log(name)}); err != nil {
			return err
		}
	}
	return nil
}

// importImage runs `ctr images import` inside a node.
func importImage(ctx context.Context, nsenter string, args []string) error {
	ctx, cancel := context.WithTimeout(ctx, imageImportTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, nsenter, args...)
	cmd.Env = append(componentEnv(os.Environ()), nodePath)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// launchInNode starts cs (nsenter running a program inside a real node) and
// records it with the program's PID.
func (c *Cluster) launchInNode(cs componentState) error {
	c.mu.Lock()
	detach := c.st.Detach
	c.mu.Unlock()
	p, err := spawn(spawnSpec{name: cs.Name, binary: cs.Binary, args: cs.Args, logPath: cs.Log, detach: detach, env: []string{nodePath}})
	if err != nil {
		return err
	}
	cs.PID, cs.StartTime = p.pid, p.startTime
	cs.ChildPID, cs.ChildStartTime = 0, 0
	// nsenter forks the program into the node's PID namespace at once.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if pid := firstChild(p.pid); pid > 0 {
			cs.ChildPID = pid
			if st, err := readProcStat(pid); err == nil {
				cs.ChildStartTime = st.startTime
			}
			break
		}
		if stateOf(p.pid, p.startTime) == procDead {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return c.record(cs, p)
}

// firstChild returns a child of pid (nsenter has one), or 0.
func firstChild(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0
	}
	child, _ := strconv.Atoi(f[0])
	return child
}

// createRealNodes creates the Node objects of the real nodes (kept if they
// exist from an earlier run in the same directory).
func (c *Cluster) createRealNodes(ctx context.Context, cs kubernetes.Interface, nodes []realNode) error {
	for _, n := range nodes {
		_, err := cs.CoreV1().Nodes().Create(ctx, realNodeObject(n), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create node %s: %w", n.Name, err)
		}
	}
	return nil
}

// realNodesReady succeeds once every real node is Ready with a heartbeat
// since since (a Node object kept from an earlier run may still say Ready)
// and its kube-proxy is healthy.
func (c *Cluster) realNodesReady(ctx context.Context, cs kubernetes.Interface, since time.Time) error {
	var notReady []string
	for _, rn := range c.RealNodes() {
		n, err := cs.CoreV1().Nodes().Get(ctx, rn.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		fresh := false
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && !cond.LastHeartbeatTime.Time.Before(since.Add(-time.Second)) {
				fresh = true
			}
		}
		if !fresh || !nodeReady(n) {
			notReady = append(notReady, rn.Name)
			continue
		}
		if rn.Netns == "" {
			return fmt.Errorf("node %s has no init", rn.Name)
		}
		if _, err := getInNetns(ctx, rn.Netns, kubeProxyHealthz); err != nil {
			return fmt.Errorf("kube-proxy of %s: %w", rn.Name, err)
		}
	}
	if len(notReady) > 0 {
		return fmt.Errorf("real nodes not Ready: %v", notReady)
	}
	return nil
}

// cleanupRealNodes removes what outlives the processes of the real nodes:
// their cgroups (and the network process's socket, if it left it).
func (c *Cluster) cleanupRealNodes() error {
	c.mu.Lock()
	parent := c.st.CgroupParent
	c.mu.Unlock()
	var errs []error
	if parent != "" {
		mounts, err := cgroupMounts()
		if err != nil {
			errs = append(errs, err)
		} else if err := removeCgroupTree(mounts, parent); err != nil {
			errs = append(errs, err)
		}
	}
	if err := removeIfExists(layout{dir: c.dir}.egressSocket()); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
