package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/annexhq/annex/internal/cli"
	"github.com/annexhq/annex/internal/cli/offload"
)

func newOffloadCommand(s cli.IOStreams) *cobra.Command {
	o := offload.DefaultOptions()
	var kubeconfig string
	ns := &cobra.Command{
		Use:   "namespace NAMESPACE",
		Short: "Let a namespace's pods run on providers",
		Long: `offload namespace creates the namespace's NamespaceOffloading. The agent asks each
selected provider for a remote namespace (NAMESPACE-<this cluster's ID> by default) and
labels the namespace so that its new pods tolerate the virtual nodes of the selected
providers; the kube-scheduler then places them. Existing pods are not moved.

With --failover-release-after, pods on a provider that stays unreachable are released
(deleted here, so their controllers replace them elsewhere) after that long, once the
provider has stopped them itself after --failover-fence-after (docs/failover.md).`,
		Example: `  annexctl offload namespace shop --pod-strategy Remote
  annexctl offload namespace shop --cluster-selector 'region=eu'
  annexctl offload namespace db --failover-release-after 60s --failover-fence-after 30s`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := o.Spec(); err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			c, err := cli.Connect(ctx, kubeconfig, connectTimeout)
			if err != nil {
				return err
			}
			return offload.Run(ctx, s, c, args[0], o)
		},
	}
	f := ns.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "the consumer's kubeconfig (default: $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&o.ClusterSelector, "cluster-selector", "", "label selector over virtual node labels choosing the providers (default: all)")
	f.StringVar(&o.PodStrategy, "pod-strategy", o.PodStrategy, "where pods may run: Local, Remote or LocalAndRemote")
	f.StringVar(&o.Mapping, "mapping", o.Mapping, "remote namespace name: DefaultName (<namespace>-<cluster ID>) or EnforceSameName (<namespace>; a provider refuses it unless its agent runs with --allow-same-name-namespaces)")
	f.DurationVar(&o.ReleaseAfter, "failover-release-after", 0, "turn failover on: release the pods of a provider unreachable this long (at least --failover-fence-after + 15s; 0: off)")
	f.DurationVar(&o.FenceAfter, "failover-fence-after", o.FenceAfter, "with failover, how long a provider waits without this cluster's heartbeat before stopping the namespace's pods (at least 10s and three --consumer-heartbeat-intervals of the agent)")
	f.BoolVar(&o.Wait, "wait", o.Wait, "wait until every selected provider answered")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up waiting after this long")
	cmd := &cobra.Command{Use: "offload", Short: "Offload a namespace to providers"}
	cmd.AddCommand(ns)
	return cmd
}

func newUnoffloadCommand(s cli.IOStreams) *cobra.Command {
	var kubeconfig string
	timeout := 2 * time.Minute
	ns := &cobra.Command{
		Use:   "namespace NAMESPACE",
		Short: "Stop offloading a namespace and remove its remote namespaces",
		Long: `unoffload namespace deletes the namespace's NamespaceOffloading; the agent deletes
its remote namespaces on every provider (and with them everything offloaded there) and
removes the namespace's offloading labels.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			c, err := cli.Connect(ctx, kubeconfig, connectTimeout)
			if err != nil {
				return err
			}
			return offload.Remove(ctx, s, c, args[0], timeout)
		},
	}
	ns.Flags().StringVar(&kubeconfig, "kubeconfig", "", "the consumer's kubeconfig (default: $KUBECONFIG or ~/.kube/config)")
	ns.Flags().DurationVar(&timeout, "timeout", timeout, "give up after this long")
	cmd := &cobra.Command{Use: "unoffload", Short: "Stop offloading a namespace"}
	cmd.AddCommand(ns)
	return cmd
}
