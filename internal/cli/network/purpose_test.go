package network

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/cli"
)

// TestLinkPurpose: `peer` records its links as the peering's; `network
// connect` records a link as the peering's on a side that peers with the
// other cluster (so connecting again, to refresh a gateway's endpoint,
// keeps it going with the peering) and as a direct connection otherwise.
func TestLinkPurpose(t *testing.T) {
	s := runtime.NewScheme()
	if err := corev1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	fc := func(name, id string) client.Object {
		return &corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1alpha1.ForeignClusterSpec{ClusterID: id}}
	}
	for _, tc := range []struct {
		name    string
		fcs     []client.Object
		purpose string // Options.Purpose
		want    string
	}{
		{"peer", nil, networkingv1alpha1.LinkPurposePeering, networkingv1alpha1.LinkPurposePeering},
		{"connect between providers", []client.Object{fc("alpha", "alpha")}, "", networkingv1alpha1.LinkPurposeDirect},
		{"connect between clusters that peer", []client.Object{fc("beta", "beta")}, "", networkingv1alpha1.LinkPurposePeering},
		{"a ForeignCluster found by cluster ID", []client.Object{fc("old-name", "beta")}, "", networkingv1alpha1.LinkPurposePeering},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &cli.Cluster{Client: fake.NewClientBuilder().WithScheme(s).WithObjects(tc.fcs...).Build()}
			got, err := linkPurpose(context.Background(), c, "beta", tc.purpose)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("purpose %q, want %q", got, tc.want)
			}
		})
	}
}
