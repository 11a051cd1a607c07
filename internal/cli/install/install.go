// Package install owns `annexctl install`: it server-side applies the CRDs,
// the annex-system namespace, the agent's RBAC, the admission policies
// (config/admission), the cluster identity ConfigMap and (unless the agent
// runs elsewhere) the agent Deployment, and creates the provider policy
// ConfigMap (ProviderPolicy) unless it exists: the operator owns that one
// once it is there.
package install

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/charts"
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
	// GatewayEndpoint, when set, runs annex-gateway next to the agent (see
	// Deployment): the IPv4 address of the gateway node at which the peers'
	// gateways reach it. GatewayNode pins the pod to that node.
	GatewayEndpoint string
	GatewayNode     string
	Timeout         time.Duration
}

// DefaultOptions are the defaults of the CLI flags.
func DefaultOptions() Options {
	return Options{
		PodCIDR:      "10.244.0.0/16",
		ServiceCIDR:  "10.96.0.0/12",
		ExternalCIDR: "10.70.0.0/16",
		Image:        "ghcr.io/annexhq/annex-agent:" + version.Version,
		Timeout:      2 * time.Minute,
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
	return nil
}

// Run installs Annex into the cluster.
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

	crds, err := cli.DecodeManifests(charts.FS, "annex/crds/*.yaml")
	if err != nil {
		return err
	}
	for _, crd := range crds {
		if err := cli.Apply(ctx, c.Client, crd); err != nil {
			return err
		}
	}
	if err := waitEstablished(ctx, c.Client, crds); err != nil {
		return err
	}
	s.Step("applied %d CustomResourceDefinitions", len(crds))

	ns := &corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: corev1alpha1.AgentNamespace, Labels: map[string]string{VersionLabel: version.Version}},
	}
	if err := applyTyped(ctx, c.Client, ns); err != nil {
		return err
	}
	s.Step("namespace %s (Annex %s)", corev1alpha1.AgentNamespace, version.Version)

	rbac, err := cli.DecodeManifests(charts.FS, "annex/templates/rbac/*.yaml")
	if err != nil {
		return err
	}
	for _, obj := range rbac {
		if err := cli.Apply(ctx, c.Client, obj); err != nil {
			return err
		}
	}
	s.Step("agent ServiceAccount and RBAC (%d objects)", len(rbac))

	admission, err := cli.DecodeManifests(charts.FS, "annex/templates/admission/*.yaml")
	if err != nil {
		return err
	}
	for _, obj := range admission {
		if err := cli.Apply(ctx, c.Client, obj); err != nil {
			return err
		}
	}
	s.Step("admission policies for offloaded namespaces and for the tenants of this provider (%d objects)", len(admission))

	if err := ensureProviderPolicy(ctx, s, c); err != nil {
		return err
	}

	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: corev1alpha1.ClusterIdentityConfigMapName, Namespace: corev1alpha1.AgentNamespace},
		Data: map[string]string{
			corev1alpha1.ClusterIdentityKeyClusterID:    clusterID,
			corev1alpha1.ClusterIdentityKeyPodCIDR:      o.PodCIDR,
			corev1alpha1.ClusterIdentityKeyServiceCIDR:  o.ServiceCIDR,
			corev1alpha1.ClusterIdentityKeyExternalCIDR: o.ExternalCIDR,
		},
	}
	if err := applyTyped(ctx, c.Client, cm); err != nil {
		return err
	}
	s.Step("cluster identity: id %s, pod CIDR %s, service CIDR %s, external CIDR %s", clusterID, o.PodCIDR, o.ServiceCIDR, o.ExternalCIDR)

	if o.LocalAgent {
		s.Step("no agent Deployment (--local-agent): run annex-agent yourself with the annex-agent ServiceAccount's credentials")
	} else {
		if err := applyTyped(ctx, c.Client, Deployment(o.Image, Gateway{Endpoint: o.GatewayEndpoint, Node: o.GatewayNode})); err != nil {
			return err
		}
		s.Step("agent Deployment %s/annex-agent with image %s", corev1alpha1.AgentNamespace, o.Image)
		if o.GatewayEndpoint != "" {
			s.Step("annex-gateway next to the agent on the host network of %s, reached by peers at %s (UDP from %d)",
				cmp.Or(o.GatewayNode, "the node it is scheduled on"), o.GatewayEndpoint, gatewayFirstPort)
		}
	}
	fmt.Fprintf(s.Out, "Annex %s is installed in %s as cluster %q.\n", version.Version, c.Host, clusterID)
	return nil
}

// ensureProviderPolicy creates the provider policy ConfigMap with its
// defaults, unless it exists: then it is the operator's and stays as it is.
// A PriorityClass marked globalDefault is allowed from the start: the API
// server gives it to every pod that names none, so refusing it would refuse
// every tenant pod.
func ensureProviderPolicy(ctx context.Context, s cli.IOStreams, c *cli.Cluster) error {
	key := client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: ProviderPolicyName}
	switch err := c.Client.Get(ctx, key, &corev1.ConfigMap{}); {
	case err == nil:
		s.Step("kept the provider policy ConfigMap %s (edit it to change what tenants may ask for; see annexctl install --help)", key)
		return nil
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("read ConfigMap %s: %w", key, err)
	}
	pcs, err := c.Clientset.SchedulingV1().PriorityClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list PriorityClasses (for the global default one): %w", err)
	}
	var globalDefault []string
	for _, pc := range pcs.Items {
		if pc.GlobalDefault {
			globalDefault = append(globalDefault, pc.Name)
		}
	}
	cm := ProviderPolicy(globalDefault...)
	switch err := c.Client.Create(ctx, cm); {
	case apierrors.IsAlreadyExists(err):
		s.Step("kept the provider policy ConfigMap %s (created meanwhile)", key)
		return nil
	case err != nil:
		return fmt.Errorf("create ConfigMap %s: %w", key, err)
	}
	s.Step("provider policy ConfigMap %s with the defaults: tolerations %q, node label keys %q, priority classes %q, runtime classes %q, schedulers %q",
		key, cm.Data[PolicyKeyTolerationKeys], cm.Data[PolicyKeyNodeLabelKeys], cm.Data[PolicyKeyPriorityClasses],
		cm.Data[PolicyKeyRuntimeClasses], cm.Data[PolicyKeySchedulerNames])
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

// applyTyped server-side applies a typed object (TypeMeta must be set).
func applyTyped(ctx context.Context, c client.Client, obj client.Object) error {
	_, err := cli.ApplyTyped(ctx, c, obj)
	return err
}

// Gateway says whether and where the agent's pod runs annex-gateway.
type Gateway struct {
	Endpoint string // "" for no gateway
	Node     string // "" for any node
}

// Ports of the agent in a pod on the host network, clear of a kubelet's
// (10250) and of the usual 8080/8081.
const (
	hostMetricsPort  = 9880
	hostHealthPort   = 9881
	hostKubeletPort  = 10260
	gatewayFirstPort = 51820
	gatewayDir       = "/run/annex-gateway"
)

// Deployment is the agent's in-cluster Deployment. The agent advertises
// its pod's IP as the virtual nodes' address, where the API server reaches
// their kubelet endpoint (logs, exec).
//
// With a gateway, the pod runs on the host network of the gateway node
// (gw.Node, or wherever it is scheduled) and holds a second container,
// annex-gateway from the same image, as root with NET_ADMIN and the
// node's /dev/net/tun; the two share the gateway's file and status file
// through an emptyDir. The agent's ports move off the kubelet's. The node
// needs IPv4 forwarding on, and routes from every node to it (docs/network.md,
// "What a real cluster needs").
func Deployment(image string, gw Gateway) *appsv1.Deployment {
	labels := map[string]string{"app.kubernetes.io/name": "annex-agent"}
	replicas := int32(1)
	nonRoot, root, f := true, false, false
	zero, one := intstr.FromInt32(0), intstr.FromInt32(1)
	metricsPort, healthPort, kubeletPort := int32(8080), int32(8081), int32(10250)
	if gw.Endpoint != "" {
		metricsPort, healthPort, kubeletPort = hostMetricsPort, hostHealthPort, hostKubeletPort
	}
	args := []string{"--namespace=" + corev1alpha1.AgentNamespace, "--virtual-node-ip=$(POD_IP)",
		fmt.Sprintf("--metrics-bind-address=:%d", metricsPort), fmt.Sprintf("--health-probe-bind-address=:%d", healthPort),
		fmt.Sprintf("--kubelet-port=%d", kubeletPort)}
	agent := corev1.Container{
		Name:  "agent",
		Image: image,
		Env: []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}},
		Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: metricsPort}, {Name: "health", ContainerPort: healthPort},
			{Name: "kubelet", ContainerPort: kubeletPort}},
		SecurityContext: &corev1.SecurityContext{RunAsNonRoot: &nonRoot, AllowPrivilegeEscalation: &f},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: "/readyz", Port: intstr.FromString("health"),
		}}},
		LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: "/healthz", Port: intstr.FromString("health"),
		}}},
	}
	pod := corev1.PodSpec{ServiceAccountName: "annex-agent"}
	if gw.Endpoint != "" {
		agent.Args = append(args, "--gateway-config="+gatewayDir+"/config.json", "--gateway-status="+gatewayDir+"/status.json",
			"--gateway-endpoint="+gw.Endpoint)
		mount := corev1.VolumeMount{Name: "gateway", MountPath: gatewayDir}
		agent.VolumeMounts = []corev1.VolumeMount{mount}
		uid := int64(0)
		chardev := corev1.HostPathCharDev
		gateway := corev1.Container{
			Name:    "gateway",
			Image:   image,
			Command: []string{"/annex-gateway", "--config=" + gatewayDir + "/config.json", "--status=" + gatewayDir + "/status.json"},
			SecurityContext: &corev1.SecurityContext{RunAsUser: &uid, RunAsNonRoot: &root, AllowPrivilegeEscalation: &f,
				Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}, Drop: []corev1.Capability{"ALL"}}},
			VolumeMounts: []corev1.VolumeMount{mount, {Name: "tun", MountPath: "/dev/net/tun"}},
		}
		pod.Containers = []corev1.Container{agent, gateway}
		pod.HostNetwork = true
		pod.DNSPolicy = corev1.DNSClusterFirstWithHostNet
		pod.Volumes = []corev1.Volume{
			{Name: "gateway", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "tun", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/dev/net/tun", Type: &chardev}}},
		}
		if gw.Node != "" {
			pod.NodeSelector = map[string]string{corev1.LabelHostname: gw.Node}
		}
	} else {
		agent.Args = args
		pod.Containers = []corev1.Container{agent}
	}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "annex-agent", Namespace: corev1alpha1.AgentNamespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			// The old pod goes before the new one starts: on the host
			// network, two would want the same ports (the scheduler would
			// keep the new one Pending, and the old one would never go).
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &zero, MaxUnavailable: &one}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod},
		},
	}
}
