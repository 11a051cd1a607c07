package localcluster

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Component names: the binaries, the log file names and the names in Status.
const (
	Etcd              = "etcd"
	APIServer         = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
	Scheduler         = "kube-scheduler"
	Kwok              = "kwok"
)

// Labels and annotations of the kwok nodes Start creates.
const (
	// NodeTypeLabel is set to NodeTypeKwok on every simulated node; kwok
	// manages exactly the nodes carrying it.
	NodeTypeLabel = "type"
	// NodeTypeKwok is the value of NodeTypeLabel on simulated nodes.
	NodeTypeKwok = "kwok"
	kwokNodeAnno = "kwok.x-k8s.io/node"
)

// frontProxyUser is the user the API server's aggregator proxies as.
const frontProxyUser = "front-proxy-client"

// Names of the certificates (in the PKI directory) of the kubelet API.
const (
	kubeletClientCertName = "apiserver-kubelet-client"
	kwokServingCertName   = "kwok-serving"
)

// serviceAccountIssuer is the issuer of the cluster's service-account tokens.
const serviceAccountIssuer = "https://kubernetes.default.svc"

// layout is where things live inside the cluster's state directory.
type layout struct{ dir string }

func (l layout) pki() pkiFiles               { return pkiFiles{dir: filepath.Join(l.dir, "pki")} }
func (l layout) etcdData() string            { return filepath.Join(l.dir, "etcd") }
func (l layout) logs() string                { return filepath.Join(l.dir, "logs") }
func (l layout) log(component string) string { return filepath.Join(l.logs(), component+".log") }
func (l layout) auditPolicy() string         { return filepath.Join(l.dir, "audit-policy.yaml") }
func (l layout) auditLog() string            { return filepath.Join(l.logs(), "audit.log") }
func (l layout) adminKubeconfig() string     { return filepath.Join(l.dir, "kubeconfig") }
func (l layout) kubeconfigs() string         { return filepath.Join(l.dir, "kubeconfigs") }
func (l layout) kubeconfig(comp string) string {
	return filepath.Join(l.kubeconfigs(), comp+".kubeconfig")
}

func loopbackURL(scheme string, port int) string {
	return scheme + "://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

func etcdArgs(l layout, name string, p ports) []string {
	client := loopbackURL("http", p.EtcdClient)
	peer := loopbackURL("http", p.EtcdPeer)
	return []string{
		"--name=" + name,
		"--data-dir=" + l.etcdData(),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=" + name + "=" + peer,
		"--initial-cluster-state=new",
		// Throw-away clusters: a crash of the machine may lose the data,
		// a crash of etcd does not (the page cache survives it).
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}
}

// auditWritesPolicy records every write request at level Metadata (user,
// user agent, verb, object, response code) once answered, nothing else.
const auditWritesPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

func apiServerArgs(l layout, s *state) []string {
	args := baseAPIServerArgs(l, s)
	if s.Profiling {
		// Flags parse left to right: this overrides --profiling=false.
		args = append(args, "--profiling=true")
	}
	if s.AuditWrites {
		args = append(args,
			"--audit-policy-file="+l.auditPolicy(),
			"--audit-log-path="+l.auditLog(),
			"--audit-log-format=json",
			"--audit-log-mode=blocking",
			// Never rotated (the default rotates at 100 MB), so that a
			// reader can go on from an offset.
			"--audit-log-maxsize=1000000")
	}
	return args
}

func baseAPIServerArgs(l layout, s *state) []string {
	pki := l.pki()
	// The advertise address is loopback, which an Endpoints object may
	// not contain: the `kubernetes` Service has no endpoints. With real
	// nodes it is their API address, forwarded to this loopback port on
	// every node (see realnode.go).
	advertise, reconciler := "127.0.0.1", "none"
	if nn, err := newNodeNetwork(s.NodeNetworkCIDR); err == nil && s.RealNodes > 0 {
		advertise, reconciler = nn.API.String(), "lease"
	}
	args := []string{
		"--etcd-servers=" + loopbackURL("http", s.Ports.EtcdClient),
		"--bind-address=127.0.0.1",
		"--advertise-address=" + advertise,
		"--secure-port=" + strconv.Itoa(s.Ports.APIServer),
		"--cert-dir=" + pki.dir,
		"--tls-cert-file=" + pki.cert("apiserver"),
		"--tls-private-key-file=" + pki.key("apiserver"),
		"--client-ca-file=" + pki.caCert(),
		"--service-cluster-ip-range=" + s.ServiceCIDR,
		"--service-account-issuer=" + serviceAccountIssuer,
		"--service-account-key-file=" + pki.saPub(),
		"--service-account-signing-key-file=" + pki.saKey(),
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		"--endpoint-reconciler-type=" + reconciler,
		"--profiling=false",
		// Front proxy, for aggregated API servers.
		"--requestheader-client-ca-file=" + pki.caCert(),
		"--requestheader-allowed-names=" + frontProxyUser,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + pki.cert("front-proxy-client"),
		"--proxy-client-key-file=" + pki.key("front-proxy-client"),
		// Nothing routes Service IPs on the host: the aggregator
		// dials endpoints directly.
		"--enable-aggregator-routing=true",
		// Kubelets (kwok, virtual nodes) must present a serving
		// certificate of the cluster CA; the API server authenticates to
		// them with a client certificate.
		"--kubelet-certificate-authority=" + pki.caCert(),
		"--kubelet-client-certificate=" + pki.cert(kubeletClientCertName),
		"--kubelet-client-key=" + pki.key(kubeletClientCertName),
	}
	if s.RealNodes > 0 {
		args = append(args,
			// Kubelets, pods and Service endpoints live in the cluster's
			// node network; the network process dials them (and
			// loopback kubelets: kwok, virtual nodes) for the API server.
			"--egress-selector-config-file="+l.egressConfig(),
			// Real kubelets have no resolvable host name.
			"--kubelet-preferred-address-types=InternalIP,InternalDNS,Hostname,ExternalDNS,ExternalIP",
		)
	}
	return args
}

func controllerManagerArgs(l layout, s *state) []string {
	pki := l.pki()
	kc := l.kubeconfig(ControllerManager)
	mask, _ := nodeCIDRMaskSize(s.PodCIDR)
	return []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(s.Ports.ControllerManager),
		"--tls-cert-file=" + pki.cert(ControllerManager),
		"--tls-private-key-file=" + pki.key(ControllerManager),
		"--leader-elect=false",
		"--controllers=*",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + pki.saKey(),
		"--root-ca-file=" + pki.caCert(),
		"--cluster-signing-cert-file=" + pki.caCert(),
		"--cluster-signing-key-file=" + pki.caKey(),
		"--allocate-node-cidrs=true",
		"--cluster-cidr=" + s.PodCIDR,
		"--node-cidr-mask-size=" + strconv.Itoa(mask),
		"--service-cluster-ip-range=" + s.ServiceCIDR,
		"--cluster-name=" + s.Name,
		// A node whose Lease is not renewed for this long is marked
		// Unknown and all its pods Ready=False. kwok never sets them Ready
		// again (a kubelet would), so a fault-injection test that keeps an
		// API server down for half a minute would find the provider's own
		// pods NotReady afterwards. Real clusters use 40 s.
		"--node-monitor-grace-period=5m",
		// The default client rate limit (20 qps) makes the controller
		// manager take ~5 s to start its controllers, each with its own
		// service-account client.
		"--kube-api-qps=200",
		"--kube-api-burst=400",
		"--profiling=false",
	}
}

func schedulerArgs(l layout, s *state) []string {
	pki := l.pki()
	kc := l.kubeconfig(Scheduler)
	return []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(s.Ports.Scheduler),
		"--tls-cert-file=" + pki.cert(Scheduler),
		"--tls-private-key-file=" + pki.key(Scheduler),
		"--leader-elect=false",
		"--profiling=false",
	}
}

// kwokNodeLeaseSeconds is the duration of the kwok nodes' Leases (a
// kubelet's default).
const kwokNodeLeaseSeconds = 40

func kwokArgs(l layout, s *state, stageFiles []string) []string {
	args := []string{
		"--kubeconfig=" + l.kubeconfig(Kwok),
		"--manage-all-nodes=false",
		"--manage-nodes-with-label-selector=" + NodeTypeLabel + "=" + NodeTypeKwok,
		"--cidr=" + s.PodCIDR,
		"--node-ip=127.0.0.1",
		// Renew a Lease per node, as a kubelet does. Without one the
		// node-heartbeat-with-lease stage patches the Node's status only
		// every 10 minutes, so the node lifecycle controller finds the node
		// silent after its grace period (50 s), marks it Unknown and every
		// pod on it Ready=False — which kwok never sets back.
		"--node-lease-duration-seconds=" + strconv.Itoa(kwokNodeLeaseSeconds),
		// Without an explicit address kwok serves on 0.0.0.0:<node-port>.
		"--server-address=" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Ports.Kwok)),
		// The port the nodes advertise (status.daemonEndpoints), where
		// the API server fetches logs and runs exec.
		"--node-port=" + strconv.Itoa(s.Ports.Kwok),
		// kwok serves HTTP and HTTPS on one port; the API server
		// verifies this certificate with the cluster CA.
		"--tls-cert-file=" + l.pki().cert(kwokServingCertName),
		"--tls-private-key-file=" + l.pki().key(kwokServingCertName),
		"--config=" + l.kwokOptions(),
		"--config=" + l.kwokConfig(),
	}
	for _, f := range stageFiles {
		args = append(args, "--config="+f)
	}
	return args
}

// nodeCIDRMaskSize is the size of the pod CIDR slice each node gets: /24 for
// pod CIDRs of /20 or larger, 4 bits more than the pod CIDR otherwise.
func nodeCIDRMaskSize(podCIDR string) (int, error) {
	_, n, err := net.ParseCIDR(podCIDR)
	if err != nil {
		return 0, err
	}
	ones, _ := n.Mask.Size()
	if ones <= 20 {
		return 24, nil
	}
	return ones + 4, nil
}

// nodeCIDR is the index-th slice of podCIDR with the node mask size.
func nodeCIDR(podCIDR string, index int) (string, error) {
	_, n, err := net.ParseCIDR(podCIDR)
	if err != nil {
		return "", err
	}
	mask, err := nodeCIDRMaskSize(podCIDR)
	if err != nil {
		return "", err
	}
	ones, _ := n.Mask.Size()
	if index < 0 || index >= 1<<(mask-ones) {
		return "", fmt.Errorf("pod CIDR %s has no room for node %d (/%d per node)", podCIDR, index, mask)
	}
	ip := n.IP.To4()
	v := uint32(ip[0])<<24 | uint32(ip[1])<<16 | uint32(ip[2])<<8 | uint32(ip[3])
	v += uint32(index) << (32 - mask)                              //nolint:gosec // G115: index is checked against the room in the CIDR above
	out := net.IPv4(byte(v>>24), byte(v>>16), byte(v>>8), byte(v)) //nolint:gosec // G115: taking the address's bytes
	return fmt.Sprintf("%s/%d", out, mask), nil
}

// nodeName is the name of the index-th kwok node of a cluster.
func nodeName(cluster string, index int) string {
	return fmt.Sprintf("%s-worker-%d", cluster, index)
}

// kwokNode is the Node object of a simulated node: kwok takes it over because
// of its label and reports it Ready with a lease.
func kwokNode(name, podCIDR string) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				NodeTypeLabel:                    NodeTypeKwok,
				corev1.LabelHostname:             name,
				corev1.LabelOSStable:             "linux",
				corev1.LabelArchStable:           "amd64",
				"node-role.kubernetes.io/worker": "",
			},
			Annotations: map[string]string{
				kwokNodeAnno:                   "fake",
				"node.alpha.kubernetes.io/ttl": "0",
			},
		},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity.DeepCopy(),
		},
	}
	if podCIDR != "" {
		n.Spec.PodCIDR = podCIDR
		n.Spec.PodCIDRs = []string{podCIDR}
	}
	return n
}

// nodeReady reports whether a node is Ready and no longer carries the
// not-ready taint (the scheduler skips nodes that do).
func nodeReady(n *corev1.Node) bool {
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	if !ready {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return false
		}
	}
	return true
}
