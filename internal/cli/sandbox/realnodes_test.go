package sandbox

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/annexhq/annex/internal/cli"
)

func TestValidateNodes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		o         Options
		wantErr   string // "" for none
		wantNodes int
	}{
		{name: "kwok sandbox", o: Options{}, wantNodes: 1},
		{name: "real nodes, default", o: Options{RealNodes: true}, wantNodes: 1},
		{name: "real nodes, 1", o: Options{RealNodes: true, Nodes: 1}, wantNodes: 1},
		{name: "real nodes, 2", o: Options{RealNodes: true, Nodes: 2}, wantNodes: 2},
		{name: "real nodes, 4", o: Options{RealNodes: true, Nodes: MaxRealNodes}, wantNodes: 4},
		{name: "real nodes, 5", o: Options{RealNodes: true, Nodes: 5}, wantErr: "--nodes 5: the real-node sandbox runs 1 to 4 real nodes per cluster"},
		{name: "real nodes, -1", o: Options{RealNodes: true, Nodes: -1}, wantErr: "--nodes -1: the real-node sandbox runs 1 to 4"},
		{name: "without real nodes", o: Options{Nodes: 2}, wantErr: "--nodes 2 needs --real-nodes"},
		{name: "1 without real nodes", o: Options{Nodes: 1}, wantErr: "--nodes 1 needs --real-nodes"},
		{name: "with --network", o: Options{Network: true, Nodes: 2}, wantErr: "needs --real-nodes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := validateNodes(tc.o)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("validateNodes = %v", err)
				}
				if got := realNodesPerCluster(tc.o); got != tc.wantNodes {
					t.Errorf("realNodesPerCluster = %d, want %d", got, tc.wantNodes)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("validateNodes = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestUpRefusesBadNodes: Up says what is wrong with --nodes before it
// starts or writes anything.
func TestUpRefusesBadNodes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sandbox")
	var out bytes.Buffer
	err := Up(context.Background(), cli.IOStreams{Out: &out, ErrOut: &out}, Options{Dir: dir, Nodes: 2})
	if err == nil || !strings.Contains(err.Error(), "needs --real-nodes") {
		t.Errorf("Up with --nodes and no --real-nodes: %v", err)
	}
	if _, serr := os.Stat(dir); serr == nil {
		t.Errorf("Up made %s", dir)
	}
}

func TestRealNodeState(t *testing.T) {
	o := Options{Dir: t.TempDir()}
	if RealNodesEnabled(o) {
		t.Fatal("real nodes enabled without real-nodes.json")
	}
	if _, err := RealNodeUnderlay(o, "alpha"); err == nil {
		t.Error("RealNodeUnderlay without real-nodes.json: no error")
	}
	// A sandbox from before --nodes wrote only "enabled": one node each.
	if err := os.WriteFile(filepath.Join(o.Dir, realNodesFile), []byte(`{"enabled":true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if st, err := readRealNodes(o); err != nil || !st.Enabled || st.Nodes != 1 {
		t.Errorf("old real-nodes.json: %+v, %v; want enabled with 1 node", st, err)
	}
	if _, err := RealNodeUnderlay(o, "alpha"); err == nil || !strings.Contains(err.Error(), "not up yet") {
		t.Errorf("RealNodeUnderlay before the nodes are on the underlay: %v", err)
	}

	st := realNodesState{Enabled: true, Nodes: 2, Clusters: map[string][]RealNode{
		"alpha": {{Name: "alpha-node-0", Underlay: netip.MustParseAddr("192.168.77.1")}, {Name: "alpha-node-1", Underlay: netip.MustParseAddr("192.168.77.17")}},
		"beta":  {{Name: "beta-node-0", Underlay: netip.MustParseAddr("192.168.77.2")}, {Name: "beta-node-1", Underlay: netip.MustParseAddr("192.168.77.33")}},
	}}
	if err := writeJSON(filepath.Join(o.Dir, realNodesFile), st); err != nil {
		t.Fatal(err)
	}
	got, err := RealNodeUnderlay(o, "beta")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]netip.Addr{"beta-node-0": netip.MustParseAddr("192.168.77.2"), "beta-node-1": netip.MustParseAddr("192.168.77.33")}
	if d := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
		t.Errorf("RealNodeUnderlay(beta) (-want +got):\n%s", d)
	}
	nodes, err := RealNodesOf(o, "alpha")
	if err != nil || len(nodes) != 2 || nodes[0].Name != "alpha-node-0" {
		t.Errorf("RealNodesOf(alpha) = %+v, %v; want node 0 first", nodes, err)
	}
	if _, err := RealNodeUnderlay(o, "gamma"); err == nil {
		t.Error("RealNodeUnderlay of a cluster without nodes: no error")
	}

	var out bytes.Buffer
	PrintRealNodes(&out, []ClusterStatus{{Name: "alpha", RealNodes: st.Clusters["alpha"]}, {Name: "beta", RealNodes: st.Clusters["beta"]}})
	wantOut := "Real nodes (underlay address; `up` installs the gateway on the first):\n" +
		"  alpha  alpha-node-0 192.168.77.1, alpha-node-1 192.168.77.17\n" +
		"  beta   beta-node-0 192.168.77.2, beta-node-1 192.168.77.33\n"
	if d := cmp.Diff(wantOut, out.String()); d != "" {
		t.Errorf("PrintRealNodes (-want +got):\n%s", d)
	}
	out.Reset()
	PrintRealNodes(&out, []ClusterStatus{{Name: "alpha"}})
	if out.Len() != 0 {
		t.Errorf("PrintRealNodes without real nodes printed %q", out.String())
	}
}
