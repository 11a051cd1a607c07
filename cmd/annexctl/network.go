package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/annexhq/annex/internal/cli"
	"github.com/annexhq/annex/internal/cli/network"
)

func newNetworkCommand(s cli.IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "network",
		Short: "Connect or disconnect the networks of two clusters",
		Long: `network manages network links between clusters. A link is a pair of
NetworkConfigurations (annex-system/<remote cluster ID> on each side) holding both
clusters' pod and external CIDRs and how each side remaps the other's CIDRs when
they overlap; each cluster's gateway implements it. Any two clusters can be
linked: a consumer and its provider (peer does this unless --no-network), or two
providers, so that their pods talk directly (Services annotated
annex.dev/use-direct-connections=true).`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newNetworkConnectCommand(s), newNetworkDisconnectCommand(s))
	return cmd
}

func newNetworkConnectCommand(s cli.IOStreams) *cobra.Command {
	o := network.DefaultOptions()
	var kubeconfig, remote string
	cmd := &cobra.Command{
		Use:   "connect --kubeconfig A --remote-kubeconfig B",
		Short: "Link the networks of two clusters",
		Long: `connect reads both clusters' identities (pod, service and external CIDRs) and
their existing NetworkConfigurations, and decides how each side maps the other's
pod and external CIDRs: a CIDR that overlaps one of the side's own CIDRs, or a
CIDR of another peer as that side already sees it, is remapped to the lowest free
block of the same size in --remap-pool; any other CIDR is used as it is. It then
writes a NetworkConfiguration on each side (spec by server-side apply, remappings
and conditions in its status) and prints the mappings. Mappings already recorded
are kept, so running it again changes nothing. It needs admin access to both.

Each side records what its link is for (label annex.dev/link-purpose): "peering"
when that side has a ForeignCluster for the other cluster, "direct" when it has
none (two providers linked for direct connections). A peering's link goes with the
peering: the agent stops programming it and deletes it once the ForeignCluster is
gone. Run connect again on a link made before links recorded their purpose.`,
		Example: `  annexctl network connect --kubeconfig beta.kubeconfig --remote-kubeconfig gamma.kubeconfig`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if remote == "" {
				return fmt.Errorf("--remote-kubeconfig (the other cluster's kubeconfig) is required")
			}
			if err := o.Validate(); err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			a, err := cli.Connect(ctx, kubeconfig, connectTimeout)
			if err != nil {
				return err
			}
			b, err := cli.Connect(ctx, remote, connectTimeout)
			if err != nil {
				return err
			}
			return network.Connect(ctx, s, a, b, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "one cluster's kubeconfig (default: $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&remote, "remote-kubeconfig", "", "the other cluster's kubeconfig (required)")
	f.StringVar(&o.Pool, "remap-pool", o.Pool, "CIDR from which remapped CIDRs are allocated when two clusters' CIDRs overlap")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up after this long")
	return cmd
}

func newNetworkDisconnectCommand(s cli.IOStreams) *cobra.Command {
	o := network.DefaultOptions()
	var kubeconfig, remote string
	cmd := &cobra.Command{
		Use:   "disconnect --kubeconfig A --remote-kubeconfig B",
		Short: "Remove the network link between two clusters",
		Long: `disconnect deletes the NetworkConfigurations that link the two clusters, on both
sides, and waits until they are gone. Pods offloaded between the two clusters
can no longer reach each other until they are connected again.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if remote == "" {
				return fmt.Errorf("--remote-kubeconfig (the other cluster's kubeconfig) is required")
			}
			ctx, cancel := signalContext()
			defer cancel()
			a, err := cli.Connect(ctx, kubeconfig, connectTimeout)
			if err != nil {
				return err
			}
			b, err := cli.Connect(ctx, remote, connectTimeout)
			if err != nil {
				return err
			}
			return network.Disconnect(ctx, s, a, b, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "one cluster's kubeconfig (default: $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&remote, "remote-kubeconfig", "", "the other cluster's kubeconfig (required)")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up after this long")
	return cmd
}
