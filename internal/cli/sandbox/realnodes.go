package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/cli"
	"github.com/annexhq/annex/internal/cli/install"
	"github.com/annexhq/annex/internal/localcluster"
	"github.com/annexhq/annex/internal/ociimage"
	"github.com/annexhq/annex/internal/sandboxnet"
)

// The real-node sandbox (`up --real-nodes`): each cluster has one real node,
// or --nodes of them (kubelet, containerd, kube-proxy; internal/localcluster)
// beside its kwok nodes, and Annex is installed the way users install it,
// from the annex-agent image: the agent runs as a Deployment on real node 0,
// with annex-gateway as its second container on the node's host network.
// Every real node stands on sandboxnet's underlay (192.168.77.0/24, where
// the gateways meet) with an address of its own
// (sandboxnet.NodeUnderlayAddr), and each routes the other clusters' API
// addresses to their node 0, so that an agent in a pod on any node reaches
// its peers' API servers.

// Files of the real-node sandbox.
const (
	realNodesFile = "real-nodes.json" // <dir>: the sandbox runs on real nodes
	// PeerServerFile, in a cluster's directory, holds the URL at which
	// the other clusters' agents reach its API server (`annexctl peer
	// --remote-server`).
	PeerServerFile = "peer-server"
)

// Image tarballs the real-node sandbox imports into its nodes, in
// Options.ImagesDir (`make image` writes them).
var realNodeImages = []string{"pause.tar", "echo.tar", "annex-agent.tar"}

// KwokTaint keeps ordinary pods off the kwok nodes of the real-node
// sandbox, so that they run real containers: pods that tolerate it may
// still use the kwok nodes. It is the taint kwok's own examples give their
// nodes.
var KwokTaint = corev1.Taint{Key: "kwok.x-k8s.io/node", Value: "fake", Effect: corev1.TaintEffectNoSchedule}

// realNodeWait bounds the wait for an agent's pod on a real node.
const realNodeWait = 3 * time.Minute

// MaxRealNodes is the most real nodes per cluster `up --real-nodes
// --nodes` starts.
const MaxRealNodes = 4

// realNodesState is <dir>/real-nodes.json.
type realNodesState struct {
	Enabled bool `json:"enabled"`
	// Nodes is the number of real nodes per cluster (0 in files of
	// sandboxes before --nodes: 1).
	Nodes int `json:"nodes,omitempty"`
	// Clusters are each cluster's real nodes, once they stand on the
	// underlay.
	Clusters map[string][]RealNode `json:"clusters,omitempty"`
}

// RealNode is a real node of a real-node sandbox cluster.
type RealNode struct {
	// Name is the Node's name, <cluster>-node-<i>.
	Name string `json:"name"`
	// Underlay is its address on the sandbox's underlay
	// (sandboxnet.NodeUnderlayAddr): where a gateway on it listens.
	Underlay netip.Addr `json:"underlay"`
}

// realNodesPerCluster is how many real nodes per cluster o asks for.
func realNodesPerCluster(o Options) int {
	if o.Nodes == 0 {
		return 1
	}
	return o.Nodes
}

// validateNodes checks Options.Nodes: only with RealNodes, 1..MaxRealNodes
// (0 means 1).
func validateNodes(o Options) error {
	switch {
	case o.Nodes != 0 && !o.RealNodes:
		return fmt.Errorf("--nodes %d needs --real-nodes: only the real-node sandbox has real nodes to count", o.Nodes)
	case o.Nodes < 0 || o.Nodes > MaxRealNodes:
		return fmt.Errorf("--nodes %d: the real-node sandbox runs 1 to %d real nodes per cluster", o.Nodes, MaxRealNodes)
	}
	return nil
}

func readRealNodes(o Options) (realNodesState, error) {
	var st realNodesState
	data, err := os.ReadFile(filepath.Join(o.Dir, realNodesFile))
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("%s: %w", filepath.Join(o.Dir, realNodesFile), err)
	}
	if st.Enabled && st.Nodes == 0 {
		st.Nodes = 1
	}
	return st, nil
}

// RealNodesEnabled reports whether the sandbox in o.Dir runs on real nodes.
func RealNodesEnabled(o Options) bool {
	st, err := readRealNodes(o)
	return err == nil && st.Enabled
}

// RealNodesOf lists the real nodes of cluster in the real-node sandbox in
// o.Dir, node 0 (where `up` installs the gateway) first, with their
// underlay addresses; an error if the sandbox does not run on real nodes
// or has not put cluster's on the underlay.
func RealNodesOf(o Options, cluster string) ([]RealNode, error) {
	st, err := readRealNodes(o)
	if err != nil || !st.Enabled {
		return nil, fmt.Errorf("the sandbox in %s does not run on real nodes (%v)", o.Dir, err)
	}
	nodes, ok := st.Clusters[cluster]
	if !ok {
		return nil, fmt.Errorf("the sandbox in %s has no real nodes of %q on the underlay (not up yet?)", o.Dir, cluster)
	}
	return nodes, nil
}

// RealNodeUnderlay maps the names of cluster's real nodes in the real-node
// sandbox in o.Dir to their underlay addresses (see RealNodesOf): where
// `annexctl install --gateway-node NAME --gateway-endpoint ADDR` puts the
// gateway.
func RealNodeUnderlay(o Options, cluster string) (map[string]netip.Addr, error) {
	nodes, err := RealNodesOf(o, cluster)
	if err != nil {
		return nil, err
	}
	out := make(map[string]netip.Addr, len(nodes))
	for _, n := range nodes {
		out[n.Name] = n.Underlay
	}
	return out, nil
}

// DefaultImagesDir is images/ next to the running executable (bin/images
// in the repository, where `make image` writes them).
func DefaultImagesDir() string {
	if exe, err := os.Executable(); err == nil {
		return filepath.Join(filepath.Dir(exe), "images")
	}
	return filepath.Join("bin", "images")
}

// nodeNetworkCIDR is the real-node network of the sandbox's i-th cluster:
// each has its own, so that their API addresses differ.
func nodeNetworkCIDR(i int) string { return fmt.Sprintf("172.31.%d.0/24", i+1) }

// checkRealNodes fails, before anything starts, if --real-nodes cannot
// work here, saying what is missing.
func checkRealNodes(o Options) error {
	if o.Network {
		return errors.New("--real-nodes and --network do not go together: with --real-nodes the gateways run on the real nodes and the pods are real")
	}
	if err := localcluster.CheckRealNodes(localcluster.DefaultBinDir()); err != nil {
		return fmt.Errorf("--real-nodes: %w", err)
	}
	if err := localcluster.CheckMetricsServer(localcluster.DefaultBinDir()); err != nil {
		return fmt.Errorf("--real-nodes runs metrics-server: %w", err)
	}
	if err := localcluster.CheckNetworkPolicies(localcluster.DefaultBinDir()); err != nil {
		return fmt.Errorf("--real-nodes enforces NetworkPolicies with kube-router: %w", err)
	}
	for _, f := range realNodeImages {
		if _, err := os.Stat(filepath.Join(o.ImagesDir, f)); err != nil {
			return fmt.Errorf("--real-nodes imports the images of `make image` into the nodes: %w (run `make image`, or pass --images DIR)", err)
		}
	}
	if RealNodesEnabled(o) {
		return nil
	}
	if sandboxnet.NetnsExists(sandboxnet.UnderlayNetns()) {
		return fmt.Errorf("network namespace %s exists: another sandbox runs with --network or --real-nodes (only one can); stop it with `annexctl sandbox down --dir DIR`", sandboxnet.UnderlayNetns())
	}
	return nil
}

// upReal starts the real-node sandbox: the clusters (in parallel), the
// underlay between their real nodes, then Annex from its image in each.
func upReal(ctx context.Context, s cli.IOStreams, o Options) error {
	n := realNodesPerCluster(o)
	// Recorded first, so that a failed start's Down removes the underlay.
	st := realNodesState{Enabled: true, Nodes: n}
	if err := writeJSON(filepath.Join(o.Dir, realNodesFile), st); err != nil {
		return err
	}
	images := make([]string, len(realNodeImages))
	for i, f := range realNodeImages {
		images[i] = filepath.Join(o.ImagesDir, f)
	}
	if n == 1 {
		fmt.Fprintf(s.Out, "Starting %d clusters with a real node each in %s (about 30 s once the Kubernetes binaries are built)...\n", len(Clusters), o.Dir)
	} else {
		fmt.Fprintf(s.Out, "Starting %d clusters with %d real nodes each in %s...\n", len(Clusters), n, o.Dir)
	}
	out := &lockedWriter{w: s.Out}
	clusters := make([]*localcluster.Cluster, len(Clusters))
	err := forEachCluster(func(i int, spec Spec) error {
		opts := clusterOptions(o, spec, out)
		opts.RealNodes, opts.Images, opts.PauseImage, opts.NodeNetworkCIDR = n, images, ociimage.PauseRef(), nodeNetworkCIDR(i)
		// `kubectl top` and HPAs: the provider's PodMetrics of real
		// containers, and the consumer's of offloaded pods.
		opts.MetricsServer = true
		// NetworkPolicies enforced on the real nodes (kube-router's
		// firewall), as on a cluster whose CNI supports them.
		opts.NetworkPolicies = true
		c, err := localcluster.Start(ctx, opts)
		if err != nil {
			return fmt.Errorf("%s: %w", spec.Name, err)
		}
		clusters[i] = c
		return nil
	})
	if err != nil {
		return err
	}
	nodes, err := underlayNodes(clusters, n)
	if err != nil {
		return err
	}
	if err := sandboxnet.SetupNodes(ctx, nodes); err != nil {
		return err
	}
	st.Clusters = map[string][]RealNode{}
	for _, nd := range nodes {
		st.Clusters[nd.Cluster.Name] = append(st.Clusters[nd.Cluster.Name], RealNode{Name: clusters[nd.Cluster.Index].RealNodeNames()[nd.Index], Underlay: nd.Underlay()})
	}
	if err := writeJSON(filepath.Join(o.Dir, realNodesFile), st); err != nil {
		return err
	}
	s.Step("real nodes on the underlay %s (192.168.77.0/24), each routing the other clusters' API addresses", sandboxnet.UnderlayNetns())
	for _, c := range clusters {
		if err := recordBeforeAnnex(ctx, c); err != nil {
			return err
		}
	}
	s.Step("each real node's routes, rules and nftables ruleset recorded before Annex (<cluster>/nodes/<node>/%s)", BeforeAnnexFile)
	return forEachCluster(func(i int, spec Spec) error {
		return installReal(ctx, cli.IOStreams{Out: &prefixWriter{w: out, prefix: spec.Name + ": "}, ErrOut: s.ErrOut}, clusters[i], spec, i)
	})
}

// underlayNodes are the n real nodes of each of clusters (the sandbox's,
// in order) as they stand on the underlay.
func underlayNodes(clusters []*localcluster.Cluster, n int) ([]sandboxnet.Node, error) {
	var nodes []sandboxnet.Node
	for i, c := range clusters {
		rn := c.RealNodes()
		api, perr := netip.ParseAddrPort(c.APIAddress())
		if len(rn) != n || perr != nil {
			return nil, fmt.Errorf("%s: want %d real nodes and an API address, have nodes %+v and API address %q", c.Name(), n, rn, c.APIAddress())
		}
		for j, r := range rn {
			if r.Netns == "" {
				return nil, fmt.Errorf("%s: real node %s is not running", c.Name(), r.Name)
			}
			nodes = append(nodes, sandboxnet.Node{Cluster: sandboxnet.Cluster{Name: c.Name(), Index: i}, Index: j, Netns: r.Netns, API: api.Addr()})
		}
	}
	return nodes, nil
}

// forEachCluster runs f for every sandbox cluster in parallel.
func forEachCluster(f func(i int, spec Spec) error) error {
	errs := make(chan error, len(Clusters))
	for i, spec := range Clusters {
		go func() { errs <- f(i, spec) }()
	}
	var all []error
	for range Clusters {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

// installReal taints c's kwok nodes, installs Annex from the agent image
// with the gateway on c's real node, waits for the agent's pod and writes
// the URL at which the peers' agents reach c's API server.
func installReal(ctx context.Context, s cli.IOStreams, c *localcluster.Cluster, spec Spec, index int) error {
	conn, err := cli.Connect(ctx, c.KubeconfigPath(), 15*time.Second)
	if err != nil {
		return fmt.Errorf("%s: %w", spec.Name, err)
	}
	taints, err := json.Marshal(map[string]any{"spec": map[string]any{"taints": []corev1.Taint{KwokTaint}}})
	if err != nil {
		return err
	}
	for _, n := range c.NodeNames() {
		if _, err := conn.Clientset.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, taints, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("%s: taint kwok node %s: %w", spec.Name, n, err)
		}
	}
	node := c.RealNodeNames()[0]
	inst := install.DefaultOptions()
	inst.ClusterID, inst.PodCIDR, inst.ServiceCIDR, inst.ExternalCIDR = spec.Name, spec.PodCIDR, spec.ServiceCIDR, spec.ExternalCIDR
	inst.Image, inst.ImagePullPolicy = ociimage.AgentRef(), string(corev1.PullNever)
	inst.GatewayEndpoint, inst.GatewayNode = sandboxnet.UnderlayAddr(index).String(), node
	if err := install.Run(ctx, cli.IOStreams{Out: io.Discard, ErrOut: s.ErrOut}, conn, inst); err != nil {
		return fmt.Errorf("%s: install: %w", spec.Name, err)
	}
	s.Step("Annex installed from %s (kwok nodes tainted %s=%s:%s)", inst.Image, KwokTaint.Key, KwokTaint.Value, KwokTaint.Effect)
	wctx, cancel := context.WithTimeout(ctx, realNodeWait)
	defer cancel()
	for {
		_, ready, why := agentPod(wctx, conn)
		if ready {
			break
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("%s: the agent's pod is not Ready on %s after %s: %s (kubectl --kubeconfig %s -n %s describe pod)", spec.Name, node, realNodeWait, why, c.KubeconfigPath(), corev1alpha1.AgentNamespace)
		case <-time.After(time.Second):
		}
	}
	server := "https://" + c.APIAddress()
	if err := os.WriteFile(filepath.Join(c.Dir(), PeerServerFile), []byte(server+"\n"), 0o644); err != nil {
		return err
	}
	s.Step("annex-agent and annex-gateway ready on %s (gateway %s); peers reach the API server at %s", node, inst.GatewayEndpoint, server)
	return nil
}

// agentPod reports whether the agent's pod is running and Ready, and if not
// Ready why.
func agentPod(ctx context.Context, conn *cli.Cluster) (running, ready bool, why string) {
	pods, err := conn.Clientset.CoreV1().Pods(corev1alpha1.AgentNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=annex-agent"})
	if err != nil {
		return false, false, err.Error()
	}
	var whys []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		running = running || p.Status.Phase == corev1.PodRunning
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, true, ""
			}
		}
		whys = append(whys, fmt.Sprintf("pod %s is %s on %q", p.Name, p.Status.Phase, p.Spec.NodeName))
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil {
				whys = append(whys, fmt.Sprintf("container %s waits: %s %s", cs.Name, w.Reason, w.Message))
			}
		}
	}
	if len(whys) == 0 {
		return running, false, "no agent pod"
	}
	return running, false, strings.Join(whys, "; ")
}

// PeerServer is the URL at which the other clusters' agents reach cluster
// name's API server: the real-node sandbox's API address on the nodes, or
// "" in the kwok sandbox (whose agents use the kubeconfigs' 127.0.0.1).
func PeerServer(o Options, name string) string {
	data, err := os.ReadFile(filepath.Join(o.ClusterDir(name), PeerServerFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

// realAgentStatus is the health of the agent Deployment of a real-node
// sandbox cluster.
func realAgentStatus(ctx context.Context, c *localcluster.Cluster) AgentStatus {
	st := AgentStatus{Log: fmt.Sprintf("kubectl --kubeconfig %s -n %s logs deployment/annex-agent -c agent", c.KubeconfigPath(), corev1alpha1.AgentNamespace)}
	conn, err := cli.Connect(ctx, c.KubeconfigPath(), 5*time.Second)
	if err != nil {
		return st
	}
	st.Running, st.Ready, _ = agentPod(ctx, conn)
	return st
}
