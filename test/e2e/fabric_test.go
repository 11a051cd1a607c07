package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/cli/sandbox"
	"github.com/annexhq/annex/internal/fabric"
	"github.com/annexhq/annex/internal/localcluster"
)

// The fabric's checks of TestRealNodeSandbox (clusters with two real nodes
// each, the gateway on node 0).

// realNode is the named real node of c.
func realNode(t *testing.T, c *localcluster.Cluster, name string) localcluster.RealNode {
	t.Helper()
	for _, n := range c.RealNodes() {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("%s has no real node %s (%v)", c.Name(), name, c.RealNodeNames())
	return localcluster.RealNode{}
}

// fabricProgrammed waits until every real node of c reports Programmed
// True in its FabricNode, the gateway node with reason GatewayNode and the
// others routing want (at least) to gateway.
func fabricProgrammed(ctx context.Context, t *testing.T, c *localcluster.Cluster, cl client.Client, gateway string, want ...string) {
	t.Helper()
	eventually(t, 60*time.Second, c.Name()+"'s nodes programmed by the fabric, gateway on "+gateway, func() error {
		for _, n := range c.RealNodeNames() {
			fn := &networkingv1alpha1.FabricNode{}
			if err := cl.Get(ctx, client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: n}, fn); err != nil {
				return err
			}
			cond := meta.FindStatusCondition(fn.Status.Conditions, networkingv1alpha1.ConditionProgrammed)
			if cond == nil || cond.Status != metav1.ConditionTrue || fn.Status.GatewayNode != gateway {
				return fmt.Errorf("FabricNode %s: gateway %q, %+v", n, fn.Status.GatewayNode, cond)
			}
			wantReason := networkingv1alpha1.ReasonRoutesProgrammed
			if n == gateway {
				wantReason = networkingv1alpha1.ReasonGatewayNode
			}
			if cond.Reason != wantReason {
				return fmt.Errorf("FabricNode %s: reason %s (%s), want %s", n, cond.Reason, cond.Message, wantReason)
			}
			if n == gateway {
				continue
			}
			for _, w := range want {
				found := false
				for _, d := range fn.Status.Destinations {
					found = found || d == w
				}
				if !found {
					return fmt.Errorf("FabricNode %s routes %v, not %s", n, fn.Status.Destinations, w)
				}
			}
		}
		return nil
	})
}

// fabricPID is the host PID of annex-fabric on the node whose network
// namespace is netns (a host-network container: it shares it).
func fabricPID(t *testing.T, netns string) int {
	t.Helper()
	want, err := os.Stat(netns)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.HasPrefix(string(cmdline), "/annex-fabric\x00") {
			continue
		}
		if st, err := os.Stat(filepath.Join("/proc", e.Name(), "ns", "net")); err == nil && os.SameFile(st, want) {
			return pid
		}
	}
	return 0
}

// inNode runs argv in the network namespace netns.
func inNode(netns string, argv ...string) (string, error) {
	out, err := exec.Command("nsenter", append([]string{"--net=" + netns, "--"}, argv...)...).CombinedOutput()
	return string(out), err
}

// checkFabricRestart plants a route of the fabric's protocol on node (as
// a killed predecessor could have left), SIGKILLs its annex-fabric and
// checks that the restarted one removes the route and programs the node
// again.
func checkFabricRestart(ctx context.Context, t *testing.T, c *localcluster.Cluster, cl client.Client, node, gateway string) {
	t.Helper()
	netns := realNode(t, c, node).Netns
	stale := "10.250.0.0/16"
	if out, err := inNode(netns, "ip", "route", "add", "unreachable", stale, "proto", strconv.Itoa(fabric.RouteProtocol)); err != nil {
		t.Fatalf("plant a stale route: %v: %s", err, out)
	}
	var pid int
	eventually(t, 30*time.Second, "annex-fabric running on "+node, func() error {
		if pid = fabricPID(t, netns); pid == 0 {
			return fmt.Errorf("no annex-fabric process in %s", netns)
		}
		return nil
	})
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	eventually(t, 90*time.Second, "a new annex-fabric on "+node+" removes the stale route", func() error {
		if p := fabricPID(t, netns); p == 0 || p == pid {
			return fmt.Errorf("annex-fabric not restarted yet (pid %d)", p)
		}
		out, err := inNode(netns, "ip", "-4", "route", "show", "proto", strconv.Itoa(fabric.RouteProtocol))
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		if strings.Contains(out, "10.250.0.0/16") {
			return fmt.Errorf("stale route still there:\n%s", out)
		}
		if !strings.Contains(out, "via") {
			return fmt.Errorf("no route via the gateway node:\n%s", out)
		}
		return nil
	})
	t.Logf("annex-fabric on %s SIGKILLed: restarted, stale route removed and routes back %s later", node, time.Since(killed).Round(100*time.Millisecond))
	fabricProgrammed(ctx, t, c, cl, gateway)
}

// checkFabricNodeConfined: a token bound to the fabric's pod on node
// writes that node's FabricNode and no other one (admission policy
// annex-fabric-node).
func checkFabricNodeConfined(ctx context.Context, t *testing.T, c *localcluster.Cluster, cl client.Client, node, other string) {
	t.Helper()
	pods := &corev1.PodList{}
	if err := cl.List(ctx, pods, client.InNamespace(corev1alpha1.AgentNamespace), client.MatchingLabels{"app.kubernetes.io/name": "annex-fabric"}); err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	for i := range pods.Items {
		if pods.Items[i].Spec.NodeName == node {
			pod = &pods.Items[i]
		}
	}
	if pod == nil {
		t.Fatalf("no annex-fabric pod on %s", node)
	}
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	tr, err := cs.CoreV1().ServiceAccounts(corev1alpha1.AgentNamespace).CreateToken(ctx, "annex-fabric", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(int64(600)),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	as := rest.AnonymousClientConfig(cfg)
	as.BearerToken = tr.Status.Token
	fc, err := client.New(as, client.Options{Scheme: cl.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	patch := func(name string) error {
		fn := &networkingv1alpha1.FabricNode{}
		if err := fc.Get(ctx, client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: name}, fn); err != nil {
			return err
		}
		orig := fn.DeepCopy()
		fn.Status.Destinations = append(fn.Status.Destinations, "10.250.0.0/16")
		return fc.Status().Patch(ctx, fn, client.MergeFrom(orig))
	}
	err = patch(other)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "annex-fabric-node") {
		t.Fatalf("the fabric of %s patching FabricNode %s: %v, want Forbidden by annex-fabric-node", node, other, err)
	}
	t.Logf("the fabric of %s writing %s's FabricNode: %v", node, other, err)
	if err := patch(node); err != nil {
		t.Fatalf("the fabric of %s patching its own FabricNode: %v", node, err)
	}
}

// checkNodesAsBefore compares every real node of c with the network state
// the sandbox recorded before it installed Annex.
func checkNodesAsBefore(ctx context.Context, t *testing.T, c *localcluster.Cluster) {
	t.Helper()
	for _, n := range c.RealNodes() {
		before, err := os.ReadFile(filepath.Join(c.Dir(), "nodes", n.Name, sandbox.BeforeAnnexFile))
		if err != nil {
			t.Fatal(err)
		}
		var now string
		// kube-router, where it runs, rewrites its rules at least once a
		// minute (kubeRouterSyncPeriod) even if it missed a pod's deletion.
		eventually(t, 90*time.Second, n.Name+"'s routes, rules and nftables ruleset as before Annex", func() error {
			now, err = sandbox.NodeNetworkState(ctx, n.Netns)
			if err != nil {
				return err
			}
			if diff := lineDiff(sortChains(string(before)), sortChains(now)); diff != "" {
				return fmt.Errorf("lines that differ (-before +now):\n%s", diff)
			}
			return nil
		})
		t.Logf("%s: as before Annex (%d lines of routes, rules and nftables rules)", n.Name, strings.Count(now, "\n"))
	}
}

// lineDiff lists the lines only before has (-) and only now has (+), each
// as often as it is missing from the other: short enough to be read whole
// at the end of a long log, where a diff with context would be cut.
func lineDiff(before, now string) string {
	count := map[string]int{}
	for _, l := range strings.Split(before, "\n") {
		count[l]++
	}
	for _, l := range strings.Split(now, "\n") {
		count[l]--
	}
	var out []string
	for l, n := range count {
		for ; n > 0; n-- {
			out = append(out, "- "+l)
		}
		for ; n < 0; n++ {
			out = append(out, "+ "+l)
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// sortChains sorts the rules inside each nftables chain of a ruleset's
// text: kube-proxy rewrites its chains (KUBE-SERVICES) with the Services in
// an order of its own, which says nothing about what was added or left.
func sortChains(state string) string {
	lines := strings.Split(state, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "chain ") || !strings.HasSuffix(l, "{") {
			continue
		}
		end := i + 1
		for end < len(lines) && strings.TrimSpace(lines[end]) != "}" {
			end++
		}
		slices.Sort(lines[i+1 : end])
		i = end
	}
	return strings.Join(lines, "\n")
}
