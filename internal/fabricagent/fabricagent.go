// Package fabricagent is the reconciler of annex-fabric, the node agent of
// the DaemonSet that `annexctl install` runs with a gateway: on its node it
// programs what the node's pods need to reach every peer through the
// gateway node (routes and masquerade exemptions, internal/fabric), from
// the cluster's NetworkConfigurations, its identity and where the gateway
// runs (the node of the agent's pod whose gateway container runs), and
// reports it in the FabricNode named after the node.
//
// Everything maps to one request (the node): any change of a
// NetworkConfiguration, the identity or the agent's pods recomputes the
// whole plan, and a resync every Resync repairs what else changed.
package fabricagent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	"github.com/annexhq/annex/internal/fabric"
	"github.com/annexhq/annex/internal/network"
)

// AgentPodLabel selects the agent's pods (the chart's Deployment).
const AgentPodLabel = "app.kubernetes.io/name"

// AgentPodLabelValue is AgentPodLabel's value on the agent's pods.
const AgentPodLabelValue = "annex-agent"

// Resync is how often the node's state is applied again without a change:
// a route or rule someone removed comes back within it.
const Resync = 30 * time.Second

// Dataplane programs the node (internal/fabric.Dataplane).
type Dataplane interface {
	Apply(fabric.Plan) error
}

// Reconciler keeps one node's fabric in step.
type Reconciler struct {
	client    client.Client
	api       client.Reader
	namespace string
	node      string
	dp        Dataplane
	clock     clock.PassiveClock
}

// New returns the reconciler of node, reading the cluster through c (a
// cache over namespace) and its Node through api.
func New(c client.Client, api client.Reader, namespace, node string, dp Dataplane, clk clock.PassiveClock) *Reconciler {
	return &Reconciler{client: c, api: api, namespace: namespace, node: node, dp: dp, clock: clk}
}

// SetupWithManager watches what the plan depends on.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	one := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: r.namespace, Name: r.node}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("fabric").
		Watches(&networkingv1alpha1.NetworkConfiguration{}, one).
		Watches(&corev1.ConfigMap{}, one).
		Watches(&corev1.Pod{}, one).
		Complete(r)
}

// Reconcile applies the node's plan and reports it.
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("node", r.node)
	d, err := r.decide(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	cond := metav1.Condition{Type: networkingv1alpha1.ConditionProgrammed, Status: metav1.ConditionTrue, Reason: d.Reason, Message: d.Message}
	if d.Reason == networkingv1alpha1.ReasonNoGateway {
		cond.Status = metav1.ConditionFalse
	}
	applyErr := r.dp.Apply(d.Plan)
	if applyErr != nil {
		cond.Status, cond.Reason = metav1.ConditionFalse, networkingv1alpha1.ReasonProgrammingFailed
		if errors.Is(applyErr, fabric.ErrGatewayNotOnLink) {
			cond.Reason = networkingv1alpha1.ReasonGatewayNotOnLink
		}
		cond.Message = applyErr.Error()
		log.Error(applyErr, "Cannot program the node")
	}
	st := networkingv1alpha1.FabricNodeStatus{}
	if d.Plan.Gateway.IsValid() || d.Reason == networkingv1alpha1.ReasonGatewayNode {
		st.GatewayNode, st.GatewayAddress = d.gateway.Node, d.gateway.Address.String()
	}
	for _, p := range d.Plan.Destinations {
		st.Destinations = append(st.Destinations, p.String())
	}
	if err := r.report(ctx, st, cond); err != nil {
		return reconcile.Result{}, errors.Join(applyErr, err)
	}
	if applyErr != nil {
		return reconcile.Result{}, applyErr
	}
	return reconcile.Result{RequeueAfter: Resync}, nil
}

type decision struct {
	Decision
	gateway Gateway
}

func (r *Reconciler) decide(ctx context.Context) (decision, error) {
	var id corev1.ConfigMap
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: r.namespace, Name: corev1alpha1.ClusterIdentityConfigMapName}, &id); err != nil {
		return decision{}, fmt.Errorf("the cluster identity %s/%s: %w", r.namespace, corev1alpha1.ClusterIdentityConfigMapName, err)
	}
	local, err := localOf(&id)
	if err != nil {
		return decision{}, err
	}
	var ncs networkingv1alpha1.NetworkConfigurationList
	if err := r.client.List(ctx, &ncs, client.InNamespace(r.namespace)); err != nil {
		return decision{}, err
	}
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.InNamespace(r.namespace), client.MatchingLabels{AgentPodLabel: AgentPodLabelValue}); err != nil {
		return decision{}, err
	}
	gw, ok := FindGateway(pods.Items)
	dst, skipped := Destinations(local, ncs.Items)
	return decision{Decision: Decide(r.node, local, gw, ok, dst, skipped), gateway: gw}, nil
}

func localOf(id *corev1.ConfigMap) (Local, error) {
	var l Local
	for _, f := range []struct {
		key string
		to  *netip.Prefix
	}{
		{corev1alpha1.ClusterIdentityKeyPodCIDR, &l.PodCIDR},
		{corev1alpha1.ClusterIdentityKeyServiceCIDR, &l.ServiceCIDR},
		{corev1alpha1.ClusterIdentityKeyExternalCIDR, &l.ExternalCIDR},
	} {
		v := id.Data[f.key]
		if v == "" && f.key != corev1alpha1.ClusterIdentityKeyPodCIDR {
			continue
		}
		p, err := network.ParseCIDR(v)
		if err != nil {
			return Local{}, fmt.Errorf("the cluster identity's %s: %w", f.key, err)
		}
		*f.to = p
	}
	return l, nil
}

// report creates the node's FabricNode (owned by its Node, so it goes with
// it) and patches its status when it changed.
func (r *Reconciler) report(ctx context.Context, st networkingv1alpha1.FabricNodeStatus, cond metav1.Condition) error {
	key := types.NamespacedName{Namespace: r.namespace, Name: r.node}
	var fn networkingv1alpha1.FabricNode
	err := r.client.Get(ctx, key, &fn)
	if apierrors.IsNotFound(err) {
		fn = networkingv1alpha1.FabricNode{ObjectMeta: metav1.ObjectMeta{Namespace: r.namespace, Name: r.node,
			Labels: map[string]string{corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}}}
		var node corev1.Node
		if err := r.api.Get(ctx, types.NamespacedName{Name: r.node}, &node); err != nil {
			return fmt.Errorf("node %s: %w", r.node, err)
		}
		fn.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}
		if err := r.client.Create(ctx, &fn); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create FabricNode %s: %w", key, err)
		}
		if err := r.api.Get(ctx, key, &fn); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	next := fn.DeepCopy()
	next.Status.GatewayNode, next.Status.GatewayAddress, next.Status.Destinations = st.GatewayNode, st.GatewayAddress, st.Destinations
	now := metav1.NewTime(r.clock.Now())
	if old := meta.FindStatusCondition(next.Status.Conditions, cond.Type); old == nil || old.Status != cond.Status {
		cond.LastTransitionTime = now
	}
	meta.SetStatusCondition(&next.Status.Conditions, cond)
	if statusEqual(fn.Status, next.Status) {
		return nil
	}
	if err := r.client.Status().Patch(ctx, next, client.MergeFrom(&fn)); err != nil {
		return fmt.Errorf("status of FabricNode %s: %w", key, err)
	}
	return nil
}

func statusEqual(a, b networkingv1alpha1.FabricNodeStatus) bool {
	if a.GatewayNode != b.GatewayNode || a.GatewayAddress != b.GatewayAddress || !slices.Equal(a.Destinations, b.Destinations) || len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for i := range a.Conditions {
		x, y := a.Conditions[i], b.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message || !x.LastTransitionTime.Equal(&y.LastTransitionTime) {
			return false
		}
	}
	return true
}
