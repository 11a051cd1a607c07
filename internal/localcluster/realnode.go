package localcluster

// Real nodes: a kubelet, containerd and kube-proxy (iptables mode) per node,
// running real containers.
//
// Every node is three namespaces of its own, PID, mount and network, whose
// first process (PID 1) is `localcluster-proxy node` (see tools/kube's
// internal/localclusterproxy): when it exits the kernel kills every process
// of the node, shims and containers included, and the namespaces, their
// mounts, devices and iptables rules go with them. Inside, the node sees
// tmpfs over /run, /var/lib and /var/log (the paths containerd and the
// kubelet hard-code), a /proc of its own whose host-wide sysctls are
// read-only (the kubelet runs with protectKernelDefaults and reads the
// values it expects from files bound over them), and its configuration,
// containerd's images and containers and the pods' logs under
// <Dir>/nodes/<node> (the kubelet's own directory, with the pods' volumes,
// stays on the tmpfs: its sockets need short paths). Its containers go into a cgroup of its own,
// /annex-lc-<id>/<node> in every hierarchy, made before the kubelet starts
// and removed by Stop. containerd, kubelet and kube-proxy are started in
// the node with nsenter.
//
// The nodes of a cluster share an L2 network: a bridge in a network
// namespace of the cluster's own, held by `localcluster-proxy network`, with
// the node network (NodeNetworkCIDR): the bridge has the first address, node
// i the (i+2)-th on its eth0, and each node routes the other nodes' pod
// CIDRs to them. The last address of the node network is the cluster's API
// address: every node holds it on its loopback device, where its init
// process forwards it to the API server on the host's 127.0.0.1; it is the
// API server's advertise address, so the `kubernetes` Service and the
// kubeconfigs of kubelet and kube-proxy point at it. The API server reaches
// kubelets (logs, exec, port-forward) and pods through the network
// process's HTTP CONNECT proxy on <Dir>/egress.sock (its egress selector),
// which also dials 127.0.0.1 destinations (kwok, virtual nodes) in the
// host's namespace, and nothing else. The host's own network namespace
// gets no address, route or device.

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultNodeNetworkCIDR is the default of Options.NodeNetworkCIDR. Every
// cluster has a bridge of its own, so clusters may share it.
const DefaultNodeNetworkCIDR = "172.31.0.0/24"

// NodeTypeReal is the value of NodeTypeLabel on real nodes.
const NodeTypeReal = "real"

// Component names of real nodes. The processes of node N are named
// "<kind>@N" in Status (e.g. "kubelet@alpha-node-0"); NodeNetwork is the
// cluster's network process.
const (
	NodeNetwork = "node-network"
	NodeInit    = "init"
	Containerd  = "containerd"
	Kubelet     = "kubelet"
	KubeProxy   = "kube-proxy"
)

// ProxyCommand is the helper command real nodes need in the binary
// directory (a symlink to tools/kube's multi-call binary).
const ProxyCommand = "localcluster-proxy"

// NodeComponent is the Status name of a real node's process of the given
// kind (NodeInit, Containerd, Kubelet or KubeProxy).
func NodeComponent(kind, node string) string { return kind + "@" + node }

// ErrRealNodesUnavailable is wrapped by the errors of CheckRealNodes (and of
// Start with Options.RealNodes) when this machine or user cannot run real
// nodes.
var ErrRealNodesUnavailable = errors.New("real nodes cannot run here")

// Paths inside a node's mount namespace.
const (
	// nodeContainerdSocket is containerd's socket (on the node's /run).
	nodeContainerdSocket = "/run/containerd/containerd.sock"
	// nodeRuntimeEndpoint is the kubelet's CRI endpoint.
	nodeRuntimeEndpoint = "unix://" + nodeContainerdSocket
)

// nodeTmpfs are the directories a node sees as empty tmpfs: the paths
// containerd, the kubelet and the CNI plugins hard-code
// (/var/lib/kubelet/device-plugins, /var/log/containers, /var/lib/cni,
// /run/containerd/{s,fifo,runc}, /run/netns/cni-*), private to the node.
// Nothing a node needs from the host may live below them.
var nodeTmpfs = []string{"/run", "/var/lib", "/var/log"}

// kernelDefaults are the host-wide sysctls the kubelet insists on (it
// fails with protectKernelDefaults if they differ, and would write them
// otherwise): a node reads these values from read-only files bound over
// them, and the host's settings stay untouched.
var kernelDefaults = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// cniPlugins are the CNI plugins a node's network configuration uses
// (loopback is containerd's own).
var cniPlugins = []string{"bridge", "host-local", "loopback", "portmap"}

// cniBinDirs are where distributions install the CNI plugins, in the order
// they are looked for.
var cniBinDirs = []string{"/usr/lib/cni", "/opt/cni/bin"}

// hostTools are the host programs real nodes need, with the Debian package
// holding each.
var hostTools = []struct{ name, pkg string }{
	{"containerd", "containerd"},
	{"containerd-shim-runc-v2", "containerd"},
	{"ctr", "containerd"},
	{"runc", "runc"},
	{"nsenter", "util-linux"},
	{"iptables", "iptables"},
	{"iptables-restore", "iptables"},
	// kube-router's NetworkPolicy firewall (Options.NetworkPolicies).
	{"ipset", "ipset"},
}

// CheckRealNodes returns nil when real nodes can run here with the binaries
// in binDir, and otherwise one error wrapping ErrRealNodesUnavailable that
// lists everything missing and how to get it: root, the container runtime
// (containerd, runc), the CNI plugins, nsenter, iptables and ipset, /dev/net/tun,
// cgroup file systems, and the kubelet, kube-proxy and localcluster-proxy
// binaries. Start checks it before starting anything when asked for real
// nodes; tests skip with its message (and fail with it under CI=true).
func CheckRealNodes(binDir string) error {
	var problems []string
	if os.Geteuid() != 0 {
		problems = append(problems, "not root: real nodes need root (namespaces, mounts, cgroups, veth devices); run as root")
	}
	var pkgs []string
	addPkg := func(p string) {
		for _, q := range pkgs {
			if q == p {
				return
			}
		}
		pkgs = append(pkgs, p)
	}
	var tools []string
	for _, t := range hostTools {
		if _, err := exec.LookPath(t.name); err != nil {
			tools = append(tools, t.name)
			addPkg(t.pkg)
		}
	}
	if _, err := findCNIBinDir(); err != nil {
		tools = append(tools, "CNI plugins "+strings.Join(cniPlugins, ", ")+" (in "+strings.Join(cniBinDirs, " or ")+")")
		addPkg("containernetworking-plugins")
	}
	if len(tools) > 0 {
		problems = append(problems, fmt.Sprintf("missing %s: install them with `apt-get install -y %s` (or `make node-deps`)",
			strings.Join(tools, ", "), strings.Join(pkgs, " ")))
	}
	if fi, err := os.Stat("/dev/net/tun"); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		problems = append(problems, "no /dev/net/tun: load the tun module (`modprobe tun`) or run where the device exists")
	}
	if mounts, err := cgroupMounts(); err != nil || len(mounts) == 0 {
		problems = append(problems, "no cgroup file system mounted under /sys/fs/cgroup")
	}
	if bins := missingExecutables(binDir, realNodeBinaries); len(bins) > 0 {
		problems = append(problems, fmt.Sprintf("missing %s in %s: run `make tools` to build them", strings.Join(bins, ", "), binDir))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrRealNodesUnavailable, strings.Join(problems, "; "))
	}
	return nil
}

// findCNIBinDir returns the first of cniBinDirs holding every plugin in
// cniPlugins.
func findCNIBinDir() (string, error) {
next:
	for _, d := range cniBinDirs {
		for _, p := range cniPlugins {
			fi, err := os.Stat(filepath.Join(d, p))
			if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
				continue next
			}
		}
		return d, nil
	}
	return "", fmt.Errorf("no directory of %v holds the CNI plugins %v", cniBinDirs, cniPlugins)
}

// validateRealNodeOptions checks what real nodes need of o (after
// defaults): the node network, the images, and paths the nodes can see.
func validateRealNodeOptions(o Options) error {
	if o.RealNodes < 0 {
		return fmt.Errorf("options: RealNodes %d < 0", o.RealNodes)
	}
	if o.RealNodes == 0 {
		if o.MetricsServer {
			return errors.New("options: MetricsServer needs RealNodes: metrics-server runs in real node 0 and scrapes real kubelets")
		}
		if o.NetworkPolicies {
			return errors.New("options: NetworkPolicies needs RealNodes: kube-router filters the traffic of real nodes' pods, kwok's pods send none")
		}
		return nil
	}
	nodeNet, err := parseIPv4CIDR("NodeNetworkCIDR", o.NodeNetworkCIDR, 16, 29)
	if err != nil {
		return err
	}
	for _, other := range []struct{ field, cidr string }{{"PodCIDR", o.PodCIDR}, {"ServiceCIDR", o.ServiceCIDR}} {
		n, err := parseIPv4CIDR(other.field, other.cidr, 8, 28)
		if err != nil {
			return err
		}
		if n.Contains(nodeNet.IP) || nodeNet.Contains(n.IP) {
			return fmt.Errorf("options: NodeNetworkCIDR %s and %s %s overlap", o.NodeNetworkCIDR, other.field, other.cidr)
		}
	}
	p := netip.MustParsePrefix(o.NodeNetworkCIDR)
	// The network and broadcast addresses, the bridge's and the API
	// address are not nodes'.
	if room := 1<<(32-p.Bits()) - 4; o.RealNodes > room {
		return fmt.Errorf("options: NodeNetworkCIDR %s has room for %d real nodes, not %d", o.NodeNetworkCIDR, room, o.RealNodes)
	}
	if o.PauseImage == "" {
		return errors.New("options: PauseImage is required with RealNodes: the reference of the CRI sandbox (pause) image, whose tarball is among Images (internal/ociimage builds one: ociimage.Pause, ociimage.PauseRef)")
	}
	if len(o.Images) == 0 {
		return errors.New("options: Images is required with RealNodes: image tarballs to import into every node, the pause image's among them")
	}
	for _, img := range o.Images {
		if !filepath.IsAbs(img) {
			return fmt.Errorf("options: image %q: the path must be absolute", img)
		}
		if fi, err := os.Stat(img); err != nil || !fi.Mode().IsRegular() {
			return fmt.Errorf("options: image %s: not a readable file", img)
		}
	}
	// A node sees the host's files except below nodeTmpfs: what it needs
	// from the host may not be there.
	for _, p := range append([]string{o.Dir, o.BinDir}, o.Images...) {
		if d := hiddenInNodes(p); d != "" {
			return fmt.Errorf("options: %s is below %s, which real nodes see as an empty tmpfs; use a directory elsewhere", p, d)
		}
	}
	if sock := (layout{dir: o.Dir}).egressSocket(); len(sock) > maxSocketPath {
		return fmt.Errorf("options: Dir %s is too long for real nodes: the API server's egress socket %s would be longer than %d bytes", o.Dir, sock, maxSocketPath)
	}
	return nil
}

// maxSocketPath is the longest path a Unix socket may have (sun_path, less
// the terminating NUL).
const maxSocketPath = 107

// hiddenInNodes returns the directory of nodeTmpfs that covers path (after
// resolving symbolic links where it exists), or "".
func hiddenInNodes(path string) string {
	paths := []string{filepath.Clean(path)}
	if r, err := filepath.EvalSymlinks(path); err == nil {
		paths = append(paths, r)
	}
	for _, p := range paths {
		for _, d := range nodeTmpfs {
			if p == d || strings.HasPrefix(p, d+"/") {
				return d
			}
		}
	}
	return ""
}

// clusterID names the cluster's machine-wide resources (cgroups): a hash
// of its directory, so clusters of the same name in different directories
// never share them.
func clusterID(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return hex.EncodeToString(sum[:])[:10]
}

// cgroupParent is the cgroup (in every hierarchy) holding the cgroups of a
// cluster's real nodes.
func cgroupParent(dir string) string { return "/annex-lc-" + clusterID(dir) }

// realNode is one real node, as derived from the cluster's state.
type realNode struct {
	Name    string
	Index   int
	IP      netip.Addr // on its eth0, in the node network
	PodCIDR string
	// CgroupRoot is the kubelet's cgroupRoot, in every hierarchy.
	CgroupRoot string
}

// nodeNetwork is the addressing of a cluster's node network.
type nodeNetwork struct {
	Prefix netip.Prefix
	Bridge netip.Addr // the bridge's address in the network namespace
	API    netip.Addr // the API address, on every node's loopback
}

func newNodeNetwork(cidr string) (nodeNetwork, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil || !p.Addr().Is4() || p.Bits() > 29 {
		return nodeNetwork{}, fmt.Errorf("node network %q: want an IPv4 CIDR of /29 or larger", cidr)
	}
	p = p.Masked()
	return nodeNetwork{Prefix: p, Bridge: p.Addr().Next(), API: lastUsable(p)}, nil
}

// nodeIP is the address of node index.
func (n nodeNetwork) nodeIP(index int) netip.Addr {
	a := n.Bridge
	for range index + 1 {
		a = a.Next()
	}
	return a
}

// lastUsable is the address before p's broadcast address.
func lastUsable(p netip.Prefix) netip.Addr {
	b := p.Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v |= 1<<(32-p.Bits()) - 1 // broadcast
	v--
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}) //nolint:gosec // G115: taking the address's bytes
}

// realNodeName is the name of the index-th real node of a cluster.
func realNodeName(cluster string, index int) string {
	return fmt.Sprintf("%s-node-%d", cluster, index)
}

// realNodes derives the cluster's real nodes: their pod CIDRs follow the
// kwok nodes'.
func (s *state) realNodes() ([]realNode, error) {
	if s.RealNodes == 0 {
		return nil, nil
	}
	nn, err := newNodeNetwork(s.NodeNetworkCIDR)
	if err != nil {
		return nil, err
	}
	out := make([]realNode, s.RealNodes)
	for i := range out {
		cidr, err := nodeCIDR(s.PodCIDR, s.Nodes+i)
		if err != nil {
			return nil, err
		}
		name := realNodeName(s.Name, i)
		out[i] = realNode{Name: name, Index: i, IP: nn.nodeIP(i), PodCIDR: cidr, CgroupRoot: s.CgroupParent + "/" + name}
	}
	return out, nil
}

// realNodeObject is the Node object of a real node, made before its kubelet
// starts so that it has its pod CIDR (the kubelet cannot set it) before it
// runs a pod; the kubelet takes it over when it registers.
func realNodeObject(n realNode) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: n.Name,
			Labels: map[string]string{
				NodeTypeLabel:                    NodeTypeReal,
				corev1.LabelHostname:             n.Name,
				corev1.LabelOSStable:             "linux",
				"node-role.kubernetes.io/worker": "",
			},
		},
		Spec: corev1.NodeSpec{PodCIDR: n.PodCIDR, PodCIDRs: []string{n.PodCIDR}},
	}
}

// Host-side layout of real nodes, in the cluster's directory.
func (l layout) egressSocket() string { return filepath.Join(l.dir, "egress.sock") }
func (l layout) egressConfig() string { return filepath.Join(l.dir, "egress-selector.yaml") }
func (l layout) nodesDir() string     { return filepath.Join(l.dir, "nodes") }
func (l layout) networkReady() string { return filepath.Join(l.nodesDir(), "network.ready") }
func (l layout) node(name string) nodeLayout {
	return nodeLayout{dir: filepath.Join(l.nodesDir(), name)}
}

// nodeLayout is where one real node's state lives on the host; the node
// sees the same paths.
type nodeLayout struct{ dir string }

func (n nodeLayout) ready() string            { return filepath.Join(n.dir, "init.ready") }
func (n nodeLayout) containerdConfig() string { return filepath.Join(n.dir, "containerd.toml") }
func (n nodeLayout) containerdRoot() string   { return filepath.Join(n.dir, "containerd") }
func (n nodeLayout) containerdOpt() string    { return filepath.Join(n.dir, "containerd-opt") }
func (n nodeLayout) cniConfDir() string       { return filepath.Join(n.dir, "cni") }
func (n nodeLayout) cniConfig() string        { return filepath.Join(n.cniConfDir(), "10-annex.conflist") }
func (n nodeLayout) kubeletConfig() string    { return filepath.Join(n.dir, "kubelet.yaml") }
func (n nodeLayout) podLogs() string          { return filepath.Join(n.dir, "pod-logs") }
func (n nodeLayout) kubeProxyConfig() string  { return filepath.Join(n.dir, "kube-proxy.yaml") }
func (n nodeLayout) resolvConf() string       { return filepath.Join(n.dir, "resolv.conf") }
func (n nodeLayout) sysctlDir() string        { return filepath.Join(n.dir, "sysctl") }
func (n nodeLayout) sysctlFile(key string) string {
	return filepath.Join(n.sysctlDir(), strings.ReplaceAll(key, "/", "."))
}

// Certificates of real nodes, in the PKI directory.
func kubeletServingCertName(node string) string { return "kubelet-serving-" + node }
func kubeletClientCertFor(node string) string   { return "kubelet-" + node }

const kubeProxyCertName = KubeProxy

// realNodeCerts are the certificates real nodes need: per node a serving
// certificate for its kubelet API (its name and address) and a client one
// in system:nodes (the Node authorizer and NodeRestriction know it by
// name), and kube-proxy's client certificate (system:kube-proxy, which the
// default RBAC binds to system:node-proxier).
func realNodeCerts(nodes []realNode) map[string]certRequest {
	out := map[string]certRequest{
		kubeProxyCertName: clientCert("system:kube-proxy"),
	}
	for _, n := range nodes {
		out[kubeletServingCertName(n.Name)] = certRequest{
			commonName: "system:node:" + n.Name,
			dnsNames:   []string{n.Name},
			ips:        []net.IP{net.IP(n.IP.AsSlice())},
			usages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		out[kubeletClientCertFor(n.Name)] = clientCert("system:node:"+n.Name, "system:nodes")
	}
	return out
}
