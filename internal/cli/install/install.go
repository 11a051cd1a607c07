// Package install owns `annexctl install`: it renders the embedded Helm
// chart (charts/annex, through internal/chart) with the options as values
// and server-side applies what it renders — the CRDs (first, waiting until
// they are established), the annex-system namespace, the agent's RBAC, the
// admission policies, the cluster identity ConfigMap and (unless the agent
// runs elsewhere) the agent Deployment — and creates the provider policy
// ConfigMap (ProviderPolicyName) unless it exists: the operator owns that
// one once it is there. It makes no Helm release: what the chart would look
// up in the cluster (the installed cluster ID, the global default
// PriorityClass, an existing policy), install looks up itself.
package install

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/charts"
	"github.com/annexhq/annex/internal/chart"
	"github.com/annexhq/annex/internal/cli"
	"github.com/annexhq/annex/internal/version"
)

// VersionLabel on the annex-system namespace records the installed Annex version.
const VersionLabel = "annex.dev/version"

// MaxClusterIDLength keeps names derived from a cluster ID (annex-tenant-<id>,
// annex-peer-<id>, <namespace>-<id>, annex-<id>) within Kubernetes'
// 63-character limit.
const MaxClusterIDLength = 32

// Options are the settings of one install.
type Options struct {
	ClusterID    string
	PodCIDR      string
	ServiceCIDR  string
	ExternalCIDR string
	// LocalAgent skips the agent Deployment: the agent runs as a local process
	// (the sandbox) or is managed by something else.
	LocalAgent bool
	Image      string
	// ImagePullPolicy of the agent's containers.
	ImagePullPolicy string
	// GatewayEndpoint, when set, runs annex-gateway next to the agent (see
	// Deployment): the IPv4 address of the gateway node at which the peers'
	// gateways reach it. GatewayNode pins the pod to that node.
	GatewayEndpoint string
	GatewayNode     string
	// AgentCPURequest, AgentMemoryRequest and AgentMemoryLimit are the
	// agent container's resources (quantities).
	AgentCPURequest    string
	AgentMemoryRequest string
	AgentMemoryLimit   string
	Timeout            time.Duration
}

// DefaultOptions are the defaults of the CLI flags.
func DefaultOptions() Options {
	return Options{
		PodCIDR:      "10.244.0.0/16",
		ServiceCIDR:  "10.96.0.0/12",
		ExternalCIDR: "10.70.0.0/16",
		Image:        "ghcr.io/annexhq/annex-agent:" + version.Version,
		// Images are often imported into the nodes' runtime, not pulled.
		ImagePullPolicy: string(corev1.PullIfNotPresent),
		// The chart's defaults (charts/annex/values.yaml).
		AgentCPURequest:    "100m",
		AgentMemoryRequest: "128Mi",
		AgentMemoryLimit:   "512Mi",
		Timeout:            2 * time.Minute,
	}
}

// Validate checks the options that do not need the cluster.
func (o Options) Validate() error {
	if o.ClusterID != "" {
		if errs := validation.IsDNS1123Label(o.ClusterID); len(errs) > 0 {
			return fmt.Errorf("--cluster-id %q: %s", o.ClusterID, errs[0])
		}
		if len(o.ClusterID) > MaxClusterIDLength {
			return fmt.Errorf("--cluster-id %q: at most %d characters", o.ClusterID, MaxClusterIDLength)
		}
	}
	cidrs := map[string]string{"--pod-cidr": o.PodCIDR, "--service-cidr": o.ServiceCIDR, "--external-cidr": o.ExternalCIDR}
	parsed := map[string]netip.Prefix{}
	for _, flag := range []string{"--pod-cidr", "--service-cidr", "--external-cidr"} {
		p, err := netip.ParsePrefix(cidrs[flag])
		if err != nil {
			return fmt.Errorf("%s %q is not a CIDR: %w", flag, cidrs[flag], err)
		}
		if p != p.Masked() {
			return fmt.Errorf("%s %q has host bits set; did you mean %s?", flag, cidrs[flag], p.Masked())
		}
		for other, q := range parsed {
			if p.Overlaps(q) {
				return fmt.Errorf("%s %s overlaps %s %s", flag, p, other, q)
			}
		}
		parsed[flag] = p
	}
	if !o.LocalAgent && o.Image == "" {
		return errors.New("--image is required unless --local-agent is set")
	}
	switch corev1.PullPolicy(o.ImagePullPolicy) {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return fmt.Errorf("--image-pull-policy %q: one of Always, IfNotPresent, Never", o.ImagePullPolicy)
	}
	if o.GatewayEndpoint != "" {
		if a, err := netip.ParseAddr(o.GatewayEndpoint); err != nil || !a.Is4() {
			return fmt.Errorf("--gateway-endpoint %q: the IPv4 address of the gateway node that the peers' gateways reach", o.GatewayEndpoint)
		}
		if o.LocalAgent {
			return errors.New("--gateway-endpoint deploys the gateway with the agent: it cannot be combined with --local-agent (run annex-gateway yourself and give the agent --gateway-config)")
		}
	}
	if o.GatewayNode != "" && o.GatewayEndpoint == "" {
		return errors.New("--gateway-node needs --gateway-endpoint (the address of that node)")
	}
	return o.validateResources()
}

// validateResources checks the agent's resources: quantities, and a memory
// request no larger than the limit (the API server would refuse the pod).
func (o Options) validateResources() error {
	quantity := func(flag, val string) (*resource.Quantity, error) {
		if val == "" {
			return nil, nil // the chart's default
		}
		q, err := resource.ParseQuantity(val)
		if err != nil || q.Sign() < 0 {
			return nil, fmt.Errorf("%s %q: a quantity such as 100m (CPU) or 256Mi (memory)", flag, val)
		}
		return &q, nil
	}
	if _, err := quantity("--agent-cpu-request", o.AgentCPURequest); err != nil {
		return err
	}
	req, err := quantity("--agent-memory-request", o.AgentMemoryRequest)
	if err != nil {
		return err
	}
	limit, err := quantity("--agent-memory-limit", o.AgentMemoryLimit)
	if err != nil {
		return err
	}
	if req != nil && limit != nil && req.Cmp(*limit) > 0 {
		return fmt.Errorf("--agent-memory-request %s is larger than --agent-memory-limit %s", o.AgentMemoryRequest, o.AgentMemoryLimit)
	}
	return nil
}

// Run installs Annex into the cluster: it renders the embedded chart
// (charts/annex) with the options as values and applies what it renders.
func Run(ctx context.Context, s cli.IOStreams, c *cli.Cluster, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()

	clusterID, err := checkExisting(ctx, c, o.ClusterID)
	if err != nil {
		return err
	}
	policyExists, priorityClasses, err := providerPolicyState(ctx, c)
	if err != nil {
		return err
	}
	r, err := chart.Render(ctx, chartValues(o, clusterID, priorityClasses))
	if err != nil {
		return err
	}
	applied := map[string]bool{}
	apply := func(name string) (int, error) {
		objs := r.Objects(name)
		for _, obj := range objs {
			if err := cli.Apply(ctx, c.Client, obj); err != nil {
				return 0, err
			}
		}
		for _, t := range r.Templates {
			if t.Name == name || strings.HasSuffix(name, "/") && strings.HasPrefix(t.Name, name) {
				applied[t.Name] = true
			}
		}
		return len(objs), nil
	}

	if err := applyCRDs(ctx, c.Client, r.CRDs); err != nil {
		return err
	}
	s.Step("applied %d CustomResourceDefinitions", len(r.CRDs))

	if _, err := apply("namespace.yaml"); err != nil {
		return err
	}
	s.Step("namespace %s (Annex %s)", corev1alpha1.AgentNamespace, version.Version)

	n, err := apply("rbac/")
	if err != nil {
		return err
	}
	s.Step("agent ServiceAccount and RBAC (%d objects)", n)

	if n, err = apply("admission/"); err != nil {
		return err
	}
	s.Step("admission policies for offloaded namespaces and for the tenants of this provider (%d objects)", n)

	if err := ensureProviderPolicy(ctx, s, c, policyExists, r.Objects(providerPolicyTemplate)); err != nil {
		return err
	}
	applied[providerPolicyTemplate] = true

	if _, err := apply("cluster-identity.yaml"); err != nil {
		return err
	}
	s.Step("cluster identity: id %s, pod CIDR %s, service CIDR %s, external CIDR %s", clusterID, o.PodCIDR, o.ServiceCIDR, o.ExternalCIDR)

	if n, err = apply("deployment.yaml"); err != nil {
		return err
	}
	switch {
	case o.LocalAgent:
		s.Step("no agent Deployment (--local-agent): run annex-agent yourself with the annex-agent ServiceAccount's credentials")
	case n > 0:
		s.Step("agent Deployment %s/annex-agent with image %s", corev1alpha1.AgentNamespace, o.Image)
		if o.GatewayEndpoint != "" {
			s.Step("annex-gateway next to the agent on the host network of %s, reached by peers at %s (UDP from %d)",
				cmp.Or(o.GatewayNode, "the node it is scheduled on"), o.GatewayEndpoint, gatewayFirstPort)
		}
	}
	if n, err = apply("fabric.yaml"); err != nil {
		return err
	}
	if n > 0 {
		s.Step("annex-fabric DaemonSet %s/annex-fabric: every node routes the peers' ranges to the gateway node (kubectl -n %s get fabricnodes)",
			corev1alpha1.AgentNamespace, corev1alpha1.AgentNamespace)
	}

	// Whatever else the chart holds, so that install never lags behind it.
	for _, t := range r.Templates {
		if applied[t.Name] {
			continue
		}
		if _, err := apply(t.Name); err != nil {
			return err
		}
		s.Step("%s (%d objects)", t.Name, len(t.Objects))
	}
	// Last, so that the quota controller's discovery has run meanwhile.
	waited, err := waitQuotaCounts(ctx, c.Client)
	if err != nil {
		return err
	}
	s.Step("the cluster's quota controller counts Annex's kinds (%s; it looks for new kinds every 30 s)", waited.Round(100*time.Millisecond))
	fmt.Fprintf(s.Out, "Annex %s is installed in %s as cluster %q.\n", version.Version, c.Host, clusterID)
	return nil
}

// chartValues are the chart values of an install with o, as cluster
// clusterID, whose provider policy (when created) also allows
// priorityClasses.
func chartValues(o Options, clusterID string, priorityClasses []string) chart.Values {
	v := chart.Values{ClusterID: clusterID, PodCIDR: o.PodCIDR, ServiceCIDR: o.ServiceCIDR, ExternalCIDR: o.ExternalCIDR,
		Agent: !o.LocalAgent, GatewayEndpoint: o.GatewayEndpoint, GatewayNode: o.GatewayNode,
		AgentCPURequest: o.AgentCPURequest, AgentMemoryRequest: o.AgentMemoryRequest, AgentMemoryLimit: o.AgentMemoryLimit,
		AllowedPriorityClasses: append([]string{}, priorityClasses...)}
	if !o.LocalAgent {
		v.Image, v.ImagePullPolicy = o.Image, o.ImagePullPolicy
	}
	return v
}

// providerPolicyTemplate renders the provider policy ConfigMap.
const providerPolicyTemplate = "provider-policy.yaml"

// providerPolicyState says whether the provider policy ConfigMap exists
// and, if it does not, which PriorityClasses are globalDefault: a
// PriorityClass marked globalDefault is allowed from the start, since the
// API server gives it to every pod that names none, so refusing it would
// refuse every tenant pod.
func providerPolicyState(ctx context.Context, c *cli.Cluster) (exists bool, globalDefault []string, err error) {
	key := client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: ProviderPolicyName}
	switch err := c.Client.Get(ctx, key, &corev1.ConfigMap{}); {
	case err == nil:
		return true, nil, nil
	case !apierrors.IsNotFound(err):
		return false, nil, fmt.Errorf("read ConfigMap %s: %w", key, err)
	}
	pcs, err := c.Clientset.SchedulingV1().PriorityClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, nil, fmt.Errorf("list PriorityClasses (for the global default one): %w", err)
	}
	for _, pc := range pcs.Items {
		if pc.GlobalDefault {
			globalDefault = append(globalDefault, pc.Name)
		}
	}
	return false, globalDefault, nil
}

// ensureProviderPolicy creates the provider policy ConfigMap as the chart
// renders it, unless it exists: then it is the operator's and stays as it
// is.
func ensureProviderPolicy(ctx context.Context, s cli.IOStreams, c *cli.Cluster, exists bool, rendered []*unstructured.Unstructured) error {
	key := client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: ProviderPolicyName}
	if exists {
		s.Step("kept the provider policy ConfigMap %s (edit it to change what tenants may ask for; see annexctl install --help)", key)
		return nil
	}
	if len(rendered) != 1 || rendered[0].GetKind() != "ConfigMap" || rendered[0].GetName() != ProviderPolicyName {
		return fmt.Errorf("the chart's %s rendered %d objects, want the ConfigMap %s", providerPolicyTemplate, len(rendered), key)
	}
	cm := rendered[0].DeepCopy()
	switch err := c.Client.Create(ctx, cm); {
	case apierrors.IsAlreadyExists(err):
		s.Step("kept the provider policy ConfigMap %s (created meanwhile)", key)
		return nil
	case err != nil:
		return fmt.Errorf("create ConfigMap %s: %w", key, err)
	}
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	s.Step("provider policy ConfigMap %s with the defaults: tolerations %q, node label keys %q, priority classes %q, runtime classes %q, schedulers %q",
		key, data[PolicyKeyTolerationKeys], data[PolicyKeyNodeLabelKeys], data[PolicyKeyPriorityClasses],
		data[PolicyKeyRuntimeClasses], data[PolicyKeySchedulerNames])
	return nil
}

// checkExisting refuses to install over a different Annex version or to change
// an installed cluster's ID, and returns the cluster ID to use.
func checkExisting(ctx context.Context, c *cli.Cluster, wanted string) (string, error) {
	ns := &corev1.Namespace{}
	switch err := c.Client.Get(ctx, client.ObjectKey{Name: corev1alpha1.AgentNamespace}, ns); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return "", c.Unreachable(err)
	default:
		if v := ns.Labels[VersionLabel]; v != "" && v != version.Version {
			return "", fmt.Errorf("Annex %s is already installed in %s; this annexctl is %s: run `annexctl uninstall` with the matching version first", v, c.Host, version.Version) //nolint:staticcheck // ST1005: the message starts with the product's name
		}
		if ns.DeletionTimestamp != nil {
			return "", fmt.Errorf("namespace %s is being deleted (an uninstall is in progress); wait for it to finish", corev1alpha1.AgentNamespace)
		}
	}
	cm := &corev1.ConfigMap{}
	err := c.Client.Get(ctx, client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: corev1alpha1.ClusterIdentityConfigMapName}, cm)
	switch {
	case err == nil:
		have := cm.Data[corev1alpha1.ClusterIdentityKeyClusterID]
		if wanted != "" && have != "" && have != wanted {
			return "", fmt.Errorf("this cluster is already installed as %q; changing its cluster ID to %q would break its peerings (uninstall first)", have, wanted)
		}
		if have != "" {
			return have, nil
		}
	case !apierrors.IsNotFound(err):
		return "", err
	}
	if wanted != "" {
		return wanted, nil
	}
	// No ID given or recorded: derive a stable one from kube-system's UID.
	ks := &corev1.Namespace{}
	if err := c.Client.Get(ctx, client.ObjectKey{Name: "kube-system"}, ks); err != nil {
		return "", fmt.Errorf("derive a cluster ID from namespace kube-system (or pass --cluster-id): %w", err)
	}
	return "cluster-" + string(ks.UID)[:8], nil
}

// ApplyCRDs applies the chart's CRDs with c and waits until they are
// established: what install does first, for a cluster that should have
// them before its controllers start (localcluster.Options.BeforeControllers).
func ApplyCRDs(ctx context.Context, c client.Client) error {
	crds, err := cli.DecodeManifests(charts.FS, "annex/crds/*.yaml")
	if err != nil {
		return err
	}
	return applyCRDs(ctx, c, crds)
}

func applyCRDs(ctx context.Context, c client.Client, crds []*unstructured.Unstructured) error {
	for _, crd := range crds {
		if err := cli.Apply(ctx, c, crd); err != nil {
			return err
		}
	}
	return waitEstablished(ctx, c, crds)
}

func waitEstablished(ctx context.Context, c client.Client, crds []*unstructured.Unstructured) error {
	for _, u := range crds {
		name := u.GetName()
		err := cli.Poll(ctx, 200*time.Millisecond, 30*time.Second, "CRD "+name+" to be established", func(ctx context.Context) (bool, error) {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
				return false, err
			}
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// gatewayFirstPort is annex-gateway's first UDP port (the chart's
// templates/deployment.yaml runs it).
const gatewayFirstPort = 51820
