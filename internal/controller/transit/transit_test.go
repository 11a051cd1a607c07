package transit

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/agent"
)

func pod(name, node, transit string, phase corev1.PodPhase) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, CreationTimestamp: metav1.Now()}, Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: phase}}
	if transit != "" {
		p.Annotations = map[string]string{corev1alpha1.AnnotationTransitAddress: transit}
	}
	return p
}

func TestReconcile(t *testing.T) {
	scheme, err := agent.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	beta := &corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "beta"}, Spec: corev1alpha1.ForeignClusterSpec{ClusterID: "beta"}}
	gamma := &corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "gamma"}, Spec: corev1alpha1.ForeignClusterSpec{ClusterID: "gamma"}}
	kept := pod("kept", "annex-beta", "10.70.0.9", corev1.PodRunning)
	kept.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Hour))
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(beta, gamma,
		kept,
		pod("duplicate", "annex-beta", "10.70.0.9", corev1.PodRunning), // a younger claim on kept's address
		pod("outside", "annex-beta", "192.168.0.1", corev1.PodRunning),
		pod("new", "annex-beta", "", corev1.PodPending),
		pod("local", "kwok-0", "", corev1.PodRunning),
		pod("done", "annex-beta", "10.70.0.3", corev1.PodSucceeded),
	).Build()
	r, err := New(c, netip.MustParsePrefix("10.70.0.0/16"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	reconcileAll := func() {
		for _, name := range []string{"kept", "duplicate", "outside", "new", "local", "done"} {
			if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: "shop", Name: name}}); err != nil {
				t.Fatalf("reconcile %s: %v", name, err)
			}
		}
	}
	read := func() map[string]string {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, p := range pods.Items {
			out[p.Name] = p.Annotations[corev1alpha1.AnnotationTransitAddress]
		}
		return out
	}
	reconcileAll()
	got := read()
	// kept keeps its address (restored before anything is handed out);
	// duplicate and outside get new ones; the finished pod's is released.
	if got["kept"] != "10.70.0.9" {
		t.Errorf("kept: %s, want 10.70.0.9", got["kept"])
	}
	seen := map[string]string{}
	for _, name := range []string{"kept", "duplicate", "outside", "new"} {
		a, err := netip.ParseAddr(got[name])
		if err != nil || !netip.MustParsePrefix("10.70.0.0/16").Contains(a) {
			t.Errorf("%s: transit address %q", name, got[name])
		}
		if other, dup := seen[got[name]]; dup {
			t.Errorf("%s and %s share %s", name, other, got[name])
		}
		seen[got[name]] = name
	}
	if got["local"] != "" {
		t.Errorf("a local pod got a transit address %s", got["local"])
	}
	if _, held := r.alloc.Owner(netip.MustParseAddr("10.70.0.3")); held {
		t.Error("a finished pod's address is still held")
	}

	// Stable: a second pass (and a restarted reconciler) changes nothing.
	reconcileAll()
	if diff := cmp.Diff(got, read()); diff != "" {
		t.Errorf("second pass changed addresses (-before +after):\n%s", diff)
	}
	r2, _ := New(c, netip.MustParsePrefix("10.70.0.0/16"))
	r = r2
	reconcileAll()
	if diff := cmp.Diff(got, read()); diff != "" {
		t.Errorf("restart changed addresses (-before +after):\n%s", diff)
	}

	// A deleted pod's address is released.
	if err := c.Delete(ctx, pod("new", "", "", "")); err != nil {
		t.Fatal(err)
	}
	reconcileAll()
	if _, held := r.alloc.Owner(netip.MustParseAddr(got["new"])); held {
		t.Errorf("deleted pod's address %s still held", got["new"])
	}
}

// TestSinglePeer: with one peer no pod needs a transit address (no write);
// one a pod already has is kept; a second peer gives every pod one.
func TestSinglePeer(t *testing.T) {
	scheme, err := agent.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	beta := &corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "beta"}, Spec: corev1alpha1.ForeignClusterSpec{ClusterID: "beta"}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(beta,
		pod("new", "annex-beta", "", corev1.PodPending),
		pod("had", "annex-beta", "10.70.0.9", corev1.PodRunning),
	).Build()
	r, err := New(c, netip.MustParsePrefix("10.70.0.0/16"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	annotation := func(name string) string {
		p := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: name}, p); err != nil {
			t.Fatal(err)
		}
		return p.Annotations[corev1alpha1.AnnotationTransitAddress]
	}
	reconcileAll := func() {
		for _, name := range []string{"new", "had"} {
			if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: "shop", Name: name}}); err != nil {
				t.Fatalf("reconcile %s: %v", name, err)
			}
		}
	}
	reconcileAll()
	if a := annotation("new"); a != "" {
		t.Errorf("a pod got transit address %s with a single peer", a)
	}
	if a := annotation("had"); a != "10.70.0.9" {
		t.Errorf("a pod's transit address became %q with a single peer, want it kept", a)
	}
	gamma := &corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "gamma"}, Spec: corev1alpha1.ForeignClusterSpec{ClusterID: "gamma"}}
	if err := c.Create(ctx, gamma); err != nil {
		t.Fatal(err)
	}
	reconcileAll()
	if a, err := netip.ParseAddr(annotation("new")); err != nil || a == netip.MustParseAddr("10.70.0.9") {
		t.Errorf("with a second peer: transit address %q", annotation("new"))
	}
}
