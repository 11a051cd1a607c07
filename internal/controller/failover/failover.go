// Package failover owns the consumer's side of failover: the pods of a
// namespace offloaded with spec.failover that sit on the virtual node of a
// provider unreachable for releaseAfterSeconds (T) are deleted here, at
// once, so that their controllers (Deployments, StatefulSets, Jobs) create
// replacements on other virtual nodes or locally.
//
// A pod is released only when its old copy is proven stopped: the provider
// armed the fence the namespace asks for (fenceAfterSeconds, F; the
// RemoteNamespace's status.fenceAfterSeconds, see package fencing), and the
// last heartbeat this agent sent it is at least T old (heartbeat.Sent). The
// provider fences by the renewTime it holds, never later than that, so its
// fence fell at least T − F (the fencing margin, validated ≥ 15 s) before
// the release, whether it is dead, hung or only cut off from this cluster,
// and also when this cluster is the one cut off from everything. A provider
// that never armed the fence is never released from.
//
// When the provider answers again, the virtual node's reflector finds the
// released pods' ShadowPods orphaned (or already fenced) and deletes them:
// nothing released ever runs there again.
package failover

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/controller/namespaceoffloading"
)

// Poll is how often a namespace with failover is looked at while its
// providers answer: well under the shortest T − F, so a provider's loss is
// noticed before any release falls due.
const Poll = 5 * time.Second

// Remotes says whether a provider answers now.
type Remotes interface {
	Reachable(clusterID string) bool
}

// Heartbeats says when this agent last sent a provider its heartbeat.
type Heartbeats interface {
	Last(clusterID string) (time.Time, bool)
}

// Reconciler releases the pods of unreachable providers.
type Reconciler struct {
	// Client reads from the manager's cache and deletes.
	Client client.Client
	// APIReader lists the pods bound to a virtual node.
	APIReader  client.Reader
	Remotes    Remotes
	Heartbeats Heartbeats
	Recorder   events.EventRecorder
	Clock      clock.PassiveClock
}

// +kubebuilder:rbac:groups=offloading.annex.dev,resources=namespaceoffloadings,verbs=get;list;watch
// +kubebuilder:rbac:groups=offloading.annex.dev,resources=remotenamespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=core.annex.dev,resources=virtualnodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete

// Reconcile looks at one NamespaceOffloading's providers and releases the
// pods of those lost for longer than its releaseAfterSeconds.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	nso := &offloadingv1alpha1.NamespaceOffloading{}
	if err := r.Client.Get(ctx, req.NamespacedName, nso); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if nso.Spec.Failover == nil || !nso.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	release := time.Duration(nso.Spec.Failover.ReleaseAfterSeconds) * time.Second
	rns := &offloadingv1alpha1.RemoteNamespaceList{}
	if err := r.Client.List(ctx, rns, client.MatchingLabels{corev1alpha1.LabelSourceNamespace: nso.Namespace, corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}); err != nil {
		return ctrl.Result{}, err
	}
	next := Poll
	now := r.Clock.Now()
	for i := range rns.Items {
		rn := &rns.Items[i]
		provider := rn.Labels[corev1alpha1.LabelRemoteClusterID]
		if provider == "" || rn.Namespace != corev1alpha1.PeerNamespaceName(provider) || rn.Spec.SourceNamespace != nso.Namespace {
			continue
		}
		if !namespaceoffloading.Armed(rn, nso.Spec.Failover.FenceAfterSeconds) || r.Remotes.Reachable(provider) {
			continue
		}
		last, ok := r.Heartbeats.Last(provider)
		if !ok {
			continue // not started: the next poll
		}
		if due := last.Add(release); now.Before(due) {
			next = min(next, due.Sub(now)+100*time.Millisecond)
			continue
		}
		if err := r.releaseFrom(ctx, nso, provider, now.Sub(last)); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

// releaseFrom deletes, without grace, the pods of nso's namespace bound to
// provider's virtual node that have not finished.
func (r *Reconciler) releaseFrom(ctx context.Context, nso *offloadingv1alpha1.NamespaceOffloading, provider string, silent time.Duration) error {
	log := ctrl.LoggerFrom(ctx).WithValues("provider", provider)
	vns := &corev1alpha1.VirtualNodeList{}
	if err := r.Client.List(ctx, vns, client.InNamespace(corev1alpha1.PeerNamespaceName(provider))); err != nil {
		return err
	}
	released := 0
	for i := range vns.Items {
		if vns.Items[i].Spec.ClusterID != provider {
			continue
		}
		node := vns.Items[i].NodeName()
		pods := &corev1.PodList{}
		if err := r.APIReader.List(ctx, pods, client.InNamespace(nso.Namespace), client.MatchingFields{"spec.nodeName": node}); err != nil {
			return err
		}
		for j := range pods.Items {
			pod := &pods.Items[j]
			if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
				continue
			}
			uid := pod.UID
			if err := r.Client.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("release pod %s/%s: %w", pod.Namespace, pod.Name, err)
			}
			log.Info("Released pod from unreachable provider", "pod", klog.KObj(pod), "node", node, "heartbeatSilentFor", silent.Round(time.Second))
			r.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, "ReleasedFromLostProvider", "Release",
				"provider %s has been unreachable and without a heartbeat from this cluster for %s (releaseAfterSeconds %d; it fenced the pod after %d s): deleted so that its controller replaces it",
				provider, silent.Round(time.Second), nso.Spec.Failover.ReleaseAfterSeconds, nso.Spec.Failover.FenceAfterSeconds)
			released++
		}
	}
	if released > 0 {
		r.Recorder.Eventf(nso, nil, corev1.EventTypeWarning, "ReleasedFromLostProvider", "Release",
			"released %d pod(s) from provider %s, unreachable and without a heartbeat for %s", released, provider, silent.Round(time.Second))
	}
	return nil
}

// SetupWithManager reconciles every NamespaceOffloading; those with
// failover come back every Poll.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("failover").
		For(&offloadingv1alpha1.NamespaceOffloading{}).
		Complete(r)
}
