package cli

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/annexhq/annex/internal/identity"
)

// Identities reads the identities of the clusters of --kubeconfig (a, called
// aRole in errors) and --remote-kubeconfig (b, bRole) and refuses to go on
// when both are the same cluster; verb names what cannot be done with itself.
func Identities(ctx context.Context, a, b *Cluster, aRole, bRole, verb string) (identity.Identity, identity.Identity, error) {
	aid, err := identity.Read(ctx, a.Client)
	if err != nil {
		return aid, aid, fmt.Errorf("%s (%s): %w", aRole, a.Host, err)
	}
	bid, err := identity.Read(ctx, b.Client)
	if err != nil {
		return aid, bid, fmt.Errorf("%s (%s): %w", bRole, b.Host, err)
	}
	if aid.ClusterID == bid.ClusterID {
		return aid, bid, fmt.Errorf("both kubeconfigs reach cluster %q: a cluster cannot %s itself", aid.ClusterID, verb)
	}
	ak, bk := &corev1.Namespace{}, &corev1.Namespace{}
	if a.Client.Get(ctx, client.ObjectKey{Name: "kube-system"}, ak) == nil && b.Client.Get(ctx, client.ObjectKey{Name: "kube-system"}, bk) == nil && ak.UID == bk.UID {
		return aid, bid, errors.New("both kubeconfigs reach the same cluster (same kube-system namespace): a cluster cannot " + verb + " itself")
	}
	return aid, bid, nil
}
