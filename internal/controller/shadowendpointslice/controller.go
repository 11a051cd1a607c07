// Package shadowendpointslice owns the provider side of endpoint reflection:
// for every ShadowEndpointSlice a consumer creates in one of its remote
// namespaces, it creates and keeps in sync a real discovery.k8s.io/v1
// EndpointSlice with the same name and namespace, owned by the
// ShadowEndpointSlice (deleting it garbage-collects the slice).
//
// Only ShadowEndpointSlices in namespaces labelled
// annex.dev/managed-by=annex and annex.dev/remote-cluster-id=<consumer> are
// handled. The real slice has the template's labels plus
// endpointslice.kubernetes.io/managed-by=annex.dev (so Kubernetes' own
// EndpointSlice controller leaves it alone), and must carry
// kubernetes.io/service-name; its address type and ports are the
// template's (at most 1000 endpoints and 100 ports, as the CRD says), and
// its endpoints are the template's less two kinds:
//
//   - endpoints whose address is the pod IP of an unfinished pod in the same
//     namespace on this cluster are dropped silently (the consumer's pods
//     offloaded here: Kubernetes already publishes them for the reflected
//     Service);
//   - endpoints with an address that is not the consumer's are refused. The
//     consumer is a tenant: its endpoints may only point into the ranges
//     that belong to it in this cluster's view (Tenant): its pod CIDR and
//     its external CIDR (where its transit addresses live) as this
//     cluster's NetworkConfiguration with it maps them, and never into
//     this cluster's own ranges (pod, service and external CIDR), its
//     nodes' addresses, another linked cluster's ranges, loopback,
//     link-local (169.254.169.254 included), multicast or other special
//     ranges. FQDN slices publish nothing. An endpoint with one refused
//     address, no address or over 100 addresses is left out whole; the
//     others are written in canonical form. Without a usable
//     NetworkConfiguration with the consumer (none, or its mapping not
//     decided yet) no range is known: the EndpointSlice is deleted and
//     nothing is published until the link exists.
//
// The fields naming the consumer's nodes and pods (nodeName, targetRef,
// hints, deprecatedTopology) are cleared.
//
// Direct connections: the annex.dev/direct-connections-data annotation
// (internal/directconn) may ask to replace transit addresses of endpoints
// that live on another provider Q by Q's pod addresses. It is untrusted: an
// entry is used only if this cluster has a NetworkConfiguration with Q
// (whose status says how it maps Q's pod CIDR), the address is one the
// slice keeps and the pod address lies in Q's pod CIDR (and, once mapped,
// in none of this cluster's own ranges or node addresses), and the agent
// was not started with --deny-direct-connections. The pod address is
// written in this cluster's view of Q. Refused entries keep the transit
// address and are reported by a Warning Event (once per change); the
// annotation is never copied to the EndpointSlice.
//
// Status: condition Ready is True when the slice is up to date, False with
// reason Forbidden (an invalid template), CreationFailed (the API server
// refused the slice, or a slice of that name that is not ours is in the
// way) or NoNetworkLink. Condition AddressesAllowed is False with reason
// OutsideConsumerRanges (or NoNetworkLink) when endpoints were refused,
// status.refusedEndpoints says how many, and the message names the first
// five addresses and why. Each False answer, or a change of its message, is
// also a Warning Event (AddressesRefused for refused addresses).
//
// A consumer may change its ShadowEndpointSlices as often as its API server
// lets it, and every kube-proxy of the cluster watches EndpointSlices: the
// EndpointSlice writes are bounded per consumer (--tenant-sync-rate,
// fairqueue.Limiter). Beyond the bound a slice waits for the consumer's
// turn and is then written as its ShadowEndpointSlice is at that time.
package shadowendpointslice

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/controller/fairqueue"
	"github.com/annexhq/annex/internal/controller/predicates"
	"github.com/annexhq/annex/internal/directconn"
	"github.com/annexhq/annex/internal/network"
)

// +kubebuilder:rbac:groups=offloading.annex.dev,resources=shadowendpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=offloading.annex.dev,resources=shadowendpointslices/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=offloading.annex.dev,resources=shadowendpointslices/finalizers,verbs=update
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=networking.annex.dev,resources=networkconfigurations,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// DefaultPendingRequeue is how soon a ShadowEndpointSlice is looked at again
// while its EndpointSlice is being replaced.
const DefaultPendingRequeue = 2 * time.Second

// Options tune the reconciler. The zero value means the defaults.
type Options struct {
	// Clock stamps condition transition times (default: the real clock).
	Clock clock.PassiveClock
	// PendingRequeue is how soon to look again while an EndpointSlice is
	// being replaced (DefaultPendingRequeue).
	PendingRequeue time.Duration
	// DenyDirectConnections ignores the direct-connections data: endpoints
	// on other providers are always reached through their consumer.
	DenyDirectConnections bool
	// LocalCIDRs are this cluster's own ranges from its identity (pod,
	// service and external CIDR): never a consumer's, whatever its
	// NetworkConfiguration says.
	LocalCIDRs []Range
	// Sync bounds, per consumer, the EndpointSlice writes that follow
	// changes of its ShadowEndpointSlices (--tenant-sync-rate): a consumer
	// may change them as often as its API server lets it, and every
	// kube-proxy of the cluster watches EndpointSlices. Nil: no bound.
	Sync *fairqueue.Limiter
}

// BindFlags registers the options that are flags on fs.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.DenyDirectConnections, "deny-direct-connections", o.DenyDirectConnections,
		"as a provider, ignore consumers' direct-connections data: pods on other providers are always reached through the consumer, even when this cluster has a network link with them")
}

// Reconciler publishes the consumers' ShadowEndpointSlices as EndpointSlices.
type Reconciler struct {
	client   client.Client
	recorder events.EventRecorder
	opts     Options

	mu       sync.Mutex
	reported map[types.NamespacedName]string // the last direct-connections problems reported per slice
}

// New returns the reconciler. c reads ShadowEndpointSlices, namespaces and
// pods, writes EndpointSlices and patches ShadowEndpointSlice status;
// recorder receives a Warning Event when a slice cannot be published.
func New(c client.Client, recorder events.EventRecorder, opts Options) *Reconciler {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.PendingRequeue <= 0 {
		opts.PendingRequeue = DefaultPendingRequeue
	}
	return &Reconciler{client: c, recorder: recorder, opts: opts, reported: map[types.NamespacedName]string{}}
}

// Reconcile publishes one ShadowEndpointSlice.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	ses := &offloadingv1alpha1.ShadowEndpointSlice{}
	if err := r.client.Get(ctx, req.NamespacedName, ses); err != nil {
		if apierrors.IsNotFound(err) {
			r.mu.Lock()
			delete(r.reported, req.NamespacedName)
			r.mu.Unlock()
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ns := &corev1.Namespace{}
	if err := r.client.Get(ctx, client.ObjectKey{Name: ses.Namespace}, ns); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	consumer := consumerOf(ns)
	if consumer == "" || !ses.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("consumer", consumer))

	if msg := ValidateTemplate(&ses.Spec.Template); msg != "" {
		if err := r.deleteOurs(ctx, ses); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.setStatus(ctx, ses, verdict{reason: offloadingv1alpha1.ReasonForbidden, msg: msg})
	}

	links := &networkingv1alpha1.NetworkConfigurationList{}
	if err := r.client.List(ctx, links, client.InNamespace(corev1alpha1.AgentNamespace)); err != nil {
		return ctrl.Result{}, fmt.Errorf("list NetworkConfigurations: %w", err)
	}
	nodes := &corev1.NodeList{}
	if err := r.client.List(ctx, nodes); err != nil {
		return ctrl.Result{}, fmt.Errorf("list nodes: %w", err)
	}
	tenant, why := NewTenant(consumer, links.Items, r.opts.LocalCIDRs, nodes.Items)
	if tenant == nil {
		// Without a link this cluster knows no range of the consumer's:
		// nothing is published.
		if err := r.deleteOurs(ctx, ses); err != nil {
			return ctrl.Result{}, err
		}
		r.report(ses, client.ObjectKeyFromObject(ses), "")
		msg := why + ": no endpoint is published"
		return ctrl.Result{}, r.setStatus(ctx, ses, verdict{reason: offloadingv1alpha1.ReasonNoNetworkLink, msg: msg,
			addresses: &addressVerdict{reason: offloadingv1alpha1.ReasonNoNetworkLink, msg: msg, refused: len(ses.Spec.Template.Endpoints)}})
	}

	// Read only (LocalIPs): no copy of every pod of the namespace.
	pods := &corev1.PodList{}
	if err := r.client.List(ctx, pods, client.InNamespace(ses.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, fmt.Errorf("list pods: %w", err)
	}
	eps, dropped := Endpoints(ses.Spec.Template.Endpoints, LocalIPs(pods.Items))
	eps, refusals, nRefused := tenant.Filter(ses.Spec.Template.AddressType, eps)
	addresses := &addressVerdict{allowed: true, reason: offloadingv1alpha1.ReasonInConsumerRanges,
		msg: fmt.Sprintf("every address is consumer %s's (%s in this cluster's view)", consumer, tenant.Ranges())}
	if nRefused > 0 {
		addresses = &addressVerdict{reason: offloadingv1alpha1.ReasonOutsideConsumerRanges, msg: tenant.RefusalSummary(refusals, nRefused), refused: nRefused}
		ctrl.LoggerFrom(ctx).V(1).Info("Endpoints refused", "count", nRefused, "first", refusals[0].Address, "why", refusals[0].Why)
	}
	eps = r.direct(ctx, ses, eps, links.Items, tenant)
	want, err := r.desired(ses, eps)
	if err != nil {
		return ctrl.Result{}, err
	}
	failed := func(msg string) error {
		return r.setStatus(ctx, ses, verdict{reason: offloadingv1alpha1.ReasonCreationFailed, msg: msg, addresses: addresses})
	}

	// turn says whether the consumer may have its slice written now
	// (Options.Sync); when not, the slice is looked at again once it may,
	// and written as the ShadowEndpointSlice is then.
	turn := func() (time.Duration, bool) {
		wait := r.opts.Sync.Wait(consumer, req.NamespacedName)
		if wait > 0 {
			ctrl.LoggerFrom(ctx).V(1).Info("Consumer's EndpointSlice writes are over its rate, waiting for its turn", "wait", wait)
		}
		return wait, wait == 0
	}
	got := &discoveryv1.EndpointSlice{}
	err = r.client.Get(ctx, req.NamespacedName, got)
	switch {
	case apierrors.IsNotFound(err):
		if wait, ok := turn(); !ok {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		if err := r.client.Create(ctx, want); err != nil {
			if refused(err) {
				return ctrl.Result{}, failed("cannot create the EndpointSlice: " + err.Error())
			}
			return ctrl.Result{}, fmt.Errorf("create EndpointSlice: %w", err)
		}
		ctrl.LoggerFrom(ctx).V(1).Info("Created EndpointSlice")
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("get EndpointSlice: %w", err)
	case !metav1.IsControlledBy(got, ses):
		if !got.DeletionTimestamp.IsZero() || isShadowRef(metav1.GetControllerOf(got)) {
			// A previous ShadowEndpointSlice's slice, being garbage-collected.
			return ctrl.Result{RequeueAfter: r.opts.PendingRequeue}, nil
		}
		return ctrl.Result{}, failed(fmt.Sprintf("EndpointSlice %s already exists on this provider and does not belong to this ShadowEndpointSlice", got.Name))
	case got.AddressType != want.AddressType:
		// addressType is immutable: replace the slice.
		uid := got.UID
		if err := r.client.Delete(ctx, got, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("replace EndpointSlice: %w", err)
		}
		return ctrl.Result{RequeueAfter: r.opts.PendingRequeue}, nil
	case !same(got, want):
		if wait, ok := turn(); !ok {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		got.Labels = want.Labels
		got.Endpoints = want.Endpoints
		got.Ports = want.Ports
		if err := r.client.Update(ctx, got); err != nil {
			if refused(err) {
				return ctrl.Result{}, failed("cannot update the EndpointSlice: " + err.Error())
			}
			return ctrl.Result{}, fmt.Errorf("update EndpointSlice: %w", err)
		}
		ctrl.LoggerFrom(ctx).V(1).Info("Updated EndpointSlice")
	}
	return ctrl.Result{}, r.setStatus(ctx, ses, verdict{ready: true, reason: offloadingv1alpha1.ReasonReconciled,
		msg: fmt.Sprintf("EndpointSlice is up to date: %d endpoints, %d dropped (pods of this cluster), %d refused (addresses not the consumer's)",
			len(eps), dropped, nRefused),
		addresses: addresses})
}

// direct applies the direct-connections data of ses to eps (see the
// package doc) and reports refused entries. A rewritten address must also
// stay out of this cluster's own ranges and addresses.
func (r *Reconciler) direct(ctx context.Context, ses *offloadingv1alpha1.ShadowEndpointSlice, eps []discoveryv1.Endpoint,
	list []networkingv1alpha1.NetworkConfiguration, tenant *Tenant) []discoveryv1.Endpoint {
	key := client.ObjectKeyFromObject(ses)
	value, has := ses.Annotations[corev1alpha1.AnnotationDirectConnectionsData]
	if !has || r.opts.DenyDirectConnections {
		r.report(ses, key, "")
		return eps
	}
	entries, err := directconn.Parse(value)
	if err != nil {
		r.report(ses, key, err.Error())
		return eps
	}
	addrs := map[string]bool{}
	for _, ep := range eps {
		for _, a := range ep.Addresses {
			addrs[a] = true
		}
	}
	rewrites, problems := directconn.Resolve(entries, addrs, links(list))
	byAddress := map[string]directconn.Entry{}
	for _, e := range entries {
		byAddress[e.Address] = e
	}
	for from, to := range rewrites {
		e := byAddress[from]
		addr, err := netip.ParseAddr(to)
		if err != nil {
			delete(rewrites, from)
			continue
		}
		if rng, never := NeverAllowed(addr, tenant.Reserved, e.ClusterID); never {
			delete(rewrites, from)
			problems = append(problems, fmt.Sprintf("%s (cluster %q, pod address %q): the pod address is %s here, in %s",
				quoteish(from), e.ClusterID, e.PodAddress, to, rng.Name))
		}
	}
	slices.Sort(problems)
	r.report(ses, key, directconn.Summary(problems))
	if len(rewrites) == 0 {
		return eps
	}
	out := make([]discoveryv1.Endpoint, len(eps))
	for i, ep := range eps {
		out[i] = *ep.DeepCopy()
		for j, a := range out[i].Addresses {
			if to, ok := rewrites[a]; ok {
				out[i].Addresses[j] = to
			}
		}
	}
	return out
}

// links returns this cluster's network links: how it maps each linked
// cluster's pod CIDR. Links whose mapping is not decided yet are left out.
func links(list []networkingv1alpha1.NetworkConfiguration) directconn.Links {
	links := directconn.Links{}
	for _, nc := range list {
		if nc.Status.RemappedRemote == nil || !nc.DeletionTimestamp.IsZero() {
			continue
		}
		m, err := network.ParseMapping(nc.Spec.Remote.PodCIDR, nc.Status.RemappedRemote.PodCIDR)
		if err != nil {
			continue
		}
		links[nc.Spec.RemoteClusterID] = m
	}
	return links
}

// report records a Warning Event when the direct-connections problems of a
// slice change to something non-empty.
func (r *Reconciler) report(ses *offloadingv1alpha1.ShadowEndpointSlice, key types.NamespacedName, problems string) {
	r.mu.Lock()
	prev := r.reported[key]
	if problems == "" {
		delete(r.reported, key)
	} else {
		r.reported[key] = problems
	}
	r.mu.Unlock()
	if problems != "" && problems != prev {
		r.recorder.Eventf(ses, nil, corev1.EventTypeWarning, "DirectConnectionsRefused", "Publish",
			"direct-connections data not used for some endpoints, which keep their transit address: %s", problems)
	}
}

// desired is the EndpointSlice of ses with endpoints eps.
func (r *Reconciler) desired(ses *offloadingv1alpha1.ShadowEndpointSlice, eps []discoveryv1.Endpoint) (*discoveryv1.EndpointSlice, error) {
	t := &ses.Spec.Template
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: ses.Name, Namespace: ses.Namespace, Labels: Labels(t)},
		AddressType: t.AddressType,
		Endpoints:   eps,
		Ports:       defaultedPorts(t.Ports),
	}
	if err := controllerutil.SetControllerReference(ses, s, r.client.Scheme()); err != nil {
		return nil, fmt.Errorf("set owner: %w", err)
	}
	return s, nil
}

// defaultedPorts returns ports with the API server's defaults applied (name
// "", protocol TCP), so that a stored slice compares equal to its template.
func defaultedPorts(ports []discoveryv1.EndpointPort) []discoveryv1.EndpointPort {
	out := make([]discoveryv1.EndpointPort, len(ports))
	for i := range ports {
		p := *ports[i].DeepCopy()
		if p.Name == nil {
			p.Name = ptr.To("")
		}
		if p.Protocol == nil {
			p.Protocol = ptr.To(corev1.ProtocolTCP)
		}
		out[i] = p
	}
	return out
}

// same reports whether got already has want's labels, endpoints and ports.
func same(got, want *discoveryv1.EndpointSlice) bool {
	return maps.Equal(got.Labels, want.Labels) &&
		apiequality.Semantic.DeepEqual(got.Endpoints, want.Endpoints) &&
		apiequality.Semantic.DeepEqual(got.Ports, want.Ports)
}

// deleteOurs deletes the EndpointSlice of ses, if it has one.
func (r *Reconciler) deleteOurs(ctx context.Context, ses *offloadingv1alpha1.ShadowEndpointSlice) error {
	got := &discoveryv1.EndpointSlice{}
	if err := r.client.Get(ctx, client.ObjectKeyFromObject(ses), got); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(got, ses) || !got.DeletionTimestamp.IsZero() {
		return nil
	}
	uid := got.UID
	if err := r.client.Delete(ctx, got, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete EndpointSlice: %w", err)
	}
	return nil
}

// verdict is what one reconcile found: the Ready condition, and the
// AddressesAllowed condition with status.refusedEndpoints (nil: unchanged,
// the addresses were not looked at).
type verdict struct {
	ready       bool
	reason, msg string
	addresses   *addressVerdict
}

type addressVerdict struct {
	allowed     bool
	reason, msg string
	refused     int
}

// setStatus writes the conditions of v when they change, with a Warning
// Event when one becomes False or its message changes while False (one
// Event when both say the same).
func (r *Reconciler) setStatus(ctx context.Context, ses *offloadingv1alpha1.ShadowEndpointSlice, v verdict) error {
	orig := ses.DeepCopy()
	readyChanged := setCondition(ses, offloadingv1alpha1.ConditionReady, v.ready, v.reason, v.msg, r.opts.Clock.Now())
	addrChanged := false
	if a := v.addresses; a != nil {
		addrChanged = setCondition(ses, offloadingv1alpha1.ConditionAddressesAllowed, a.allowed, a.reason, a.msg, r.opts.Clock.Now())
		ses.Status.RefusedEndpoints = int32(min(a.refused, MaxEndpoints)) //nolint:gosec // bounded
	}
	if apiequality.Semantic.DeepEqual(orig.Status, ses.Status) {
		return nil
	}
	if err := r.client.Status().Patch(ctx, ses, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	if readyChanged && !v.ready {
		ctrl.LoggerFrom(ctx).Info("Cannot publish ShadowEndpointSlice", "reason", v.reason, "message", v.msg)
		r.recorder.Eventf(ses, nil, corev1.EventTypeWarning, v.reason, "Publish", "%s", v.msg)
	}
	if a := v.addresses; addrChanged && !a.allowed && !(readyChanged && !v.ready && a.msg == v.msg) {
		ctrl.LoggerFrom(ctx).Info("Endpoints refused", "reason", a.reason, "message", a.msg)
		r.recorder.Eventf(ses, nil, corev1.EventTypeWarning, ReasonAddressesRefused, "Publish", "%s", a.msg)
	}
	return nil
}

// ReasonAddressesRefused is the reason of the Warning Event recorded when
// endpoints are left out because of their addresses.
const ReasonAddressesRefused = "AddressesRefused"

// setCondition sets condition typ of ses and reports whether its status,
// reason or message changed.
func setCondition(ses *offloadingv1alpha1.ShadowEndpointSlice, typ string, ok bool, reason, msg string, now time.Time) bool {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	prev := meta.FindStatusCondition(ses.Status.Conditions, typ)
	changed := prev == nil || prev.Status != status || prev.Reason != reason || prev.Message != msg
	meta.SetStatusCondition(&ses.Status.Conditions, metav1.Condition{
		Type:               typ,
		Status:             status,
		ObservedGeneration: ses.Generation,
		LastTransitionTime: metav1.NewTime(now),
		Reason:             reason,
		Message:            msg,
	})
	return changed
}

// refused reports whether err is an answer that retrying the same request
// cannot change.
func refused(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err)
}

// consumerOf returns the consumer namespace ns belongs to, or "" when it is
// not a namespace Annex manages for a consumer.
func consumerOf(ns *corev1.Namespace) string {
	if ns.Labels[corev1alpha1.LabelManagedBy] != corev1alpha1.ManagedByAnnex {
		return ""
	}
	return ns.Labels[corev1alpha1.LabelRemoteClusterID]
}

// isShadowRef reports whether ref refers to a ShadowEndpointSlice.
func isShadowRef(ref *metav1.OwnerReference) bool {
	if ref == nil || ref.Kind != "ShadowEndpointSlice" {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == offloadingv1alpha1.GroupVersion.Group
}

// SetupWithManager registers the controller "shadowendpointslice" on mgr. It
// is triggered by ShadowEndpointSlice creation, spec changes and changes of
// its direct-connections annotation (not of others, which the consumer may
// change at will and nothing reads), by changes
// of the EndpointSlices it owns (labelled managed-by=annex.dev), and by pods
// appearing, disappearing, changing IPs or finishing, which re-evaluates
// every ShadowEndpointSlice of their namespace.
//
// It reads EndpointSlices and pods from the manager's cache; it needs no
// restriction of it (the consumer side of Annex reads every EndpointSlice
// from the same cache). Its queue serves the consumers in turn
// (fairqueue.NewQueue).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	ours := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetLabels()[discoveryv1.LabelManagedBy] == ManagedBy
	})
	newQueue, err := fairqueue.ForTenants(mgr)
	if err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("shadowendpointslice").
		For(&offloadingv1alpha1.ShadowEndpointSlice{}, builder.WithPredicates(
			predicate.Or(predicates.SpecChanged(), predicates.AnnotationChanged(corev1alpha1.AnnotationDirectConnectionsData)))).
		Owns(&discoveryv1.EndpointSlice{}, builder.WithPredicates(ours)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.slicesInNamespace), builder.WithPredicates(podAddressChanged())).
		Watches(&networkingv1alpha1.NetworkConfiguration{}, handler.EnqueueRequestsFromMapFunc(r.allSlices), builder.WithPredicates(mappingChanged())).
		WithOptions(controller.Options{NewQueue: newQueue}).
		Complete(r)
}

// allSlices queues every ShadowEndpointSlice: a network link changed, and
// with it the ranges of a consumer (and those reserved for every other).
// Links change rarely (see mappingChanged).
func (r *Reconciler) allSlices(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &offloadingv1alpha1.ShadowEndpointSliceList{}
	if err := r.client.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Cannot list ShadowEndpointSlices")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

// mappingChanged passes NetworkConfiguration creations and deletions, and
// updates of its spec, its remappings or its deletion timestamp (not the
// gateway's tunnel statistics).
func mappingChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*networkingv1alpha1.NetworkConfiguration)
			n, ok2 := e.ObjectNew.(*networkingv1alpha1.NetworkConfiguration)
			if !ok1 || !ok2 {
				return true
			}
			return !apiequality.Semantic.DeepEqual(o.Spec, n.Spec) ||
				!apiequality.Semantic.DeepEqual(o.Status.RemappedRemote, n.Status.RemappedRemote) ||
				o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero()
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// slicesInNamespace enqueues every ShadowEndpointSlice in o's namespace.
func (r *Reconciler) slicesInNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	list := &offloadingv1alpha1.ShadowEndpointSliceList{}
	if err := r.client.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Cannot list ShadowEndpointSlices", "namespace", o.GetNamespace())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

// podAddressChanged passes pod creations and deletions, and updates that
// change the pod's IPs or whether it has finished.
func podAddressChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*corev1.Pod)
			n, ok2 := e.ObjectNew.(*corev1.Pod)
			if !ok1 || !ok2 {
				return true
			}
			before, after := map[string]bool{}, map[string]bool{}
			addPodIPs(before, o)
			addPodIPs(after, n)
			return !maps.Equal(before, after)
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
