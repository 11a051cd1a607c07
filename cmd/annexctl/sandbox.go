package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
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
and its logs are in <dir>/<cluster>/logs.`,
	}
	cmd.PersistentFlags().StringVar(&o.Dir, "dir", o.Dir, "directory holding the sandbox's state")

	up := &cobra.Command{
		Use:   "up",
		Short: "Start the sandbox (does nothing if it is already up)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			return sandbox.Up(ctx, s, o)
		},
	}
	up.Flags().StringVar(&o.AgentBinary, "agent-binary", sandbox.DefaultAgentBinary(), "annex-agent executable to run for each cluster")
	up.Flags().StringArrayVar(&o.AgentArgs, "agent-arg", nil, "extra flag for every agent (repeatable), e.g. --agent-arg=--v=4")
	up.Flags().DurationVar(&o.TokenTTL, "token-ttl", o.TokenTTL, "lifetime of the agents' ServiceAccount tokens")

	down := &cobra.Command{
		Use:   "down",
		Short: "Stop every sandbox process and remove its state",
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
			switch output {
			case "json":
				enc := json.NewEncoder(s.Out)
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"dir": o.Dir, "clusters": sts})
			case "yaml":
				data, err := yaml.Marshal(map[string]any{"dir": o.Dir, "clusters": sts})
				if err != nil {
					return err
				}
				_, err = s.Out.Write(data)
				return err
			case "", "table":
				tw := tabwriter.NewWriter(s.Out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "CLUSTER\tAPI SERVER\tCOMPONENTS\tAGENT\tKUBECONFIG")
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
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", st.Name, st.APIServer, comps, agent, st.Kubeconfig)
				}
				return tw.Flush()
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
	cmd.AddCommand(up, down, status,
		action("kill", "Kill a cluster's API server with SIGKILL (a dead peer)"),
		action("pause", "Stop a cluster's API server with SIGSTOP (a hung peer)"),
		action("resume", "Restart a killed API server or continue a paused one"),
	)
	return cmd
}
