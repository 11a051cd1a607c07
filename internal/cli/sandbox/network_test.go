package sandbox

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestGatewayAgentArgs(t *testing.T) {
	o := Options{Dir: "/s"}
	got := gatewayAgentArgs(o, "beta")
	want := []string{"--gateway-config", "/s/beta/gateway/config.json", "--gateway-status", "/s/beta/gateway/status.json", "--gateway-endpoint", "192.168.77.2"}
	if !slices.Equal(got, want) {
		t.Errorf("gatewayAgentArgs = %q, want %q", got, want)
	}
	clusters := sandboxClusters(o)
	if len(clusters) != 3 || clusters[2].Name != "gamma" || clusters[2].Index != 2 || clusters[2].Kubeconfig != "/s/gamma/kubeconfig" {
		t.Errorf("sandboxClusters = %+v", clusters)
	}
}

func TestNetworkStateFiles(t *testing.T) {
	o := Options{Dir: t.TempDir()}
	if NetworkEnabled(o) || GetNetworkStatus(o) != nil || gatewayStatus(o, "alpha") != nil {
		t.Fatal("network enabled without network.json")
	}
	if err := writeJSON(filepath.Join(o.Dir, networkFile), networkState{Enabled: true}); err != nil {
		t.Fatal(err)
	}
	if !NetworkEnabled(o) {
		t.Fatal("network.json not read")
	}
	if st := GetNetworkStatus(o); st == nil || st.PodNetwork.Running || st.PodNetwork.Log != filepath.Join(o.Dir, podNetworkLog) {
		t.Errorf("GetNetworkStatus = %+v", st)
	}
	if gw := gatewayStatus(o, "gamma"); gw == nil || gw.Running || gw.Netns != "annex-sbx-gamma" || gw.Address != "192.168.77.3" {
		t.Errorf("gatewayStatus = %+v", gw)
	}
	if err := writeGatewayConfig(o, "alpha"); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(o.GatewayConfig("alpha")); strings.TrimSpace(string(data)) != `{"links":[]}` {
		t.Errorf("initial gateway config %q", data)
	}
	if err := os.WriteFile(o.GatewayConfig("alpha"), []byte(`{"links":[{"peer":"beta"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeGatewayConfig(o, "alpha"); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(o.GatewayConfig("alpha")); !strings.Contains(string(data), "beta") {
		t.Error("writeGatewayConfig overwrote the agent's file")
	}
}

func TestStartProcess(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep")
	}
	dir := t.TempDir()
	record := filepath.Join(dir, "p.json")
	p, err := startProcess(exec.Command(sleep, "60"), filepath.Join(dir, "p.log"), "", record)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	loaded, err := loadProcess(record)
	if err != nil || loaded.PID != p.PID || !loaded.Running() {
		t.Fatalf("recorded %+v, %v", loaded, err)
	}
	if err := loaded.Stop(); err != nil || loaded.Running() {
		t.Errorf("Stop: %v, running %v", err, loaded.Running())
	}
	if _, err := startProcess(exec.Command(sleep, "not-a-number"), filepath.Join(dir, "q.log"), "", filepath.Join(dir, "q.json")); err == nil || !strings.Contains(err.Error(), "exited at once") {
		t.Errorf("a process that exits at once: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "q.json")); !errors.Is(err, os.ErrNotExist) {
		t.Error("a process that exited at once was recorded")
	}
}

func TestWhyNoNetns(t *testing.T) {
	o := Options{Dir: t.TempDir()}
	kwok := func(b bool) func() (bool, error) { return func() (bool, error) { return b, nil } }
	labelled := map[string]string{"annex-sandbox-netns": "true"}
	if got := whyNoNetns(o, labelled, "n", "10.0.0.1", kwok(true)); !strings.Contains(got, "without the network") {
		t.Errorf("no network: %q", got)
	}
	if err := writeJSON(filepath.Join(o.Dir, networkFile), networkState{Enabled: true}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		labels   map[string]string
		node, ip string
		kwok     bool
		want     string
	}{
		{nil, "n", "10.0.0.1", true, "does not carry the label"},
		{labelled, "", "", true, "not scheduled"},
		{labelled, "n", "", true, "no IP"},
		{labelled, "annex-beta", "10.0.0.1", false, "not a kwok node"},
		{labelled, "n", "10.0.0.1", true, "pod-network"},
	} {
		if got := whyNoNetns(o, c.labels, c.node, c.ip, kwok(c.kwok)); !strings.Contains(got, c.want) {
			t.Errorf("whyNoNetns(%v, %q, %q, kwok %v) = %q, want it to say %q", c.labels, c.node, c.ip, c.kwok, got, c.want)
		}
	}
}
