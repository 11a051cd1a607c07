// Package reflection owns the consumer side of resource reflection. For every
// namespace NS that has a NamespaceOffloading NS/offloading, it keeps a copy of
// NS's Services, ConfigMaps, Secrets and EndpointSlices in the remote
// namespace of every provider whose entry in the NamespaceOffloading's
// status.remoteNamespaces is Ready:
//
//   - a Service becomes a Service of the same name of type ClusterIP
//     (headless if it is), whatever its type here: a provider accepts
//     nothing else from a consumer, and exposing an offloaded Service outside
//     is this cluster's business. The copy has no selector (the provider's
//     own EndpointSlice controller must leave it alone), none of the fields
//     the API server allocates (cluster IPs, IP families, node ports) and
//     none that expose a Service outside its cluster (externalIPs,
//     load-balancer fields and annotations, externalTrafficPolicy,
//     healthCheckNodePort). ExternalName Services are not reflected (a
//     Warning Event on the Service says so);
//   - a ConfigMap or Secret becomes a copy of its data, type and
//     immutability. The kube-root-ca.crt ConfigMap and service-account-token
//     Secrets are never reflected: every cluster has its own;
//   - an EndpointSlice of a reflected Service (label kubernetes.io/service-name)
//     becomes a ShadowEndpointSlice of the same name, whose endpoints went
//     through an EndpointTranslator (by default: endpoints of pods running on
//     that provider's own virtual node are dropped, addresses are unchanged).
//     Endpoint conditions are kept exactly: they are what withdraws a failed
//     provider's pods from every other provider's Services.
//
// Objects annotated annex.dev/skip-reflection: "true", objects being deleted
// and objects labelled annex.dev/managed-by=annex (copies other clusters made
// here) are not reflected; their remote copy, if any, is deleted.
//
// Remote copies carry annex.dev/remote-cluster-id=<this cluster's ID> and
// annex.dev/managed-by=annex. Only objects carrying both are ever updated or
// deleted: an object of the same name that the provider owns is left alone
// and reported with a Warning Event on the local object.
//
// The reconciler works from the desired state, one (namespace, kind) at a
// time: it lists the local objects and the remote objects of the kind and
// creates, updates (only when something differs) and deletes remote copies
// until they match. No finalizer is needed, so nothing hangs on a dead
// provider. Providers are reached only through Remotes: an unreachable
// provider is skipped (no error, no retry loop) and caught up with when
// Remotes reports its reachability transition; a provider whose
// ForeignCluster is gone or has spec.unreachable set is never called. Remote
// namespaces that are not Ready, and namespaces that are no longer offloaded,
// are left alone: deleting a RemoteNamespace deletes the remote namespace and
// everything in it.
package reflection

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

// Local RBAC. Remote writes use the consumer's own credentials on each
// provider and need no local permission.
// +kubebuilder:rbac:groups="",resources=services;configmaps;secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=offloading.annex.dev,resources=namespaceoffloadings,verbs=get;list;watch
// +kubebuilder:rbac:groups=core.annex.dev,resources=foreignclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=networking.annex.dev,resources=networkconfigurations,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

const (
	// DefaultResyncPeriod is how often a (namespace, kind) is compared with
	// its remote copies at steady state, which repairs remote copies changed
	// or deleted behind Annex's back. It costs reads only.
	DefaultResyncPeriod = 10 * time.Minute

	// DefaultPendingRequeue is how soon a (namespace, kind) is looked at again
	// while a remote copy is being deleted and must be created again.
	DefaultPendingRequeue = 2 * time.Second

	// DefaultMaxConcurrentReconciles is the number of workers per kind.
	DefaultMaxConcurrentReconciles = 4

	// ReasonConflict is the reason of the Warning Event recorded on a local
	// object whose name is taken, in a remote namespace, by an object that
	// this cluster's Annex did not create.
	ReasonConflict = "ReflectionConflict"
)

// Kind is a kind of object that is reflected.
type Kind string

// The reflected kinds.
const (
	KindService       Kind = "Service"
	KindConfigMap     Kind = "ConfigMap"
	KindSecret        Kind = "Secret"
	KindEndpointSlice Kind = "EndpointSlice"
)

// AllKinds returns every reflected kind.
func AllKinds() []Kind {
	return []Kind{KindService, KindConfigMap, KindSecret, KindEndpointSlice}
}

// Remotes gives access to providers. *remote.Manager implements it.
type Remotes interface {
	// Client returns a client for the provider whose every call has a
	// timeout, or an error when the provider is unknown or unreachable.
	Client(clusterID string) (client.Client, error)
	// Subscribe returns a channel of reachability transitions (events whose
	// object is named after the provider's cluster ID).
	Subscribe() <-chan event.TypedGenericEvent[*corev1alpha1.ForeignCluster]
}

// Options tune the reconciler. The zero value means the defaults.
type Options struct {
	// Kinds are the kinds to reflect (default AllKinds); New panics on an
	// unknown kind.
	Kinds []Kind
	// Translator rewrites endpoints for each provider
	// (default DefaultEndpointTranslator{}).
	Translator EndpointTranslator
	// Recorder receives conflict Events. New discards them when nil;
	// SetupWithManager then uses the manager's recorder "annex-reflection".
	Recorder events.EventRecorder
	// LiveReader reads ConfigMaps and Secrets, whose data the agent does not
	// cache. New uses local when nil; SetupWithManager the manager's
	// uncached API reader.
	LiveReader client.Reader
	// ResyncPeriod is how often to compare with the remote copies at steady
	// state (DefaultResyncPeriod; negative disables it).
	ResyncPeriod time.Duration
	// PendingRequeue is how soon to look again while a remote copy is being
	// deleted (DefaultPendingRequeue).
	PendingRequeue time.Duration
	// MaxConcurrentReconciles is the number of workers per kind
	// (DefaultMaxConcurrentReconciles).
	MaxConcurrentReconciles int
}

// Reconciler reflects the objects of offloaded namespaces to providers. It
// runs one controller per kind (see SetupWithManager), each reconciling one
// namespace at a time.
type Reconciler struct {
	reader         client.Reader // NamespaceOffloadings, ForeignClusters, Services, EndpointSlices
	live           client.Reader // ConfigMaps, Secrets
	remotes        Remotes
	localClusterID string
	opts           Options
	recorder       events.EventRecorder
	reflectors     map[Kind]reflector

	mu sync.Mutex
	// conflicts remembers the conflicts already reported, so that a
	// persistent conflict yields one Event, not one per reconcile.
	conflicts map[conflictScope]map[string]types.UID
	// externalNames remembers, per namespace, the ExternalName Services
	// already reported as not reflected.
	externalNames map[string]map[string]externalName
}

type conflictScope struct {
	kind      Kind
	provider  string
	namespace string
}

// New returns the reconciler. local reads local objects (until
// SetupWithManager switches reads to the manager's cache and API reader);
// nothing local is ever written but Events. remotes gives clients for
// providers; localClusterID is this cluster's ID, written on every remote
// copy.
func New(local client.Client, remotes Remotes, localClusterID string, opts Options) *Reconciler {
	if len(opts.Kinds) == 0 {
		opts.Kinds = AllKinds()
	}
	if opts.Translator == nil {
		opts.Translator = DefaultEndpointTranslator{}
	}
	if opts.ResyncPeriod == 0 {
		opts.ResyncPeriod = DefaultResyncPeriod
	}
	if opts.PendingRequeue <= 0 {
		opts.PendingRequeue = DefaultPendingRequeue
	}
	if opts.MaxConcurrentReconciles <= 0 {
		opts.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	r := &Reconciler{
		reader:         local,
		live:           local,
		remotes:        remotes,
		localClusterID: localClusterID,
		opts:           opts,
		recorder:       opts.Recorder,
		reflectors:     map[Kind]reflector{},
		conflicts:      map[conflictScope]map[string]types.UID{},
		externalNames:  map[string]map[string]externalName{},
	}
	if opts.LiveReader != nil {
		r.live = opts.LiveReader
	}
	if r.recorder == nil {
		r.recorder = &events.FakeRecorder{} // discards
	}
	for _, k := range opts.Kinds {
		r.reflectors[k] = newReflector(k)
	}
	return r
}

// reflector is what differs between kinds.
type reflector interface {
	// object is an empty local object of the kind (the watched type).
	object() client.Object
	// list returns the local objects of namespace that must be reflected.
	list(ctx context.Context, r *Reconciler, namespace string) ([]client.Object, error)
	// listRemote returns every remote object of the kind in namespace.
	listRemote(ctx context.Context, c client.Client, namespace string) ([]client.Object, error)
	// desired returns local's remote copy for provider: name, labels,
	// annotations and content; the caller sets the namespace and Annex's
	// labels.
	desired(ctx context.Context, r *Reconciler, provider string, local client.Object) client.Object
	// apply returns a copy of remote with desired's content (the caller
	// sets labels and annotations), or recreate when remote cannot be
	// updated into it (an immutable field differs).
	apply(desired, remote client.Object) (updated client.Object, recreate bool)
}

// target is one provider's remote namespace.
type target struct {
	provider  string
	namespace string
}

// kindReconciler reconciles one kind; requests are namespaces.
type kindReconciler struct {
	*Reconciler
	kind Kind
}

// Reconcile reflects the objects of one kind in namespace req.Namespace.
func (k kindReconciler) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	return k.reconcileKind(ctx, k.kind, req.Namespace)
}

func (r *Reconciler) reconcileKind(ctx context.Context, kind Kind, namespace string) (ctrl.Result, error) {
	ref := r.reflectors[kind]
	nso := &offloadingv1alpha1.NamespaceOffloading{}
	if err := r.reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: offloadingv1alpha1.NamespaceOffloadingName}, nso); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !nso.DeletionTimestamp.IsZero() {
		// The remote namespaces go away with their RemoteNamespaces.
		return ctrl.Result{}, nil
	}
	targets := readyTargets(nso)
	if len(targets) == 0 {
		return ctrl.Result{}, nil
	}
	locals, err := ref.list(ctx, r, namespace)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("list local %ss: %w", kind, err)
	}

	var errs []error
	pending := false
	for _, t := range targets {
		log := ctrl.LoggerFrom(ctx).WithValues("provider", t.provider, "remoteNamespace", t.namespace)
		pctx := ctrl.LoggerInto(ctx, log)
		skip, why, err := r.peerGone(ctx, t.provider)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if skip {
			log.V(1).Info("Not reflecting", "reason", why)
			continue
		}
		rc, err := r.remotes.Client(t.provider)
		if err != nil {
			// A reachability transition brings us back.
			log.V(1).Info("Provider not reachable now, reflection waits for it", "reason", err.Error())
			continue
		}
		p, err := r.sync(pctx, kind, ref, rc, t, locals)
		pending = pending || p
		if err != nil {
			errs = append(errs, fmt.Errorf("provider %s: %w", t.provider, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return ctrl.Result{}, err
	}
	if pending {
		return ctrl.Result{RequeueAfter: r.opts.PendingRequeue}, nil
	}
	if r.opts.ResyncPeriod > 0 {
		return ctrl.Result{RequeueAfter: r.opts.ResyncPeriod}, nil
	}
	return ctrl.Result{}, nil
}

// sync makes the remote objects of kind in t.namespace match locals. pending
// is true when it must look again soon.
func (r *Reconciler) sync(ctx context.Context, kind Kind, ref reflector, rc client.Client, t target, locals []client.Object) (pending bool, err error) {
	log := ctrl.LoggerFrom(ctx)
	remotes, err := ref.listRemote(ctx, rc, t.namespace)
	if err != nil {
		return false, fmt.Errorf("list remote %ss in %s: %w", kind, t.namespace, err)
	}
	byName := make(map[string]client.Object, len(remotes))
	for _, o := range remotes {
		byName[o.GetName()] = o
	}

	var errs []error
	wanted := make(map[string]bool, len(locals))
	conflicts := map[string]conflict{}
	for _, l := range locals {
		want := ref.desired(ctx, r, t.provider, l)
		want.SetNamespace(t.namespace)
		r.own(want)
		name := want.GetName()
		wanted[name] = true
		key := t.namespace + "/" + name

		cur, exists := byName[name]
		switch {
		case !exists:
			if err := rc.Create(ctx, want); err != nil {
				if apierrors.IsAlreadyExists(err) {
					pending = true // created meanwhile; look again
					continue
				}
				errs = append(errs, fmt.Errorf("create %s %s: %w", kind, key, err))
				continue
			}
			log.V(1).Info("Created remote copy", "kind", kind, "name", name)
		case !r.ours(cur):
			conflicts[name] = conflict{local: l, uid: cur.GetUID()}
		case !cur.GetDeletionTimestamp().IsZero():
			pending = true
		default:
			updated, recreate := ref.apply(want, cur)
			if recreate {
				if err := deleteRemote(ctx, rc, cur); err != nil {
					errs = append(errs, fmt.Errorf("delete %s %s to re-create it: %w", kind, key, err))
					continue
				}
				if err := rc.Create(ctx, want); err != nil {
					if apierrors.IsAlreadyExists(err) {
						pending = true // still being deleted
						continue
					}
					errs = append(errs, fmt.Errorf("re-create %s %s: %w", kind, key, err))
					continue
				}
				log.V(1).Info("Re-created remote copy", "kind", kind, "name", name)
				continue
			}
			updated.SetLabels(want.GetLabels())
			updated.SetAnnotations(want.GetAnnotations())
			if apiequality.Semantic.DeepEqual(updated, cur) {
				continue
			}
			if err := rc.Update(ctx, updated); err != nil {
				errs = append(errs, fmt.Errorf("update %s %s: %w", kind, key, err))
				continue
			}
			log.V(1).Info("Updated remote copy", "kind", kind, "name", name)
		}
	}

	for _, o := range remotes {
		if wanted[o.GetName()] || !r.ours(o) || !o.GetDeletionTimestamp().IsZero() {
			continue
		}
		if err := deleteRemote(ctx, rc, o); err != nil {
			errs = append(errs, fmt.Errorf("delete stale %s %s/%s: %w", kind, t.namespace, o.GetName(), err))
			continue
		}
		log.V(1).Info("Deleted stale remote copy", "kind", kind, "name", o.GetName())
	}

	r.reportConflicts(conflictScope{kind: kind, provider: t.provider, namespace: t.namespace}, conflicts)
	return pending, errors.Join(errs...)
}

type conflict struct {
	local client.Object
	uid   types.UID
}

// reportConflicts records a Warning Event for every conflict not reported
// yet in scope and forgets the ones that are gone.
func (r *Reconciler) reportConflicts(scope conflictScope, now map[string]conflict) {
	r.mu.Lock()
	seen := r.conflicts[scope]
	next := make(map[string]types.UID, len(now))
	var report []conflict
	for name, c := range now {
		next[name] = c.uid
		if uid, ok := seen[name]; !ok || uid != c.uid {
			report = append(report, c)
		}
	}
	if len(next) == 0 {
		delete(r.conflicts, scope)
	} else {
		r.conflicts[scope] = next
	}
	r.mu.Unlock()
	for _, c := range report {
		r.recorder.Eventf(c.local, nil, corev1.EventTypeWarning, ReasonConflict, "Reflect",
			"%s %s/%s on provider %s exists and was not created by Annex for cluster %s: not overwriting it",
			scope.kind, scope.namespace, c.local.GetName(), scope.provider, r.localClusterID)
	}
}

// deleteRemote deletes o, only if it is still the object that was read.
func deleteRemote(ctx context.Context, rc client.Client, o client.Object) error {
	uid := o.GetUID()
	err := rc.Delete(ctx, o, client.Preconditions{UID: &uid}, client.PropagationPolicy("Background"))
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// readyTargets returns the Ready remote namespaces of nso.
func readyTargets(nso *offloadingv1alpha1.NamespaceOffloading) []target {
	var out []target
	for _, s := range nso.Status.RemoteNamespaces {
		if s.Phase == offloadingv1alpha1.RemoteNamespaceReady && s.ClusterID != "" && s.RemoteNamespace != "" {
			out = append(out, target{provider: s.ClusterID, namespace: s.RemoteNamespace})
		}
	}
	return out
}

// peerGone reports whether every remote operation towards provider must be
// skipped: its ForeignCluster is gone or marked permanently unreachable.
func (r *Reconciler) peerGone(ctx context.Context, provider string) (bool, string, error) {
	fc := &corev1alpha1.ForeignCluster{}
	if err := r.reader.Get(ctx, client.ObjectKey{Name: provider}, fc); err != nil {
		if apierrors.IsNotFound(err) {
			return true, "ForeignCluster " + provider + " does not exist", nil
		}
		return false, "", fmt.Errorf("get ForeignCluster %s: %w", provider, err)
	}
	if fc.Spec.Unreachable {
		return true, "ForeignCluster " + provider + " is marked unreachable", nil
	}
	return false, "", nil
}

// own adds Annex's ownership labels to a remote copy.
func (r *Reconciler) own(o client.Object) {
	l := o.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[corev1alpha1.LabelRemoteClusterID] = r.localClusterID
	l[corev1alpha1.LabelManagedBy] = corev1alpha1.ManagedByAnnex
	o.SetLabels(l)
}

// ours reports whether a remote object was created by this cluster's Annex.
func (r *Reconciler) ours(o client.Object) bool {
	l := o.GetLabels()
	return l[corev1alpha1.LabelManagedBy] == corev1alpha1.ManagedByAnnex && l[corev1alpha1.LabelRemoteClusterID] == r.localClusterID
}

// reflectable applies the rules shared by every kind: not being deleted, not
// opted out, not a copy that Annex made here for another cluster.
func reflectable(o client.Object) bool {
	return o.GetDeletionTimestamp().IsZero() &&
		o.GetAnnotations()[corev1alpha1.AnnotationSkipReflection] != "true" &&
		o.GetLabels()[corev1alpha1.LabelManagedBy] != corev1alpha1.ManagedByAnnex
}

// copiedLabels returns a copy of the labels of o.
func copiedLabels(o client.Object) map[string]string {
	return maps.Clone(o.GetLabels())
}

// copiedAnnotations returns the annotations of o that go to remote copies:
// all but kubectl's (last-applied-configuration is large and describes the
// local object, allocated fields included) and Annex's own (this cluster's
// settings; providers remove annex.dev keys from tenants' objects, see
// charts/annex/templates/admission/metadata-keys.yaml, and a copy that
// kept asking for them would be written again at every reflection).
func copiedAnnotations(o client.Object) map[string]string {
	var out map[string]string
	for k, v := range o.GetAnnotations() {
		if strings.HasPrefix(k, "kubectl.kubernetes.io/") || strings.HasPrefix(k, "annex.dev/") {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out
}
