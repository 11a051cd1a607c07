package localcluster

// NetworkPolicies (Options.NetworkPolicies): a real NetworkPolicy enforcer
// on every real node, kube-router's firewall (its network policy
// controller) and nothing else of kube-router: no BGP router, no service
// proxy (kube-proxy stays the proxy), no load-balancer allocator, no
// listener (--health-port=0: its health server would serve the process's
// default HTTP mux, which kube-router's main fills with net/http/pprof, on
// every address of the node).
//
// It runs as a process of the node, like kube-proxy: inside the node's
// mount, network and PID namespaces (nsenter), where it programs the
// node's iptables (filter table: KUBE-ROUTER-{INPUT,FORWARD,OUTPUT}, a
// chain per local pod and per policy) and ipsets, with the iptables,
// iptables-save/-restore and ipset commands of the host. Both live in the
// node's network namespace, so they go with it when the node stops;
// nothing is written on the host. It finds its node with
// --hostname-override and the node's pods by their status.hostIP (the
// node's InternalIP). Pod-to-pod traffic on one node crosses the node's
// pod bridge (cni0): it reaches the iptables FORWARD chain because
// net.bridge.bridge-nf-call-iptables is 1 in the node's network namespace
// (a per-namespace sysctl, which Start sets there; the host's stays as it
// is).
//
// It authenticates with a client certificate of the cluster CA for user
// kubeRouterUser, which kubeRouterRBAC lets read what kube-router's
// informers list and watch (it starts them all, whatever it runs):
// pods, namespaces, nodes, NetworkPolicies, Services, Endpoints and
// EndpointSlices. It writes nothing to the API.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netns"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/annexhq/annex/internal/netnsutil"
)

// KubeRouter is the binary of kube-router and its kind of component: it
// runs as NodeComponent(KubeRouter, <node>) on every real node.
const KubeRouter = "kube-router"

const (
	// kubeRouterUser is the user kube-router authenticates as.
	kubeRouterUser = "system:kube-router"
	// kubeRouterCertName is its client certificate, in the PKI directory.
	kubeRouterCertName = "kube-router-client"
	// kubeRouterSyncPeriod is how often kube-router rewrites its rules
	// even when nothing changed (it also does at every change of a pod,
	// namespace or NetworkPolicy).
	kubeRouterSyncPeriod = "1m"
	// bridgeCallIptables is the per-network-namespace sysctl that sends
	// bridged traffic (pod to pod on one node) through iptables.
	bridgeCallIptables = "net/bridge/bridge-nf-call-iptables"
)

// kubeRouterSyncedRule is in kube-router's KUBE-ROUTER-FORWARD chain once
// it has completed a sync (ensureExplicitAccept: added while it rewrites
// the filter table): the node enforces NetworkPolicies.
const kubeRouterSyncedRule = "rule to explicitly ACCEPT traffic that comply to network policies"

// CheckNetworkPolicies is CheckBinaries for Options.NetworkPolicies: nil
// when binDir holds the kube-router binary tools/kube builds and this
// kernel filters bridged traffic with iptables (br_netfilter), else an
// error saying what is missing (wrapping ErrMissingBinaries for the
// binary). CheckRealNodes checks the host's ipset command.
func CheckNetworkPolicies(binDir string) error {
	var errs []error
	if err := missingError(binDir, missingExecutables(binDir, []string{KubeRouter})); err != nil {
		errs = append(errs, err)
	}
	if _, err := os.Stat(filepath.Join("/proc/sys", bridgeCallIptables)); err != nil {
		errs = append(errs, fmt.Errorf("%w: no /proc/sys/%s: NetworkPolicies between pods of one node need br_netfilter (`modprobe br_netfilter`)", ErrRealNodesUnavailable, bridgeCallIptables))
	}
	return errors.Join(errs...)
}

// kubeRouterArgs is kube-router's command line on node n of a cluster
// whose Services come from serviceCIDR.
func kubeRouterArgs(l layout, n realNode, serviceCIDR string) []string {
	return []string{
		"--kubeconfig=" + l.kubeconfig(KubeRouter),
		"--hostname-override=" + n.Name,
		"--run-firewall=true",
		"--run-router=false",
		"--run-service-proxy=false",
		"--run-loadbalancer=false",
		// Its ClusterIP rule (INPUT) and the NodePort range it lets
		// through to the node.
		"--service-cluster-ip-range=" + serviceCIDR,
		"--enable-ipv4=true",
		"--enable-ipv6=false",
		// No listener at all (see the top of this file); metrics are off
		// by default (--metrics-port=0).
		"--health-port=0",
		"--metrics-port=0",
		"--iptables-sync-period=" + kubeRouterSyncPeriod,
		// v1: one line per sync, with its duration.
		"--v=1",
	}
}

// kubeRouterRBAC is the ClusterRole (and its binding) of kubeRouterUser:
// read what kube-router's informers watch, nothing else.
func kubeRouterRBAC() (*rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding) {
	read := []string{"get", "list", "watch"}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: kubeRouterUser},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "namespaces", "nodes", "services", "endpoints"}, Verbs: read},
			{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: read},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: read},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: kubeRouterUser},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: kubeRouterUser}},
	}
	return role, binding
}

// startNetworkPolicies grants kube-router its rights, starts it on every
// real node and returns once each node's rules are in place (a first sync
// done).
func (c *Cluster) startNetworkPolicies(ctx context.Context, cs kubernetes.Interface, nodes []realNode) error {
	role, binding := kubeRouterRBAC()
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterRole %s: %w", role.Name, err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterRoleBinding %s: %w", binding.Name, err)
	}
	l := layout{dir: c.dir}
	c.mu.Lock()
	server := "https://" + c.st.apiAddress()
	bin := filepath.Join(c.st.BinDir, KubeRouter)
	serviceCIDR := c.st.ServiceCIDR
	c.mu.Unlock()
	if err := c.writeClientKubeconfig(KubeRouter, kubeRouterCertName, kubeRouterUser, server); err != nil {
		return err
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return err
	}
	var names []string
	inits := map[string]int{}
	for _, n := range nodes {
		c.mu.Lock()
		nodeInit := c.st.component(NodeComponent(NodeInit, n.Name))
		c.mu.Unlock()
		if nodeInit == nil {
			return fmt.Errorf("node %s has no init: it must run before kube-router starts in it", n.Name)
		}
		inits[n.Name] = nodeInit.PID
		name := NodeComponent(KubeRouter, n.Name)
		args := nsenterArgs(nodeInit.PID, l.node(n.Name).dir, append([]string{bin}, kubeRouterArgs(l, n, serviceCIDR)...)...)
		if err := c.launchInNode(componentState{Name: name, Binary: nsenter, Args: args, Log: l.log(name)}); err != nil {
			return err
		}
		names = append(names, name)
	}
	return c.await(ctx, "kube-router's rules on every real node", names, func(ctx context.Context) error {
		for _, n := range nodes {
			if err := kubeRouterSynced(ctx, inits[n.Name]); err != nil {
				return fmt.Errorf("node %s: %w", n.Name, err)
			}
		}
		return nil
	})
}

// kubeRouterSynced succeeds once kube-router's chains are hooked into the
// filter table of the node whose init is pid and it has completed a sync.
func kubeRouterSynced(ctx context.Context, pid int) error {
	rules, err := nodeIptablesSave(ctx, pid, "filter")
	if err != nil {
		return err
	}
	for _, want := range []string{"-A FORWARD -m comment --comment \"kube-router netpol", kubeRouterSyncedRule} {
		if !strings.Contains(rules, want) {
			return fmt.Errorf("kube-router has not synced yet: no %q in the filter table", want)
		}
	}
	return nil
}

// nodeIptablesSave returns iptables-save's dump of a table of the node
// whose init is pid (its network namespace).
func nodeIptablesSave(ctx context.Context, pid int, table string) (string, error) {
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, nsenter, fmt.Sprintf("--target=%d", pid), "--net", "--", "iptables-save", "-t", table)
	cmd.Env = append(componentEnv(os.Environ()), nodePath)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("iptables-save -t %s: %w: %s", table, err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("iptables-save -t %s: %w", table, err)
	}
	return string(out), nil
}

// filterBridgedTraffic sets bridgeCallIptables in the network namespace of
// process pid (a real node's init): pod-to-pod traffic on the node's pod
// bridge goes through iptables, where kube-router filters it.
func filterBridgedTraffic(pid int) error {
	h, err := netns.GetFromPid(pid)
	if err != nil {
		return fmt.Errorf("network namespace of pid %d: %w", pid, err)
	}
	defer h.Close()
	return netnsutil.In(h, func() error {
		return netnsutil.WriteSysctls(map[string]string{bridgeCallIptables: "1"})
	})
}

// writeClientKubeconfig writes the kubeconfig of component comp: server
// and the client certificate certName (for user).
func (c *Cluster) writeClientKubeconfig(comp, certName, user, server string) error {
	l := layout{dir: c.dir}
	files := l.pki()
	var pems [3][]byte
	for i, p := range []string{files.caCert(), files.cert(certName), files.key(certName)} {
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		pems[i] = data
	}
	return writeKubeconfig(l.kubeconfig(comp), kubeconfigFor(c.st.Name, user, server, pems[0], pems[1], pems[2]))
}
