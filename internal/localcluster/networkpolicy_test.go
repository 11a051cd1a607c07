package localcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestNetworkPolicyOptions: kube-router needs real nodes, and says what is
// missing.
func TestNetworkPolicyOptions(t *testing.T) {
	_, err := Options{Name: "a", Dir: t.TempDir(), NetworkPolicies: true}.withDefaults()
	if err == nil || !strings.Contains(err.Error(), "NetworkPolicies needs RealNodes") {
		t.Errorf("withDefaults() with NetworkPolicies and no real node: error %v, want one saying it needs RealNodes", err)
	}
	if err := CheckNetworkPolicies(t.TempDir()); err == nil || !strings.Contains(err.Error(), KubeRouter) || !strings.Contains(err.Error(), "make tools") {
		t.Errorf("CheckNetworkPolicies(empty dir) = %v, want an error naming kube-router and `make tools`", err)
	}
}

// TestKubeRouterArgs: only the firewall runs, for the node's own name, with
// no listener; its role only reads.
func TestKubeRouterArgs(t *testing.T) {
	st := state{Name: "p", PodCIDR: DefaultPodCIDR, ServiceCIDR: "10.97.0.0/16", RealNodes: 2, NodeNetworkCIDR: "172.31.9.0/24", NetworkPolicies: true}
	nodes, err := st.realNodes()
	if err != nil {
		t.Fatal(err)
	}
	args := kubeRouterArgs(layout{dir: "/d"}, nodes[1], st.ServiceCIDR)
	for _, want := range []string{
		"--kubeconfig=/d/kubeconfigs/kube-router.kubeconfig",
		"--hostname-override=p-node-1",
		"--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--run-loadbalancer=false",
		"--service-cluster-ip-range=10.97.0.0/16",
		"--health-port=0", "--metrics-port=0",
	} {
		if !slices.Contains(args, want) {
			t.Errorf("kube-router args lack %s: %v", want, args)
		}
	}
	role, binding := kubeRouterRBAC()
	for _, r := range role.Rules {
		for _, v := range r.Verbs {
			if v != "get" && v != "list" && v != "watch" {
				t.Errorf("kube-router's role may %s %v", v, r.Resources)
			}
		}
	}
	if binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 || binding.Subjects[0].Name != kubeRouterUser {
		t.Errorf("binding %+v does not bind %s to %s", binding, kubeRouterUser, role.Name)
	}
}

// onCI reports whether the tests run in CI (CI=true), where `make test`
// builds and installs everything real nodes need: there a missing piece
// fails a test instead of skipping it.
func onCI() bool { return os.Getenv("CI") == "true" }

// requireNetworkPolicies reports whether kube-router can run here; if not,
// the test fails in CI and logs why otherwise.
func requireNetworkPolicies(t *testing.T) bool {
	t.Helper()
	err := CheckNetworkPolicies(DefaultBinDir())
	if err == nil {
		return true
	}
	if onCI() {
		t.Fatalf("NetworkPolicies: %v", err)
	}
	t.Logf("without NetworkPolicies: %v", err)
	return false
}

// policyPod is an echo pod in namespace ns on node, labelled app=name.
func policyPod(ns, name, image, node string) *corev1.Pod {
	p := echoPod(name, image, node)
	p.Namespace = ns
	return p
}

// connects reports whether pod ns/from gets the echo server's answer from
// ip:8080 (a TCP connection and a request) within timeout, and what it
// printed otherwise.
func connects(ctx context.Context, cfg *rest.Config, ns, from, ip string, timeout time.Duration) (bool, string) {
	out, stderr, err := execIn(ctx, cfg, ns, from, "echo-server", "get", "-timeout", timeout.String(), "http://"+net.JoinHostPort(ip, "8080")+"/")
	if err == nil && strings.Contains(out, `"hostname":`) {
		return true, ""
	}
	return false, strings.TrimSpace(fmt.Sprintf("%s %s %v", out, stderr, err))
}

// checkNetworkPolicies shows with real packets that kube-router enforces
// NetworkPolicies on the real nodes a and b: pods in namespaces x and y
// on both; without policies all connect; a default-deny ingress policy in
// y blocks x → y on one node and across nodes (and a pod of y still gets
// Ready: the kubelet's probes pass); a rule with a namespaceSelector lets
// x in again; an egress ipBlock 0.0.0.0/0 with one pod's /32 excepted
// blocks that pod only. It logs how long each new policy took to act.
func checkNetworkPolicies(ctx context.Context, t *testing.T, c *Cluster, cfg *rest.Config, image string, a, b RealNode) {
	cs := kubernetes.NewForConfigOrDie(cfg)
	for _, ns := range []string{"x", "y"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pods := []*corev1.Pod{
		policyPod("x", "xa", image, a.Name), policyPod("x", "xb", image, b.Name),
		policyPod("y", "ya", image, a.Name), policyPod("y", "yb", image, b.Name),
	}
	for _, p := range pods {
		if _, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ip := map[string]string{}
	for _, p := range pods {
		if err := poll(ctx, 60*time.Second, func() (bool, error) {
			got, err := cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			if err == nil && podReady(got) {
				ip[p.Name] = got.Status.PodIP
				return true, nil
			}
			return false, err
		}); err != nil {
			t.Fatalf("pod %s/%s not Ready: %v", p.Namespace, p.Name, err)
		}
	}
	const timeout = 2 * time.Second
	type conn struct{ ns, from, to string }
	expect := func(when string, want bool, conns ...conn) {
		t.Helper()
		for _, cn := range conns {
			if got, out := connects(ctx, cfg, cn.ns, cn.from, ip[cn.to], timeout); got != want {
				t.Errorf("%s: %s/%s → %s (%s): connects %v, want %v (%s)", when, cn.ns, cn.from, cn.to, ip[cn.to], got, want, out)
			}
		}
	}
	// until polls one connection until it connects (want) or not, and
	// returns how long that took after since.
	until := func(what string, want bool, cn conn, since time.Time) time.Duration {
		t.Helper()
		var last string
		if err := poll(ctx, 30*time.Second, func() (bool, error) {
			got, out := connects(ctx, cfg, cn.ns, cn.from, ip[cn.to], 500*time.Millisecond)
			last = out
			return got == want, nil
		}); err != nil {
			t.Fatalf("%s: %s/%s → %s never %s: %v (last: %s)\nkube-router's log on %s:\n%s", what, cn.ns, cn.from, cn.to,
				map[bool]string{true: "connected", false: "failed"}[want], err, last, a.Name, logTail(c.LogPath(NodeComponent(KubeRouter, a.Name)), 20))
		}
		d := time.Since(since)
		t.Logf("%s: %s/%s → %s %s %s after the policy was created", what, cn.ns, cn.from, cn.to, map[bool]string{true: "connects", false: "blocked"}[want], d.Round(10*time.Millisecond))
		return d
	}
	sameNode, crossNode := conn{"x", "xa", "ya"}, conn{"x", "xa", "yb"}

	// No policy: everything connects, on one node and across.
	expect("no policy", true, sameNode, crossNode, conn{"x", "xb", "yb"}, conn{"y", "ya", "xb"}, conn{"y", "yb", "ya"})

	// Default deny of ingress in y.
	nps := cs.NetworkingV1().NetworkPolicies("y")
	t0 := time.Now()
	if _, err := nps.Create(ctx, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-ingress"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	until("default deny in y", false, sameNode, t0)
	expect("default deny in y", false, crossNode, conn{"x", "xb", "yb"}, conn{"x", "xb", "ya"}, conn{"y", "yb", "ya"})
	expect("default deny in y (egress from y, ingress to x)", true, conn{"y", "ya", "xb"}, conn{"x", "xa", "xb"})
	// A new pod of y gets Ready: the kubelet's readiness probe comes
	// from its node, which kube-router lets in.
	t1 := time.Now()
	if _, err := cs.CoreV1().Pods("y").Create(ctx, policyPod("y", "late", image, b.Name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, 60*time.Second, func() (bool, error) {
		p, err := cs.CoreV1().Pods("y").Get(ctx, "late", metav1.GetOptions{})
		if err == nil && podReady(p) {
			ip["late"] = p.Status.PodIP
			return true, nil
		}
		return false, err
	}); err != nil {
		t.Errorf("pod y/late not Ready under default deny: %v", err)
	} else {
		t.Logf("pod y/late Ready under default deny in %s", time.Since(t1).Round(10*time.Millisecond))
		expect("default deny in y, a pod started since", false, conn{"x", "xb", "late"})
	}
	for _, p := range []string{"ya", "yb"} {
		if got, err := cs.CoreV1().Pods("y").Get(ctx, p, metav1.GetOptions{}); err != nil || !podReady(got) {
			t.Errorf("pod y/%s not Ready under default deny: %v", p, err)
		}
	}

	// Ingress from namespace x allowed again.
	t0 = time.Now()
	if _, err := nps.Create(ctx, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "from-x"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "x"}},
			}}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	until("ingress from x into y", true, sameNode, t0)
	expect("ingress from x into y", true, crossNode, conn{"x", "xb", "yb"}, conn{"x", "xb", "late"})
	expect("ingress from x into y (y itself still denied)", false, conn{"y", "yb", "ya"})

	// Egress of x/xa: anywhere but yb.
	t0 = time.Now()
	if _, err := cs.NetworkingV1().NetworkPolicies("x").Create(ctx, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "xa-not-to-yb"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "xa"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{
				IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{ip["yb"] + "/32"}},
			}}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	until("egress of x/xa except yb", false, crossNode, t0)
	expect("egress of x/xa except yb", true, sameNode, conn{"x", "xa", "late"}, conn{"x", "xb", "yb"})

	// Its ipsets are the node's: the host has none.
	c.mu.Lock()
	initPID := c.st.component(NodeComponent(NodeInit, a.Name)).PID
	c.mu.Unlock()
	inNode, err := exec.CommandContext(ctx, "nsenter", fmt.Sprintf("--target=%d", initPID), "--net", "--", "ipset", "list", "-name").CombinedOutput()
	if err != nil || !strings.Contains(string(inNode), "KUBE-") {
		t.Errorf("ipsets of %s: %v %q, want kube-router's KUBE-* sets", a.Name, err, inNode)
	}
	if onHost, err := exec.CommandContext(ctx, "ipset", "list", "-name").CombinedOutput(); err != nil || strings.Contains(string(onHost), "KUBE-") {
		t.Errorf("ipsets of the host: %v %q, want none of kube-router's", err, onHost)
	}

	// kube-router read everything it needed.
	for _, n := range []RealNode{a, b} {
		log := c.LogPath(NodeComponent(KubeRouter, n.Name))
		data, err := os.ReadFile(log)
		if err != nil {
			t.Error(err)
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if l := strings.ToLower(line); strings.Contains(l, "forbidden") || strings.Contains(l, "failed") || strings.HasPrefix(line, "E") {
				t.Errorf("kube-router on %s logged: %s", n.Name, line)
			}
		}
	}
}
