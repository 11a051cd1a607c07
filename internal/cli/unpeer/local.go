package unpeer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/cli"
	"github.com/annexhq/annex/internal/identity"
	"github.com/annexhq/annex/internal/remote"
)

// LocalOptions are the settings of an unpeer run with the consumer's
// kubeconfig only.
type LocalOptions struct {
	// Force removes the peering even if the provider does not answer.
	Force bool
	// GracefulTimeout bounds the attempt to reach the provider and clean up
	// through it before giving up (and, with Force, going on without it).
	GracefulTimeout time.Duration
	Timeout         time.Duration
}

// RunLocal removes the peering in which c consumes the provider named
// cluster (its cluster ID or ForeignCluster name), using only c's
// kubeconfig. It first tries the graceful path through the provider; if the
// provider does not answer within GracefulTimeout it fails without changing
// anything, or, with Force, marks the ForeignCluster unreachable so that no
// component calls the provider again and removes everything locally. A
// provider that answers but does not finish a step within GracefulTimeout
// (it stopped answering meanwhile) makes unpeer stop with a hint, or, with
// Force, go on the same way without it. Either way this cluster's side of
// the network link goes first and the ForeignCluster last; the provider's
// agent removes its side of the link, first too, when the heartbeat is
// released or lapses (tenantgc), or as soon as its ForeignCluster is gone
// (linkgc).
func RunLocal(ctx context.Context, s cli.IOStreams, c *cli.Cluster, cluster string, o LocalOptions) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	id, err := identity.Read(ctx, c.Client)
	if err != nil {
		return err
	}
	fc, err := findForeignCluster(ctx, c, cluster)
	if err != nil {
		return err
	}
	pid := fc.Spec.ClusterID
	fmt.Fprintf(s.Out, "Unpeering %s (consumer) from %s (provider)\n", id.ClusterID, pid)

	reason := ""
	if !fc.Spec.Unreachable {
		reason = probeProvider(ctx, c, fc, o.GracefulTimeout)
	} else {
		reason = "its ForeignCluster is already marked unreachable"
	}
	graceful := reason == ""
	switch {
	case graceful:
		s.Step("provider %s answers: removing the peering through it (timeout %s)", pid, o.GracefulTimeout)
	case !o.Force:
		return fmt.Errorf("provider %s does not answer (%s); nothing was changed. If it is gone for good, run `annexctl unpeer %s --force` to remove the peering from this cluster without it", pid, reason, pid)
	default:
		s.Step("provider %s does not answer (%s): forcing", pid, reason)
		if err := markUnreachable(ctx, c, fc); err != nil {
			return err
		}
		s.Step("ForeignCluster %s marked unreachable: no component calls the provider again", pid)
	}

	peerNS := corev1alpha1.PeerNamespaceName(pid)
	rm := remover{s: s, ctx: ctx}
	both := fc.Status.Role == corev1alpha1.RoleBoth
	// Access first: this cluster's side of the network link, unless the
	// other direction of a two-way peering still needs it. (The provider's
	// agent removes its side with the tenant, link first: tenantgc.)
	if !both {
		if err := deleteLinks(ctx, c, rm, pid, o.Timeout); err != nil {
			return err
		}
	}
	// Then the virtual node, so nothing new is scheduled there.
	vn := &corev1alpha1.VirtualNode{}
	vn.Name, vn.Namespace, vn.Spec.ClusterID = pid, peerNS, pid
	if existing := (&corev1alpha1.VirtualNode{}); c.Client.Get(ctx, client.ObjectKeyFromObject(vn), existing) == nil {
		vn = existing
	}
	nodeName := vn.NodeName()
	stepTimeout := o.Timeout
	if graceful {
		stepTimeout = o.GracefulTimeout
	}
	// deleteThrough deletes an object whose clean-up goes through the
	// provider. If the provider does not finish in time, --force goes on
	// without it; otherwise unpeer stops and says so.
	deleteThrough := func(obj client.Object, what string) error {
		err := rm.delete(c, obj, what, stepTimeout)
		if err == nil || !graceful {
			return err
		}
		if !o.Force {
			return rm.gracefulFailed(err, pid)
		}
		s.Step("provider %s did not finish in time (%v): forcing", pid, err)
		if err := markUnreachable(ctx, c, fc); err != nil {
			return err
		}
		s.Step("ForeignCluster %s marked unreachable: no component calls the provider again", pid)
		graceful, stepTimeout = false, o.Timeout
		return rm.delete(c, obj, what, stepTimeout)
	}
	if err := deleteThrough(vn, "VirtualNode "+peerNS+"/"+pid); err != nil {
		return err
	}
	node := &corev1.Node{}
	node.Name = nodeName
	if err := rm.delete(c, node, "Node "+nodeName, stepTimeout); err != nil {
		return err
	}
	if !graceful {
		// Pods bound to the gone node: their replacements are scheduled elsewhere.
		if n, err := forceDeletePodsOn(ctx, c, nodeName); err != nil {
			return err
		} else if n > 0 {
			s.Step("force-deleted %d pod(s) that were on %s; their controllers re-create them elsewhere", n, nodeName)
		}
	}
	// Remote namespaces, then the ResourceSlice: with a reachable provider the
	// agent deletes their replicas there first; marked unreachable, it only
	// releases its finalizers.
	rns := &offloadingv1alpha1.RemoteNamespaceList{}
	if err := c.Client.List(ctx, rns, client.InNamespace(peerNS)); err != nil {
		return err
	}
	for i := range rns.Items {
		if err := deleteThrough(&rns.Items[i], "RemoteNamespace "+peerNS+"/"+rns.Items[i].Name); err != nil {
			return err
		}
	}
	rss := &corev1alpha1.ResourceSliceList{}
	if err := c.Client.List(ctx, rss, client.InNamespace(peerNS)); err != nil {
		return err
	}
	for i := range rss.Items {
		if err := deleteThrough(&rss.Items[i], "ResourceSlice "+peerNS+"/"+rss.Items[i].Name); err != nil {
			return err
		}
	}
	left := fmt.Sprintf("tenant namespace %s and the network link on %s (its agent removes them when the heartbeat lapses, after its --tenant-grace-period)", corev1alpha1.TenantNamespaceName(id.ClusterID), pid)
	// The heartbeat is released last, once this cluster's agent no longer
	// renews it; the client is built now, while the credentials exist.
	var provider kubernetes.Interface
	if graceful {
		provider, _ = providerClient(ctx, c, fc, o.GracefulTimeout)
	}
	// Credentials and the rest, locally.
	secret := &corev1.Secret{}
	secret.Name, secret.Namespace = corev1alpha1.CredentialsSecretName, peerNS
	if err := rm.delete(c, secret, "credentials Secret "+peerNS+"/"+secret.Name, o.Timeout); err != nil {
		return err
	}
	ns := &corev1.Namespace{}
	ns.Name = peerNS
	if err := rm.delete(c, ns, "namespace "+peerNS, o.Timeout); err != nil {
		return err
	}
	if !both {
		if err := rm.delete(c, fc, "ForeignCluster "+fc.Name, o.Timeout); err != nil {
			return err
		}
	} else if err := keepRole(ctx, s, c, fc, corev1alpha1.RoleConsumer, "consumer "+id.ClusterID); err != nil {
		return err
	}
	if provider != nil {
		// Released: the provider then removes the tenant at once.
		if err := releaseHeartbeat(ctx, provider, id.ClusterID); err == nil {
			s.Step("released the heartbeat on %s", pid)
			left = fmt.Sprintf("tenant namespace %s and the network link on %s (its agent removes them now that the heartbeat is released)", corev1alpha1.TenantNamespaceName(id.ClusterID), pid)
		}
	}
	fmt.Fprintf(s.Out, "%s no longer consumes resources of %s (%s).\n", id.ClusterID, pid, time.Since(start).Round(100*time.Millisecond))
	fmt.Fprintf(s.Out, "Not cleaned here (needs the provider): %s.\n", left)
	return nil
}

// deleteLinks deletes this cluster's NetworkConfigurations with peer and
// waits until they are gone.
func deleteLinks(ctx context.Context, c *cli.Cluster, rm remover, peer string, timeout time.Duration) error {
	links := &networkingv1alpha1.NetworkConfigurationList{}
	if err := c.Client.List(ctx, links, client.InNamespace(corev1alpha1.AgentNamespace)); err != nil {
		return err
	}
	for i := range links.Items {
		if nc := &links.Items[i]; nc.Spec.RemoteClusterID == peer {
			if err := rm.delete(c, nc, "NetworkConfiguration "+nc.Namespace+"/"+nc.Name, timeout); err != nil {
				return err
			}
		}
	}
	return nil
}

// findForeignCluster finds the ForeignCluster by name or cluster ID.
func findForeignCluster(ctx context.Context, c *cli.Cluster, cluster string) (*corev1alpha1.ForeignCluster, error) {
	fc := &corev1alpha1.ForeignCluster{}
	err := c.Client.Get(ctx, client.ObjectKey{Name: cluster}, fc)
	if err == nil {
		return fc, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, c.Unreachable(err)
	}
	list := &corev1alpha1.ForeignClusterList{}
	if err := c.Client.List(ctx, list); err != nil {
		return nil, err
	}
	var names []string
	for i := range list.Items {
		if list.Items[i].Spec.ClusterID == cluster {
			return &list.Items[i], nil
		}
		names = append(names, list.Items[i].Name)
	}
	return nil, fmt.Errorf("no peering with %q on this cluster (peers: %v)", cluster, names)
}

// probeProvider returns why the provider cannot be reached, or "".
func probeProvider(ctx context.Context, c *cli.Cluster, fc *corev1alpha1.ForeignCluster, timeout time.Duration) string {
	cs, err := providerClient(ctx, c, fc, timeout)
	if err != nil {
		return err.Error()
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(pctx); err != nil {
		if errors.Is(pctx.Err(), context.DeadlineExceeded) {
			return fmt.Sprintf("no answer within %s", timeout)
		}
		return err.Error()
	}
	return ""
}

// providerClient builds a client for the provider from the peering's credentials.
func providerClient(ctx context.Context, c *cli.Cluster, fc *corev1alpha1.ForeignCluster, timeout time.Duration) (kubernetes.Interface, error) {
	ref := fc.Spec.CredentialsSecretRef
	if ref == nil {
		return nil, errors.New("this cluster has no credentials for it")
	}
	secret := &corev1.Secret{}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, secret); err != nil {
		return nil, fmt.Errorf("credentials Secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	cfg, err := remote.RESTConfigFromKubeconfig(secret.Data[corev1alpha1.CredentialsKubeconfigKey])
	if err != nil {
		return nil, err
	}
	if fc.Spec.APIServerURL != "" {
		cfg.Host = fc.Spec.APIServerURL
	}
	cfg.Timeout = timeout
	return kubernetes.NewForConfig(cfg)
}

// releaseHeartbeat marks this cluster's heartbeat on the provider as
// released.
func releaseHeartbeat(ctx context.Context, cs kubernetes.Interface, localID string) error {
	// Renewed at the epoch rather than deleted: without a Lease the
	// provider counts the silence from the tenant namespace's creation, so
	// a young peering would keep its tenant for a whole grace period.
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"renewTime": metav1.NewMicroTime(time.Unix(corev1alpha1.HeartbeatReleasedUnix, 0))}})
	_, err := cs.CoordinationV1().Leases(corev1alpha1.TenantNamespaceName(localID)).Patch(ctx, corev1alpha1.HeartbeatLeaseName, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func markUnreachable(ctx context.Context, c *cli.Cluster, fc *corev1alpha1.ForeignCluster) error {
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"unreachable": true}})
	if err := c.Client.Patch(ctx, fc, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("mark ForeignCluster %s unreachable: %w", fc.Name, err)
	}
	return nil
}

// forceDeletePodsOn deletes, without grace, the pods bound to node.
func forceDeletePodsOn(ctx context.Context, c *cli.Cluster, node string) (int, error) {
	pods := &corev1.PodList{}
	if err := c.Client.List(ctx, pods, client.MatchingFields{"spec.nodeName": node}); err != nil {
		return 0, err
	}
	for i := range pods.Items {
		if err := c.Client.Delete(ctx, &pods.Items[i], client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
			return i, err
		}
	}
	return len(pods.Items), nil
}

// remover deletes objects and waits until they are gone.
type remover struct {
	s   cli.IOStreams
	ctx context.Context
}

func (r remover) delete(cl *cli.Cluster, obj client.Object, what string, timeout time.Duration) error {
	err := cl.Client.Delete(r.ctx, obj)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", what, err)
	}
	err = cli.Poll(r.ctx, 200*time.Millisecond, timeout, what+" to be deleted", func(ctx context.Context) (bool, error) {
		err := cl.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if err != nil {
		return err
	}
	r.s.Step("deleted %s", what)
	return nil
}

func (r remover) gracefulFailed(err error, pid string) error {
	return fmt.Errorf("%w; the provider may have stopped answering: run `annexctl unpeer %s --force` to finish without it", err, pid)
}
