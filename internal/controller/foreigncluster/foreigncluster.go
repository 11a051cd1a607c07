// Package foreigncluster owns the ForeignCluster reconciler: it keeps the
// peers of internal/remote in step with the local ForeignClusters. For each
// one it loads the kubeconfig of spec.credentialsSecretRef and hands it to
// remote.Manager (which probes the peer and writes APIServerReachable and
// Authenticated from then on), marks the peer permanently unreachable when
// spec.unreachable is set, and forgets it when the ForeignCluster goes away.
// It writes the conditions only for what remote.Manager cannot see: missing
// credentials, and ForeignClusters this cluster never calls.
package foreigncluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/controller/predicates"
	"github.com/annexhq/annex/internal/remote"
)

const (
	// IndexCredentialsSecret indexes ForeignClusters by the
	// "<namespace>/<name>" of their spec.credentialsSecretRef.
	IndexCredentialsSecret = "spec.credentialsSecretRef"

	// KubeconfigKey is the key of the credentials Secret that holds the
	// kubeconfig.
	KubeconfigKey = "kubeconfig"
)

// Reconciler reconciles ForeignClusters into remote.Manager peers.
//
// The credentials Secrets are read cluster-wide (`annexctl peer` puts them
// in the peer namespaces "annex-peer-<clusterID>", where no peer has rights). Secrets are watched as metadata
// only and read uncached, so Secret data is never cached by the agent.
//
// +kubebuilder:rbac:groups=core.annex.dev,resources=foreignclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=core.annex.dev,resources=foreignclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
type Reconciler struct {
	// Client reads ForeignClusters and patches their status in the local
	// cluster.
	Client client.Client
	// Secrets reads the credentials Secrets. SetupWithManager defaults it to
	// the manager's uncached API reader.
	Secrets client.Reader
	// Remote is the peer manager the reconciler configures.
	Remote *remote.Manager
	// Clock stamps condition transitions; defaults to the real clock.
	Clock clock.PassiveClock
}

// SetupWithManager registers the index and the controller with mgr. Remote
// must be added to mgr separately (mgr.Add), so that it runs.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.Secrets == nil {
		r.Secrets = mgr.GetAPIReader()
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1alpha1.ForeignCluster{},
		IndexCredentialsSecret, CredentialsSecretIndexValue); err != nil {
		return fmt.Errorf("index ForeignClusters by credentials Secret: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("foreigncluster").
		// Status writes (ours and remote.Manager's) do not need a reconcile.
		For(&corev1alpha1.ForeignCluster{}, builder.WithPredicates(predicates.SpecChanged())).
		// A renewed token is an update of the Secret.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.ForeignClustersForSecret), builder.OnlyMetadata).
		Complete(r)
}

// CredentialsSecretIndexValue is the IndexCredentialsSecret value of a
// ForeignCluster.
func CredentialsSecretIndexValue(obj client.Object) []string {
	fc, ok := obj.(*corev1alpha1.ForeignCluster)
	if !ok || fc.Spec.CredentialsSecretRef == nil {
		return nil
	}
	ref := fc.Spec.CredentialsSecretRef
	return []string{ref.Namespace + "/" + ref.Name}
}

// ForeignClustersForSecret maps a Secret to the ForeignClusters whose
// credentials it holds.
func (r *Reconciler) ForeignClustersForSecret(ctx context.Context, secret client.Object) []reconcile.Request {
	var list corev1alpha1.ForeignClusterList
	key := secret.GetNamespace() + "/" + secret.GetName()
	if err := r.Client.List(ctx, &list, client.MatchingFields{IndexCredentialsSecret: key}); err != nil {
		logf.FromContext(ctx).Error(err, "Cannot list the ForeignClusters of a Secret", "secret", klog.KObj(secret))
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, fc := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: fc.Name}})
	}
	return reqs
}

// Reconcile configures the peer of one ForeignCluster.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	fc := &corev1alpha1.ForeignCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, fc); err != nil {
		if apierrors.IsNotFound(err) {
			// The name of a ForeignCluster is its cluster ID.
			log.V(1).Info("ForeignCluster gone; forgetting the peer", "clusterID", req.Name)
			r.Remote.Remove(req.Name)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	id := fc.Spec.ClusterID
	if id == "" {
		id = fc.Name
	}
	log = log.WithValues("clusterID", id)
	ctx = logf.IntoContext(ctx, log)

	if fc.Spec.Unreachable {
		// No remote call at all, not even reading credentials that a forced
		// unpeer may be deleting: remote.Manager writes MarkedUnreachable.
		r.Remote.SetPermanentlyUnreachable(id, true)
		return ctrl.Result{}, nil
	}

	ref := fc.Spec.CredentialsSecretRef
	if ref == nil {
		r.Remote.Remove(id)
		if fc.Spec.APIServerURL == "" {
			return ctrl.Result{}, r.setConditions(ctx, fc, metav1.Condition{
				Type:    corev1alpha1.ConditionAPIServerReachable,
				Status:  metav1.ConditionUnknown,
				Reason:  corev1alpha1.ReasonNoAPIServerURL,
				Message: "spec.apiServerURL is empty: this cluster never calls the remote one, so it does not probe it",
			})
		}
		return ctrl.Result{}, r.credentialsMissing(ctx, fc,
			"spec.credentialsSecretRef is not set: there are no credentials to call "+fc.Spec.APIServerURL)
	}

	cfg, problem, err := r.loadCredentials(ctx, ref)
	if err != nil {
		return ctrl.Result{}, err
	}
	if problem == "" {
		if fc.Spec.APIServerURL != "" {
			cfg.Host = fc.Spec.APIServerURL // the spec wins over the kubeconfig's server
		}
		if err := r.Remote.Set(id, cfg); err != nil {
			problem = fmt.Sprintf("Secret %s/%s: %v", ref.Namespace, ref.Name, err)
		}
	}
	if problem != "" {
		log.Info("Cannot use the peer's credentials", "secret", klog.KRef(ref.Namespace, ref.Name), "problem", problem)
		r.Remote.Remove(id)
		return ctrl.Result{}, r.credentialsMissing(ctx, fc, problem)
	}
	r.Remote.SetPermanentlyUnreachable(id, false)
	return ctrl.Result{}, nil
}

// loadCredentials reads the kubeconfig of ref. A problem a person must fix
// is returned as a message; err is for transient errors worth a retry.
func (r *Reconciler) loadCredentials(ctx context.Context, ref *corev1alpha1.SecretReference) (*rest.Config, string, error) {
	secret := &corev1.Secret{}
	if err := r.Secrets.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Sprintf("Secret %s/%s not found", ref.Namespace, ref.Name), nil
		}
		return nil, "", fmt.Errorf("get credentials Secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	data := secret.Data[KubeconfigKey]
	if len(data) == 0 {
		return nil, fmt.Sprintf("Secret %s/%s has no %q key", ref.Namespace, ref.Name, KubeconfigKey), nil
	}
	cfg, err := remote.RESTConfigFromKubeconfig(data)
	if err != nil {
		return nil, fmt.Sprintf("Secret %s/%s: %v", ref.Namespace, ref.Name, err), nil
	}
	return cfg, "", nil
}

// credentialsMissing says that the peer cannot be called for lack of usable
// credentials: whether its API server is up is unknown.
func (r *Reconciler) credentialsMissing(ctx context.Context, fc *corev1alpha1.ForeignCluster, problem string) error {
	return r.setConditions(ctx, fc,
		metav1.Condition{
			Type:    corev1alpha1.ConditionAuthenticated,
			Status:  metav1.ConditionFalse,
			Reason:  corev1alpha1.ReasonCredentialsMissing,
			Message: problem,
		},
		metav1.Condition{
			Type:    corev1alpha1.ConditionAPIServerReachable,
			Status:  metav1.ConditionUnknown,
			Reason:  corev1alpha1.ReasonCredentialsMissing,
			Message: "not probed: " + problem,
		})
}

// setConditions patches the status of fc with conds when one of them
// changes. The optimistic lock keeps the conditions other writers own.
func (r *Reconciler) setConditions(ctx context.Context, fc *corev1alpha1.ForeignCluster, conds ...metav1.Condition) error {
	orig := fc.DeepCopy()
	now := metav1.NewTime(r.Clock.Now())
	changed := false
	for _, c := range conds {
		c.LastTransitionTime = now
		if meta.SetStatusCondition(&fc.Status.Conditions, c) {
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, fc, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("patch ForeignCluster status: %w", err)
	}
	logf.FromContext(ctx).V(1).Info("ForeignCluster conditions written")
	return nil
}
