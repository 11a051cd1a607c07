package remotenamespace

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/controller/replicator"
	"github.com/annexhq/annex/internal/netview"
)

// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch

// NetworkPolicyName is the NetworkPolicy kept in every remote namespace
// (see desiredNetworkPolicy).
const NetworkPolicyName = "annex-tenant-isolation"

// The link-local ranges: cloud metadata services (169.254.169.254) and
// node-local agents listen there.
var (
	linkLocal4 = netip.MustParsePrefix("169.254.0.0/16")
	linkLocal6 = netip.MustParsePrefix("fe80::/10")
)

// desiredNetworkPolicy is the NetworkPolicy NetworkPolicyName of the remote
// namespace ns of consumer, for a cluster whose pod CIDR is podCIDR and whose
// nodes have the addresses nodes. It selects every pod of ns and lets in
// only:
//   - pods of consumer's remote namespaces (any of them: a tenant's
//     namespaces talk to each other as they do at home);
//   - sources outside the pod CIDR: the consumer through the gateway (whose
//     per-link accept list already keeps other peers to their own tenants),
//     and the nodes (kubelet probes).
//
// So neither the provider's own pods nor another tenant's reach it. It lets
// out only:
//   - to pods of consumer's remote namespaces;
//   - to the cluster DNS (pods labelled k8s-app=kube-dns in kube-system,
//     port 53);
//   - to addresses outside the pod CIDR, the nodes' addresses and the
//     link-local ranges: the consumer and its other providers through the
//     gateway, and whatever lies beyond the cluster.
//
// So a tenant's pod reaches neither the provider's pods, another tenant's,
// the nodes (kubelets, node ports, the API server where it runs on a node)
// nor a metadata service. The policy is the Kubernetes API: the provider's
// network plugin enforces it where it enforces NetworkPolicies.
func desiredNetworkPolicy(ns, consumer string, podCIDR netip.Prefix, nodes []netip.Addr) *networkingv1.NetworkPolicy {
	tenant := []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: managedLabels(consumer)}}}
	udp, tcp, dns := corev1.ProtocolUDP, corev1.ProtocolTCP, intstr.FromInt32(53)
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: NetworkPolicyName, Namespace: ns, Labels: managedLabels(consumer)},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{From: tenant},
				{From: outside(podCIDR, nil)},
			},
			Egress: []networkingv1.NetworkPolicyEgressRule{
				{To: tenant},
				{
					To: []networkingv1.NetworkPolicyPeer{{
						NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "kube-system"}},
						PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
					}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}},
				},
				{To: outside(podCIDR, nodes)},
			},
		},
	}
}

// outside returns the ipBlock of every address of the pod CIDR's family
// but the pod CIDR, and, when nodes is not nil, the link-local range and
// the addresses of nodes (those of the other family left out: the
// gateway, and so a tenant's reach, is IPv4 only).
func outside(podCIDR netip.Prefix, nodes []netip.Addr) []networkingv1.NetworkPolicyPeer {
	all, local := netip.MustParsePrefix("0.0.0.0/0"), linkLocal4
	if podCIDR.Addr().Is6() {
		all, local = netip.MustParsePrefix("::/0"), linkLocal6
	}
	except := []string{podCIDR.Masked().String()}
	if nodes != nil {
		except = append(except, local.String())
	}
	for _, a := range nodes {
		if a.BitLen() == podCIDR.Addr().BitLen() && !podCIDR.Contains(a) && !local.Contains(a) {
			except = append(except, netip.PrefixFrom(a, a.BitLen()).String())
		}
	}
	return []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: all.String(), Except: except}}}
}

// nodeAddresses returns the addresses of this cluster's nodes (Annex's
// virtual nodes left out), sorted and without duplicates.
func (r *Reconciler) nodeAddresses(ctx context.Context) ([]netip.Addr, error) {
	nodes := &corev1.NodeList{}
	if err := r.client.List(ctx, nodes); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	out := []netip.Addr{}
	for _, a := range netview.NodeAddresses(nodes.Items) {
		out = append(out, a.Addr)
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(out), nil
}

// ensureNetworkPolicy creates or corrects the NetworkPolicy NetworkPolicyName
// in ns. Without a pod CIDR (Options.PodCIDR) it keeps none: it could not
// tell the cluster's pods from the rest.
func (r *Reconciler) ensureNetworkPolicy(ctx context.Context, ns, consumer string) error {
	if !r.opts.PodCIDR.IsValid() || r.opts.NoNetworkPolicy {
		return nil
	}
	nodes, err := r.nodeAddresses(ctx)
	if err != nil {
		return err
	}
	want := desiredNetworkPolicy(ns, consumer, r.opts.PodCIDR, nodes)
	got := &networkingv1.NetworkPolicy{}
	_, err = r.ensure(ctx, "NetworkPolicy", want, got, func() bool {
		if apiequality.Semantic.DeepEqual(got.Spec, want.Spec) && hasLabels(got.Labels, want.Labels) {
			return false
		}
		got.Spec = *want.Spec.DeepCopy()
		got.Labels = withLabels(got.Labels, want.Labels)
		return true
	})
	return err
}

// nodeAddressesOf is what a Node event may change in the NetworkPolicies:
// the addresses of a node that is not one of Annex's virtual nodes.
func nodeAddressesOf(o client.Object) []netip.Addr {
	n, ok := o.(*corev1.Node)
	if !ok {
		return nil
	}
	var out []netip.Addr
	for _, a := range netview.NodeAddresses([]corev1.Node{*n}) {
		out = append(out, a.Addr)
	}
	return out
}

// nodeAddressesChanged passes the Node events that change what
// nodeAddressesOf returns.
var nodeAddressesChanged = predicate.Funcs{
	CreateFunc:  func(e event.CreateEvent) bool { return len(nodeAddressesOf(e.Object)) > 0 },
	DeleteFunc:  func(e event.DeleteEvent) bool { return len(nodeAddressesOf(e.Object)) > 0 },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return !slices.Equal(nodeAddressesOf(e.ObjectOld), nodeAddressesOf(e.ObjectNew))
	},
}

// allReplicas returns every replica that is not being deleted: a change of
// the nodes' addresses changes every remote namespace's NetworkPolicy.
func (r *Reconciler) allReplicas(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &offloadingv1alpha1.RemoteNamespaceList{}
	if err := r.client.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Cannot list RemoteNamespaces")
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if rn := &list.Items[i]; replicator.IsReplica(rn) && rn.DeletionTimestamp.IsZero() {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(rn)})
		}
	}
	return reqs
}
