package localcluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	"sigs.k8s.io/yaml"

	"github.com/annexhq/annex/internal/netnsutil"
	"github.com/annexhq/annex/internal/ociimage"
)

func TestNodeNetwork(t *testing.T) {
	tests := []struct {
		cidr               string
		bridge, api, node0 string
		node2              string
		wantErr            bool
	}{
		{cidr: "172.31.0.0/24", bridge: "172.31.0.1", api: "172.31.0.254", node0: "172.31.0.2", node2: "172.31.0.4"},
		{cidr: "10.250.7.0/29", bridge: "10.250.7.1", api: "10.250.7.6", node0: "10.250.7.2", node2: "10.250.7.4"},
		{cidr: "192.168.0.0/16", bridge: "192.168.0.1", api: "192.168.255.254", node0: "192.168.0.2", node2: "192.168.0.4"},
		{cidr: "10.0.0.0/30", wantErr: true},
		{cidr: "fd00::/64", wantErr: true},
	}
	for _, tt := range tests {
		nn, err := newNodeNetwork(tt.cidr)
		if tt.wantErr {
			if err == nil {
				t.Errorf("newNodeNetwork(%s) succeeded", tt.cidr)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		got := []string{nn.Bridge.String(), nn.API.String(), nn.nodeIP(0).String(), nn.nodeIP(2).String()}
		if diff := cmp.Diff([]string{tt.bridge, tt.api, tt.node0, tt.node2}, got); diff != "" {
			t.Errorf("newNodeNetwork(%s) bridge, API, node 0, node 2 (-want +got):\n%s", tt.cidr, diff)
		}
	}
}

func TestRealNodesOfState(t *testing.T) {
	s := &state{Name: "alpha", PodCIDR: "10.244.0.0/16", Nodes: 2, RealNodes: 2, NodeNetworkCIDR: "172.31.0.0/24", CgroupParent: "/annex-lc-0123456789"}
	got, err := s.realNodes()
	if err != nil {
		t.Fatal(err)
	}
	want := []realNode{
		{Name: "alpha-node-0", Index: 0, IP: netip.MustParseAddr("172.31.0.2"), PodCIDR: "10.244.2.0/24", CgroupRoot: "/annex-lc-0123456789/alpha-node-0"},
		{Name: "alpha-node-1", Index: 1, IP: netip.MustParseAddr("172.31.0.3"), PodCIDR: "10.244.3.0/24", CgroupRoot: "/annex-lc-0123456789/alpha-node-1"},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("realNodes (-want +got):\n%s", diff)
	}
	if got := s.apiAddress(); got != "" {
		t.Errorf("apiAddress without a port = %q", got)
	}
	s.Ports.APIServer = 6443
	if got, want := s.apiAddress(), "172.31.0.254:6443"; got != want {
		t.Errorf("apiAddress = %q, want %q", got, want)
	}
	if n, _ := (&state{Name: "a", PodCIDR: "10.244.0.0/16", Nodes: 1}).realNodes(); n != nil {
		t.Errorf("realNodes without real nodes = %v", n)
	}
}

func TestClusterIDAndCgroupParent(t *testing.T) {
	a, b := cgroupParent("/tmp/x/alpha"), cgroupParent("/tmp/y/alpha")
	if a == b || !strings.HasPrefix(a, "/annex-lc-") || len(a) != len("/annex-lc-")+10 {
		t.Errorf("cgroupParent = %q and %q: want distinct /annex-lc-<10 hex>", a, b)
	}
	if a != cgroupParent("/tmp/x/alpha") {
		t.Error("cgroupParent is not stable")
	}
}

func TestRealNodeOptions(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "pause.tar")
	if err := os.WriteFile(img, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ok := Options{Name: "a", Dir: dir, RealNodes: 1, Images: []string{img}, PauseImage: "annex.dev/pause:v1"}
	tests := []struct {
		name    string
		mutate  func(o *Options)
		wantErr string
		check   func(t *testing.T, o Options)
	}{
		{name: "defaults", check: func(t *testing.T, o Options) {
			if o.Nodes != 0 || o.NodeNetworkCIDR != DefaultNodeNetworkCIDR {
				t.Errorf("Nodes %d, NodeNetworkCIDR %q: want 0 kwok nodes and %s", o.Nodes, o.NodeNetworkCIDR, DefaultNodeNetworkCIDR)
			}
		}},
		{name: "both kinds", mutate: func(o *Options) { o.Nodes = 2 }, check: func(t *testing.T, o Options) {
			if o.Nodes != 2 || o.RealNodes != 1 {
				t.Errorf("Nodes %d RealNodes %d", o.Nodes, o.RealNodes)
			}
		}},
		{name: "negative", mutate: func(o *Options) { o.RealNodes = -1 }, wantErr: "RealNodes -1"},
		{name: "no pause image", mutate: func(o *Options) { o.PauseImage = "" }, wantErr: "PauseImage is required"},
		{name: "no images", mutate: func(o *Options) { o.Images = nil }, wantErr: "Images is required"},
		{name: "relative image", mutate: func(o *Options) { o.Images = []string{"pause.tar"} }, wantErr: "absolute"},
		{name: "missing image", mutate: func(o *Options) { o.Images = []string{filepath.Join(dir, "nope.tar")} }, wantErr: "not a readable file"},
		{name: "node network overlaps pods", mutate: func(o *Options) { o.NodeNetworkCIDR = "10.244.5.0/24" }, wantErr: "overlap"},
		{name: "node network overlaps services", mutate: func(o *Options) { o.NodeNetworkCIDR = "10.96.0.0/24" }, wantErr: "overlap"},
		{name: "node network too small", mutate: func(o *Options) { o.NodeNetworkCIDR = "172.31.0.0/29"; o.RealNodes = 5 }, wantErr: "room for 4"},
		{name: "dir hidden in nodes", mutate: func(o *Options) { o.Dir = "/var/lib/annex/a" }, wantErr: "below /var/lib"},
		{name: "bin dir hidden in nodes", mutate: func(o *Options) { o.BinDir = "/run/kube/bin" }, wantErr: "below /run"},
		{name: "dir too long", mutate: func(o *Options) { o.Dir = "/tmp/" + strings.Repeat("d", 100) }, wantErr: "too long"},
		{name: "too many nodes for the pod CIDR", mutate: func(o *Options) { o.PodCIDR = "10.244.0.0/24"; o.Nodes = 15; o.RealNodes = 2 }, wantErr: "no room"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := ok
			o.Images = append([]string(nil), ok.Images...)
			if tt.mutate != nil {
				tt.mutate(&o)
			}
			got, err := o.withDefaults()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("withDefaults() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, got)
		})
	}
}

func TestHiddenInNodes(t *testing.T) {
	for path, want := range map[string]string{
		"/run":               "/run",
		"/run/x":             "/run",
		"/var/lib/kubelet/x": "/var/lib",
		"/var/log":           "/var/log",
		"/var/library":       "",
		"/tmp/run":           "",
		"/root/.cache/annex": "",
	} {
		if got := hiddenInNodes(path); got != want {
			t.Errorf("hiddenInNodes(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestParseCgroupMounts(t *testing.T) {
	mountinfo := `21 26 0:20 / /proc rw,relatime - proc proc rw
30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 30 0:30 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
41 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
42 26 0:38 / /mnt/a\040b rw - cgroup cgroup rw,cpuset,cpu
`
	want := []cgroupMount{
		{Path: "/sys/fs/cgroup/cpu"},
		{Path: "/sys/fs/cgroup/cpuset", Cpuset: true},
		{Path: "/sys/fs/cgroup/memory"},
		{Path: "/sys/fs/cgroup/systemd"},
		{Path: "/sys/fs/cgroup/unified", V2: true},
		{Path: "/mnt/a b", Cpuset: true},
	}
	if diff := cmp.Diff(want, parseCgroupMounts(mountinfo)); diff != "" {
		t.Errorf("parseCgroupMounts (-want +got):\n%s", diff)
	}
}

// TestCgroupCreateRemove makes and removes a cgroup tree in every
// hierarchy of this machine (as root).
func TestCgroupCreateRemove(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (cgroups)")
	}
	mounts, err := cgroupMounts()
	if err != nil || len(mounts) == 0 {
		t.Skipf("no cgroup mounts: %v", err)
	}
	parent := cgroupParent(t.TempDir())
	t.Cleanup(func() { _ = removeCgroupTree(mounts, parent) })
	rel := parent + "/n0"
	if err := createCgroup(mounts, rel); err != nil {
		t.Fatal(err)
	}
	if err := createCgroup(mounts, rel); err != nil {
		t.Fatalf("second createCgroup: %v", err)
	}
	if err := os.Mkdir(filepath.Join(mounts[0].Path, rel, "kubepods"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if _, err := os.Stat(filepath.Join(m.Path, rel)); err != nil {
			t.Errorf("%s: %v", m.Path, err)
		}
		if m.Cpuset {
			want, _ := os.ReadFile(filepath.Join(m.Path, "cpuset.cpus"))
			got, _ := os.ReadFile(filepath.Join(m.Path, rel, "cpuset.cpus"))
			if strings.TrimSpace(string(got)) == "" || string(got) != string(want) {
				t.Errorf("cpuset.cpus of %s = %q, want the root's %q", rel, got, want)
			}
		}
	}
	// A process in the tree is killed by the removal.
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := os.WriteFile(filepath.Join(mounts[0].Path, rel, "kubepods", "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait() }()
	if err := removeCgroupTree(mounts, parent); err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if _, err := os.Stat(filepath.Join(m.Path, parent)); !os.IsNotExist(err) {
			t.Errorf("%s%s left: %v", m.Path, parent, err)
		}
	}
	if err := removeCgroupTree(mounts, parent); err != nil {
		t.Errorf("removing a missing tree: %v", err)
	}
}

func TestNodeConfigs(t *testing.T) {
	n := realNode{Name: "alpha-node-0", IP: netip.MustParseAddr("172.31.0.2"), PodCIDR: "10.244.1.0/24", CgroupRoot: "/annex-lc-x/alpha-node-0"}
	nl := nodeLayout{dir: "/d/nodes/alpha-node-0"}
	pki := pkiFiles{dir: "/d/pki"}

	kc := kubeletConfig(n, nl, pki)
	for k, want := range map[string]any{
		"address": "172.31.0.2", "cgroupRoot": "/annex-lc-x/alpha-node-0", "cgroupDriver": "cgroupfs",
		"failCgroupV1": false, "protectKernelDefaults": true, "imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent": 99, "resolvConf": "/d/nodes/alpha-node-0/resolv.conf",
		"containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock", "readOnlyPort": 0,
		"tlsCertFile": "/d/pki/kubelet-serving-alpha-node-0.crt", "podLogsDir": "/d/nodes/alpha-node-0/pod-logs",
	} {
		if diff := cmp.Diff(want, kc[k]); diff != "" {
			t.Errorf("kubelet %s (-want +got):\n%s", k, diff)
		}
	}
	kp := kubeProxyConfig(n, "/d/kubeconfigs/kube-proxy.kubeconfig", "10.244.0.0/16")
	wantConntrack := map[string]any{"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s", "udpTimeout": "0s", "udpStreamTimeout": "0s"}
	if diff := cmp.Diff(wantConntrack, kp["conntrack"]); diff != "" {
		t.Errorf("kube-proxy conntrack (-want +got):\n%s", diff)
	}
	if kp["mode"] != "iptables" || kp["hostnameOverride"] != "alpha-node-0" || kp["clusterCIDR"] != "10.244.0.0/16" {
		t.Errorf("kube-proxy mode %v hostname %v clusterCIDR %v", kp["mode"], kp["hostnameOverride"], kp["clusterCIDR"])
	}
	// The documents survive YAML (what the kubelet and kube-proxy read).
	for _, doc := range []map[string]any{kc, kp, egressSelectorConfig("/d/egress.sock"), cniConfig(n.PodCIDR)} {
		data, err := marshalYAML(doc)
		if err != nil {
			t.Fatal(err)
		}
		var back map[string]any
		if err := yaml.Unmarshal(data, &back); err != nil {
			t.Fatalf("%v\n%s", err, data)
		}
	}
	egress, _ := marshalYAML(egressSelectorConfig("/d/egress.sock"))
	for _, want := range []string{"kind: EgressSelectorConfiguration", "name: cluster", "proxyProtocol: HTTPConnect", "udsName: /d/egress.sock"} {
		if !strings.Contains(string(egress), want) {
			t.Errorf("egress selector config lacks %q:\n%s", want, egress)
		}
	}
	cni, _ := json.Marshal(cniConfig(n.PodCIDR))
	for _, want := range []string{`"subnet":"10.244.1.0/24"`, `"type":"bridge"`, `"isDefaultGateway":true`, `"ipMasq":false`, `"type":"portmap"`} {
		if !strings.Contains(string(cni), want) {
			t.Errorf("CNI config lacks %s: %s", want, cni)
		}
	}

	ctrd := containerdConfig(nl, "annex.dev/pause:v1", "/usr/lib/cni")
	for _, want := range []string{
		`root = "/d/nodes/alpha-node-0/containerd"`,
		`state = "/run/containerd"`,
		`address = "/run/containerd/containerd.sock"`,
		`sandbox_image = "annex.dev/pause:v1"`,
		`restrict_oom_score_adj = true`,
		`SystemdCgroup = false`,
		`bin_dir = "/usr/lib/cni"`,
		`conf_dir = "/d/nodes/alpha-node-0/cni"`,
		`path = "/d/nodes/alpha-node-0/containerd-opt"`,
	} {
		if !strings.Contains(ctrd, want) {
			t.Errorf("containerd config lacks %s:\n%s", want, ctrd)
		}
	}

	nn, _ := newNodeNetwork("172.31.0.0/24")
	gotInit := flagMap(t, nodeInitArgs(nn, nl, 6443)[1:])
	wantInit := map[string]string{
		"host-netns-fd": "3",
		"api-listen":    "172.31.0.254:6443",
		"api-target":    "127.0.0.1:6443",
		"ready-file":    "/d/nodes/alpha-node-0/init.ready",
		"tmpfs":         "/run,/var/lib,/var/log",
		"sysctl-file": "kernel/keys/root_maxbytes=/d/nodes/alpha-node-0/sysctl/kernel.keys.root_maxbytes," +
			"kernel/keys/root_maxkeys=/d/nodes/alpha-node-0/sysctl/kernel.keys.root_maxkeys," +
			"kernel/panic=/d/nodes/alpha-node-0/sysctl/kernel.panic," +
			"kernel/panic_on_oops=/d/nodes/alpha-node-0/sysctl/kernel.panic_on_oops," +
			"vm/overcommit_memory=/d/nodes/alpha-node-0/sysctl/vm.overcommit_memory," +
			"vm/panic_on_oom=/d/nodes/alpha-node-0/sysctl/vm.panic_on_oom",
	}
	if diff := cmp.Diff(wantInit, gotInit); diff != "" {
		t.Errorf("node init args (-want +got):\n%s", diff)
	}
	s := &state{PodCIDR: "10.244.0.0/16", NodeNetworkCIDR: "172.31.0.0/24"}
	gotNet := flagMap(t, networkArgs(layout{dir: "/d"}, s)[1:])
	wantNet := map[string]string{"egress-socket": "/d/egress.sock", "host-netns-fd": "3", "allow": "172.31.0.0/24,10.244.0.0/16", "ready-file": "/d/nodes/network.ready"}
	if diff := cmp.Diff(wantNet, gotNet); diff != "" {
		t.Errorf("network args (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"--target=42", "--mount", "--net", "--pid", "--wd=/w", "--", "/bin/x", "-y"}, nsenterArgs(42, "/w", "/bin/x", "-y")); diff != "" {
		t.Errorf("nsenterArgs (-want +got):\n%s", diff)
	}
}

func TestAPIServerArgsWithRealNodes(t *testing.T) {
	l := layout{dir: "/d"}
	s := &state{Name: "alpha", PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/16", RealNodes: 1, NodeNetworkCIDR: "172.31.0.0/24", Ports: ports{APIServer: 6443}}
	got := flagMap(t, apiServerArgs(l, s))
	for k, want := range map[string]string{
		"advertise-address":               "172.31.0.254",
		"bind-address":                    "127.0.0.1",
		"endpoint-reconciler-type":        "lease",
		"egress-selector-config-file":     "/d/egress-selector.yaml",
		"kubelet-preferred-address-types": "InternalIP,InternalDNS,Hostname,ExternalDNS,ExternalIP",
	} {
		if got[k] != want {
			t.Errorf("--%s = %q, want %q", k, got[k], want)
		}
	}
	s.RealNodes = 0
	got = flagMap(t, apiServerArgs(l, s))
	if got["advertise-address"] != "127.0.0.1" || got["endpoint-reconciler-type"] != "none" || got["egress-selector-config-file"] != "" {
		t.Errorf("without real nodes: advertise %q reconciler %q egress %q", got["advertise-address"], got["endpoint-reconciler-type"], got["egress-selector-config-file"])
	}
}

// hostSnapshot is what the real nodes of the cluster in dir must not leave
// behind on the host: mounts of this mount namespace, named network
// namespaces, cgroups at the top of each hierarchy, devices of the host's
// network namespace, its nftables ruleset and ipsets, and processes (those whose
// command line names dir, those in another PID namespace than the host's,
// and containerd's). Other tests on this machine make things of their own
// (sandboxnet's namespaces, other clusters' cgroups): those are not listed.
func hostSnapshot(t *testing.T, dir string) map[string][]string {
	t.Helper()
	snap := map[string][]string{}
	ours := func(name string) bool {
		return !strings.HasPrefix(name, "annex-sbx-") && !strings.HasPrefix(name, "asbt")
	}
	mounts, _ := os.ReadFile("/proc/self/mounts")
	for _, l := range strings.Split(strings.TrimSpace(string(mounts)), "\n") {
		if f := strings.Fields(l); len(f) > 2 && ours(strings.TrimPrefix(f[1], "/run/netns/")) {
			snap["mount"] = append(snap["mount"], f[1]+" "+f[2])
		}
	}
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if ours(e.Name()) {
			snap["netns"] = append(snap["netns"], e.Name())
		}
	}
	parent := strings.TrimPrefix(cgroupParent(dir), "/")
	if cm, err := cgroupMounts(); err == nil {
		for _, m := range cm {
			entries, _ := os.ReadDir(m.Path)
			for _, e := range entries {
				if e.IsDir() && (e.Name() == parent || !strings.HasPrefix(e.Name(), "annex-lc-")) {
					snap["cgroup"] = append(snap["cgroup"], filepath.Join(m.Path, e.Name()))
				}
			}
		}
	}
	links, _ := netlink.LinkList()
	for _, l := range links {
		snap["link"] = append(snap["link"], l.Attrs().Name+" "+l.Type())
	}
	if out, err := exec.Command("nft", "list", "ruleset").Output(); err == nil {
		snap["nft"] = strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	// kube-router's sets live in the nodes' network namespaces.
	if out, err := exec.Command("ipset", "list", "-name").Output(); err == nil {
		snap["ipset"] = strings.Fields(string(out))
	}
	hostPidNS, _ := os.Readlink("/proc/self/ns/pid")
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue // gone, or a kernel thread
		}
		exe, _ := os.Readlink(filepath.Join("/proc", p.Name(), "exe"))
		pidNS, _ := os.Readlink(filepath.Join("/proc", p.Name(), "ns", "pid"))
		line := string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
		switch {
		case strings.Contains(line, dir),
			pidNS != "" && pidNS != hostPidNS,
			strings.HasPrefix(filepath.Base(exe), "containerd"):
			snap["process"] = append(snap["process"], fmt.Sprintf("%d %s", pid, line))
		}
	}
	for k := range snap {
		sort.Strings(snap[k])
	}
	return snap
}

// leftovers lists what after has and before had not.
func leftovers(before, after map[string][]string) []string {
	var out []string
	for kind, items := range after {
		had := map[string]bool{}
		for _, i := range before[kind] {
			had[i] = true
		}
		for _, i := range items {
			if !had[i] {
				out = append(out, kind+": "+i)
			}
		}
	}
	sort.Strings(out)
	return out
}

// nodeRSS sums the resident memory (KiB) of the processes of a real node
// by kind: its containerd, kubelet and kube-proxy, and everything in the
// node's PID namespace (shims, pause and containers included).
func nodeRSS(t *testing.T, c *Cluster, node string) map[string]int {
	t.Helper()
	c.refresh()
	out := map[string]int{}
	for _, kind := range []string{Containerd, Kubelet, KubeProxy, KubeRouter} {
		if cs := c.st.component(NodeComponent(kind, node)); cs != nil && cs.ChildPID != 0 {
			out[kind] = rssKiB(cs.ChildPID)
			out[kind+" anon"] = statusKiB(cs.ChildPID, "RssAnon:")
		}
	}
	initCS := c.st.component(NodeComponent(NodeInit, node))
	if initCS == nil {
		return out
	}
	pidNS, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", initCS.PID))
	if err != nil {
		return out
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		// Members of the node's PID namespace, or of one nested in it
		// (containers): their ancestors' namespace list holds it.
		status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
		if ns == pidNS || inNestedPidNS(string(status)) && ancestorInNS(pid, pidNS) {
			out["all"] += rssKiB(pid)
			out["all anon"] += statusKiB(pid, "RssAnon:")
		}
	}
	return out
}

// inNestedPidNS reports whether a /proc/<pid>/status says the process sees
// itself under more than one PID (it is in a nested PID namespace).
func inNestedPidNS(status string) bool {
	for _, l := range strings.Split(status, "\n") {
		if strings.HasPrefix(l, "NSpid:") {
			return len(strings.Fields(l)) > 2
		}
	}
	return false
}

// ancestorInNS reports whether an ancestor of pid is in the PID namespace
// ns.
func ancestorInNS(pid int, ns string) bool {
	for range 64 {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:]))
		if len(f) < 2 {
			return false
		}
		ppid, _ := strconv.Atoi(f[1])
		if ppid <= 1 {
			return false
		}
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", ppid)); l == ns {
			return true
		}
		pid = ppid
	}
	return false
}

func rssKiB(pid int) int { return statusKiB(pid, "VmRSS:") }

// statusKiB reads a size field (KiB) of /proc/<pid>/status.
func statusKiB(pid int, field string) int {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, field) {
			f := strings.Fields(l)
			if len(f) >= 2 {
				v, _ := strconv.Atoi(f[1])
				return v
			}
		}
	}
	return 0
}

// execIn runs command in a pod's container through the API server and
// returns its stdout; a non-zero exit is err.
func execIn(ctx context.Context, cfg *rest.Config, ns, pod string, command ...string) (string, string, error) {
	cs := kubernetes.NewForConfigOrDie(cfg)
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: command, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return "", "", err
	}
	var stdout, stderr bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	return stdout.String(), stderr.String(), err
}

// echoPod is a pod of the echo image on a real node (any, if node is
// empty), Ready once it serves.
func echoPod(name, image, node string) *corev1.Pod {
	sel := map[string]string{NodeTypeLabel: NodeTypeReal}
	if node != "" {
		sel[corev1.LabelHostname] = node
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeSelector:                  sel,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: "echo", Image: image, ImagePullPolicy: corev1.PullNever,
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// requireRealNodes skips t unless it may start real nodes here (not -short,
// the binaries and the runtime present). In CI (onCI), where `make test`
// builds and installs all of it, a missing piece fails t instead.
func requireRealNodes(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: skipped with -short")
	}
	skip := t.Skipf
	if onCI() {
		skip = t.Fatalf
	}
	binDir := DefaultBinDir()
	if err := CheckBinaries(binDir); err != nil {
		skip("skipping: %v", err)
	}
	if err := CheckRealNodes(binDir); err != nil {
		skip("skipping: %v", err)
	}
}

// testImages builds the pause and echo images into a temporary directory.
func testImages(ctx context.Context, t *testing.T) (pause, echo ociimage.Image) {
	t.Helper()
	dir := t.TempDir()
	pause, err := ociimage.Pause(ctx, filepath.Join(dir, "pause.tar"))
	if err != nil {
		t.Fatal(err)
	}
	echo, err = ociimage.Echo(ctx, filepath.Join(dir, "echo.tar"))
	if err != nil {
		t.Fatal(err)
	}
	return pause, echo
}

// TestRealNodes starts a cluster with two real nodes and a kwok node, runs
// real containers (logs, exec, port-forward and the pod proxy through the
// API server; a ClusterIP Service through kube-proxy from a pod on the
// other node, from the same pod and from the node; pod to pod across nodes;
// the `kubernetes` Service; kwok still serving its pods), enforces
// NetworkPolicies with kube-router (checkNetworkPolicies; everything else
// runs under its firewall too), restarts the API server, and shows that
// Stop leaves nothing behind on the host.
func TestRealNodes(t *testing.T) {
	requireRealNodes(t)
	policies := requireNetworkPolicies(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	pause, echo := testImages(ctx, t)

	dir := t.TempDir()
	before := hostSnapshot(t, dir)
	begin := time.Now()
	c, err := Start(ctx, Options{
		Name: "real", Dir: dir, Nodes: 1, RealNodes: 2, NetworkPolicies: policies,
		Images: []string{pause.Path, echo.Path}, PauseImage: pause.Ref,
		Progress: testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster with 2 Ready real nodes in %s", time.Since(begin).Round(10*time.Millisecond))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Stop(context.Background())
		}
	})
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	rn := c.RealNodes()
	if len(rn) != 2 || rn[0].Netns == "" || rn[1].Netns == "" {
		t.Fatalf("RealNodes = %+v", rn)
	}
	node, other := rn[0], rn[1]
	if diff := cmp.Diff([]string{"real-node-0", "real-node-1"}, c.RealNodeNames()); diff != "" {
		t.Errorf("RealNodeNames (-want +got):\n%s", diff)
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s: kubelet %s, runtime %s, addresses %v, podCIDR %s", n.Name, n.Status.NodeInfo.KubeletVersion, n.Status.NodeInfo.ContainerRuntimeVersion, n.Status.Addresses, n.Spec.PodCIDR)
	if n.Spec.PodCIDR != node.PodCIDR || n.Status.NodeInfo.KubeletVersion != KubeVersion {
		t.Errorf("node podCIDR %s kubelet %s, want %s and %s", n.Spec.PodCIDR, n.Status.NodeInfo.KubeletVersion, node.PodCIDR, KubeVersion)
	}

	// A real pod: Running and Ready with an IP from its node's pod CIDR.
	t0 := time.Now()
	for _, p := range []*corev1.Pod{echoPod("echo", echo.Ref, node.Name), echoPod("client", echo.Ref, other.Name)} {
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var pod *corev1.Pod
	if err := poll(ctx, 90*time.Second, func() (bool, error) {
		pod, err = cs.CoreV1().Pods("default").Get(ctx, "echo", metav1.GetOptions{})
		return err == nil && podReady(pod), err
	}); err != nil {
		t.Fatalf("pod echo not Ready: %v (status %+v)", err, pod.Status)
	}
	t.Logf("first pod Ready in %s on %s with IP %s", time.Since(t0).Round(10*time.Millisecond), pod.Spec.NodeName, pod.Status.PodIP)
	if ip, err := netip.ParseAddr(pod.Status.PodIP); err != nil || !netip.MustParsePrefix(node.PodCIDR).Contains(ip) {
		t.Errorf("pod IP %q not in the node's pod CIDR %s", pod.Status.PodIP, node.PodCIDR)
	}
	var clientPod *corev1.Pod
	if err := poll(ctx, 60*time.Second, func() (bool, error) {
		clientPod, err = cs.CoreV1().Pods("default").Get(ctx, "client", metav1.GetOptions{})
		return err == nil && podReady(clientPod), err
	}); err != nil {
		t.Fatalf("pod client not Ready: %v", err)
	}
	if ip, err := netip.ParseAddr(clientPod.Status.PodIP); err != nil || !netip.MustParsePrefix(other.PodCIDR).Contains(ip) {
		t.Errorf("pod client's IP %q not in %s's pod CIDR %s", clientPod.Status.PodIP, other.Name, other.PodCIDR)
	}

	// Logs and exec through the API server (its egress proxy reaches the
	// kubelet in the node's namespace).
	logs, err := cs.CoreV1().Pods("default").GetLogs("echo", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil || !strings.Contains(string(logs), "msg=listening") {
		t.Errorf("logs of echo: %v %q, want the server's listening line", err, logs)
	}
	if out, stderr, err := execIn(ctx, cfg, "default", "echo", "echo-server", "say", "hello", "from", "exec"); err != nil || strings.TrimSpace(out) != "hello from exec" {
		t.Errorf("exec say: %q %q %v", out, stderr, err)
	}
	if body, err := portForwardGet(ctx, cfg, "default", "echo", 8080); err != nil || !strings.Contains(body, `"hostname":"echo"`) {
		t.Errorf("port-forward to echo: %q %v", body, err)
	}
	// The API server's pod proxy dials the pod IP (its egress, into the
	// node network and on to the pod's node).
	if body, err := cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces/default/pods/echo:8080/proxy/").DoRaw(ctx); err != nil || !strings.Contains(string(body), `"hostname":"echo"`) {
		t.Errorf("pod proxy to echo: %q %v", body, err)
	}
	// Pod to pod across nodes.
	podURL := "http://" + net.JoinHostPort(pod.Status.PodIP, "8080") + "/"
	if out, stderr, err := execIn(ctx, cfg, "default", "client", "echo-server", "get", "-timeout", "3s", podURL); err != nil || !strings.Contains(out, `"hostname":"echo"`) {
		t.Errorf("client on %s → echo on %s at %s: %q %q %v", other.Name, node.Name, podURL, out, stderr, err)
	}

	// A ClusterIP Service reaches the pod from a pod on another node, from
	// the pod itself (hairpin) and from the node, through kube-proxy.
	svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "default"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "echo"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svcURL := "http://" + net.JoinHostPort(svc.Spec.ClusterIP, "80") + "/"
	var body string
	if err := poll(ctx, 30*time.Second, func() (bool, error) {
		out, _, err := execIn(ctx, cfg, "default", "client", "echo-server", "get", "-timeout", "2s", svcURL)
		body = out
		return err == nil && strings.Contains(out, `"hostname":"echo"`), nil
	}); err != nil {
		t.Errorf("client pod → Service %s: %v (last reply %q)", svcURL, err, body)
	}
	if out, stderr, err := execIn(ctx, cfg, "default", "echo", "echo-server", "get", "-timeout", "3s", svcURL); err != nil || !strings.Contains(out, `"hostname":"echo"`) {
		t.Errorf("echo → its own Service %s: %q %q %v", svcURL, out, stderr, err)
	}
	if got, err := getInNetns(ctx, node.Netns, svcURL); err != nil || !strings.Contains(string(got), `"hostname":"echo"`) {
		t.Errorf("node → Service %s: %v %q", svcURL, err, got)
	}

	// The `kubernetes` Service reaches the API server from pods (plain
	// HTTP to its TLS port proves the path) and from the node (TLS,
	// verified with the cluster CA).
	svcIP, err := firstServiceIP(c.ServiceCIDR())
	if err != nil {
		t.Fatal(err)
	}
	kubeSvc := svcIP.String()
	out, _, _ := execIn(ctx, cfg, "default", "client", "echo-server", "get", "-timeout", "3s", "http://"+net.JoinHostPort(kubeSvc, "443")+"/")
	if !strings.Contains(out, "HTTP request to an HTTPS server") {
		t.Errorf("pod → kubernetes Service: %q, want the API server's complaint about plain HTTP", out)
	}
	if err := getAPIServerFromNode(ctx, c, node.Netns, "https://"+net.JoinHostPort(kubeSvc, "443")+"/readyz"); err != nil {
		t.Errorf("node → kubernetes Service: %v", err)
	}

	t.Run("NetworkPolicies", func(t *testing.T) {
		if !policies {
			t.Skip("kube-router cannot run here (see the log above)")
		}
		t0 := time.Now()
		checkNetworkPolicies(ctx, t, c, cfg, echo.Ref, node, other)
		t.Logf("NetworkPolicies checked in %s", time.Since(t0).Round(10*time.Millisecond))
	})

	// kwok keeps working beside the real node.
	kwokPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sim", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{NodeTypeLabel: NodeTypeKwok},
			Containers:   []corev1.Container{{Name: "sim", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, kwokPod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, 60*time.Second, func() (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "sim", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, err
	}); err != nil {
		t.Fatalf("kwok pod not Running: %v", err)
	}
	checkKwokLogsAndExec(ctx, t, c, cfg, "default", "sim")

	// What the cluster has on the host while it runs (that the check
	// after Stop would see if it were left).
	during := strings.Join(leftovers(before, hostSnapshot(t, dir)), "\n")
	for _, want := range []string{"cgroup: /sys/fs/cgroup/memory" + c.st.CgroupParent, "process: ", "containerd --config=", "/pause", "/echo-server"} {
		if !strings.Contains(during, want) {
			t.Errorf("while the cluster runs, the host snapshot lacks %q; it has:\n%s", want, during)
		}
	}

	rss := nodeRSS(t, c, node.Name)
	t.Logf("RSS (anonymous) of %s in KiB: containerd %d (%d), kubelet %d (%d), kube-proxy %d (%d), kube-router %d (%d); every process of the node with its pods %d (%d)",
		node.Name, rss[Containerd], rss[Containerd+" anon"], rss[Kubelet], rss[Kubelet+" anon"], rss[KubeProxy], rss[KubeProxy+" anon"], rss[KubeRouter], rss[KubeRouter+" anon"], rss["all"], rss["all anon"])

	// The API server restarts: the nodes' kubelet and kube-proxy are
	// restarted with it, and the node keeps running its pods.
	loaded, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := loaded.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	if err := loaded.ResumeAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("API server restarted in %s", time.Since(t0).Round(10*time.Millisecond))
	if out, _, err := execIn(ctx, cfg, "default", "client", "echo-server", "get", "-timeout", "2s", svcURL); err != nil || !strings.Contains(out, `"hostname":"echo"`) {
		t.Errorf("Service right after the restart: %q %v", out, err)
	}
	if p, err := cs.CoreV1().Pods("default").Get(ctx, "echo", metav1.GetOptions{}); err != nil || !podReady(p) {
		t.Errorf("pod echo not Ready after the restart: %v", err)
	}
	t0 = time.Now()
	if _, err := cs.CoreV1().Pods("default").Create(ctx, echoPod("late", echo.Ref, ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, 90*time.Second, func() (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "late", metav1.GetOptions{})
		return err == nil && podReady(p), err
	}); err != nil {
		t.Errorf("pod created after the restart not Ready: %v", err)
	}
	t.Logf("pod created right after the API server's restart Ready in %s", time.Since(t0).Round(10*time.Millisecond))
	for _, s := range c.Status() {
		if s.State != Running {
			t.Errorf("%s is %s", s.Name, s.State)
		}
	}

	// Stop, from another Cluster value as annexctl would: nothing left.
	t0 = time.Now()
	if err := loaded.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	stopped = true
	t.Logf("Stop took %s", time.Since(t0).Round(10*time.Millisecond))
	if err := c.Stop(ctx); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	var left []string
	if err := poll(ctx, 10*time.Second, func() (bool, error) {
		left = leftovers(before, hostSnapshot(t, dir))
		return len(left) == 0, nil
	}); err != nil {
		t.Errorf("left behind after Stop:\n%s", strings.Join(left, "\n"))
	}
	for _, m := range mustCgroupMounts(t) {
		if _, err := os.Stat(filepath.Join(m.Path, c.st.CgroupParent)); !os.IsNotExist(err) {
			t.Errorf("cgroup %s%s left: %v", m.Path, c.st.CgroupParent, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "egress.sock")); !os.IsNotExist(err) {
		t.Errorf("egress socket left: %v", err)
	}
}

func mustCgroupMounts(t *testing.T) []cgroupMount {
	t.Helper()
	m, err := cgroupMounts()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// getAPIServerFromNode GETs url from inside a node's network namespace,
// verifying the API server with the cluster CA and authenticating as admin.
func getAPIServerFromNode(ctx context.Context, c *Cluster, netnsPath, url string) error {
	h, err := netns.GetFromPath(netnsPath)
	if err != nil {
		return err
	}
	defer h.Close()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CA())
	files := layout{dir: c.dir}.pki()
	admin, err := tls.LoadX509KeyPair(files.cert("admin"), files.key("admin"))
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		Proxy:           nil,
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{admin}, MinVersion: tls.VersionTLS12},
		DialContext:     netnsutil.Dialer(h),
	}}
	return probeGet(ctx, client, url)
}

// realNodeHelperEnv makes the test binary start a cluster with a real node
// running a pod, as "attach|detach,DIR,PAUSE_TAR,PAUSE_REF", and then exit
// (detach) or die (attach). See TestRealNodesWithTheirStarter.
const realNodeHelperEnv = "LOCALCLUSTER_TEST_REAL_NODE"

func realNodeHelper(spec string) int {
	f := strings.Split(spec, ",")
	if len(f) != 4 {
		fmt.Fprintln(os.Stderr, "bad", realNodeHelperEnv, spec)
		return 2
	}
	mode, dir, tarball, ref := f[0], f[1], f[2], f[3]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{
		Name: "starter", Dir: dir, RealNodes: 1, Images: []string{tarball}, PauseImage: ref,
		Detach: mode == "detach", Progress: os.Stderr,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg, err := c.RESTConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sleeper", Namespace: "default"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64),
			Containers:                    []corev1.Container{{Name: "pause", Image: ref, ImagePullPolicy: corev1.PullNever}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := poll(ctx, time.Minute, func() (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "sleeper", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, err
	}); err != nil {
		fmt.Fprintln(os.Stderr, "pod not running:", err)
		return 1
	}
	fmt.Println("running")
	if mode == "attach" {
		panic("the starter dies with its cluster attached")
	}
	return 0
}

// TestRealNodesWithTheirStarter starts a cluster with a real node running a
// pod from another process, as annexctl sandbox does: detached, it outlives
// that process and Load(dir).Stop leaves nothing behind; attached, every
// process of the node (its containers too) dies with that process, and
// Load(dir).Stop removes what is left (cgroups).
func TestRealNodesWithTheirStarter(t *testing.T) {
	requireRealNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	pause, err := ociimage.Pause(ctx, filepath.Join(t.TempDir(), "pause.tar"))
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"detach", "attach"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			before := hostSnapshot(t, dir)
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), realNodeHelperEnv+"="+strings.Join([]string{mode, dir, pause.Path, pause.Ref}, ","))
			out, err := cmd.CombinedOutput()
			t.Cleanup(func() {
				if c, err := Load(dir); err == nil {
					_ = c.Stop(context.Background())
				}
			})
			if !strings.Contains(string(out), "\nrunning\n") {
				t.Fatalf("starter: %v\n%s", err, out)
			}
			c, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			switch mode {
			case "detach":
				for _, s := range c.Status() {
					if s.State != Running {
						t.Errorf("%s is %s after its starter exited", s.Name, s.State)
					}
				}
				cfg, err := c.RESTConfig()
				if err != nil {
					t.Fatal(err)
				}
				p, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Pods("default").Get(ctx, "sleeper", metav1.GetOptions{})
				if err != nil || p.Status.Phase != corev1.PodRunning {
					t.Errorf("pod after the starter exited: %v", err)
				}
			case "attach":
				// Everything but the cgroups goes with the starter.
				var left []string
				if err := poll(ctx, 20*time.Second, func() (bool, error) {
					left = nil
					for _, l := range leftovers(before, hostSnapshot(t, dir)) {
						if !strings.HasPrefix(l, "cgroup: ") {
							left = append(left, l)
						}
					}
					for _, s := range c.Status() {
						if s.State != Dead {
							left = append(left, fmt.Sprintf("component: %s (pid %d) %s", s.Name, s.PID, s.State))
						}
					}
					return len(left) == 0, nil
				}); err != nil {
					t.Errorf("left behind by the dead starter:\n%s", strings.Join(left, "\n"))
				}
			}
			if err := c.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			if left := leftovers(before, hostSnapshot(t, dir)); len(left) > 0 {
				t.Errorf("left behind after Stop:\n%s", strings.Join(left, "\n"))
			}
		})
	}
}

// TestCheckRealNodesSaysWhatIsMissing: without the runtime's programs on
// PATH and without the binaries, the error names each and how to get it.
func TestCheckRealNodesSaysWhatIsMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	err := CheckRealNodes(t.TempDir())
	if err == nil {
		t.Fatal("CheckRealNodes succeeded with an empty PATH and binary directory")
	}
	if !errors.Is(err, ErrRealNodesUnavailable) {
		t.Errorf("error %v does not wrap ErrRealNodesUnavailable", err)
	}
	for _, want := range []string{
		"containerd", "runc", "nsenter", "iptables", "ipset",
		"apt-get install -y containerd runc util-linux iptables ipset", "make node-deps",
		"kubelet, kube-proxy, localcluster-proxy", "make tools",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if os.Geteuid() != 0 && !strings.Contains(err.Error(), "run as root") {
		t.Errorf("error does not say to run as root: %v", err)
	}
}

// portForwardGet forwards a local port to a pod's port through the API
// server and GETs / through it.
func portForwardGet(ctx context.Context, cfg *rest.Config, ns, pod string, port int) (string, error) {
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return "", err
	}
	u := kubernetes.NewForConfigOrDie(cfg).CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	stop, ready := make(chan struct{}), make(chan struct{})
	defer close(stop)
	pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		return "", err
	}
	errc := make(chan error, 1)
	go func() { errc <- pf.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-errc:
		return "", err
	case <-ctx.Done():
		return "", ctx.Err()
	}
	ports, err := pf.GetPorts()
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/", ports[0].Local), nil)
	if err != nil {
		return "", err
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

// TestRealNodeStartFails: a node that cannot start (an image that does not
// import) fails Start with an error saying why, and Start cleans up after
// itself: nothing is left on the host.
func TestRealNodeStartFails(t *testing.T) {
	requireRealNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	imgDir := t.TempDir()
	pause, err := ociimage.Pause(ctx, filepath.Join(imgDir, "pause.tar"))
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(imgDir, "bad.tar")
	if err := os.WriteFile(bad, []byte("not an image archive"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	before := hostSnapshot(t, dir)
	c, err := Start(ctx, Options{Name: "broken", Dir: dir, RealNodes: 1, Images: []string{pause.Path, bad}, PauseImage: pause.Ref, Progress: testWriter{t}})
	if err == nil {
		_ = c.Stop(ctx)
		t.Fatal("Start succeeded with an image that cannot be imported")
	}
	t.Logf("Start failed as it should: %v", err)
	if !strings.Contains(err.Error(), "import "+bad) {
		t.Errorf("Start error = %v, want one naming the import of %s", err, bad)
	}
	if left := leftovers(before, hostSnapshot(t, dir)); len(left) > 0 {
		t.Errorf("left behind by the failed Start:\n%s", strings.Join(left, "\n"))
	}
}
