// Package identity owns reading a cluster's Annex identity: the ConfigMap
// annex-system/annex-cluster-identity that `annexctl install` writes, holding
// the cluster ID and the pod, service and external CIDRs.
package identity

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

// ErrNotInstalled says the cluster has no identity ConfigMap: Annex is not installed.
var ErrNotInstalled = errors.New("annex is not installed")

// Identity is who a cluster is and which address ranges it owns.
type Identity struct {
	ClusterID    string `json:"clusterID"`
	PodCIDR      string `json:"podCIDR"`
	ServiceCIDR  string `json:"serviceCIDR"`
	ExternalCIDR string `json:"externalCIDR"`
}

// FromConfigMap parses the identity ConfigMap.
func FromConfigMap(cm *corev1.ConfigMap) (Identity, error) {
	id := Identity{
		ClusterID:    cm.Data[corev1alpha1.ClusterIdentityKeyClusterID],
		PodCIDR:      cm.Data[corev1alpha1.ClusterIdentityKeyPodCIDR],
		ServiceCIDR:  cm.Data[corev1alpha1.ClusterIdentityKeyServiceCIDR],
		ExternalCIDR: cm.Data[corev1alpha1.ClusterIdentityKeyExternalCIDR],
	}
	if id.ClusterID == "" {
		return id, fmt.Errorf("identity ConfigMap %s/%s has no %s", cm.Namespace, cm.Name, corev1alpha1.ClusterIdentityKeyClusterID)
	}
	return id, nil
}

// Read reads the identity of the cluster c talks to.
func Read(ctx context.Context, c client.Reader) (Identity, error) {
	cm := &corev1.ConfigMap{}
	err := c.Get(ctx, client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: corev1alpha1.ClusterIdentityConfigMapName}, cm)
	if apierrors.IsNotFound(err) {
		return Identity{}, fmt.Errorf("%w (no ConfigMap %s/%s): run `annexctl install` there first", ErrNotInstalled, corev1alpha1.AgentNamespace, corev1alpha1.ClusterIdentityConfigMapName)
	}
	if err != nil {
		return Identity{}, err
	}
	return FromConfigMap(cm)
}

// Prefixes returns this cluster's own pod, service and external CIDRs, those
// that are set and parse.
func (id Identity) Prefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{id.PodCIDR, id.ServiceCIDR, id.ExternalCIDR} {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}
