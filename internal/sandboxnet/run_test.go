package sandboxnet

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

func testNode(name string, kwok bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if kwok {
		n.Annotations = map[string]string{KwokNodeAnnotation: "fake"}
	}
	return n
}

func testPod(name, uid, node, ip string, labelled bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip},
	}
	if labelled {
		p.Labels = map[string]string{LabelSandboxNetns: "true"}
	}
	return p
}

// runController runs a pod controller for cluster "c" until the returned
// stop is called.
func runController(t *testing.T, n naming, cs kubernetes.Interface) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pc := newPodController(n, "c", cs, testr.New(t).WithValues("cluster", "c"))
	done := make(chan struct{})
	go func() { defer close(done); pc.run(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestRunPodsController(t *testing.T) {
	n := testNaming(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := n.setup(ctx, []Cluster{{Name: "c", Index: 0}}); err != nil {
		t.Fatal(err)
	}
	// A namespace left by an earlier run for a pod that is gone.
	leftover := n.pod("c", "dead0000-0000-4000-8000-000000000000")
	h, _, err := ensureNetns(leftover)
	if err != nil {
		t.Fatal(err)
	}
	h.Close()

	const (
		uidA = "a0000001-0000-4000-8000-000000000000" // labelled, kwok node
		uidV = "a0000002-0000-4000-8000-000000000000" // labelled, virtual node
		uidU = "a0000003-0000-4000-8000-000000000000" // not labelled
		uidL = "a0000004-0000-4000-8000-000000000000" // labelled, IP later
	)
	cs := fake.NewClientset(
		testNode("kwok-0", true), testNode("virtual", false),
		testPod("a", uidA, "kwok-0", "10.200.0.5", true),
		testPod("v", uidV, "virtual", "10.200.0.6", true),
		testPod("u", uidU, "kwok-0", "10.200.0.7", false),
		testPod("l", uidL, "kwok-0", "", true),
	)
	stop := runController(t, n, cs)
	router := n.router("c")
	echoOf := func(ip string) (Echo, error) {
		return getEcho(ctx, t, router, netip.MustParseAddr(ip))
	}
	eventually(t, "pod a's namespace", func() bool { return NetnsExists(n.pod("c", uidA)) })
	e, err := echoOf("10.200.0.5")
	if err != nil || e.Pod != "a" || e.Namespace != "ns" || e.Cluster != "c" {
		t.Fatalf("echo of pod a: %+v, %v", e, err)
	}
	eventually(t, "the leftover namespace to go", func() bool { return !NetnsExists(leftover) })
	for _, uid := range []string{uidV, uidU, uidL} {
		if NetnsExists(n.pod("c", types.UID(uid))) {
			t.Errorf("pod %s has a namespace", uid)
		}
	}

	// l gets its IP.
	l := testPod("l", uidL, "kwok-0", "10.200.0.8", true)
	if _, err := cs.CoreV1().Pods("ns").UpdateStatus(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pod l's namespace", func() bool { return NetnsExists(n.pod("c", uidL)) })
	if e, err := echoOf("10.200.0.8"); err != nil || e.Pod != "l" {
		t.Errorf("echo of pod l: %+v, %v", e, err)
	}

	// A restart adopts: no duplicate routes, the echo servers answer again.
	stop()
	runController(t, n, cs)
	if e, err := echoOf("10.200.0.5"); err != nil || e.Pod != "a" {
		t.Errorf("echo of pod a after a restart: %+v, %v", e, err)
	}
	rh := handleIn(t, router)
	for _, ip := range []string{"10.200.0.5", "10.200.0.8"} {
		if rts := routesTo(t, rh, netip.MustParsePrefix(ip+"/32")); len(rts) != 1 {
			t.Errorf("routes to %s after a restart: %v", ip, rts)
		}
	}

	// Unlabelled, terminal, deleted: the namespace goes.
	a := testPod("a", uidA, "kwok-0", "10.200.0.5", false)
	if _, err := cs.CoreV1().Pods("ns").Update(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pod a's namespace to go once unlabelled", func() bool { return !NetnsExists(n.pod("c", uidA)) })
	if rts := routesTo(t, rh, netip.MustParsePrefix("10.200.0.5/32")); len(rts) != 0 {
		t.Errorf("routes to the unlabelled pod a: %v", rts)
	}
	l.Status.Phase = corev1.PodFailed
	if _, err := cs.CoreV1().Pods("ns").UpdateStatus(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pod l's namespace to go once failed", func() bool { return !NetnsExists(n.pod("c", uidL)) })

	// A new pod with a reused name and IP gets a fresh namespace; deleting it removes it.
	const uidA2 = "b0000001-0000-4000-8000-000000000000"
	if _, err := cs.CoreV1().Pods("ns").Create(ctx, testPod("b", uidA2, "kwok-0", "10.200.0.5", true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pod b's namespace", func() bool { return NetnsExists(n.pod("c", uidA2)) })
	if e, err := echoOf("10.200.0.5"); err != nil || e.Pod != "b" {
		t.Errorf("echo at 10.200.0.5: %+v, %v; want pod b", e, err)
	}
	if err := cs.CoreV1().Pods("ns").Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pod b's namespace to go once deleted", func() bool { return !NetnsExists(n.pod("c", uidA2)) })
}
