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

// Node is a real node that stands on the underlay in place of a router (the
// real-node sandbox, `annexctl sandbox up --real-nodes`): its cluster's
// gateway runs on its host network.
type Node struct {
	// Cluster places the node: its underlay address is
	// UnderlayAddr(Cluster.Index).
	Cluster Cluster
	// Netns is the path of the node's network namespace (e.g.
	// /proc/<pid>/ns/net of its init process).
	Netns string
	// API is the address at which the node reaches its cluster's API
	// server (held and forwarded by the node itself); the other nodes
	// route it here, so that agents on them reach this cluster's API
	// server.
	API netip.Addr
}

// SetupNodes puts every node on the underlay: the underlay namespace and
// bridge (as Setup makes them), on each node the veth "ul0" holding
// UnderlayAddr(Index)/24, and routes from each node to the other nodes'
// API addresses through their underlay addresses. It is idempotent. The
// node's end of the veth goes with the node's namespace; Teardown removes
// the underlay. It needs root.
func SetupNodes(ctx context.Context, nodes []Node) error {
	return defaultNaming.setupNodes(ctx, nodes)
}

func (n naming) setupNodes(ctx context.Context, nodes []Node) error {
	clusters := make([]Cluster, len(nodes))
	for i, nd := range nodes {
		if !nd.API.Is4() {
			return fmt.Errorf("sandboxnet: node of %s: API address %v is not IPv4", nd.Cluster.Name, nd.API)
		}
		clusters[i] = nd.Cluster
	}
	return n.onUnderlay(ctx, clusters, func(i int, ul netns.NsHandle, ulh *netlink.Handle, br netlink.Link) error {
		if err := n.setupNode(nodes[i], nodes, ul, ulh, br); err != nil {
			return fmt.Errorf("node of %s (%s): %w", nodes[i].Cluster.Name, nodes[i].Netns, err)
		}
		return nil
	})
}

func (n naming) setupNode(nd Node, all []Node, ul netns.NsHandle, ulh *netlink.Handle, br netlink.Link) error {
	h, err := netns.GetFromPath(nd.Netns)
	if err != nil {
		return fmt.Errorf("open its network namespace: %w", err)
	}
	defer h.Close()
	if err := n.attach(nd.Cluster, h, ul, ulh, br); err != nil {
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
		if o.Cluster.Name == nd.Cluster.Name {
			continue
		}
		rt := netlink.Route{LinkIndex: up.Attrs().Index, Dst: netnsutil.IPNet(netip.PrefixFrom(o.API, 32)),
			Gw: net.IP(UnderlayAddr(o.Cluster.Index).AsSlice())}
		if err := nh.RouteReplace(&rt); err != nil {
			return fmt.Errorf("route %s: %w", rt, err)
		}
	}
	return nil
}
