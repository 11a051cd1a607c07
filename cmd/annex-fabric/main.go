// Command annex-fabric is Annex's node agent: one per node (the DaemonSet
// `annexctl install` runs with a gateway), it routes the peers' address
// ranges from its node to the gateway node and exempts that traffic from
// masquerading, and reports what it did in the FabricNode of its node. See
// internal/fabricagent, internal/fabric and docs/network.md ("The fabric").
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/fabric"
	"github.com/annexhq/annex/internal/fabricagent"
)

const usage = `annex-fabric programs one node so that its pods reach the peer clusters
through the gateway node: for every network link the cluster's gateway
programs, a route of the peer's pod and external CIDRs (as this cluster sees
them) and of this cluster's external CIDR via the gateway node's address
(routing protocol %d in the main table), and a rule in the nftables table
"ip %s" that exempts pod traffic to those ranges from the CNI's or
kube-proxy's masquerading. The gateway node itself is left to annex-gateway.
While no gateway runs, the ranges get unreachable routes: traffic to the
peers is refused, never sent out of the node's default route.

It follows the NetworkConfigurations, the cluster identity and the agent's
pods (the gateway node is the node of the pod whose %q container runs),
applies everything again every %s, and reports in the FabricNode
annex-system/<node> (kubectl -n annex-system get fabricnodes; annexctl
status). On SIGTERM or SIGINT it removes every route and rule it added;
after a SIGKILL the next start removes what is no longer wanted.

Runs on the node's host network with NET_ADMIN. --clean removes everything
and exits.

Flags:
`

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "annex-fabric:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := pflag.NewFlagSet("annex-fabric", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, usage, fabric.RouteProtocol, fabric.TableName, fabricagent.GatewayContainer, fabricagent.Resync)
		fs.PrintDefaults()
	}
	node := fs.String("node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	namespace := fs.String("namespace", corev1alpha1.AgentNamespace, "the namespace Annex is installed in")
	health := fs.String("health-probe-bind-address", ":9882", "where /healthz and /readyz are served (the host network: keep clear of the kubelet's and the agent's ports)")
	clean := fs.Bool("clean", false, "remove every route and rule of the fabric on this node and exit")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	log := textlogger.NewLogger(textlogger.NewConfig())
	ctrl.SetLogger(log)
	dp := fabric.New(log)
	if *clean {
		return dp.Clean()
	}
	if *node == "" {
		return errors.New("--node-name (or $NODE_NAME) is required")
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	mgr, err := fabricagent.NewManager(cfg, *namespace, *node, *health)
	if err != nil {
		return err
	}
	if err := fabricagent.New(mgr.GetClient(), mgr.GetAPIReader(), *namespace, *node, dp, clock.RealClock{}).SetupWithManager(mgr); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log.Info("Starting", "node", *node, "namespace", *namespace)
	runErr := mgr.Start(ctx)
	if err := dp.Clean(); err != nil {
		return errors.Join(runErr, fmt.Errorf("clean-up: %w", err))
	}
	log.Info("Removed the node's routes and rules")
	return runErr
}
