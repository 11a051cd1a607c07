package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/annexhq/annex/internal/cli"
	"github.com/annexhq/annex/internal/cli/install"
	"github.com/annexhq/annex/internal/cli/uninstall"
	"github.com/annexhq/annex/internal/version"
)

func newRootCommand(s cli.IOStreams) *cobra.Command {
	root := &cobra.Command{
		Use:   "annexctl",
		Short: "Borrow capacity from peer Kubernetes clusters",
		Long: `annexctl installs Annex into Kubernetes clusters, peers a consumer cluster with
provider clusters (each provider appears as a virtual node), offloads namespaces,
and runs a local sandbox of three real clusters for trying it out.`,
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(s.Out)
	root.SetErr(s.ErrOut)
	root.AddCommand(newInstallCommand(s), newUninstallCommand(s), newPeerCommand(s), newUnpeerCommand(s), newStatusCommand(s), newOffloadCommand(s), newUnoffloadCommand(s), newNetworkCommand(s), newSandboxCommand(s))
	return root
}

// signalContext is cancelled on SIGINT/SIGTERM so long operations stop cleanly.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func newInstallCommand(s cli.IOStreams) *cobra.Command {
	o := install.DefaultOptions()
	var kubeconfig string
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Install Annex (CRDs, RBAC, identity, agent) into a cluster",
		Long: `install server-side applies Annex's CustomResourceDefinitions, the annex-system
namespace, the agent's ServiceAccount and RBAC, the cluster identity ConfigMap
(cluster ID and pod/service/external CIDRs) and, unless --local-agent is set, the
annex-agent Deployment, and the admission policies that hold this cluster's
tenants to what they may ask for. Running it again changes nothing. It refuses
to install over a different Annex version or to change an installed cluster's
ID.

These objects are those of the Helm chart charts/annex, built into annexctl:
install renders it with its flags as the chart's values (no Helm release is
made) and applies the result. Installing with Helm instead
(helm install annex charts/annex --namespace default --set clusterID=...) gives
the same objects; use one or the other on a cluster (docs/install.md).

` + install.PolicyHelp,
		Example: `  annexctl install --kubeconfig alpha.kubeconfig --cluster-id alpha --pod-cidr 10.200.0.0/16`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			c, err := cli.Connect(ctx, kubeconfig, 15*time.Second)
			if err != nil {
				return err
			}
			return install.Run(ctx, s, c, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (default: $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&o.ClusterID, "cluster-id", o.ClusterID, "this cluster's ID, a DNS label of at most 32 characters (default: the installed one, else derived from kube-system's UID)")
	f.StringVar(&o.PodCIDR, "pod-cidr", o.PodCIDR, "the cluster's pod CIDR")
	f.StringVar(&o.ServiceCIDR, "service-cidr", o.ServiceCIDR, "the cluster's service CIDR")
	f.StringVar(&o.ExternalCIDR, "external-cidr", o.ExternalCIDR, "CIDR from which this cluster gives addresses to remote pods it exposes to its peers")
	f.BoolVar(&o.LocalAgent, "local-agent", o.LocalAgent, "do not deploy the agent: it runs as a local process (as in the sandbox)")
	f.StringVar(&o.Image, "image", o.Image, "annex-agent container image: `make image` writes annex.dev/annex-agent:<version> as an OCI archive to import into the nodes (ctr -n k8s.io images import), or build the repository's Dockerfile")
	f.StringVar(&o.ImagePullPolicy, "image-pull-policy", o.ImagePullPolicy, "pull policy of the agent's containers: Always, IfNotPresent or Never (IfNotPresent suits images imported into the nodes' container runtime)")
	f.StringVar(&o.GatewayEndpoint, "gateway-endpoint", "", "run annex-gateway in the agent's pod, on the host network of the gateway node, whose IPv4 address this is: the peers' gateways send their UDP (51820 and up) there (the node needs IPv4 forwarding; the annex-fabric DaemonSet routes the peers' ranges from every other node to it: docs/network.md)")
	f.StringVar(&o.GatewayNode, "gateway-node", "", "the node the agent and its gateway run on (with --gateway-endpoint; default: any)")
	f.StringVar(&o.AgentCPURequest, "agent-cpu-request", o.AgentCPURequest, "CPU request of the agent container (it has no CPU limit, so that bursts are not throttled)")
	f.StringVar(&o.AgentMemoryRequest, "agent-memory-request", o.AgentMemoryRequest, "memory request of the agent container")
	f.StringVar(&o.AgentMemoryLimit, "agent-memory-limit", o.AgentMemoryLimit, "memory limit of the agent container (empty: the chart's default); the agent gives the Go runtime 90% of it as a soft limit (about 170 MiB are used at 5000 offloaded pods: docs/bench.md)")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up after this long")
	return cmd
}

func newUninstallCommand(s cli.IOStreams) *cobra.Command {
	o := uninstall.Options{Timeout: 2 * time.Minute}
	var kubeconfig string
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove Annex from a cluster",
		Long: `uninstall deletes the annex-agent, its RBAC, the annex-system namespace and Annex's
CustomResourceDefinitions, and waits until they are gone; with a gateway, the
annex-fabric pods remove their routes and rules from every node as they go. It
refuses while the cluster still has peerings or offloaded namespaces (their
NamespaceOffloadings carry the agent's finalizer) unless --force is given.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			c, err := cli.Connect(ctx, kubeconfig, 15*time.Second)
			if err != nil {
				return err
			}
			return uninstall.Run(ctx, s, c, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (default: $KUBECONFIG or ~/.kube/config)")
	f.BoolVar(&o.Force, "force", false, "uninstall even if peerings exist (the peers are not told) or namespaces are offloaded (their NamespaceOffloadings are deleted, and their finalizers removed after 30 s)")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up after this long")
	return cmd
}
