// Package agent owns the annex-agent process: its flags, its
// controller-runtime manager (leader election, health and readiness probes,
// Prometheus metrics) and the RBAC that the agent's ServiceAccount is granted.
// Controllers register themselves on the manager it returns.
package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/spf13/pflag"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	networkingv1alpha1 "github.com/annexhq/annex/apis/networking/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/podstatus"
)

// The agent's RBAC. controller-gen turns these markers into charts/annex/templates/rbac/role.yaml.
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch,namespace=annex-system
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete,namespace=annex-system
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=core.annex.dev,resources=foreignclusters;resourceslices;virtualnodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=core.annex.dev,resources=foreignclusters/status;resourceslices/status;virtualnodes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=offloading.annex.dev,resources=namespaceoffloadings;shadowpods;shadowendpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=offloading.annex.dev,resources=namespaceoffloadings/status;shadowpods/status;shadowendpointslices/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=networking.annex.dev,resources=networkconfigurations,verbs=get;list;watch
// +kubebuilder:rbac:groups=networking.annex.dev,resources=networkconfigurations/status,verbs=get;update;patch

// Options are the agent's command-line settings.
type Options struct {
	Kubeconfig          string
	Namespace           string
	LeaderElect         bool
	LeaderElectionID    string
	MetricsBindAddress  string
	HealthProbeAddress  string
	PprofBindAddress    string // "" or "0": off
	GracefulStopTimeout time.Duration
}

// DefaultOptions returns the settings used when a flag is not given.
func DefaultOptions() Options {
	return Options{
		Namespace:           corev1alpha1.AgentNamespace,
		LeaderElect:         true,
		LeaderElectionID:    "annex-agent",
		MetricsBindAddress:  ":8080",
		HealthProbeAddress:  ":8081",
		GracefulStopTimeout: 10 * time.Second,
	}
}

// BindFlags registers the options on fs.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig of the cluster this agent runs for (default: in-cluster config, then $KUBECONFIG)")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "namespace Annex is installed in (leader-election lease, identity ConfigMap)")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "elect a leader so that only one agent replica acts at a time")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", o.LeaderElectionID, "name of the leader-election Lease")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, "address of the Prometheus /metrics endpoint (\"0\" disables it)")
	fs.StringVar(&o.HealthProbeAddress, "health-probe-bind-address", o.HealthProbeAddress, "address of the /healthz and /readyz endpoints")
	fs.StringVar(&o.PprofBindAddress, "pprof-bind-address", o.PprofBindAddress, "address of the pprof endpoints (/debug/pprof/; empty or \"0\" disables them)")
	fs.DurationVar(&o.GracefulStopTimeout, "graceful-stop-timeout", o.GracefulStopTimeout, "how long to wait for controllers to stop on shutdown")
}

// Validate reports the first invalid option.
func (o *Options) Validate() error {
	switch {
	case o.Namespace == "":
		return errors.New("--namespace must not be empty")
	case o.HealthProbeAddress == "" || o.HealthProbeAddress == "0":
		return errors.New("--health-probe-bind-address is required: the agent's readiness is part of its contract")
	}
	return nil
}

// Scheme returns a scheme with the Kubernetes built-in types and every Annex API group.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme,
		corev1alpha1.AddToScheme,
		offloadingv1alpha1.AddToScheme,
		networkingv1alpha1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// RESTConfig loads the kubeconfig named by the options, or the in-cluster or
// default configuration when none is named. Either way client-side rate
// limiting is off, as ctrl.GetConfig leaves it (the API server's priority and
// fairness applies): a --kubeconfig must not get client-go's default of 5
// requests per second, which made a local agent far slower than one in a
// cluster (bench: the provider created offloaded pods at 2.5 per second).
//
// Responses are not compressed either: the agent runs next to its own
// cluster's API server, where gzip costs both sides CPU and saves nothing
// (kube-controller-manager and kube-scheduler turn it off for the same
// reason). Watches of every pod were compressed: gunzipping them was 12 %
// of a provider agent's CPU during a stream of 20 pods/s (bench).
func (o *Options) RESTConfig() (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if o.Kubeconfig != "" {
		if cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig); err != nil {
			return nil, fmt.Errorf("load --kubeconfig %s: %w", o.Kubeconfig, err)
		}
		if cfg.QPS == 0 {
			cfg.QPS = -1
		}
	} else if cfg, err = ctrl.GetConfig(); err != nil {
		return nil, err
	}
	cfg.DisableCompression = true
	return cfg, nil
}

// NewManager builds the agent's manager. Its readiness check passes once the
// agent can read the cluster identity ConfigMap with its own credentials,
// which proves both connectivity and RBAC.
//
// byObject restricts what the manager's cache holds of some kinds (merged in
// order; controllers export what they need).
func NewManager(cfg *rest.Config, o Options, byObject ...map[client.Object]cache.ByObject) (ctrl.Manager, error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	var lock resourcelock.Interface
	if o.LeaderElect {
		if lock, err = leaderLock(cfg, o); err != nil {
			return nil, err
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		LeaderElectionResourceLockInterface: lock,
		Scheme:                              scheme,
		LeaderElection:                      o.LeaderElect,
		LeaderElectionID:                    o.LeaderElectionID,
		LeaderElectionNamespace:             o.Namespace,
		LeaderElectionReleaseOnCancel:       true,
		LeaseDuration:                       ptr.To(LeaderLeaseDuration),
		RenewDeadline:                       ptr.To(LeaderRenewDeadline),
		RetryPeriod:                         ptr.To(LeaderRetryPeriod),
		Metrics:                             metricsserver.Options{BindAddress: o.MetricsBindAddress},
		HealthProbeBindAddress:              o.HealthProbeAddress,
		PprofBindAddress:                    o.PprofBindAddress,
		GracefulShutdownTimeout:             &o.GracefulStopTimeout,
		Cache:                               cache.Options{ByObject: cacheByObject(byObject...), DefaultTransform: cache.TransformStripManagedFields()},
	})
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("identity", identityCheck(cs, o.Namespace)); err != nil {
		return nil, err
	}
	return mgr, nil
}

// Leader election timing. The leader renews its Lease every
// LeaderRetryPeriod: that write is the agent's only one while nothing
// happens, so it is 5 s rather than controller-runtime's 2 s (0.2 writes/s
// instead of 0.5). The other two keep controller-runtime's proportions
// (a renew deadline of four retry periods, and 5 s more before another
// replica may take a Lease that was not renewed). What that costs:
//
//   - an agent that crashed or was SIGKILLed (no release) is replaced
//     after up to LeaderLeaseDuration + LeaderRetryPeriod, 35 s instead
//     of 17 s, by another replica or by its own restart (a new process has
//     a new identity and waits the Lease out; a re-exec after a lost
//     leadership keeps its identity and takes the Lease back at once).
//     Meanwhile nothing is reconciled and peers are not probed. A graceful
//     stop releases the Lease at once, as before;
//   - an agent that cannot reach its own API server gives up leadership
//     (and restarts, see cmd/annex-agent) after LeaderRenewDeadline, 20 s
//     instead of 10 s: a shorter outage of its API server no longer
//     restarts it.
const (
	LeaderLeaseDuration = 30 * time.Second
	LeaderRenewDeadline = 20 * time.Second
	LeaderRetryPeriod   = 5 * time.Second
)

// leaderIdentityEnv carries the agent's leader-election identity across the
// re-exec that follows a lost leadership (see cmd/annex-agent).
const leaderIdentityEnv = "ANNEX_AGENT_LEADER_IDENTITY"

// leaderLock is the leader-election Lease lock. Its identity is
// <hostname>_<uuid>, kept in the environment so that the agent keeps it when
// it re-executes itself: a Lease still held under its own name (its API
// server went away, so it could neither renew nor release it) is then taken
// back at once instead of after the Lease expires.
func leaderLock(cfg *rest.Config, o Options) (resourcelock.Interface, error) {
	id := os.Getenv(leaderIdentityEnv)
	if id == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, err
		}
		id = host + "_" + string(uuid.NewUUID())
		if err := os.Setenv(leaderIdentityEnv, id); err != nil {
			return nil, err
		}
	}
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = LeaderRetryPeriod // a quarter of the renew deadline: one hung call cannot cost the lease
	cs, err := kubernetes.NewForConfig(rest.AddUserAgent(cfg, "leader-election"))
	if err != nil {
		return nil, err
	}
	return resourcelock.New(resourcelock.LeasesResourceLock, o.Namespace, o.LeaderElectionID,
		cs.CoreV1(), cs.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: id})
}

// cacheByObject keeps only Annex's own Leases (heartbeats, not every node's)
// and adds the restrictions controllers ask for. Pods are cached trimmed
// (TrimPod), whatever restriction a controller adds. Secrets and ConfigMaps
// are cached as TrimTrigger leaves them, whatever a controller adds.
//
// What the cache holds, kind by kind, and why (docs/security.md, "What the
// agent caches"): Secrets and ConfigMaps are watched for metadata only
// (credentials, foreigncluster, reflection), as triggers: of each the
// cache keeps its name, namespace, UID, resourceVersion, deletion and
// Annex's own labels (TrimTrigger), never data, tenants' annotations or
// labels; readers read the objects themselves with the API reader. Leases,
// RoleBindings, ResourceQuotas and LimitRanges: only Annex's (label
// selectors). Pods: every pod, trimmed (TrimPod). Services, EndpointSlices,
// Namespaces, Nodes and Annex's own kinds are cached whole: the reflection
// reads local Services and EndpointSlices whole (they are the consumer's
// own in offloaded namespaces, which no selector can single out); the
// tenants' are bounded in number (ResourceQuota) and size (admission
// policies annex-tenant-metadata, annex-tenant-shadowendpointslices).
func cacheByObject(extra ...map[client.Object]cache.ByObject) map[client.Object]cache.ByObject {
	out := map[client.Object]cache.ByObject{
		&coordinationv1.Lease{}: {Label: labels.SelectorFromSet(labels.Set{corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex})},
	}
	var pod *cache.ByObject
	for _, m := range extra {
		for k, v := range m {
			if _, ok := k.(*corev1.Pod); ok {
				pod = &v
				continue
			}
			out[k] = v
		}
	}
	if pod == nil {
		pod = &cache.ByObject{}
	}
	if pod.Transform == nil {
		pod.Transform = TrimPod
	}
	out[&corev1.Pod{}] = *pod
	for k, v := range out {
		switch k.(type) {
		case *corev1.Secret, *corev1.ConfigMap:
			v.Transform = TrimTrigger
			out[k] = v
		}
	}
	for _, k := range []client.Object{&corev1.Secret{}, &corev1.ConfigMap{}} {
		if !hasKind(out, k) {
			out[k] = cache.ByObject{Transform: TrimTrigger}
		}
	}
	return out
}

// hasKind reports whether m has an entry for the Go type of k.
func hasKind(m map[client.Object]cache.ByObject, k client.Object) bool {
	for o := range m {
		if fmt.Sprintf("%T", o) == fmt.Sprintf("%T", k) {
			return true
		}
	}
	return false
}

// triggerLabels are the labels TrimTrigger keeps: what the agent's
// predicates and handlers of Secrets and ConfigMaps read.
var triggerLabels = []string{corev1alpha1.LabelManagedBy, corev1alpha1.LabelRemoteClusterID}

// TrimTrigger is the transform of the Secrets and ConfigMaps in the agent's
// cache. They are watched for their metadata only, and only as triggers:
// the credentials controller (name, the managed-by label), the foreigncluster
// controller (namespace and name) and the reflection (namespace) read
// nothing else, and read the objects themselves with the API reader. The
// cache watches every Secret and ConfigMap of the cluster (the consumer's
// in offloaded namespaces cannot be singled out by a selector), tenants'
// included, so it keeps of each only its name, namespace, UID,
// resourceVersion, generation, deletion and Annex's own labels: never their
// data, nor labels, annotations, finalizers or owner references, which a
// tenant chooses (up to 256 KiB of annotations per object in Kubernetes).
// A full Secret or ConfigMap, should a reader ever ask the cache for one, is
// trimmed the same way, data included: read them with the API reader.
func TrimTrigger(obj any) (any, error) {
	o, ok := obj.(client.Object)
	if !ok {
		return obj, nil // a DeletedFinalStateUnknown
	}
	var kept map[string]string
	for _, k := range triggerLabels {
		if v, ok := o.GetLabels()[k]; ok {
			if kept == nil {
				kept = map[string]string{}
			}
			kept[k] = v
		}
	}
	meta := metav1.ObjectMeta{Name: o.GetName(), Namespace: o.GetNamespace(), UID: o.GetUID(),
		ResourceVersion: o.GetResourceVersion(), Generation: o.GetGeneration(),
		CreationTimestamp: o.GetCreationTimestamp(), DeletionTimestamp: o.GetDeletionTimestamp(), Labels: kept}
	switch o := o.(type) {
	case *metav1.PartialObjectMetadata:
		o.ObjectMeta = meta
	case *corev1.Secret:
		*o = corev1.Secret{TypeMeta: o.TypeMeta, ObjectMeta: meta, Type: o.Type}
	case *corev1.ConfigMap:
		*o = corev1.ConfigMap{TypeMeta: o.TypeMeta, ObjectMeta: meta}
	}
	return o, nil
}

// TrimPod is the transform of the pods in the agent's cache. The cache holds
// every pod of the cluster (the consumer's offloaded pods, the provider's
// ShadowPod pods, anyone else's), and its readers look at a pod's metadata
// (labels, annotations such as the transit address, owner references,
// deletion), its status and a small part of its spec:
//
//   - the virtual nodes (podreflector, eventreflector): the pods bound to
//     them, with podstatus.StatusSpec of their spec (the status
//     translation reads container names, images and restart policies);
//     the reflector reads a pod whole from the API server when it creates
//     the pod's ShadowPod;
//   - transit: the node, the phase, the transit address annotation;
//   - shadowpod: owner references, labels and annotations, deletion, the
//     whole status (a finished pod's is recorded in its ShadowPod), and
//     what its quota counts (shadowpod.PodRequests): the requests and
//     limits of every container and init container, the pod-level
//     resources and the overhead. Without them every cached pod counted as
//     a pod and nothing else, and a tenant's pods whose admissions had
//     reached the cache took none of its CPU or memory grant: ShadowPods
//     that each fit ran together far beyond it;
//   - shadowendpointslice: the phase and the pod IPs;
//   - reflection (through netview) and gatewayconfig: the namespace, the
//     node, the phase, the pod IPs, deletion and the transit address
//     (gatewayconfig needs every pod: tenants' pods in remote namespaces,
//     the consumer's own pods in offloaded namespaces, pods with transit
//     addresses; restricting the cached pods to ShadowPods' would leave
//     the consumer's out).
//
// So the cache keeps a pod's metadata without managedFields, its status,
// and of its spec only podstatus.StatusSpec and the quota's fields
// (keepRequests): with 5000 offloaded pods
// the rest of the spec (volumes, env, resources, tolerations) and a second
// cache of the same pods were the largest part of the consumer agent's
// heap. A reader that needs more of a pod's spec must read it from the API
// server or widen this transform. Writes stay correct: pods from the cache
// are patched with merge patches computed from a copy (client.MergeFrom),
// which carry the changed fields only, and the virtual nodes' status
// writes (pods/status) cannot change a pod's spec: the API server keeps
// the stored one.
func TrimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a DeletedFinalStateUnknown
	}
	pod.ManagedFields = nil
	spec := podstatus.StatusSpec(&pod.Spec)
	keepRequests(&spec, &pod.Spec)
	pod.Spec = spec
	return pod, nil
}

// keepRequests copies into trimmed, a StatusSpec of full, what the provider's
// quota counts of a pod (shadowpod.PodRequests): each container's and init
// container's requests and limits, the pod-level resources and the overhead.
func keepRequests(trimmed, full *corev1.PodSpec) {
	for i := range trimmed.Containers {
		trimmed.Containers[i].Resources = corev1.ResourceRequirements{
			Requests: full.Containers[i].Resources.Requests, Limits: full.Containers[i].Resources.Limits}
	}
	for i := range trimmed.InitContainers {
		trimmed.InitContainers[i].Resources = corev1.ResourceRequirements{
			Requests: full.InitContainers[i].Resources.Requests, Limits: full.InitContainers[i].Resources.Limits}
	}
	if full.Resources != nil {
		trimmed.Resources = &corev1.ResourceRequirements{Requests: full.Resources.Requests, Limits: full.Resources.Limits}
	}
	trimmed.Overhead = full.Overhead
}

// identityCheck reads the identity ConfigMap with a short timeout.
func identityCheck(cs kubernetes.Interface, ns string) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), 3*time.Second)
		defer cancel()
		cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, corev1alpha1.ClusterIdentityConfigMapName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("read identity ConfigMap %s/%s: %w", ns, corev1alpha1.ClusterIdentityConfigMapName, err)
		}
		if cm.Data[corev1alpha1.ClusterIdentityKeyClusterID] == "" {
			return fmt.Errorf("identity ConfigMap %s/%s has no %s", ns, corev1alpha1.ClusterIdentityConfigMapName, corev1alpha1.ClusterIdentityKeyClusterID)
		}
		return nil
	}
}
