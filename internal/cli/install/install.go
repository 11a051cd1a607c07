// Package install owns `annexctl install`: it server-side applies the CRDs,
// the annex-system namespace, the agent's RBAC, the cluster identity
// ConfigMap and (unless the agent runs elsewhere) the agent Deployment.
package install

import (
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
	"github.com/annexhq/annex/config"
	"github.com/annexhq/annex/internal/cli"
	"github.com/annexhq/annex/internal/version"
)

// VersionLabel on the annex-system namespace records the installed Annex version.
const VersionLabel = "annex.dev/version"

// MaxClusterIDLength keeps names derived from a cluster ID (annex-tenant-<id>,
// <namespace>-<id>, annex-<id>) within Kubernetes' 63-character limit.
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
	Timeout    time.Duration
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

	crds, err := cli.DecodeManifests(config.FS, "crd/*.yaml")
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

	rbac, err := cli.DecodeManifests(config.FS, "rbac/*.yaml")
	if err != nil {
		return err
	}
	for _, obj := range rbac {
		if err := cli.Apply(ctx, c.Client, obj); err != nil {
			return err
		}
	}
	s.Step("agent ServiceAccount and RBAC (%d objects)", len(rbac))

	admission, err := cli.DecodeManifests(config.FS, "admission/*.yaml")
	if err != nil {
		return err
	}
	for _, obj := range admission {
		if err := cli.Apply(ctx, c.Client, obj); err != nil {
			return err
		}
	}
	s.Step("admission policy for offloaded namespaces (%d objects)", len(admission))

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
		if err := applyTyped(ctx, c.Client, Deployment(o.Image)); err != nil {
			return err
		}
		s.Step("agent Deployment %s/annex-agent with image %s", corev1alpha1.AgentNamespace, o.Image)
	}
	fmt.Fprintf(s.Out, "Annex %s is installed in %s as cluster %q.\n", version.Version, c.Host, clusterID)
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
			return "", fmt.Errorf("Annex %s is already installed in %s; this annexctl is %s: run `annexctl uninstall` with the matching version first", v, c.Host, version.Version)
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

// Deployment is the agent's in-cluster Deployment.
func Deployment(image string) *appsv1.Deployment {
	labels := map[string]string{"app.kubernetes.io/name": "annex-agent"}
	replicas := int32(1)
	nonRoot := true
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "annex-agent", Namespace: corev1alpha1.AgentNamespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: "annex-agent",
					SecurityContext:    &corev1.PodSecurityContext{RunAsNonRoot: &nonRoot},
					Containers: []corev1.Container{{
						Name:  "agent",
						Image: image,
						Args:  []string{"--namespace=" + corev1alpha1.AgentNamespace},
						Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 8080}, {Name: "health", ContainerPort: 8081}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Path: "/readyz", Port: intstr.FromString("health"),
						}}},
						LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Path: "/healthz", Port: intstr.FromString("health"),
						}}},
					}},
				},
			},
		},
	}
}
