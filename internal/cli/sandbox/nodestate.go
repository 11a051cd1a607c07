package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/annexhq/annex/internal/localcluster"
)

// BeforeAnnexFile, in a real node's directory (<cluster>/nodes/<node>), is
// the node's network state (NodeNetworkState) recorded just before the
// sandbox installed Annex: after `annexctl uninstall` the node must be
// back to it.
const BeforeAnnexFile = "network-before-annex.txt"

// NodeNetworkState is what a node's network namespace (a path such as
// /proc/<pid>/ns/net) holds that Annex may change: the IPv4 routes of
// every table (without the "linkdown" flag, a device's carrier state), the
// policy rules, and the nftables ruleset (iptables-nft's rules included)
// without counters and handles, one rule per line. It needs nsenter, ip and
// nft.
func NodeNetworkState(ctx context.Context, netns string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var out strings.Builder
	for _, argv := range [][]string{
		{"ip", "-4", "route", "show", "table", "all"},
		{"ip", "-4", "rule", "show"},
		{"nft", "--stateless", "list", "ruleset"},
	} {
		cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + netns, "--"}, argv...)...) //nolint:gosec // G204: fixed commands in the node's namespace
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("%s in %s: %w: %s", strings.Join(argv, " "), netns, err, strings.TrimSpace(stderr.String()))
		}
		text := stdout.String()
		if argv[0] == "ip" {
			// The carrier state of a route's device (a bridge with no
			// pod attached), not routing configuration.
			text = strings.ReplaceAll(text, " linkdown", "")
		}
		fmt.Fprintf(&out, "# %s\n%s", strings.Join(argv, " "), text)
	}
	return out.String(), nil
}

// recordBeforeAnnex writes every real node's NodeNetworkState to its
// BeforeAnnexFile once kube-proxy has programmed it (the `kubernetes`
// Service's rules are there) and it reads the same twice a second apart.
func recordBeforeAnnex(ctx context.Context, c *localcluster.Cluster) error {
	for _, n := range c.RealNodes() {
		var last string
		deadline := time.Now().Add(60 * time.Second)
		for {
			st, err := NodeNetworkState(ctx, n.Netns)
			if err != nil {
				return fmt.Errorf("%s: %w", n.Name, err)
			}
			if st == last && strings.Contains(st, "KUBE-SVC-") {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: its network state did not settle (kube-proxy's rules) within 60 s", n.Name)
			}
			last = st
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}
		if err := os.WriteFile(filepath.Join(c.Dir(), "nodes", n.Name, BeforeAnnexFile), []byte(last), 0o644); err != nil { //nolint:gosec // G306: not secret
			return err
		}
	}
	return nil
}
