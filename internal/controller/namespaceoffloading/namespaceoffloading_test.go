package namespaceoffloading

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/controller/replicator"
)

func TestMatches(t *testing.T) {
	node := labels.Set{"type": "virtual-node", corev1alpha1.LabelRemoteClusterID: "beta", "region": "eu"}
	term := func(key string, op corev1.NodeSelectorOperator, vals ...string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: op, Values: vals}}}
	}
	for _, tc := range []struct {
		name string
		sel  *corev1.NodeSelector
		want bool
	}{
		{"nil selects all", nil, true},
		{"In", &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term("region", corev1.NodeSelectorOpIn, "eu", "us")}}, true},
		{"NotIn", &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term("region", corev1.NodeSelectorOpNotIn, "eu")}}, false},
		{"terms ORed", &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term("region", corev1.NodeSelectorOpIn, "us"), term("type", corev1.NodeSelectorOpExists)}}, true},
		{"DoesNotExist", &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term("gpu", corev1.NodeSelectorOpDoesNotExist)}}, true},
		{"empty term matches nothing", &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Matches(tc.sel, node)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Matches = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTargets(t *testing.T) {
	e := func(id string, phase offloadingv1alpha1.RemoteNamespacePhase) offloadingv1alpha1.ProviderNamespaceStatus {
		return offloadingv1alpha1.ProviderNamespaceStatus{ClusterID: id, Phase: phase}
	}
	ready, pending, failed := offloadingv1alpha1.RemoteNamespaceReady, offloadingv1alpha1.RemoteNamespacePending, offloadingv1alpha1.RemoteNamespaceFailed
	for _, tc := range []struct {
		name    string
		entries []offloadingv1alpha1.ProviderNamespaceStatus
		want    []string
	}{
		{name: "none", want: nil},
		{name: "ready ones only, sorted", entries: []offloadingv1alpha1.ProviderNamespaceStatus{e("gamma", ready), e("beta", pending), e("alpha", ready)}, want: []string{"alpha", "gamma"}},
		{name: "none ready yet: the pending ones", entries: []offloadingv1alpha1.ProviderNamespaceStatus{e("gamma", pending), e("beta", failed), e("alpha", pending)}, want: []string{"alpha", "gamma"}},
		{name: "only refusals", entries: []offloadingv1alpha1.ProviderNamespaceStatus{e("beta", failed)}, want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Targets(tc.entries)); diff != "" {
				t.Errorf("Targets (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReconcile(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = corev1alpha1.AddToScheme(s)
	_ = offloadingv1alpha1.AddToScheme(s)
	vn := func(id, region string) *corev1alpha1.VirtualNode {
		return &corev1alpha1.VirtualNode{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: "annex-peer-" + id},
			Spec: corev1alpha1.VirtualNodeSpec{ClusterID: id, Labels: map[string]string{"region": region}}}
	}
	nso := &offloadingv1alpha1.NamespaceOffloading{ObjectMeta: metav1.ObjectMeta{Name: "offloading", Namespace: "shop", Generation: 1},
		Spec: offloadingv1alpha1.NamespaceOffloadingSpec{PodOffloadingStrategy: offloadingv1alpha1.PodOffloadingRemote,
			ClusterSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "region", Operator: corev1.NodeSelectorOpIn, Values: []string{"eu"}}}}}}}}
	// A replica another consumer ("delta") made here must be left alone.
	replica := &offloadingv1alpha1.RemoteNamespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "annex-tenant-delta",
		Labels:      map[string]string{corev1alpha1.LabelRemoteClusterID: "delta", corev1alpha1.LabelManagedBy: "annex", corev1alpha1.LabelSourceNamespace: "shop"},
		Annotations: map[string]string{replicator.AnnotationOriginNamespace: "annex-peer-alpha"}}}
	c := fake.NewClientBuilder().WithScheme(s).
		WithObjects(nso, vn("beta", "eu"), vn("gamma", "us"), replica, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}).
		WithStatusSubresource(&offloadingv1alpha1.NamespaceOffloading{}, &offloadingv1alpha1.RemoteNamespace{}).Build()
	r := &Reconciler{Client: c, LocalClusterID: "alpha"}
	ctx := context.Background()
	reconcileOnce := func() {
		t.Helper()
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(nso)}); err != nil {
			t.Fatal(err)
		}
	}
	reconcileOnce()

	rn := &offloadingv1alpha1.RemoteNamespace{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "annex-peer-beta", Name: "shop"}, rn); err != nil {
		t.Fatalf("no RemoteNamespace for beta: %v", err)
	}
	if diff := cmp.Diff(offloadingv1alpha1.RemoteNamespaceSpec{SourceNamespace: "shop", RemoteNamespace: "shop-alpha"}, rn.Spec); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "annex-peer-gamma", Name: "shop"}, &offloadingv1alpha1.RemoteNamespace{}); err == nil {
		t.Error("gamma does not match the selector but got a RemoteNamespace")
	}
	ns := &corev1.Namespace{}
	_ = c.Get(ctx, client.ObjectKey{Name: "shop"}, ns)
	if diff := cmp.Diff(map[string]string{corev1alpha1.LabelOffloading: "true", corev1alpha1.LabelOffloadingStrategy: "Remote"}, ns.Labels); diff != "" {
		t.Errorf("namespace labels (-want +got):\n%s", diff)
	}
	// Pods created before the provider answers go to its virtual node and
	// wait there for the remote namespace.
	if got := ns.Annotations[corev1alpha1.AnnotationOffloadingClusters]; got != "beta" {
		t.Errorf("offloading-clusters while beta's remote namespace is pending = %q, want beta", got)
	}

	// The provider's answer arrives (through the replicator).
	rn.Status = offloadingv1alpha1.RemoteNamespaceStatus{Phase: offloadingv1alpha1.RemoteNamespaceReady,
		Conditions: []metav1.Condition{{Type: "Ready", Status: "True", Reason: "Created", ObservedGeneration: rn.Generation, LastTransitionTime: metav1.Now()}}}
	if err := c.Status().Update(ctx, rn); err != nil {
		t.Fatal(err)
	}
	reconcileOnce()
	got := &offloadingv1alpha1.NamespaceOffloading{}
	_ = c.Get(ctx, client.ObjectKeyFromObject(nso), got)
	if diff := cmp.Diff([]offloadingv1alpha1.ProviderNamespaceStatus{{ClusterID: "beta", RemoteNamespace: "shop-alpha", Phase: offloadingv1alpha1.RemoteNamespaceReady}}, got.Status.RemoteNamespaces); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if !meta.IsStatusConditionTrue(got.Status.Conditions, offloadingv1alpha1.ConditionReady) {
		t.Errorf("not Ready: %+v", got.Status.Conditions)
	}
	_ = c.Get(ctx, client.ObjectKey{Name: "shop"}, ns)
	if ns.Annotations[corev1alpha1.AnnotationOffloadingClusters] != "beta" {
		t.Errorf("offloading-clusters = %q, want beta", ns.Annotations[corev1alpha1.AnnotationOffloadingClusters])
	}

	// Unoffload: remote namespaces are withdrawn, labels removed, finalizer released.
	if err := c.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	reconcileOnce() // deletes the RemoteNamespace
	reconcileOnce() // sees it gone, releases the finalizer
	if err := c.Get(ctx, client.ObjectKeyFromObject(nso), &offloadingv1alpha1.NamespaceOffloading{}); err == nil {
		t.Error("NamespaceOffloading still exists")
	}
	_ = c.Get(ctx, client.ObjectKey{Name: "shop"}, ns)
	if len(ns.Labels) != 0 {
		t.Errorf("labels left: %v", ns.Labels)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(replica), &offloadingv1alpha1.RemoteNamespace{}); err != nil {
		t.Errorf("another consumer's replica was touched: %v", err)
	}
}
