// Package network owns `annexctl network connect` and `network disconnect`:
// with admin access to two clusters it checks the CIDRs each publishes
// (private ranges only, clear of the other's service CIDR and nodes: the
// rules of internal/network.CheckPeerCIDR), decides how each side maps the
// other's pod and external CIDRs (remapping those that overlap, see
// internal/network)
// and writes the pair of NetworkConfigurations — spec by server-side apply,
// the remappings and conditions by status patch — that a gateway implements;
// or deletes them. Each records what it is for (label annex.dev/link-purpose):
// a peering's link goes with the peering, a link for direct connections
// between providers needs none.
package network

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/cli"
	"github.com/annexhq/annex/internal/identity"
	"github.com/annexhq/annex/internal/netview"
	annexnet "github.com/annexhq/annex/internal/network"
)

// Options are the settings of network connect and disconnect.
type Options struct {
	// Pool is the range remapped CIDRs are allocated from.
	Pool string
	// Timeout bounds the whole operation (0: no bound beyond ctx).
	Timeout time.Duration
	// Purpose is what the link is for, recorded on both sides (label
	// networkingv1alpha1.LabelLinkPurpose): LinkPurposePeering from `peer`.
	// Empty (`network connect`): each side records LinkPurposePeering when
	// it has a ForeignCluster for the other, LinkPurposeDirect otherwise.
	Purpose string
}

// DefaultOptions are the CLI defaults.
func DefaultOptions() Options {
	return Options{Pool: annexnet.DefaultPool, Timeout: 2 * time.Minute}
}

// Validate checks the options that do not need a cluster.
func (o Options) Validate() error {
	_, err := o.pool()
	return err
}

func (o Options) pool() (netip.Prefix, error) {
	s := o.Pool
	if s == "" {
		s = annexnet.DefaultPool
	}
	p, err := annexnet.ParseCIDR(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("--remap-pool: %w", err)
	}
	return p, nil
}

// Connect links the networks of clusters a and b (either can be consumer or
// provider of the other, or neither). Running it again changes nothing.
func Connect(ctx context.Context, s cli.IOStreams, a, b *cli.Cluster, o Options) error {
	_, err := Link(ctx, s, a, b, o)
	return err
}

// Link is Connect that also reports whether anything changed, for callers
// (such as peer) that summarise several steps.
func Link(ctx context.Context, s cli.IOStreams, a, b *cli.Cluster, o Options) (bool, error) {
	pool, err := o.pool()
	if err != nil {
		return false, err
	}
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	aid, bid, err := cli.Identities(ctx, a, b, "cluster of --kubeconfig", "cluster of --remote-kubeconfig", "be connected with")
	if err != nil {
		return false, err
	}
	fmt.Fprintf(s.Out, "Connecting the networks of %s and %s\n", aid.ClusterID, bid.ClusterID)
	sa, err := side(ctx, a, aid, bid.ClusterID)
	if err != nil {
		return false, err
	}
	sb, err := side(ctx, b, bid, aid.ClusterID)
	if err != nil {
		return false, err
	}
	plan, err := Decide(sa, sb, pool)
	if err != nil {
		return false, err
	}
	for _, v := range []View{plan.A, plan.B} {
		for _, l := range v.Lines() {
			s.Step("%s", l)
		}
	}
	ga, err := readGateway(ctx, a, aid.ClusterID)
	if err != nil {
		return false, err
	}
	gb, err := readGateway(ctx, b, bid.ClusterID)
	if err != nil {
		return false, err
	}
	ta, tb, tunnelLine := tunnels(sa, sb, ga, gb)
	s.Step("%s", tunnelLine)

	changed := false
	note := func(ch bool, format string, args ...any) {
		changed = changed || ch
		if !ch {
			format += " (unchanged)"
		}
		s.Step(format, args...)
	}
	ends := []struct {
		c          *cli.Cluster
		v, reverse View
		tunnel     *networkingv1alpha1.TunnelSpec
	}{{a, plan.A, plan.B, ta}, {b, plan.B, plan.A, tb}}
	for _, e := range ends {
		nc := e.v.Object(e.reverse)
		nc.Spec.Tunnel = e.tunnel
		self := e.v.Self.ClusterID
		purpose, err := linkPurpose(ctx, e.c, e.v.Peer.ClusterID, o.Purpose)
		if err != nil {
			return false, fmt.Errorf("%s: %w", self, err)
		}
		nc.Labels[networkingv1alpha1.LabelLinkPurpose] = purpose
		ch, err := cli.ApplyTyped(ctx, e.c.Client, nc)
		if err != nil {
			return false, fmt.Errorf("%s: %w", self, err)
		}
		note(ch, "%s: NetworkConfiguration %s/%s (remote %s, %s)", self, nc.Namespace, nc.Name, nc.Spec.RemoteClusterID, describePurpose(purpose))
	}
	for _, e := range ends {
		self := e.v.Self.ClusterID
		ch, err := writeStatus(ctx, e.c.Client, e.v, e.reverse)
		if err != nil {
			return false, fmt.Errorf("%s: status of NetworkConfiguration %s/%s: %w", self, corev1alpha1.AgentNamespace, e.v.Peer.ClusterID, err)
		}
		note(ch, "%s: remappings recorded in the status of NetworkConfiguration %s/%s", self, corev1alpha1.AgentNamespace, e.v.Peer.ClusterID)
	}
	switch {
	case changed && ta != nil:
		fmt.Fprintf(s.Out, "The network link between %s and %s is recorded; their gateways set up the tunnel (see `annexctl status`).\n", aid.ClusterID, bid.ClusterID)
	case changed:
		fmt.Fprintf(s.Out, "The network link between %s and %s is recorded (the address translation each side uses); no packets flow until both run a gateway and this command runs again.\n", aid.ClusterID, bid.ClusterID)
	default:
		fmt.Fprintf(s.Out, "The network link between %s and %s was already recorded; nothing changed.\n", aid.ClusterID, bid.ClusterID)
	}
	return changed, nil
}

// linkPurpose is what the link of c with peer is for: purpose when set,
// else LinkPurposePeering when c has a ForeignCluster for peer (the link
// then lives only as long as that peering: see internal/controller/linkgc)
// and LinkPurposeDirect when it has none.
func linkPurpose(ctx context.Context, c *cli.Cluster, peer, purpose string) (string, error) {
	if purpose != "" {
		return purpose, nil
	}
	fcs := &corev1alpha1.ForeignClusterList{}
	if err := c.Client.List(ctx, fcs); err != nil {
		return "", fmt.Errorf("list ForeignClusters (does this cluster peer with %s?): %w", peer, c.Unreachable(err))
	}
	for i := range fcs.Items {
		if fcs.Items[i].Spec.ClusterID == peer {
			return networkingv1alpha1.LinkPurposePeering, nil
		}
	}
	return networkingv1alpha1.LinkPurposeDirect, nil
}

// describePurpose says what a link made for purpose is.
func describePurpose(purpose string) string {
	if purpose == networkingv1alpha1.LinkPurposeDirect {
		return "for direct connections"
	}
	return "for the peering, removed with it"
}

// side lists the NetworkConfigurations of one cluster and checks that the
// one for peer, if any, is really for peer.
func side(ctx context.Context, c *cli.Cluster, id identity.Identity, peer string) (Side, error) {
	list := &networkingv1alpha1.NetworkConfigurationList{}
	if err := c.Client.List(ctx, list, client.InNamespace(corev1alpha1.AgentNamespace)); err != nil {
		return Side{}, listError(c, id, err)
	}
	for _, nc := range list.Items {
		if nc.Name == peer && nc.Spec.RemoteClusterID != peer {
			return Side{}, fmt.Errorf("%s: NetworkConfiguration %s/%s is for cluster %q, not %q; delete it first", id.ClusterID, nc.Namespace, nc.Name, nc.Spec.RemoteClusterID, peer)
		}
	}
	nodes := &corev1.NodeList{}
	if err := c.Client.List(ctx, nodes); err != nil {
		return Side{}, fmt.Errorf("%s: list nodes (a peer's CIDRs must hold none of their addresses): %w", id.ClusterID, c.Unreachable(err))
	}
	return Side{Identity: id, Configs: list.Items, Nodes: netview.NodeAddresses(nodes.Items)}, nil
}

func listError(c *cli.Cluster, id identity.Identity, err error) error {
	if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
		return fmt.Errorf("%s: the NetworkConfiguration API (networking.annex.dev) is not installed: run `annexctl install` there again", id.ClusterID)
	}
	return fmt.Errorf("%s: list NetworkConfigurations: %w", id.ClusterID, c.Unreachable(err))
}

// writeStatus patches the remappings and conditions into the status of the
// NetworkConfiguration of v, leaving other conditions (the gateway's) alone.
func writeStatus(ctx context.Context, c client.Client, v, reverse View) (bool, error) {
	changed := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		nc := &networkingv1alpha1.NetworkConfiguration{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: v.Peer.ClusterID}, nc); err != nil {
			return err
		}
		orig := nc.DeepCopy()
		remote, local := v.Remapped(), reverse.Remapped()
		nc.Status.RemappedRemote, nc.Status.RemappedLocal = &remote, &local
		v.setConditions(&nc.Status.Conditions, nc.Generation)
		if equality.Semantic.DeepEqual(orig.Status, nc.Status) {
			changed = false
			return nil
		}
		changed = true
		return c.Status().Patch(ctx, nc, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	})
	return changed, err
}

// Disconnect deletes the NetworkConfigurations that link a and b, on both
// sides, and waits until they are gone. It succeeds if there were none.
func Disconnect(ctx context.Context, s cli.IOStreams, a, b *cli.Cluster, o Options) error {
	return disconnect(ctx, s, a, b, o, true)
}

// Unlink is Disconnect for unpeer, which removes the link first and the
// peering after it: it does not note that the clusters still peer.
func Unlink(ctx context.Context, s cli.IOStreams, a, b *cli.Cluster, o Options) error {
	return disconnect(ctx, s, a, b, o, false)
}

// disconnect is Disconnect; notePeering says whether to note a peering
// that remains.
func disconnect(ctx context.Context, s cli.IOStreams, a, b *cli.Cluster, o Options, notePeering bool) error {
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	aid, bid, err := cli.Identities(ctx, a, b, "cluster of --kubeconfig", "cluster of --remote-kubeconfig", "be connected with")
	if err != nil {
		return err
	}
	fmt.Fprintf(s.Out, "Disconnecting the networks of %s and %s\n", aid.ClusterID, bid.ClusterID)
	deleted := false
	for _, e := range []struct {
		c          *cli.Cluster
		self, peer identity.Identity
	}{{a, aid, bid}, {b, bid, aid}} {
		key := client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: e.peer.ClusterID}
		what := fmt.Sprintf("%s: NetworkConfiguration %s", e.self.ClusterID, key)
		nc := &networkingv1alpha1.NetworkConfiguration{}
		nc.Namespace, nc.Name = key.Namespace, key.Name
		err := e.c.Client.Delete(ctx, nc)
		switch {
		case apierrors.IsNotFound(err):
			s.Step("%s does not exist", what)
			continue
		case err != nil && meta.IsNoMatchError(err):
			return listError(e.c, e.self, err)
		case err != nil:
			return fmt.Errorf("delete %s: %w", what, err)
		}
		if err := cli.Poll(ctx, 250*time.Millisecond, pollTimeout(ctx), what+" to be deleted", func(ctx context.Context) (bool, error) {
			err := e.c.Client.Get(ctx, key, nc)
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		}); err != nil {
			return err
		}
		deleted = true
		s.Step("deleted %s", what)
		if fc := (&corev1alpha1.ForeignCluster{}); notePeering && e.c.Client.Get(ctx, client.ObjectKey{Name: e.peer.ClusterID}, fc) == nil {
			s.Step("note: %s still peers with %s; pods offloaded between them cannot reach each other until `annexctl network connect` is run again", e.self.ClusterID, e.peer.ClusterID)
		}
	}
	if deleted {
		fmt.Fprintf(s.Out, "The networks of %s and %s are disconnected.\n", aid.ClusterID, bid.ClusterID)
	} else {
		fmt.Fprintf(s.Out, "The networks of %s and %s were not connected; nothing changed.\n", aid.ClusterID, bid.ClusterID)
	}
	return nil
}

// pollTimeout is what is left of ctx, or a minute.
func pollTimeout(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return time.Until(d)
	}
	return time.Minute
}
