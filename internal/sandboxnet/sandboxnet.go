// Package sandboxnet owns the sandbox's real-packet network (`annexctl sandbox
// up --network`): network namespaces on this machine that stand in for each
// sandbox cluster's node network, so that Annex's gateways carry real packets
// between pods of different clusters without anything leaving the machine.
//
// It owns, all under the name prefix "annex-sbx-" in /run/netns:
//
//   - the underlay namespace "annex-sbx-ul": a bridge "br0" joining the
//     clusters' routers, the stand-in for the network between the clusters'
//     nodes (192.168.77.0/24);
//   - one router namespace per cluster, RouterNetns ("annex-sbx-alpha"):
//     IPv4 forwarding on, reverse-path filtering off, a veth "ul0" on the
//     underlay bridge holding UnderlayAddr. The cluster's annex-gateway runs
//     there (StartInNetns) and listens on that address;
//   - one namespace per pod that carries the label LabelSandboxNetns="true"
//     and runs on a kwok node, PodNetns ("annex-sbx-alpha-5f3a2b1c"): a veth
//     "eth0" holding the pod's IP (the one kwok assigned) as a /32 with a
//     default route via 169.254.1.1, the router's end of the veth; the router
//     routes the pod's IP to that veth. A small HTTP server answers on
//     EchoPort there with an Echo naming the cluster and pod (RunPods keeps
//     these in step with the clusters' pods).
//
// With real nodes (SetupNodes, `annexctl sandbox up --real-nodes`) there are
// no routers or pod namespaces: each cluster's real node 0 takes its
// router's place on the underlay (its veth "ul0" holds UnderlayAddr), its
// gateway runs on the node's host network, further real nodes of the
// cluster stand on the underlay beside it (NodeUnderlayAddr), and every
// node routes the other clusters' API addresses to their node 0.
//
// Only addresses inside these namespaces are used; the host's own network
// namespace gets no address, route or device. Everything needs root
// (CAP_NET_ADMIN and CAP_SYS_ADMIN for setns and the /run/netns bind
// mounts). Namespaces are entered per OS thread (Do, StartInNetns, Get),
// never by running `ip netns exec`. Linux only.
package sandboxnet

import (
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// Cluster is one cluster's place in the sandbox network.
type Cluster struct {
	// Name is the cluster's name, e.g. "alpha"; it names the namespaces.
	Name string
	// Kubeconfig is the cluster's admin kubeconfig (RunPods reads its pods
	// and nodes with it).
	Kubeconfig string
	// Index is the cluster's position, 0, 1, 2...: its router's underlay
	// address is 192.168.77.(Index+1).
	Index int
}

// Echo is what the echo server of a pod answers (JSON).
type Echo struct {
	// Cluster is the cluster the pod runs in.
	Cluster string `json:"cluster"`
	// Namespace and Pod name the pod.
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	// PodIP is the pod's IP in its own cluster (the address it listens on).
	PodIP string `json:"podIP"`
	// From is the remote address (ip:port) the server saw, i.e. the
	// caller's address after any translation on the way.
	From string `json:"from"`
}

// EchoPort is the TCP port of every pod's echo server.
const EchoPort = 8080

// LabelSandboxNetns, set to "true" on a pod, asks for a network namespace
// for it (RunPods). The key has no domain: a provider puts on a tenant's
// pod only label keys without a domain and those of the domains it allows
// (never annex.dev's), and offloaded pods need it on their provider.
const LabelSandboxNetns = "annex-sandbox-netns"

// KwokNodeAnnotation marks the nodes kwok simulates; only pods bound to
// such nodes get a namespace (pods on Annex's virtual nodes run elsewhere).
const KwokNodeAnnotation = "kwok.x-k8s.io/node"

// Addresses and device names.
const (
	// prefix starts the name of every namespace this package makes.
	prefix = "annex-sbx-"
	// underlaySuffix names the underlay namespace after the prefix.
	underlaySuffix = "ul"
	// bridgeName is the underlay namespace's bridge.
	bridgeName = "br0"
	// routerUplink is the router's veth to the underlay bridge.
	routerUplink = "ul0"
	// podIface is the pod's end of its veth.
	podIface = "eth0"
	// uidChars is how many hex characters of a pod UID name its
	// namespace and its router-side veth.
	uidChars = 8
	// underlayBits is the underlay's prefix length.
	underlayBits = 24
	// maxIndex is the highest Cluster.Index: 192.168.77.254 is the last
	// usable address of the /24.
	maxIndex = 253
)

// PodGateway is the address every pod's default route points to: the
// router's end of the pod's veth holds it (as a /32, on every such veth).
var PodGateway = netip.MustParseAddr("169.254.1.1")

// underlayBase is the underlay network; router i has base+i+1.
var underlayBase = netip.MustParseAddr("192.168.77.0")

// naming says what the namespaces are called: the package uses prefix;
// tests use their own so they cannot touch a running sandbox.
type naming struct{ prefix string }

var defaultNaming = naming{prefix: prefix}

func (n naming) underlay() string                { return n.prefix + underlaySuffix }
func (n naming) router(cluster string) string    { return n.prefix + cluster }
func (n naming) podPrefix(cluster string) string { return n.prefix + cluster + "-" }
func (n naming) pod(cluster string, uid types.UID) string {
	return n.podPrefix(cluster) + uidHex(uid)
}

// RouterNetns returns the name of the cluster's router namespace,
// "annex-sbx-<cluster>" (bind-mounted at /run/netns/<that>).
func RouterNetns(cluster string) string { return defaultNaming.router(cluster) }

// UnderlayNetns is the name of the namespace holding the underlay bridge.
func UnderlayNetns() string { return defaultNaming.underlay() }

// UnderlayAddr is the router's underlay address, 192.168.77.<index+1>, where
// its gateway listens. It is the zero Addr for an index outside 0..253.
func UnderlayAddr(index int) netip.Addr {
	if index < 0 || index > maxIndex {
		return netip.Addr{}
	}
	b := underlayBase.As4()
	b[3] = byte(index + 1)
	return netip.AddrFrom4(b)
}

// Real nodes after the first of a cluster (the real-node sandbox's
// `--nodes`): node j (1..maxNodeIndex) of cluster i (0..maxNodeCluster)
// has 192.168.77.<16*(i+1)+j>.
const (
	// maxNodeCluster is the highest cluster index NodeUnderlayAddr
	// serves: UnderlayAddr(0..14) is .1 to .15, below every node block.
	maxNodeCluster = 14
	// maxNodeIndex is the highest node index: a cluster's block of 16
	// addresses keeps its first (.16*(i+1)) and last unused, so that the
	// last block ends at .254.
	maxNodeIndex = 14
	// nodeBlock is the size of a cluster's block of node addresses.
	nodeBlock = 16
)

// NodeUnderlayAddr is the underlay address of real node nodeIndex of
// cluster clusterIndex: node 0 has its cluster's UnderlayAddr
// (192.168.77.<clusterIndex+1>, where the gateway the sandbox installs
// listens), node j >= 1 has 192.168.77.<16*(clusterIndex+1)+j> (alpha's
// node 1 .17, beta's .33, gamma's .49). Clusters 0..14 and nodes 0..14 get
// addresses; they never collide with each other or with UnderlayAddr of
// clusters 0..14 (.1 to .15), and the rest get the zero Addr.
func NodeUnderlayAddr(clusterIndex, nodeIndex int) netip.Addr {
	if clusterIndex < 0 || clusterIndex > maxNodeCluster || nodeIndex < 0 || nodeIndex > maxNodeIndex {
		return netip.Addr{}
	}
	if nodeIndex == 0 {
		return UnderlayAddr(clusterIndex)
	}
	b := underlayBase.As4()
	b[3] = byte(nodeBlock*(clusterIndex+1) + nodeIndex)
	return netip.AddrFrom4(b)
}

// PodNetns returns the name of a pod's namespace:
// "annex-sbx-<cluster>-<the first 8 hex characters of its UID>". With the
// sandbox's cluster names (at most 5 characters) it is 24 characters long;
// keep cluster names within 13 characters for at most 32. Eight hex
// characters (32 bits) of a random UID tell a cluster's pods apart.
func PodNetns(cluster string, uid types.UID) string { return defaultNaming.pod(cluster, uid) }

// uidHex is the first uidChars characters of uid without dashes, lowercased.
func uidHex(uid types.UID) string {
	s := strings.ToLower(strings.ReplaceAll(string(uid), "-", ""))
	if len(s) > uidChars {
		s = s[:uidChars]
	}
	return s
}

// routerPodIface is the router's end of a pod's veth: "p" and the UID's
// first 8 hex characters (interface names have at most 15).
func routerPodIface(uid types.UID) string { return "p" + uidHex(uid) }

// bridgePort is the underlay bridge's end of router index's uplink:
// "r<index>-<cluster>", cut to 15 characters (the index keeps it unique).
func bridgePort(c Cluster) string {
	s := fmt.Sprintf("r%d-%s", c.Index, c.Name)
	if len(s) > 15 {
		s = s[:15]
	}
	return s
}

// nodeBridgePort is the underlay bridge's end of real node nodeIndex's
// uplink: node 0 takes its cluster's router's place and port (bridgePort),
// node j >= 1 has "n<cluster index>-<j>-<cluster>", cut to 15 characters
// (the indexes keep it unique: a router's port starts with "r").
func nodeBridgePort(c Cluster, nodeIndex int) string {
	if nodeIndex == 0 {
		return bridgePort(c)
	}
	s := fmt.Sprintf("n%d-%d-%s", c.Index, nodeIndex, c.Name)
	if len(s) > 15 {
		s = s[:15]
	}
	return s
}

// isPodNetns reports whether name is the namespace of a pod of cluster
// (the router's own name and other clusters' pods do not match).
func (n naming) isPodNetns(cluster, name string) bool {
	rest, ok := strings.CutPrefix(name, n.podPrefix(cluster))
	if !ok || len(rest) == 0 || len(rest) > uidChars {
		return false
	}
	for _, r := range rest {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}

// validateClusters checks names and indexes: non-empty, unique, and an
// index within 0..253.
func validateClusters(clusters []Cluster) error {
	names, indexes := map[string]bool{}, map[int]bool{}
	for _, c := range clusters {
		switch {
		case c.Name == "" || strings.ContainsAny(c.Name, "/ \x00"):
			return fmt.Errorf("sandboxnet: invalid cluster name %q", c.Name)
		case c.Name == underlaySuffix:
			return fmt.Errorf("sandboxnet: a cluster may not be called %q (the underlay's name)", c.Name)
		case c.Index < 0 || c.Index > maxIndex:
			return fmt.Errorf("sandboxnet: cluster %s: index %d outside 0..%d", c.Name, c.Index, maxIndex)
		case names[c.Name]:
			return fmt.Errorf("sandboxnet: cluster %s given twice", c.Name)
		case indexes[c.Index]:
			return fmt.Errorf("sandboxnet: clusters share index %d", c.Index)
		}
		names[c.Name], indexes[c.Index] = true, true
	}
	return nil
}
