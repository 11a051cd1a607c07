// Package unpeer owns `annexctl unpeer`: it removes a peering in which
// consumer C uses provider P — the network link, the VirtualNode and its
// Node, the ResourceSlice (whose replica the consumer's agent deletes on P),
// the remote namespaces and the tenant namespace on P, the peer namespace
// with the credentials on C and the ForeignClusters — and waits until nothing
// of it is left on either side. The other direction of a two-way peering
// lives in other namespaces (P's peer namespace for C, C's tenant namespace
// for P) and is left alone.
//
// Access goes first: the network link before anything else, the tenant's
// credentials (its namespace on P) before the ForeignClusters. So an unpeer
// that stops at any step (killed, or a provider that stops answering) never
// leaves a link without the peering it was made for, which a gateway would
// otherwise open to more than the tenant had (see
// internal/controller/gatewayconfig, PeerAccessTenant).
package unpeer

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/cli"
	"github.com/annexhq/annex/internal/cli/network"
	"github.com/annexhq/annex/internal/cli/peer"
)

// Options are the settings of one unpeer.
type Options struct {
	Timeout time.Duration
}

// Run removes the peering in which c consumes p.
func Run(ctx context.Context, s cli.IOStreams, c, p *cli.Cluster, o Options) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	cid, pid, err := cli.Identities(ctx, c, p, "consumer", "provider", "unpeer from")
	if err != nil {
		return err
	}
	fmt.Fprintf(s.Out, "Unpeering %s (consumer) from %s (provider)\n", cid.ClusterID, pid.ClusterID)
	peerOnC := corev1alpha1.PeerNamespaceName(pid.ClusterID)
	rm := remover{s: s, ctx: ctx}
	del := func(cl *cli.Cluster, obj client.Object, what string) error {
		return rm.delete(cl, obj, what, o.Timeout)
	}

	// 0. Access first: the network link on both sides, unless the other
	// direction of a two-way peering still needs it.
	if err := unlink(ctx, s, c, p, cid.ClusterID, pid.ClusterID); err != nil {
		return err
	}

	// 1. The virtual node, so nothing new is scheduled there.
	vn := &corev1alpha1.VirtualNode{}
	vn.Name, vn.Namespace, vn.Spec.ClusterID = pid.ClusterID, peerOnC, pid.ClusterID
	if err := del(c, vn, fmt.Sprintf("consumer %s: VirtualNode %s/%s", cid.ClusterID, vn.Namespace, vn.Name)); err != nil {
		return err
	}
	node := &corev1.Node{}
	node.Name = vn.NodeName()
	if err := del(c, node, fmt.Sprintf("consumer %s: Node %s", cid.ClusterID, node.Name)); err != nil {
		return err
	}

	// 2. The ResourceSlice: the consumer's agent deletes its replica on P first.
	rs := &corev1alpha1.ResourceSlice{}
	rs.Name, rs.Namespace = peer.ResourceSliceName, peerOnC
	if err := del(c, rs, fmt.Sprintf("consumer %s: ResourceSlice %s/%s and its replica on %s", cid.ClusterID, rs.Namespace, rs.Name, pid.ClusterID)); err != nil {
		return fmt.Errorf("%w (is the agent of %s running?)", err, cid.ClusterID)
	}

	// 2b. Remote namespaces this consumer asked for: the agent deletes their
	// replicas (and the provider the namespaces) while the credentials still work.
	rns := &offloadingv1alpha1.RemoteNamespaceList{}
	if err := c.Client.List(ctx, rns, client.InNamespace(peerOnC)); err != nil {
		return c.Unreachable(err)
	}
	for i := range rns.Items {
		rn := &rns.Items[i]
		if err := del(c, rn, fmt.Sprintf("consumer %s: RemoteNamespace %s/%s and namespace %s on %s", cid.ClusterID, rn.Namespace, rn.Name, rn.Spec.RemoteNamespace, pid.ClusterID)); err != nil {
			return err
		}
	}

	// 3. Provider side: remote namespaces of this consumer and its tenant
	// namespace (labelled alike); P's own peer namespace for C, should P
	// consume C too, carries other labels and stays.
	nss := &corev1.NamespaceList{}
	if err := p.Client.List(ctx, nss, client.MatchingLabels{corev1alpha1.LabelRemoteClusterID: cid.ClusterID, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}); err != nil {
		return p.Unreachable(err)
	}
	pfc, both, err := foreignCluster(ctx, p, cid.ClusterID)
	if err != nil {
		return err
	}
	for i := range nss.Items {
		ns := &nss.Items[i]
		if err := del(p, ns, fmt.Sprintf("provider %s: namespace %s", pid.ClusterID, ns.Name)); err != nil {
			return err
		}
	}
	if err := dropRole(ctx, s, p, pfc, both, corev1alpha1.RoleProvider, del, "provider "+pid.ClusterID); err != nil {
		return err
	}

	// 4. Consumer side: credentials, peer namespace, ForeignCluster.
	cfc, both, err := foreignCluster(ctx, c, pid.ClusterID)
	if err != nil {
		return err
	}
	secret := &corev1.Secret{}
	secret.Name, secret.Namespace = corev1alpha1.CredentialsSecretName, peerOnC
	if err := del(c, secret, fmt.Sprintf("consumer %s: credentials Secret %s/%s", cid.ClusterID, secret.Namespace, secret.Name)); err != nil {
		return err
	}
	ns := &corev1.Namespace{}
	ns.Name = peerOnC
	if err := del(c, ns, fmt.Sprintf("consumer %s: namespace %s", cid.ClusterID, ns.Name)); err != nil {
		return err
	}
	if err := dropRole(ctx, s, c, cfc, both, corev1alpha1.RoleConsumer, del, "consumer "+cid.ClusterID); err != nil {
		return err
	}
	fmt.Fprintf(s.Out, "%s no longer consumes resources of %s; nothing of that peering is left on either cluster.\n", cid.ClusterID, pid.ClusterID)
	return nil
}

// unlink deletes the network link between consumer c (cid) and provider p
// (pid) on both sides, unless both sides' ForeignClusters say the peering
// goes both ways: then the other direction keeps it, and so do both
// ForeignClusters (dropRole). A peering only one side calls two-way loses
// the link: a ForeignCluster that goes never leaves one behind.
func unlink(ctx context.Context, s cli.IOStreams, c, p *cli.Cluster, cid, pid string) error {
	_, bothOnC, err := foreignCluster(ctx, c, pid)
	if err != nil {
		return err
	}
	_, bothOnP, err := foreignCluster(ctx, p, cid)
	if err != nil {
		return err
	}
	if bothOnC && bothOnP {
		s.Step("network link kept: %s also consumes %s", pid, cid)
		return nil
	}
	if err := network.Unlink(ctx, s, c, p, network.Options{}); err != nil {
		return fmt.Errorf("network link: %w", err)
	}
	return nil
}

// foreignCluster returns the ForeignCluster named id (nil if absent) and
// whether the peering goes both ways.
func foreignCluster(ctx context.Context, cl *cli.Cluster, id string) (*corev1alpha1.ForeignCluster, bool, error) {
	fc := &corev1alpha1.ForeignCluster{}
	err := cl.Client.Get(ctx, client.ObjectKey{Name: id}, fc)
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, cl.Unreachable(err)
	}
	return fc, fc.Status.Role == corev1alpha1.RoleBoth, nil
}

// dropRole deletes the ForeignCluster, or, when the peering goes both ways,
// only downgrades its role to the one that remains.
func dropRole(ctx context.Context, s cli.IOStreams, cl *cli.Cluster, fc *corev1alpha1.ForeignCluster, both bool, remaining corev1alpha1.PeeringRole,
	del func(*cli.Cluster, client.Object, string) error, side string) error {
	if fc == nil {
		return nil
	}
	if !both {
		return del(cl, fc, fmt.Sprintf("%s: ForeignCluster %s", side, fc.Name))
	}
	return keepRole(ctx, s, cl, fc, remaining, side)
}

// keepRole keeps the ForeignCluster of a two-way peering with the role that
// remains, and forgets the namespace of the role that went.
func keepRole(ctx context.Context, s cli.IOStreams, cl *cli.Cluster, fc *corev1alpha1.ForeignCluster, remaining corev1alpha1.PeeringRole, side string) error {
	gone := "peerNamespace" // we no longer consume the peer
	if remaining == corev1alpha1.RoleProvider {
		gone = "tenantNamespace" // the peer no longer consumes us
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"role": remaining, gone: nil}})
	if err := cl.Client.Status().Patch(ctx, fc, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return err
	}
	s.Step("%s: ForeignCluster %s kept with role %s (the other direction remains)", side, fc.Name, remaining)
	return nil
}
