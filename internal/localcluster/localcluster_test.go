package localcluster

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func parseCertPEM(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatal("no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func ipStrings(ips []net.IP) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}

func TestFirstServiceIP(t *testing.T) {
	tests := []struct {
		cidr    string
		want    string
		wantErr bool
	}{
		{cidr: "10.96.0.0/16", want: "10.96.0.1"},
		{cidr: "172.20.0.0/12", want: "172.16.0.1"},
		{cidr: "192.168.5.0/24", want: "192.168.5.1"},
		{cidr: "fd00::/108", wantErr: true},
		{cidr: "10.0.0.0/31", wantErr: true},
		{cidr: "nonsense", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.cidr, func(t *testing.T) {
			got, err := firstServiceIP(tt.cidr)
			if (err != nil) != tt.wantErr {
				t.Fatalf("firstServiceIP(%q) error = %v, wantErr %v", tt.cidr, err, tt.wantErr)
			}
			if err == nil && got.String() != tt.want {
				t.Errorf("firstServiceIP(%q) = %s, want %s", tt.cidr, got, tt.want)
			}
		})
	}
}

func TestAPIServerServingCert(t *testing.T) {
	now := time.Now()
	ca, _, err := newAuthority("test", now)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	tests := []struct {
		serviceCIDR string
		wantIPs     []string
	}{
		{serviceCIDR: "10.96.0.0/16", wantIPs: []string{"127.0.0.1", "10.96.0.1"}},
		{serviceCIDR: "10.100.0.0/20", wantIPs: []string{"127.0.0.1", "10.100.0.1"}},
	}
	wantDNS := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	for _, tt := range tests {
		t.Run(tt.serviceCIDR, func(t *testing.T) {
			req, err := apiServerServing(tt.serviceCIDR)
			if err != nil {
				t.Fatal(err)
			}
			certPEM, _, err := ca.issue(req, now)
			if err != nil {
				t.Fatal(err)
			}
			cert := parseCertPEM(t, certPEM)
			if diff := cmp.Diff(wantDNS, cert.DNSNames); diff != "" {
				t.Errorf("DNS SANs (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantIPs, ipStrings(cert.IPAddresses)); diff != "" {
				t.Errorf("IP SANs (-want +got):\n%s", diff)
			}
			for _, name := range append(wantDNS, tt.wantIPs...) {
				if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, CurrentTime: now}); err != nil {
					t.Errorf("verify for %s: %v", name, err)
				}
			}
		})
	}
}

func TestCertificateSubjects(t *testing.T) {
	now := time.Now()
	ca, _, err := newAuthority("test", now)
	if err != nil {
		t.Fatal(err)
	}
	type subject struct {
		CN     string
		O      []string
		Usages []x509.ExtKeyUsage
		IPs    []string
	}
	tests := []struct {
		name string
		req  certRequest
		want subject
	}{
		{
			name: "admin",
			req:  clientCert("alpha-admin", "system:masters"),
			want: subject{CN: "alpha-admin", O: []string{"system:masters"}, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
		},
		{
			name: "controller-manager",
			req:  loopbackServing("system:kube-controller-manager"),
			want: subject{CN: "system:kube-controller-manager", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, IPs: []string{"127.0.0.1"}},
		},
		{
			name: "scheduler",
			req:  loopbackServing("system:kube-scheduler"),
			want: subject{CN: "system:kube-scheduler", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, IPs: []string{"127.0.0.1"}},
		},
		{
			name: "user with groups",
			req:  clientCert("jane", "ops", "devs"),
			want: subject{CN: "jane", O: []string{"devs", "ops"}, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			certPEM, keyPEM, err := ca.issue(tt.req, now)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := decodeKey(keyPEM); err != nil {
				t.Fatalf("key: %v", err)
			}
			cert := parseCertPEM(t, certPEM)
			got := subject{CN: cert.Subject.CommonName, O: cert.Subject.Organization, Usages: cert.ExtKeyUsage}
			if len(cert.IPAddresses) > 0 {
				got.IPs = ipStrings(cert.IPAddresses)
			}
			// DER sorts a SET OF: the order of organizations is not kept.
			if diff := cmp.Diff(tt.want, got, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
				t.Errorf("subject (-want +got):\n%s", diff)
			}
			if cert.IsCA {
				t.Error("leaf certificate is a CA")
			}
		})
	}
}

func TestLoadOrCreateAuthorityReuses(t *testing.T) {
	files := pkiFiles{dir: filepath.Join(t.TempDir(), "pki")}
	now := time.Now()
	first, err := loadOrCreateAuthority(files, "alpha", now)
	if err != nil {
		t.Fatal(err)
	}
	sa1, err := os.ReadFile(files.saKey())
	if err != nil {
		t.Fatal(err)
	}
	second, err := loadOrCreateAuthority(files, "alpha", now)
	if err != nil {
		t.Fatal(err)
	}
	sa2, err := os.ReadFile(files.saKey())
	if err != nil {
		t.Fatal(err)
	}
	if !first.cert.Equal(second.cert) {
		t.Error("CA was regenerated")
	}
	if string(sa1) != string(sa2) {
		t.Error("service-account key was regenerated")
	}
	if fi, err := os.Stat(files.caKey()); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("ca.key mode: %v %v", fi.Mode(), err)
	}
}

func TestOptionsWithDefaults(t *testing.T) {
	tests := []struct {
		name    string
		in      Options
		want    Options // BinDir and Progress are not compared
		wantErr string
	}{
		{
			name: "defaults",
			in:   Options{Name: "alpha", Dir: "/tmp/x"},
			want: Options{Name: "alpha", Dir: "/tmp/x", PodCIDR: DefaultPodCIDR, ServiceCIDR: DefaultServiceCIDR, Nodes: 1},
		},
		{
			name: "explicit",
			in:   Options{Name: "beta", Dir: "/tmp/y", PodCIDR: "10.10.0.0/20", ServiceCIDR: "10.20.0.0/24", Nodes: 3, Detach: true},
			want: Options{Name: "beta", Dir: "/tmp/y", PodCIDR: "10.10.0.0/20", ServiceCIDR: "10.20.0.0/24", Nodes: 3, Detach: true},
		},
		{name: "no name", in: Options{Dir: "/tmp/x"}, wantErr: "Name is required"},
		{name: "bad name", in: Options{Name: "Alpha_1", Dir: "/tmp/x"}, wantErr: "Name"},
		{name: "no dir", in: Options{Name: "alpha"}, wantErr: "Dir is required"},
		{name: "overlap", in: Options{Name: "a", Dir: "/x", PodCIDR: "10.0.0.0/8", ServiceCIDR: "10.96.0.0/16"}, wantErr: "overlap"},
		{name: "ipv6", in: Options{Name: "a", Dir: "/x", PodCIDR: "fd00::/64"}, wantErr: "IPv4"},
		{name: "host bits", in: Options{Name: "a", Dir: "/x", PodCIDR: "10.244.1.0/16"}, wantErr: "host bits"},
		{name: "pod CIDR too small", in: Options{Name: "a", Dir: "/x", PodCIDR: "10.244.0.0/26"}, wantErr: "prefix length"},
		{name: "too many nodes", in: Options{Name: "a", Dir: "/x", PodCIDR: "10.244.0.0/24", Nodes: 17}, wantErr: "no room"},
		{name: "negative nodes", in: Options{Name: "a", Dir: "/x", Nodes: -1}, wantErr: "Nodes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.in.withDefaults()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.BinDir == "" || got.Progress == nil {
				t.Errorf("BinDir %q / Progress %v not defaulted", got.BinDir, got.Progress)
			}
			got.BinDir, got.Progress = "", nil
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDefaultBinDir(t *testing.T) {
	t.Setenv("ANNEX_KUBE_DIR", "/opt/kube")
	if got := DefaultBinDir(); got != "/opt/kube/bin" {
		t.Errorf("with ANNEX_KUBE_DIR: %s", got)
	}
	t.Setenv("ANNEX_KUBE_DIR", "")
	t.Setenv("XDG_CACHE_HOME", "/cache")
	if got, want := DefaultBinDir(), "/cache/annex/kube-"+KubeVersion+"/bin"; got != want {
		t.Errorf("with XDG_CACHE_HOME: %s, want %s", got, want)
	}
	if got, want := stagesDir("/cache/annex/kube-"+KubeVersion+"/bin"), "/cache/annex/kube-"+KubeVersion+"/kwok-stages"; got != want {
		t.Errorf("stagesDir: %s, want %s", got, want)
	}
}

// flagMap turns --key=value arguments into a map; repeated keys join with
// ",".
func flagMap(t *testing.T, args []string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, a := range args {
		k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok {
			t.Fatalf("argument %q is not --key=value", a)
		}
		if old, dup := m[k]; dup {
			v = old + "," + v
		}
		m[k] = v
	}
	return m
}

func TestComponentArgs(t *testing.T) {
	l := layout{dir: "/d"}
	s := &state{
		Name: "alpha", PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/16",
		Ports: ports{EtcdClient: 2379, EtcdPeer: 2380, APIServer: 6443, ControllerManager: 10257, Scheduler: 10259, Kwok: 10247},
	}
	tests := []struct {
		name string
		args []string
		want map[string]string // a subset of the flags
	}{
		{
			name: "etcd",
			args: etcdArgs(l, "alpha", s.Ports),
			want: map[string]string{
				"data-dir":              "/d/etcd",
				"listen-client-urls":    "http://127.0.0.1:2379",
				"listen-peer-urls":      "http://127.0.0.1:2380",
				"initial-cluster":       "alpha=http://127.0.0.1:2380",
				"advertise-client-urls": "http://127.0.0.1:2379",
			},
		},
		{
			name: "kube-apiserver",
			args: apiServerArgs(l, s),
			want: map[string]string{
				"etcd-servers":                     "http://127.0.0.1:2379",
				"kubelet-certificate-authority":    "/d/pki/ca.crt",
				"kubelet-client-certificate":       "/d/pki/apiserver-kubelet-client.crt",
				"kubelet-client-key":               "/d/pki/apiserver-kubelet-client.key",
				"bind-address":                     "127.0.0.1",
				"advertise-address":                "127.0.0.1",
				"secure-port":                      "6443",
				"client-ca-file":                   "/d/pki/ca.crt",
				"tls-cert-file":                    "/d/pki/apiserver.crt",
				"tls-private-key-file":             "/d/pki/apiserver.key",
				"service-cluster-ip-range":         "10.96.0.0/16",
				"service-account-issuer":           "https://kubernetes.default.svc",
				"service-account-key-file":         "/d/pki/sa.pub",
				"service-account-signing-key-file": "/d/pki/sa.key",
				"authorization-mode":               "Node,RBAC",
				"allow-privileged":                 "true",
				"endpoint-reconciler-type":         "none",
			},
		},
		{
			name: "kube-controller-manager",
			args: controllerManagerArgs(l, s),
			want: map[string]string{
				"kubeconfig":                       "/d/kubeconfigs/kube-controller-manager.kubeconfig",
				"bind-address":                     "127.0.0.1",
				"secure-port":                      "10257",
				"leader-elect":                     "false",
				"controllers":                      "*",
				"use-service-account-credentials":  "true",
				"service-account-private-key-file": "/d/pki/sa.key",
				"root-ca-file":                     "/d/pki/ca.crt",
				"allocate-node-cidrs":              "true",
				"cluster-cidr":                     "10.244.0.0/16",
				"node-cidr-mask-size":              "24",
			},
		},
		{
			name: "kube-scheduler",
			args: schedulerArgs(l, s),
			want: map[string]string{
				"kubeconfig":   "/d/kubeconfigs/kube-scheduler.kubeconfig",
				"bind-address": "127.0.0.1",
				"secure-port":  "10259",
				"leader-elect": "false",
			},
		},
		{
			name: "kwok",
			args: kwokArgs(l, s, []string{"/s/a.yaml", "/s/b.yaml"}),
			want: map[string]string{
				"kubeconfig":                       "/d/kubeconfigs/kwok.kubeconfig",
				"manage-all-nodes":                 "false",
				"manage-nodes-with-label-selector": "type=kwok",
				"cidr":                             "10.244.0.0/16",
				"server-address":                   "127.0.0.1:10247",
				"node-port":                        "10247",
				"tls-cert-file":                    "/d/pki/kwok-serving.crt",
				"tls-private-key-file":             "/d/pki/kwok-serving.key",
				"config":                           "/d/kwok/options.yaml,/d/kwok/debugging.yaml,/s/a.yaml,/s/b.yaml",
				"node-lease-duration-seconds":      "40",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := flagMap(t, tt.args)
			sub := map[string]string{}
			for k := range tt.want {
				sub[k] = got[k]
			}
			if diff := cmp.Diff(tt.want, sub); diff != "" {
				t.Errorf("flags (-want +got):\n%s", diff)
			}
			for _, a := range tt.args {
				if strings.Contains(a, "0.0.0.0") {
					t.Errorf("argument %q listens on all interfaces", a)
				}
			}
		})
	}
}

func TestNodeCIDR(t *testing.T) {
	tests := []struct {
		podCIDR string
		index   int
		want    string
		wantErr bool
	}{
		{podCIDR: "10.244.0.0/16", index: 0, want: "10.244.0.0/24"},
		{podCIDR: "10.244.0.0/16", index: 3, want: "10.244.3.0/24"},
		{podCIDR: "10.244.0.0/16", index: 255, want: "10.244.255.0/24"},
		{podCIDR: "10.244.0.0/16", index: 256, wantErr: true},
		{podCIDR: "10.0.0.0/8", index: 258, want: "10.1.2.0/24"},
		{podCIDR: "10.10.16.0/20", index: 15, want: "10.10.31.0/24"},
		{podCIDR: "192.168.1.0/24", index: 1, want: "192.168.1.16/28"},
		{podCIDR: "192.168.1.0/24", index: 16, wantErr: true},
		{podCIDR: "10.244.0.0/16", index: -1, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d", tt.podCIDR, tt.index), func(t *testing.T) {
			got, err := nodeCIDR(tt.podCIDR, tt.index)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error = %v, wantErr %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("nodeCIDR = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestKwokNode(t *testing.T) {
	n := kwokNode("alpha-worker-0", "10.244.0.0/24")
	got := map[string]string{
		"label type":     n.Labels["type"],
		"label hostname": n.Labels[corev1.LabelHostname],
		"annotation":     n.Annotations["kwok.x-k8s.io/node"],
		"cpu":            n.Status.Capacity.Cpu().String(),
		"memory":         n.Status.Allocatable.Memory().String(),
		"pods":           n.Status.Capacity.Pods().String(),
		"podCIDR":        n.Spec.PodCIDR,
	}
	want := map[string]string{
		"label type":     "kwok",
		"label hostname": "alpha-worker-0",
		"annotation":     "fake",
		"cpu":            "32",
		"memory":         "256Gi",
		"pods":           "110",
		"podCIDR":        "10.244.0.0/24",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("node (-want +got):\n%s", diff)
	}
}

func TestNodeReady(t *testing.T) {
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue}
	tests := []struct {
		name string
		node corev1.Node
		want bool
	}{
		{name: "no conditions", want: false},
		{name: "ready", node: corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{ready}}}, want: true},
		{
			name: "ready but tainted",
			node: corev1.Node{
				Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}},
				Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{ready}},
			},
			want: false,
		},
		{
			name: "not ready",
			node: corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}}},
			want: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nodeReady(&tt.node); got != tt.want {
				t.Errorf("nodeReady = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	want := &state{
		Version: stateVersion, Name: "alpha", BinDir: "/bin", PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/16",
		Nodes: 2, Detach: true,
		Ports: ports{EtcdClient: 1, EtcdPeer: 2, APIServer: 3, ControllerManager: 4, Scheduler: 5, Kwok: 6},
		Components: []componentState{
			{Name: Etcd, Binary: "/bin/etcd", Args: []string{"--a=b"}, Log: "/d/logs/etcd.log", PID: 42, StartTime: 1234},
			{Name: APIServer, Binary: "/bin/kube-apiserver", Args: []string{"--c=d", "--e"}, Log: "/d/logs/kube-apiserver.log", PID: 43, StartTime: 1235},
		},
	}
	if err := writeState(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := readState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(state{}, ports{}, componentState{})); diff != "" {
		t.Errorf("state round trip (-want +got):\n%s", diff)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}

	// setComponent replaces in place.
	got.setComponent(componentState{Name: APIServer, PID: 99})
	if got.component(APIServer).PID != 99 || len(got.Components) != 2 {
		t.Errorf("setComponent: %+v", got.Components)
	}

	// Bad versions are refused.
	want.Version = 99
	if err := writeState(dir, want); err != nil {
		t.Fatal(err)
	}
	if _, err := readState(dir); err == nil {
		t.Error("readState accepted an unknown version")
	}
	if _, err := Load(t.TempDir()); err == nil {
		t.Error("Load of an empty directory succeeded")
	}
}

func TestFreePorts(t *testing.T) {
	pp, err := freePorts(8)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range pp {
		if seen[p] {
			t.Errorf("port %d returned twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Errorf("port %d not free: %v", p, err)
			continue
		}
		l.Close()
	}
}

func TestParseProcStat(t *testing.T) {
	tail := " 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 987654 20 21"
	tests := []struct {
		name    string
		in      string
		want    procStat
		wantErr bool
	}{
		{name: "plain", in: "123 (etcd) S" + tail, want: procStat{state: 'S', startTime: 987654}},
		{name: "stopped", in: "123 (kube-apiserver) T" + tail, want: procStat{state: 'T', startTime: 987654}},
		{name: "tricky comm", in: "123 (a) (b c) Z" + tail, want: procStat{state: 'Z', startTime: 987654}},
		{name: "truncated", in: "123 (etcd) S 1 2 3", wantErr: true},
		{name: "no paren", in: "garbage", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseProcStat([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("error = %v, wantErr %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(procStat{})); diff != "" {
				t.Errorf("parseProcStat (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStateOfSelf(t *testing.T) {
	st, err := readProcStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if got := stateOf(os.Getpid(), st.startTime); got != procRunning {
		t.Errorf("stateOf(self) = %v, want running", got)
	}
	if got := stateOf(os.Getpid(), st.startTime+1); got != procDead {
		t.Errorf("stateOf(self, other start time) = %v, want dead (recycled pid)", got)
	}
	if got := stateOf(0, 0); got != procDead {
		t.Errorf("stateOf(0) = %v, want dead", got)
	}
}

func TestTailLines(t *testing.T) {
	tests := []struct {
		name string
		in   string
		n    int
		want string
	}{
		{name: "short", in: "a\nb\n", n: 5, want: "a\nb"},
		{name: "last n", in: "a\nb\nc\nd\n", n: 2, want: "c\nd"},
		{name: "after marker", in: "old\n" + logMarker + "x starting\nnew1\nnew2\n", n: 5, want: "new1\nnew2"},
		{name: "marker last", in: "old\n" + logMarker + "x starting\n", n: 5, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tailLines(tt.in, tt.n); got != tt.want {
				t.Errorf("tailLines = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCheckBinaries(t *testing.T) {
	root := t.TempDir()
	bin := filepath.Join(root, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	err := CheckBinaries(bin)
	if !errors.Is(err, ErrMissingBinaries) || !strings.Contains(err.Error(), "make tools") {
		t.Fatalf("CheckBinaries(empty) = %v, want ErrMissingBinaries mentioning make tools", err)
	}
	// tools/kube's layout: one multi-call binary, a symlink per command,
	// kwok on its own.
	if err := os.WriteFile(filepath.Join(bin, "kube"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range requiredBinaries {
		if b == Kwok {
			if err := os.WriteFile(filepath.Join(bin, b), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.Symlink("kube", filepath.Join(bin, b)); err != nil {
			t.Fatal(err)
		}
	}
	if err := CheckBinaries(bin); err == nil || !strings.Contains(err.Error(), "kwok stage") {
		t.Fatalf("CheckBinaries(no stages) = %v, want an error about stages", err)
	}
	if err := os.MkdirAll(stagesDir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stagesDir(bin), "pod-fast.yaml"), []byte("kind: Stage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckBinaries(bin); err != nil {
		t.Fatalf("CheckBinaries(complete, no node binaries) = %v", err)
	}

	err = CheckRealNodeBinaries(bin)
	if !errors.Is(err, ErrMissingBinaries) || !strings.Contains(err.Error(), "[kubelet kube-proxy localcluster-proxy]") {
		t.Fatalf("CheckRealNodeBinaries(none) = %v, want ErrMissingBinaries listing kubelet, kube-proxy and localcluster-proxy", err)
	}
	// A dangling symlink counts as missing.
	if err := os.Symlink("no-such-kube", filepath.Join(bin, "kube-proxy")); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"kubelet", "localcluster-proxy"} {
		if err := os.Symlink("kube", filepath.Join(bin, b)); err != nil {
			t.Fatal(err)
		}
	}
	err = CheckRealNodeBinaries(bin)
	if !errors.Is(err, ErrMissingBinaries) || !strings.Contains(err.Error(), "[kube-proxy]") {
		t.Fatalf("CheckRealNodeBinaries(dangling kube-proxy) = %v, want ErrMissingBinaries listing kube-proxy only", err)
	}
	if err := os.Remove(filepath.Join(bin, "kube-proxy")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("kube", filepath.Join(bin, "kube-proxy")); err != nil {
		t.Fatal(err)
	}
	if err := CheckRealNodeBinaries(bin); err != nil {
		t.Fatalf("CheckRealNodeBinaries(complete) = %v", err)
	}
}

// helperEnv makes the test binary act as a process that spawns a child and
// then dies (see TestAttachedChildDiesWithParent).
const helperEnv = "LOCALCLUSTER_TEST_SPAWN_HELPER"

// startDetachedEnv makes the test binary start a detached cluster in the
// directory it names and exit (see TestDetachedClusterOutlivesStarter).
const startDetachedEnv = "LOCALCLUSTER_TEST_START_DETACHED"

func TestMain(m *testing.M) {
	if dir := os.Getenv(startDetachedEnv); dir != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if _, err := Start(ctx, Options{Name: "beta", Dir: dir, Detach: true, Progress: os.Stderr}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if spec := os.Getenv(realNodeHelperEnv); spec != "" {
		os.Exit(realNodeHelper(spec))
	}
	if mode := os.Getenv(helperEnv); mode != "" {
		p, err := spawn(spawnSpec{name: "sleep", binary: "/bin/sleep", args: []string{"1000"}, logPath: os.Getenv(helperEnv + "_LOG"), detach: mode == "detach"})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Println(p.pid, p.startTime)
		// Die abruptly, as a crashing test binary would.
		panic("helper exits")
	}
	os.Exit(m.Run())
}

// TestAttachedChildDiesWithParent shows that a component started without
// Detach does not outlive the process that started it, even when that
// process panics, and that a detached one does.
func TestAttachedChildDiesWithParent(t *testing.T) {
	if _, err := os.Stat("/bin/sleep"); err != nil {
		t.Skip("no /bin/sleep")
	}
	for _, mode := range []string{"attach", "detach"} {
		t.Run(mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperEnv+"_LOG="+filepath.Join(t.TempDir(), "sleep.log"))
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var pid int
			var start uint64
			if _, err := fmt.Fscan(bufio.NewReader(out), &pid, &start); err != nil {
				t.Fatalf("read child pid: %v", err)
			}
			_ = cmd.Wait() // the helper panics
			t.Cleanup(func() { _ = signal(pid, start, syscall.SIGKILL) })
			// An attached child is killed at once; a detached one must
			// still be there a moment later.
			wait := 5 * time.Second
			if mode == "detach" {
				wait = time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			err = waitState(ctx, pid, start, nil, procDead)
			switch mode {
			case "attach":
				if err != nil {
					t.Errorf("attached child %d still alive after its parent died", pid)
				}
			case "detach":
				if err == nil {
					t.Errorf("detached child %d died with its parent", pid)
				}
			}
		})
	}
}

// TestStartKillPauseResume starts a real cluster and exercises the fault
// injection the failure tests rely on.
func TestStartKillPauseResume(t *testing.T) {
	if err := CheckBinaries(DefaultBinDir()); err != nil {
		t.Skipf("skipping: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	dir := t.TempDir()
	begin := time.Now()
	c, err := Start(ctx, Options{Name: "alpha", Dir: dir, Nodes: 2, Progress: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster ready in %s", time.Since(begin).Round(10*time.Millisecond))
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})

	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Insecure || len(cfg.CAData) == 0 {
		t.Errorf("admin config does not verify the server: insecure=%v CA=%d bytes", cfg.Insecure, len(cfg.CAData))
	}
	cs := kubernetes.NewForConfigOrDie(cfg)

	// A pod goes Running with an IP from the pod CIDR.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "web", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, podNet, _ := net.ParseCIDR(c.PodCIDR())
	var got *corev1.Pod
	if err := poll(ctx, 60*time.Second, func() (bool, error) {
		got, err = cs.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return got.Status.Phase == corev1.PodRunning && got.Status.PodIP != "", nil
	}); err != nil {
		t.Fatalf("pod not Running with an IP: %v (last status %+v)", err, got.Status)
	}
	if ip := net.ParseIP(got.Status.PodIP); ip == nil || !podNet.Contains(ip) {
		t.Errorf("pod IP %q not in pod CIDR %s", got.Status.PodIP, c.PodCIDR())
	}
	t.Logf("pod web Running on %s with IP %s", got.Spec.NodeName, got.Status.PodIP)

	// kubectl logs and exec work: the API server reaches kwok's kubelet
	// endpoint, verifying its certificate with the cluster CA.
	checkKwokLogsAndExec(ctx, t, c, cfg, "default", "web")

	// Every node renews a Lease, as a kubelet does: without one the node
	// lifecycle controller marks the node Unknown and its pods NotReady once
	// its grace period lapses.
	for _, name := range c.NodeNames() {
		if err := poll(ctx, 30*time.Second, func() (bool, error) {
			l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil && l.Spec.RenewTime != nil, err
		}); err != nil {
			t.Errorf("node %s has no renewed Lease: %v", name, err)
		}
	}

	// Bound service-account tokens work.
	expiration := int64(600)
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "default", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiration},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokenCfg := &rest.Config{Host: c.APIServerURL(), BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: c.CA()}}
	ssr, err := kubernetes.NewForConfigOrDie(tokenCfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ssr.Status.UserInfo.Username, "system:serviceaccount:default:default"; got != want {
		t.Errorf("token authenticates as %q, want %q", got, want)
	}

	// Minted client certificates authenticate.
	janeCfg, err := c.ClientConfig("jane", "devs")
	if err != nil {
		t.Fatal(err)
	}
	ssr, err = kubernetes.NewForConfigOrDie(janeCfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"devs", "system:authenticated"}, ssr.Status.UserInfo.Groups); ssr.Status.UserInfo.Username != "jane" || diff != "" {
		t.Errorf("client cert authenticates as %q %v", ssr.Status.UserInfo.Username, ssr.Status.UserInfo.Groups)
	}

	get := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		_, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err
	}
	wantStates := func(want map[string]ComponentState) {
		t.Helper()
		got := map[string]ComponentState{}
		for _, s := range c.Status() {
			got[s.Name] = s.State
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Status (-want +got):\n%s", diff)
		}
	}
	allRunning := map[string]ComponentState{Etcd: Running, APIServer: Running, ControllerManager: Running, Scheduler: Running, Kwok: Running}
	withAPIServer := func(s ComponentState) map[string]ComponentState {
		m := map[string]ComponentState{}
		for k, v := range allRunning {
			m[k] = v
		}
		m[APIServer] = s
		return m
	}
	wantStates(allRunning)

	// Another process's view (annexctl sandbox) agrees.
	loaded, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(c.Status(), loaded.Status()); diff != "" {
		t.Errorf("Load(dir).Status() differs (-started +loaded):\n%s", diff)
	}
	if loaded.APIServerURL() != c.APIServerURL() || loaded.PodCIDR() != c.PodCIDR() {
		t.Errorf("Load(dir) = %s %s, want %s %s", loaded.APIServerURL(), loaded.PodCIDR(), c.APIServerURL(), c.PodCIDR())
	}

	// Hung peer: requests time out.
	if err := c.PauseAPIServer(); err != nil {
		t.Fatal(err)
	}
	wantStates(withAPIServer(Paused))
	t0 := time.Now()
	if err := get(2 * time.Second); err == nil {
		t.Error("request to a paused API server succeeded")
	} else {
		t.Logf("paused: request failed after %s: %v", time.Since(t0).Round(time.Millisecond), err)
	}
	t0 = time.Now()
	if err := c.ResumeAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("resumed paused API server in %s", time.Since(t0).Round(time.Millisecond))
	if err := get(5 * time.Second); err != nil {
		t.Errorf("request after resume: %v", err)
	}
	wantStates(allRunning)

	// Dead peer: connections are refused. The kill goes through the loaded
	// view, as `annexctl sandbox kill` would.
	if err := loaded.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	wantStates(withAPIServer(Dead))
	host := strings.TrimPrefix(c.APIServerURL(), "https://")
	if conn, err := net.DialTimeout("tcp", host, 2*time.Second); err == nil {
		conn.Close()
		t.Error("dial to a killed API server succeeded")
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial to a killed API server: %v, want connection refused", err)
	}
	if err := get(2 * time.Second); err == nil {
		t.Error("request to a killed API server succeeded")
	} else {
		t.Logf("killed: request failed: %v", err)
	}
	t0 = time.Now()
	if err := c.ResumeAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted killed API server in %s", time.Since(t0).Round(time.Millisecond))
	if err := get(5 * time.Second); err != nil {
		t.Errorf("request after restart: %v", err)
	}
	if _, err := cs.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Errorf("pod lost across API server restart: %v", err)
	}
	wantStates(allRunning)

	t0 = time.Now()
	if err := c.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("RestartAPIServer took %s", time.Since(t0).Round(time.Millisecond))
	if err := get(5 * time.Second); err != nil {
		t.Errorf("request after RestartAPIServer: %v", err)
	}

	// Stop leaves no process, even when the API server is paused, and is
	// idempotent.
	if err := c.PauseAPIServer(); err != nil {
		t.Fatal(err)
	}
	status := c.Status()
	t0 = time.Now()
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("Stop took %s", time.Since(t0).Round(time.Millisecond))
	for _, s := range status {
		if err := syscall.Kill(s.PID, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) still exists after Stop: kill(0) = %v", s.Name, s.PID, err)
		}
	}
	for _, s := range c.Status() {
		if s.State != Dead {
			t.Errorf("%s is %s after Stop", s.Name, s.State)
		}
	}
	if err := c.Stop(ctx); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	for _, f := range []string{"kubeconfig", "state.json", "logs/kube-apiserver.log", "pki/ca.crt"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("Stop removed %s: %v", f, err)
		}
	}
}

// poll calls f until it returns true, an error, or timeout.
func poll(ctx context.Context, timeout time.Duration, f func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, err := f()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestDetachedClusterOutlivesStarter starts a detached cluster from another
// process that then exits, as `annexctl sandbox up` does, and drives it
// through Load as `annexctl sandbox kill/resume/down` do. It then starts a
// cluster again in the same directory, reusing its PKI and etcd data.
func TestDetachedClusterOutlivesStarter(t *testing.T) {
	if err := CheckBinaries(DefaultBinDir()); err != nil {
		t.Skipf("skipping: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()

	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), startDetachedEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	t.Logf("starter output:\n%s", out)
	t.Cleanup(func() {
		if c, err := Load(dir); err == nil {
			if err := c.Stop(context.Background()); err != nil {
				t.Errorf("cleanup Stop: %v", err)
			}
		}
	})
	if err != nil {
		t.Fatalf("starter: %v", err)
	}

	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range c.Status() {
		if s.State != Running {
			t.Errorf("%s is %s after its starter exited", s.Name, s.State)
		}
	}
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 1 || nodes.Items[0].Name != "beta-worker-0" {
		t.Errorf("nodes = %v, want [beta-worker-0]", nodes.Items)
	}

	if _, err := Start(ctx, Options{Name: "beta", Dir: dir}); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("Start in the directory of a running cluster: %v, want an already-running error", err)
	}

	if err := c.PauseAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := c.ResumeAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	oldPID := c.Status()[1].PID
	if err := c.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := c.ResumeAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if newPID := c.Status()[1].PID; newPID == oldPID {
		t.Errorf("API server pid unchanged (%d) after kill and resume", newPID)
	}
	if _, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list nodes after restart: %v", err)
	}

	status := c.Status()
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range status {
		if st, err := readProcStat(s.PID); err == nil && st.state != 'Z' {
			t.Errorf("%s (pid %d) still alive after Stop (state %c)", s.Name, s.PID, st.state)
		}
	}

	// Start again in the same directory: same CA, same etcd data.
	caBefore := c.CA()
	c2, err := Start(ctx, Options{Name: "beta", Dir: dir, Progress: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c2.Stop(context.Background()) })
	if string(c2.CA()) != string(caBefore) {
		t.Error("restart in the same directory replaced the CA")
	}
	cfg2, err := c2.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubernetes.NewForConfigOrDie(cfg2).CoreV1().Nodes().Get(ctx, "beta-worker-0", metav1.GetOptions{}); err != nil {
		t.Errorf("node from the first run: %v", err)
	}
	if err := c2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestPortConflictRetry shows that a component that loses its port to
// another process is restarted on a new one.
func TestPortConflictRetry(t *testing.T) {
	if err := CheckBinaries(DefaultBinDir()); err != nil {
		t.Skipf("skipping: %v", err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port

	dir := t.TempDir()
	l := layout{dir: dir}
	if err := os.MkdirAll(l.logs(), 0o755); err != nil {
		t.Fatal(err)
	}
	pp, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{
		dir:      dir,
		st:       state{Version: stateVersion, Name: "ports", BinDir: DefaultBinDir(), Ports: ports{EtcdClient: takenPort, EtcdPeer: pp[0]}},
		children: map[string]*process{},
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	spec := launchSpec{
		name:   Etcd,
		args:   func() []string { return etcdArgs(l, "ports", c.st.Ports) },
		repick: c.repickOne(&c.st.Ports.EtcdClient),
		ready: func(ctx context.Context) error {
			return probeGet(ctx, &http.Client{Timeout: time.Second}, loopbackURL("http", c.st.Ports.EtcdClient)+"/health")
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.launchAndAwait(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if c.st.Ports.EtcdClient == takenPort {
		t.Errorf("etcd claims the taken port %d", takenPort)
	}
	if log, _ := os.ReadFile(l.log(Etcd)); !addrInUse(string(log)) {
		t.Errorf("first etcd run did not hit the taken port; log:\n%s", log)
	}
}
