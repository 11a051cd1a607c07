package linkgc

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
)

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, corev1alpha1.AddToScheme, networkingv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// link is this cluster's NetworkConfiguration with peer, made for purpose
// ("" for a link made before links recorded it).
func link(peer, purpose string) *networkingv1alpha1.NetworkConfiguration {
	nc := &networkingv1alpha1.NetworkConfiguration{ObjectMeta: metav1.ObjectMeta{Namespace: corev1alpha1.AgentNamespace, Name: peer},
		Spec: networkingv1alpha1.NetworkConfigurationSpec{RemoteClusterID: peer}}
	if purpose != "" {
		nc.Labels = map[string]string{networkingv1alpha1.LabelLinkPurpose: purpose}
	}
	return nc
}

// foreignCluster is this cluster's ForeignCluster for id.
func foreignCluster(id string) *corev1alpha1.ForeignCluster {
	return &corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: id}, Spec: corev1alpha1.ForeignClusterSpec{ClusterID: id}}
}

// deleting is fc being deleted (held by a finalizer).
func deleting(fc *corev1alpha1.ForeignCluster) *corev1alpha1.ForeignCluster {
	now := metav1.NewTime(time.Date(2026, 12, 8, 12, 0, 0, 0, time.UTC))
	fc.DeletionTimestamp, fc.Finalizers = &now, []string{"example.com/hold"}
	return fc
}

// deletesTo sends the deletes of a cached client to the API server's.
type deletesTo struct {
	client.Client
	to client.Client
}

func (d deletesTo) Delete(ctx context.Context, o client.Object, opts ...client.DeleteOption) error {
	return d.to.Delete(ctx, o, opts...)
}

// TestReconcile: a link made for a peering goes once neither the cache nor
// the API server shows a ForeignCluster for its peer; every other link
// stays.
func TestReconcile(t *testing.T) {
	peering, direct := networkingv1alpha1.LinkPurposePeering, networkingv1alpha1.LinkPurposeDirect
	for _, tc := range []struct {
		name        string
		cached      []client.Object // nil: the same as live
		live        []client.Object
		wantDeleted bool
	}{
		{name: "a peering's link while it peers", live: []client.Object{link("alpha", peering), foreignCluster("alpha")}},
		{name: "a peering's link after its ForeignCluster went: removed", live: []client.Object{link("alpha", peering), foreignCluster("beta")},
			wantDeleted: true},
		{name: "a peering's link while its ForeignCluster is being deleted: removed",
			live: []client.Object{link("alpha", peering), deleting(foreignCluster("alpha"))}, wantDeleted: true},
		{name: "a direct connection needs no peering", live: []client.Object{link("alpha", direct)}},
		{name: "an old link without a peering is kept (it may be a direct connection)", live: []client.Object{link("alpha", "")}},
		{name: "the cache has not seen a new peering's ForeignCluster yet: kept",
			cached: []client.Object{link("alpha", peering)}, live: []client.Object{link("alpha", peering), foreignCluster("alpha")}},
		{name: "recorded as a direct connection since the cache saw it: kept",
			cached: []client.Object{link("alpha", peering)}, live: []client.Object{link("alpha", direct)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			live := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(tc.live...).Build()
			cache := live
			if tc.cached != nil {
				cache = fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(tc.cached...).Build()
			}
			rec := events.NewFakeRecorder(10)
			r := &Reconciler{Client: deletesTo{Client: cache, to: live}, APIReader: live, Recorder: rec}
			key := client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: "alpha"}
			if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
				t.Fatal(err)
			}
			err := live.Get(context.Background(), key, &networkingv1alpha1.NetworkConfiguration{})
			if deleted := apierrors.IsNotFound(err); deleted != tc.wantDeleted {
				t.Fatalf("link deleted = %v (%v), want %v", deleted, err, tc.wantDeleted)
			}
			var got []string
			for len(rec.Events) > 0 {
				got = append(got, <-rec.Events)
			}
			switch {
			case tc.wantDeleted && (len(got) != 1 || !strings.HasPrefix(got[0], "Warning "+EventLinkRemoved+" ") || !strings.Contains(got[0], "no ForeignCluster for alpha")):
				t.Errorf("events %q, want one %s Warning naming the missing ForeignCluster", got, EventLinkRemoved)
			case !tc.wantDeleted && len(got) > 0:
				t.Errorf("events %q for a link that stays", got)
			}
		})
	}
}

// TestLinksOf: a ForeignCluster's events check the links with its cluster
// only.
func TestLinksOf(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(link("alpha", "peering"), link("beta", "peering")).Build()
	r := &Reconciler{Client: c}
	got := r.linksOf(context.Background(), foreignCluster("alpha"))
	if len(got) != 1 || got[0].Name != "alpha" || got[0].Namespace != corev1alpha1.AgentNamespace {
		t.Errorf("requests %v, want annex-system/alpha only", got)
	}
}
