// Package sandbox owns `annexctl sandbox`: three real local clusters (alpha,
// the consumer; beta and gamma, providers), each with Annex installed and an
// annex-agent running as a local process that authenticates as the agent's
// ServiceAccount. State lives in one directory so that later commands (status,
// kill, pause, resume, down) can act on the processes that `up` started.
//
// With --network (root only) the sandbox also gets a real-packet network
// (internal/sandboxnet): a router network namespace per cluster running
// annex-gateway, and a background `annexctl sandbox pod-network` process that
// gives pods labelled annex-sandbox-netns=true namespaces of their own
// with an echo server (`annexctl sandbox curl`).
//
// With --real-nodes (root only; realnodes.go) each cluster also gets a real
// node, and Annex is installed from its image instead of running as local
// processes: the agent as a Deployment on the real node, the gateway beside
// it on the node's host network.
package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/annexhq/annex/internal/cli"
	"github.com/annexhq/annex/internal/cli/install"
	"github.com/annexhq/annex/internal/localcluster"
	"github.com/annexhq/annex/internal/sandboxnet"
)

// Spec describes one sandbox cluster.
type Spec struct {
	Name         string
	PodCIDR      string
	ServiceCIDR  string
	ExternalCIDR string
	Nodes        int
}

// Clusters are the sandbox's clusters. alpha's and gamma's pod CIDRs overlap
// on purpose, so that remapping is always exercised; beta's does not.
var Clusters = []Spec{
	{Name: "alpha", PodCIDR: "10.200.0.0/16", ServiceCIDR: "10.96.0.0/16", ExternalCIDR: "10.70.0.0/16", Nodes: 2},
	{Name: "beta", PodCIDR: "10.201.0.0/16", ServiceCIDR: "10.96.0.0/16", ExternalCIDR: "10.71.0.0/16", Nodes: 2},
	{Name: "gamma", PodCIDR: "10.200.0.0/16", ServiceCIDR: "10.96.0.0/16", ExternalCIDR: "10.72.0.0/16", Nodes: 2},
}

// Options locate the sandbox and its agent binary.
type Options struct {
	Dir         string
	AgentBinary string
	AgentArgs   []string
	TokenTTL    time.Duration
	Timeout     time.Duration
	// Network asks for the real-packet network (needs root).
	Network bool
	// GatewayBinary is the annex-gateway executable (with Network).
	GatewayBinary string
	// RealNodes gives each cluster a real node and installs Annex from
	// its image (realnodes.go); needs root and a container runtime.
	RealNodes bool
	// Nodes is the number of real nodes per cluster with RealNodes,
	// 1..MaxRealNodes; 0 means 1. Annex's gateway goes on node 0.
	Nodes int
	// ImagesDir holds the image tarballs of `make image` (with RealNodes).
	ImagesDir string
}

// DefaultDir is $HOME/.annex/sandbox.
func DefaultDir() string {
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".annex", "sandbox")
}

// DefaultAgentBinary is annex-agent next to the running executable, if there is one.
func DefaultAgentBinary() string {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "annex-agent")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "annex-agent"
}

// ClusterDir is where cluster name keeps its state.
func (o Options) ClusterDir(name string) string { return filepath.Join(o.Dir, name) }

// Up starts the sandbox. If it is already up it says so and changes nothing,
// except that a sandbox started with --network gets its stopped gateways and
// pod-network process restarted.
func Up(ctx context.Context, s cli.IOStreams, o Options) error {
	if err := validateNodes(o); err != nil {
		return err
	}
	if o.Network {
		if err := checkNetwork(o); err != nil {
			return err
		}
	}
	if o.RealNodes {
		dir, err := filepath.Abs(o.ImagesDir)
		if err != nil {
			return err
		}
		o.ImagesDir = dir
		if err := checkRealNodes(o); err != nil {
			return err
		}
	}
	if sts, err := Status(ctx, o); err == nil {
		var bad []string
		for _, st := range sts {
			if !st.Healthy() {
				bad = append(bad, st.Name)
			}
		}
		if len(bad) == 0 {
			if real := RealNodesEnabled(o); real != o.RealNodes {
				return fmt.Errorf("the sandbox in %s is up %s --real-nodes; to change that, `annexctl sandbox down` and up again", o.Dir, map[bool]string{true: "with", false: "without"}[real])
			}
			if st, err := readRealNodes(o); err == nil && st.Enabled && o.Nodes != 0 && o.Nodes != st.Nodes {
				return fmt.Errorf("the sandbox in %s is up with %d real nodes per cluster, not %d; to change that, `annexctl sandbox down` and up again", o.Dir, st.Nodes, o.Nodes)
			}
			network := NetworkEnabled(o)
			if o.Network && !network {
				return fmt.Errorf("the sandbox in %s is up without --network; to add it, `annexctl sandbox down` and `annexctl sandbox up --network`", o.Dir)
			}
			if network {
				// Keep the network: restart what of it stopped.
				if err := ensureNetwork(ctx, s, o); err != nil {
					return err
				}
			}
			fmt.Fprintf(s.Out, "The sandbox in %s is already up%s.\n", o.Dir, map[bool]string{true: " (with --network)", false: "; nothing changed"}[network])
			printKubeconfigs(s.Out, sts)
			return nil
		}
		return fmt.Errorf("the sandbox in %s exists but %s not healthy: run `annexctl sandbox resume CLUSTER` for a killed or paused API server, or `annexctl sandbox down` and up again", o.Dir, strings.Join(bad, ", ")+map[bool]string{true: " is", false: " are"}[len(bad) == 1])
	} else if !errors.Is(err, errNotUp) {
		return err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return err
	}
	start := time.Now()
	if o.RealNodes {
		if err := upReal(ctx, s, o); err != nil {
			fmt.Fprintln(s.ErrOut, "Sandbox start failed; stopping what was started.")
			_ = Down(context.Background(), cli.IOStreams{Out: io.Discard, ErrOut: s.ErrOut}, o)
			return err
		}
		return printUp(ctx, s, o, start)
	}
	if o.Network {
		// Recorded first, so that a failed start's Down removes the namespaces.
		if err := writeJSON(filepath.Join(o.Dir, networkFile), networkState{Enabled: true}); err != nil {
			return err
		}
		if err := sandboxnet.Setup(ctx, sandboxClusters(o)); err != nil {
			_ = Down(context.Background(), cli.IOStreams{Out: io.Discard, ErrOut: s.ErrOut}, o)
			return err
		}
		s.Step("network namespaces ready (routers %s, underlay %s)", strings.Join(routerNames(), ", "), sandboxnet.UnderlayNetns())
	}
	fmt.Fprintf(s.Out, "Starting %d clusters in %s (about 15 s once the Kubernetes binaries are built)...\n", len(Clusters), o.Dir)
	out := &lockedWriter{w: s.Out}
	var wg sync.WaitGroup
	errs := make([]error, len(Clusters))
	for i, spec := range Clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = upOne(ctx, out, cli.IOStreams{Out: &prefixWriter{w: out, prefix: spec.Name + ": "}, ErrOut: s.ErrOut}, o, spec)
		}()
	}
	wg.Wait()
	err := errors.Join(errs...)
	if err == nil && o.Network {
		err = ensureNetwork(ctx, s, o)
	}
	if err != nil {
		fmt.Fprintln(s.ErrOut, "Sandbox start failed; stopping what was started.")
		_ = Down(context.Background(), cli.IOStreams{Out: io.Discard, ErrOut: s.ErrOut}, o)
		return err
	}
	return printUp(ctx, s, o, start)
}

// printUp says the sandbox is up and where its kubeconfigs are.
func printUp(ctx context.Context, s cli.IOStreams, o Options, start time.Time) error {
	sts, err := Status(ctx, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(s.Out, "Sandbox up in %s.\n", time.Since(start).Round(100*time.Millisecond))
	printKubeconfigs(s.Out, sts)
	PrintRealNodes(s.Out, sts)
	return nil
}

// clusterOptions are the localcluster options of spec's cluster.
func clusterOptions(o Options, spec Spec, progress io.Writer) localcluster.Options {
	return localcluster.Options{
		Name:        spec.Name,
		Dir:         o.ClusterDir(spec.Name),
		PodCIDR:     spec.PodCIDR,
		ServiceCIDR: spec.ServiceCIDR,
		Nodes:       spec.Nodes,
		Detach:      true,
		Progress:    progress,
		// Annex's CRDs before the controllers start: install then need
		// not wait for the quota controller to discover them.
		BeforeControllers: ApplyCRDs,
	}
}

// ApplyCRDs is a localcluster.Options.BeforeControllers that applies
// Annex's CRDs.
func ApplyCRDs(ctx context.Context, c *localcluster.Cluster) error {
	conn, err := cli.Connect(ctx, c.KubeconfigPath(), 15*time.Second)
	if err != nil {
		return err
	}
	return install.ApplyCRDs(ctx, conn.Client)
}

// upOne starts one cluster; localcluster's progress lines name the cluster
// themselves, s prefixes the others.
func upOne(ctx context.Context, progress io.Writer, s cli.IOStreams, o Options, spec Spec) error {
	c, err := localcluster.Start(ctx, clusterOptions(o, spec, progress))
	if err != nil {
		return fmt.Errorf("%s: %w", spec.Name, err)
	}
	conn, err := cli.Connect(ctx, c.KubeconfigPath(), 15*time.Second)
	if err != nil {
		return fmt.Errorf("%s: %w", spec.Name, err)
	}
	inst := install.DefaultOptions()
	inst.ClusterID, inst.PodCIDR, inst.ServiceCIDR, inst.ExternalCIDR, inst.LocalAgent = spec.Name, spec.PodCIDR, spec.ServiceCIDR, spec.ExternalCIDR, true
	if err := install.Run(ctx, cli.IOStreams{Out: io.Discard, ErrOut: s.ErrOut}, conn, inst); err != nil {
		return fmt.Errorf("%s: install: %w", spec.Name, err)
	}
	s.Step("Annex installed")
	args := o.AgentArgs
	if o.Network {
		if err := writeGatewayConfig(o, spec.Name); err != nil {
			return fmt.Errorf("%s: %w", spec.Name, err)
		}
		args = append(gatewayAgentArgs(o, spec.Name), args...)
	}
	if _, err := StartAgent(ctx, c, AgentOptions{Binary: o.AgentBinary, TokenTTL: o.TokenTTL, Args: args, Detach: true}); err != nil {
		return fmt.Errorf("%s: %w", spec.Name, err)
	}
	s.Step("annex-agent ready (as ServiceAccount annex-system/%s)", AgentServiceAccount)
	return nil
}

// Down stops every process of the sandbox and removes its state.
func Down(ctx context.Context, s cli.IOStreams, o Options) error {
	if _, err := os.Stat(o.Dir); errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(s.Out, "No sandbox in %s; nothing to do.\n", o.Dir)
		return nil
	}
	network, real := NetworkEnabled(o), RealNodesEnabled(o)
	if (network || real) && os.Geteuid() != 0 {
		return fmt.Errorf("the sandbox in %s runs with --network or --real-nodes: removing its network namespaces needs root", o.Dir)
	}
	// The pod network and the gateways first: they watch the clusters and
	// hold the namespaces.
	errs := stopNetwork(s, o)
	for _, spec := range Clusters {
		dir := o.ClusterDir(spec.Name)
		if a, err := LoadAgent(dir); err == nil {
			if err := a.Stop(); err != nil {
				errs = append(errs, fmt.Errorf("%s agent: %w", spec.Name, err))
			}
		}
		if c, err := localcluster.Load(dir); err == nil {
			if err := c.Stop(ctx); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", spec.Name, err))
				continue
			}
			s.Step("%s stopped", spec.Name)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("some processes could not be stopped; state kept in %s: %w", o.Dir, err)
	}
	if network || real {
		if err := sandboxnet.Teardown(); err != nil {
			return fmt.Errorf("remove the network namespaces (state kept in %s): %w", o.Dir, err)
		}
		s.Step("network namespaces removed")
	}
	if err := os.RemoveAll(o.Dir); err != nil {
		return err
	}
	fmt.Fprintf(s.Out, "Sandbox removed (%s).\n", o.Dir)
	return nil
}

// ClusterStatus is the health of one sandbox cluster.
type ClusterStatus struct {
	Name       string                         `json:"name"`
	Kubeconfig string                         `json:"kubeconfig"`
	APIServer  string                         `json:"apiServer"`
	Components []localcluster.ComponentStatus `json:"components"`
	Agent      AgentStatus                    `json:"agent"`
	// Gateway is set when the sandbox runs with --network.
	Gateway *GatewayStatus `json:"gateway,omitempty"`
	// PeerServer is where the other clusters' agents reach this API
	// server, with --real-nodes (`annexctl peer --remote-server`).
	PeerServer string `json:"peerServer,omitempty"`
	// RealNodes are the cluster's real nodes with their underlay
	// addresses, with --real-nodes (node 0 first: `up` installs the
	// gateway there).
	RealNodes []RealNode `json:"realNodes,omitempty"`
}

// AgentStatus is the health of a sandbox agent.
type AgentStatus struct {
	PID     int    `json:"pid"`
	Running bool   `json:"running"`
	Ready   bool   `json:"ready"`
	Log     string `json:"log"`
}

// Healthy reports whether every component runs and the agent is ready.
func (c ClusterStatus) Healthy() bool {
	for _, comp := range c.Components {
		if comp.State != localcluster.Running {
			return false
		}
	}
	return c.Agent.Ready
}

// Status reports every sandbox cluster; errNotUp if there is no sandbox.
func Status(ctx context.Context, o Options) ([]ClusterStatus, error) {
	var out []ClusterStatus
	for _, spec := range Clusters {
		dir := o.ClusterDir(spec.Name)
		c, err := localcluster.Load(dir)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", spec.Name, err)
		}
		st := ClusterStatus{Name: spec.Name, Kubeconfig: c.KubeconfigPath(), APIServer: c.APIServerURL(), Components: c.Status()}
		if a, err := LoadAgent(dir); err == nil {
			st.Agent = AgentStatus{PID: a.PID, Running: a.Running(), Log: a.Log}
			st.Agent.Ready = st.Agent.Running && a.Ready(ctx)
		} else if RealNodesEnabled(o) {
			st.Agent = realAgentStatus(ctx, c)
			st.PeerServer = PeerServer(o, spec.Name)
			st.RealNodes, _ = RealNodesOf(o, spec.Name)
		}
		st.Gateway = gatewayStatus(o, spec.Name)
		out = append(out, st)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w (no state in %s): run `annexctl sandbox up`", errNotUp, o.Dir)
	}
	return out, nil
}

// Act loads cluster name and applies a fault action to its API server.
func Act(ctx context.Context, s cli.IOStreams, o Options, name, action string) error {
	known := false
	for _, spec := range Clusters {
		known = known || spec.Name == name
	}
	if !known {
		return fmt.Errorf("unknown sandbox cluster %q (the sandbox has alpha, beta and gamma)", name)
	}
	c, err := localcluster.Load(o.ClusterDir(name))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w (no state for %s in %s)", errNotUp, name, o.Dir)
	}
	if err != nil {
		return err
	}
	switch action {
	case "kill":
		err = c.KillAPIServer()
	case "pause":
		err = c.PauseAPIServer()
	case "resume":
		err = c.ResumeAPIServer(ctx)
	default:
		return fmt.Errorf("unknown action %q", action)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", action, name, err)
	}
	fmt.Fprintf(s.Out, "%s: API server %s\n", name, map[string]string{"kill": "killed (SIGKILL)", "pause": "paused (SIGSTOP): requests to it now hang", "resume": "answering again"}[action])
	return nil
}

// PrintRealNodes lists the clusters' real nodes with their underlay
// addresses, if they have any.
func PrintRealNodes(w io.Writer, sts []ClusterStatus) {
	header := false
	for _, st := range sts {
		if len(st.RealNodes) == 0 {
			continue
		}
		if !header {
			fmt.Fprintln(w, "Real nodes (underlay address; `up` installs the gateway on the first):")
			header = true
		}
		nodes := make([]string, len(st.RealNodes))
		for i, n := range st.RealNodes {
			nodes[i] = n.Name + " " + n.Underlay.String()
		}
		fmt.Fprintf(w, "  %-6s %s\n", st.Name, strings.Join(nodes, ", "))
	}
}

func printKubeconfigs(w io.Writer, sts []ClusterStatus) {
	fmt.Fprintln(w, "Kubeconfigs:")
	for _, st := range sts {
		fmt.Fprintf(w, "  %-6s %s\n", st.Name, st.Kubeconfig)
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// prefixWriter prefixes every line; each Write must hold whole lines.
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	var buf bytes.Buffer
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if len(line) > 0 {
			buf.WriteString(p.prefix)
			buf.Write(line)
		}
	}
	if _, err := p.w.Write(buf.Bytes()); err != nil {
		return 0, err
	}
	return len(b), nil
}
