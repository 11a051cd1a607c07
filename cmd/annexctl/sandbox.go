package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2/textlogger"
	"sigs.k8s.io/yaml"

	"github.com/annexhq/annex/internal/cli"
	"github.com/annexhq/annex/internal/cli/sandbox"
)

func newSandboxCommand(s cli.IOStreams) *cobra.Command {
	o := sandbox.Options{Dir: sandbox.DefaultDir(), TokenTTL: 7 * 24 * time.Hour, Timeout: 5 * time.Minute}
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "Run three real local clusters (alpha, beta, gamma) with Annex installed",
		Long: `sandbox runs three real Kubernetes clusters as local processes on 127.0.0.1:
alpha (the consumer), beta and gamma (providers). alpha's and gamma's pod CIDRs
overlap on purpose. Each has Annex installed and an annex-agent running as a local
process that authenticates as the agent's ServiceAccount. The Kubernetes binaries
come from 'make tools'. Each cluster's admin kubeconfig is <dir>/<cluster>/kubeconfig
and its logs are in <dir>/<cluster>/logs.

With 'up --network' (root only) the sandbox also carries real packets between
pods: see 'annexctl sandbox up --help' and 'annexctl sandbox curl --help'.
With 'up --real-nodes' (root only) each cluster also has a real node running real
containers, and Annex is installed from its image as users install it.`,
	}
	cmd.PersistentFlags().StringVar(&o.Dir, "dir", o.Dir, "directory holding the sandbox's state")

	up := &cobra.Command{
		Use:   "up",
		Short: "Start the sandbox (does nothing if it is already up)",
		Long: `up starts the three clusters, installs Annex in each and runs their agents. If the
sandbox is already up it changes nothing (it restarts stopped network processes of a
sandbox started with --network).

--network (needs root) adds a real-packet network made of network namespaces on
this machine; nothing leaves it and the host's own namespace gets no address:
  annex-sbx-ul          a bridge joining the routers (the underlay, 192.168.77.0/24)
  annex-sbx-<cluster>   the cluster's router: ul0 with 192.168.77.1 (alpha), .2 (beta),
                        .3 (gamma); its annex-gateway runs there (log <dir>/<cluster>/gateway.log,
                        configuration <dir>/<cluster>/gateway/config.json, written by the agent)
  annex-sbx-<cluster>-<uid>
                        a pod labelled annex-sandbox-netns=true on a kwok node: eth0
                        with the pod's IP, default route via its router, an HTTP echo server
                        on port 8080 answering with its cluster and pod name
The pods' namespaces are kept in step by a background 'annexctl sandbox pod-network'
(log <dir>/pod-network.log). 'annexctl sandbox curl' sends requests from a pod.

--real-nodes (needs root, containerd, runc and the CNI plugins: 'make node-deps')
gives each cluster, beside its kwok nodes, one real node: a kubelet, containerd and
kube-proxy in namespaces of their own (<cluster>-node-0, node network 172.31.1.0/24
for alpha, .2 for beta, .3 for gamma), with the images of 'make image' (--images)
imported. --nodes N (1 to 4, with --real-nodes) gives each cluster N real nodes
(<cluster>-node-0 to -<N-1>) on the cluster's node network. The kwok nodes are
tainted kwok.x-k8s.io/node=fake:NoSchedule, so pods run real containers unless they
tolerate it. Annex is installed with 'annexctl install --image': the agent runs as a
Deployment on real node 0, annex-gateway as its second container on the node's host
network. Every real node stands on the underlay annex-sbx-ul (where the gateways
meet) with an address of its own: node 0 has 192.168.77.1 (alpha), .2 (beta), .3
(gamma), node j>=1 of cluster i (alpha 0, beta 1, gamma 2) 192.168.77.<16*(i+1)+j>
(alpha's node 1 .17, beta's .33, gamma's .49); move a gateway to another node by
running 'annexctl install' again with its --gateway-node and --gateway-endpoint.
'annexctl sandbox status' lists the nodes and addresses. Every node routes the other
clusters' API addresses to their node 0, so peer with the URL in
<dir>/<cluster>/peer-server (also in 'annexctl sandbox status'):
  annexctl peer --kubeconfig <dir>/alpha/kubeconfig --remote-kubeconfig <dir>/beta/kubeconfig \
    --remote-server "$(cat <dir>/beta/peer-server)"`,
		Example: `  sudo annexctl sandbox up --network
  sudo annexctl sandbox up --real-nodes --nodes 2
  kubectl --kubeconfig ~/.annex/sandbox/gamma/kubeconfig label pod web-0 annex-sandbox-netns=true
  sudo annexctl sandbox curl gamma default/web-0 http://10.200.0.5:8080/`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("nodes") && o.Nodes == 0 {
				// Options.Nodes 0 means the default; given, it is wrong.
				return fmt.Errorf("--nodes 0: the real-node sandbox runs 1 to %d real nodes per cluster", sandbox.MaxRealNodes)
			}
			ctx, cancel := signalContext()
			defer cancel()
			return sandbox.Up(ctx, s, o)
		},
	}
	up.Flags().StringVar(&o.AgentBinary, "agent-binary", sandbox.DefaultAgentBinary(), "annex-agent executable to run for each cluster")
	up.Flags().StringArrayVar(&o.AgentArgs, "agent-arg", nil, "extra flag for every agent (repeatable), e.g. --agent-arg=--v=4")
	up.Flags().DurationVar(&o.TokenTTL, "token-ttl", o.TokenTTL, "lifetime of the agents' ServiceAccount tokens")
	up.Flags().BoolVar(&o.Network, "network", false, "also run the real-packet network: router namespaces with annex-gateway, pod namespaces with echo servers (needs root)")
	up.Flags().StringVar(&o.GatewayBinary, "gateway-binary", sandbox.DefaultGatewayBinary(), "annex-gateway executable to run in each router namespace (with --network)")
	up.Flags().BoolVar(&o.RealNodes, "real-nodes", false, "give each cluster a real node, or --nodes of them (kubelet, containerd, kube-proxy), and install Annex from its image (needs root and a container runtime)")
	up.Flags().IntVar(&o.Nodes, "nodes", 0, fmt.Sprintf("real nodes per cluster, 1 to %d (with --real-nodes; default 1): the gateway goes on node 0, the others are where it can be moved", sandbox.MaxRealNodes))
	up.Flags().StringVar(&o.ImagesDir, "images", sandbox.DefaultImagesDir(), "directory with the image tarballs of 'make image' (pause.tar, echo.tar, annex-agent.tar), with --real-nodes")

	down := &cobra.Command{
		Use:   "down",
		Short: "Stop every sandbox process and remove its state (and the network namespaces of --network)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			return sandbox.Down(ctx, s, o)
		},
	}

	var output string
	status := &cobra.Command{
		Use:   "status",
		Short: "Show the sandbox's clusters, kubeconfigs and process health",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			sts, err := sandbox.Status(ctx, o)
			if err != nil {
				return err
			}
			network := sandbox.GetNetworkStatus(o)
			doc := map[string]any{"dir": o.Dir, "clusters": sts}
			if network != nil {
				doc["network"] = network
			}
			switch output {
			case "json":
				enc := json.NewEncoder(s.Out)
				enc.SetIndent("", "  ")
				return enc.Encode(doc)
			case "yaml":
				data, err := yaml.Marshal(doc)
				if err != nil {
					return err
				}
				_, err = s.Out.Write(data)
				return err
			case "", "table":
				tw := tabwriter.NewWriter(s.Out, 0, 4, 2, ' ', 0)
				gwHeader := ""
				if network != nil {
					gwHeader = "GATEWAY\t"
				}
				if sandbox.RealNodesEnabled(o) {
					gwHeader = "PEER SERVER\t"
				}
				fmt.Fprintf(tw, "CLUSTER\tAPI SERVER\tCOMPONENTS\tAGENT\t%sKUBECONFIG\n", gwHeader)
				for _, st := range sts {
					comps := ""
					for i, c := range st.Components {
						if i > 0 {
							comps += ","
						}
						comps += c.Name + "=" + string(c.State)
					}
					agent := "not running"
					switch {
					case st.Agent.Ready:
						agent = "ready"
					case st.Agent.Running:
						agent = "not ready"
					}
					gw := ""
					if st.PeerServer != "" {
						gw = st.PeerServer + "\t"
					}
					if st.Gateway != nil {
						gw = "not running\t"
						if st.Gateway.Running {
							gw = fmt.Sprintf("running in %s on %s\t", st.Gateway.Netns, st.Gateway.Address)
						}
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s%s\n", st.Name, st.APIServer, comps, agent, gw, st.Kubeconfig)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				sandbox.PrintRealNodes(s.Out, sts)
				if network != nil {
					state := "not running"
					if network.PodNetwork.Running {
						state = fmt.Sprintf("running (pid %d)", network.PodNetwork.PID)
					}
					fmt.Fprintf(s.Out, "Network: underlay %s; pod network %s, log %s\n", network.Underlay, state, network.PodNetwork.Log)
				}
				return nil
			default:
				return fmt.Errorf("unknown output format %q (use table, json or yaml)", output)
			}
		},
	}
	status.Flags().StringVarP(&output, "output", "o", "", "output format: table, json or yaml")

	action := func(name, short string) *cobra.Command {
		return &cobra.Command{
			Use:       name + " CLUSTER",
			Short:     short,
			Args:      cobra.ExactArgs(1),
			ValidArgs: []string{"alpha", "beta", "gamma"},
			RunE: func(cmd *cobra.Command, args []string) error {
				ctx, cancel := signalContext()
				defer cancel()
				return sandbox.Act(ctx, s, o, args[0], name)
			},
		}
	}
	var curlTimeout time.Duration
	curl := &cobra.Command{
		Use:   "curl CLUSTER NAMESPACE/POD URL",
		Short: "GET a URL from inside a pod's network namespace (sandbox up --network)",
		Long: `curl sends an HTTP GET from inside the network namespace of a pod of a sandbox
started with --network, and prints the body. The pod must carry the label
annex-sandbox-netns=true and run on a kwok node of CLUSTER (an offloaded pod's
namespace is on its provider cluster). Every such pod runs an echo server on port 8080
that answers with JSON naming its cluster, namespace, pod, IP and the address the
request came from. Use IP addresses in URL. Needs root.`,
		Example:   `  sudo annexctl sandbox curl alpha default/client http://10.201.0.4:8080/`,
		Args:      cobra.ExactArgs(3),
		ValidArgs: []string{"alpha", "beta", "gamma"},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			return sandbox.Curl(ctx, s, o, args[0], args[1], args[2], curlTimeout)
		},
	}
	curl.Flags().DurationVar(&curlTimeout, "timeout", 5*time.Second, "give up after this long")

	podNetwork := &cobra.Command{
		Use:    "pod-network",
		Short:  "Keep the pods' network namespaces in step (run by sandbox up --network)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			return sandbox.RunPodNetwork(ctx, textlogger.NewLogger(textlogger.NewConfig()), o)
		},
	}

	cmd.AddCommand(up, down, status, curl, podNetwork,
		action("kill", "Kill a cluster's API server with SIGKILL (a dead peer)"),
		action("pause", "Stop a cluster's API server with SIGSTOP (a hung peer)"),
		action("resume", "Restart a killed API server or continue a paused one"),
	)
	return cmd
}
