package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/annexhq/annex/internal/cli"
	"github.com/annexhq/annex/internal/cli/peer"
	"github.com/annexhq/annex/internal/cli/status"
	"github.com/annexhq/annex/internal/cli/unpeer"
)

// connectTimeout bounds the first contact with each cluster.
const connectTimeout = 10 * time.Second

func newPeerCommand(s cli.IOStreams) *cobra.Command {
	o := peer.DefaultOptions()
	var kubeconfig, remote string
	cmd := &cobra.Command{
		Use:   "peer --kubeconfig CONSUMER --remote-kubeconfig PROVIDER",
		Short: "Let a consumer cluster use a provider cluster's resources",
		Long: `peer establishes a peering in which the consumer (--kubeconfig) uses resources
of the provider (--remote-kubeconfig); it needs admin access to both. On the provider
it creates the tenant namespace annex-tenant-<consumer> with a ServiceAccount whose
Role allows only what offloading needs in that consumer's own namespaces. On the
consumer it creates the peer namespace annex-peer-<provider>, where the consumer
keeps its own objects for the provider (out of the provider's reach): a kubeconfig
Secret with a bound, expiring token of that ServiceAccount, which its agent renews,
the ResourceSlice and the VirtualNode. ForeignClusters appear on both sides, a
ResourceSlice is requested and accepted (or denied, with the reason) by the
provider's agent, and a VirtualNode (Node annex-<provider>) is created on the
consumer. Running it again changes nothing.`,
		Example: `  annexctl peer --kubeconfig alpha.kubeconfig --remote-kubeconfig beta.kubeconfig --cpu 8 --memory 16Gi`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if remote == "" {
				return fmt.Errorf("--remote-kubeconfig (the provider's kubeconfig) is required")
			}
			if err := o.Validate(); err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			c, err := cli.Connect(ctx, kubeconfig, connectTimeout)
			if err != nil {
				return fmt.Errorf("consumer: %w", err)
			}
			p, err := cli.Connect(ctx, remote, connectTimeout)
			if err != nil {
				return fmt.Errorf("provider: %w", err)
			}
			return peer.Run(ctx, s, c, p, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "the consumer's kubeconfig (default: $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&remote, "remote-kubeconfig", "", "the provider's kubeconfig (required)")
	f.StringVar(&o.CPU, "cpu", o.CPU, "CPU to request from the provider")
	f.StringVar(&o.Memory, "memory", o.Memory, "memory to request from the provider")
	f.StringVar(&o.Pods, "pods", o.Pods, "number of pods to request from the provider")
	f.DurationVar(&o.TokenTTL, "token-ttl", o.TokenTTL, "lifetime of the consumer's token on the provider (at least 10m; the consumer's agent renews it)")
	f.BoolVar(&o.NoNetwork, "no-network", o.NoNetwork, "do not link the two clusters' networks (see `annexctl network connect`)")
	f.StringVar(&o.RemapPool, "remap-pool", o.RemapPool, "range remapped CIDRs are allocated from when the clusters' CIDRs overlap")
	f.StringVar(&o.RemoteServer, "remote-server", "", "the provider's API server URL as the consumer's agent reaches it, if not the one in --remote-kubeconfig (e.g. the agent runs in a pod; 'annexctl sandbox status' shows the real-node sandbox's)")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up after this long")
	return cmd
}

func newUnpeerCommand(s cli.IOStreams) *cobra.Command {
	o := unpeer.Options{Timeout: 2 * time.Minute}
	lo := unpeer.LocalOptions{GracefulTimeout: 10 * time.Second, Timeout: 2 * time.Minute}
	var kubeconfig, remote string
	cmd := &cobra.Command{
		Use:   "unpeer --kubeconfig CONSUMER (--remote-kubeconfig PROVIDER | PROVIDER-CLUSTER-ID) [--force]",
		Short: "Remove a peering and everything it created",
		Long: `unpeer removes the peering in which the consumer (--kubeconfig) uses a provider.

With --remote-kubeconfig (admin access to both clusters) it removes everything on both
sides: the VirtualNode and its Node, the remote namespaces and the ResourceSlice (the
consumer's agent deletes their replicas on the provider first), the consumer's tenant
namespace on the provider with its ServiceAccount and RBAC (which revokes its token),
the network link, the credentials on the consumer and both ForeignClusters.

With the provider's cluster ID (or ForeignCluster name) instead, it needs only the
consumer's kubeconfig. It first tries the graceful path through the provider, bounded by
--graceful-timeout. If the provider does not answer, unpeer fails without changing
anything — unless --force is given: then it marks the ForeignCluster unreachable (no
component calls the provider again: finalizers are released without remote deletion,
pods on the virtual node are deleted locally and re-created elsewhere by their
controllers) and removes everything of the peering from the consumer. The provider
removes its side by itself when the consumer's heartbeat lapses.`,
		Example: `  annexctl unpeer --kubeconfig alpha.kubeconfig --remote-kubeconfig beta.kubeconfig
  annexctl unpeer --kubeconfig alpha.kubeconfig beta --force`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case remote == "" && len(args) == 0:
				return fmt.Errorf("name the provider: --remote-kubeconfig PROVIDER-KUBECONFIG, or its cluster ID as an argument")
			case remote != "" && len(args) == 1:
				return fmt.Errorf("give either --remote-kubeconfig or the provider's cluster ID, not both")
			}
			ctx, cancel := signalContext()
			defer cancel()
			c, err := cli.Connect(ctx, kubeconfig, connectTimeout)
			if err != nil {
				return fmt.Errorf("consumer: %w", err)
			}
			if remote == "" {
				return unpeer.RunLocal(ctx, s, c, args[0], lo)
			}
			p, err := cli.Connect(ctx, remote, lo.GracefulTimeout)
			if err != nil {
				if !lo.Force {
					return fmt.Errorf("provider: %w; nothing was changed (if it is gone for good, run `annexctl unpeer --kubeconfig %s PROVIDER-CLUSTER-ID --force`)", err, kubeconfig)
				}
				return fmt.Errorf("provider: %w; with --force, name the provider by its cluster ID instead of --remote-kubeconfig", err)
			}
			return unpeer.Run(ctx, s, c, p, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "the consumer's kubeconfig (default: $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&remote, "remote-kubeconfig", "", "the provider's kubeconfig (clean both sides)")
	f.BoolVar(&lo.Force, "force", false, "if the provider does not answer, remove the peering from the consumer without it")
	f.DurationVar(&lo.GracefulTimeout, "graceful-timeout", lo.GracefulTimeout, "how long to try the graceful path through the provider")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up after this long")
	cmd.PreRun = func(*cobra.Command, []string) { lo.Timeout = o.Timeout }
	return cmd
}

func newStatusCommand(s cli.IOStreams) *cobra.Command {
	var kubeconfig, output string
	cmd := &cobra.Command{
		Use:     "status",
		Aliases: []string{"info"},
		Short:   "Show this cluster's peers: role, reachability, resources, virtual node, network",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			c, err := cli.Connect(ctx, kubeconfig, connectTimeout)
			if err != nil {
				return err
			}
			r, err := status.Collect(ctx, c)
			if err != nil {
				return err
			}
			return status.Print(s.Out, r, output)
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (default: $KUBECONFIG or ~/.kube/config)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: table, json or yaml")
	return cmd
}
