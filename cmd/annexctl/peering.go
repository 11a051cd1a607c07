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
Role allows only what offloading needs in that consumer's own namespaces. The
consumer gets a kubeconfig Secret with a bound, expiring token of that
ServiceAccount, which its agent renews. ForeignClusters appear on both sides, a
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
	f.BoolVar(&o.NoNetwork, "no-network", o.NoNetwork, "do not link the two clusters' networks")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up after this long")
	return cmd
}

func newUnpeerCommand(s cli.IOStreams) *cobra.Command {
	o := unpeer.Options{Timeout: 2 * time.Minute}
	var kubeconfig, remote string
	cmd := &cobra.Command{
		Use:   "unpeer --kubeconfig CONSUMER --remote-kubeconfig PROVIDER",
		Short: "Remove a peering and everything it created on both clusters",
		Long: `unpeer removes the peering in which the consumer (--kubeconfig) uses the provider
(--remote-kubeconfig): the VirtualNode and its Node, the ResourceSlice (the
consumer's agent deletes its replica on the provider first), the consumer's
namespaces on the provider, its tenant namespace with the ServiceAccount and RBAC
(which revokes its token), the credentials on the consumer and both
ForeignClusters. It waits until they are gone.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if remote == "" {
				return fmt.Errorf("--remote-kubeconfig (the provider's kubeconfig) is required")
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
			return unpeer.Run(ctx, s, c, p, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "the consumer's kubeconfig (default: $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&remote, "remote-kubeconfig", "", "the provider's kubeconfig (required)")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up after this long")
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
