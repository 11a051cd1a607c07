package sandboxnet

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/annexhq/annex/internal/netnsutil"
)

// Node is a real node that stands on the underlay (the real-node sandbox,
// `annexctl sandbox up --real-nodes`): node 0 of a cluster takes its
// router's place, and its cluster's gateway runs on its host network; the
// cluster's other nodes stand beside it.
type Node struct {
	// Cluster places the node: node 0's underlay address is
	// UnderlayAddr(Cluster.Index), node Index's NodeUnderlayAddr.
	Cluster Cluster
	// Index is the node's position in its cluster, 0, 1, 2... (at most
	// 14).
	Index int
	// Netns is the path of the node's network namespace (e.g.
	// /proc/<pid>/ns/net of its init process).
	Netns string
	// API is the address at which the node reaches its cluster's API
	// server (held and forwarded by the node itself); the other clusters'
	// nodes route it to the cluster's node 0, so that agents on them
	// reach this cluster's API server. All nodes of a cluster give the
	// same.
	API netip.Addr
}

// Underlay is the node's underlay address: NodeUnderlayAddr(Cluster.Index,
// Index).
func (nd Node) Underlay() netip.Addr { return NodeUnderlayAddr(nd.Cluster.Index, nd.Index) }

// SetupNodes puts every node on the underlay: the underlay namespace and
// bridge (as Setup makes them), on each node the veth "ul0" holding its
// Underlay()/24 (whose bridge end is its router's port for node 0, and
// "n<cluster index>-<node index>-<cluster>" for the others), and routes
// from each node to the other clusters' API addresses through their node
// 0's underlay address. Every cluster given needs its node 0. It is
// idempotent. The node's end of the veth goes with the node's namespace;
// Teardown removes the underlay. It needs root.
func SetupNodes(ctx context.Context, nodes []Node) error {
	return defaultNaming.setupNodes(ctx, nodes)
}

// validateNodes checks the nodes: their clusters (as validateClusters
// does, each once however many nodes it has), node indexes within 0..14
// and unique per cluster, every cluster's node 0 present, one IPv4 API
// address per cluster, and cluster indexes NodeUnderlayAddr serves.
func validateNodes(nodes []Node) error {
	var clusters []Cluster
	byName := map[string]Node{} // a cluster's first node
	seen := map[string]map[int]bool{}
	for _, nd := range nodes {
		name := nd.Cluster.Name
		if !nd.API.Is4() {
			return fmt.Errorf("sandboxnet: node %d of %s: API address %v is not IPv4", nd.Index, name, nd.API)
		}
		if nd.Index < 0 || nd.Index > maxNodeIndex {
			return fmt.Errorf("sandboxnet: node %d of %s: index outside 0..%d", nd.Index, name, maxNodeIndex)
		}
		first, ok := byName[name]
		if !ok {
			if nd.Cluster.Index > maxNodeCluster {
				return fmt.Errorf("sandboxnet: nodes of %s: cluster index %d outside 0..%d", name, nd.Cluster.Index, maxNodeCluster)
			}
			byName[name], seen[name] = nd, map[int]bool{}
			clusters = append(clusters, nd.Cluster)
		} else {
			switch {
			case nd.Cluster.Index != first.Cluster.Index:
				return fmt.Errorf("sandboxnet: nodes of %s give cluster indexes %d and %d", name, first.Cluster.Index, nd.Cluster.Index)
			case nd.API != first.API:
				return fmt.Errorf("sandboxnet: nodes of %s give API addresses %v and %v", name, first.API, nd.API)
			}
		}
		if seen[name][nd.Index] {
			return fmt.Errorf("sandboxnet: node %d of %s given twice", nd.Index, name)
		}
		seen[name][nd.Index] = true
	}
	if err := validateClusters(clusters); err != nil {
		return err
	}
	for _, c := range clusters {
		if !seen[c.Name][0] {
			return fmt.Errorf("sandboxnet: nodes of %s: node 0 is missing (the other clusters reach its API server through it)", c.Name)
		}
	}
	return nil
}

func (n naming) setupNodes(ctx context.Context, nodes []Node) error {
	if err := validateNodes(nodes); err != nil {
		return err
	}
	if err := requireRoot(); err != nil {
		return err
	}
	ul, ulh, br, err := n.ensureUnderlay()
	if err != nil {
		return err
	}
	defer ul.Close()
	defer ulh.Close()
	for _, nd := range nodes {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := n.setupNode(nd, nodes, ul, ulh, br); err != nil {
			return fmt.Errorf("node %d of %s (%s): %w", nd.Index, nd.Cluster.Name, nd.Netns, err)
		}
	}
	return nil
}

func (n naming) setupNode(nd Node, all []Node, ul netns.NsHandle, ulh *netlink.Handle, br netlink.Link) error {
	h, err := netns.GetFromPath(nd.Netns)
	if err != nil {
		return fmt.Errorf("open its network namespace: %w", err)
	}
	defer h.Close()
	if err := n.attach(nodeBridgePort(nd.Cluster, nd.Index), nd.Underlay(), h, ul, ulh, br); err != nil {
		return err
	}
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	defer nh.Close()
	up, err := nh.LinkByName(routerUplink)
	if err != nil {
		return err
	}
	for _, o := range all {
		if o.Cluster.Name == nd.Cluster.Name || o.Index != 0 {
			continue
		}
		rt := netlink.Route{LinkIndex: up.Attrs().Index, Dst: netnsutil.IPNet(netip.PrefixFrom(o.API, 32)),
			Gw: net.IP(o.Underlay().AsSlice())}
		if err := nh.RouteReplace(&rt); err != nil {
			return fmt.Errorf("route %s: %w", rt, err)
		}
	}
	return nil
}
