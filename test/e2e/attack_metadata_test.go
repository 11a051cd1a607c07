package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// clusterIPNotChosen: a Service the tenant creates asking for a specific
// cluster IP gets one the provider's API server allocates instead
// (annex-tenant-service-addresses), and the address asked for stays free.
func clusterIPNotChosen(ctx context.Context, tenant, admin client.Client, ns, serviceCIDR string) error {
	prefix, err := netip.ParsePrefix(serviceCIDR)
	if err != nil {
		return err
	}
	want := prefix.Addr()
	for range 200 {
		want = want.Next()
	}
	if !prefix.Contains(want) {
		return fmt.Errorf("service CIDR %s too small for the attack", serviceCIDR)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "squat-ip"},
		Spec: corev1.ServiceSpec{ClusterIP: want.String(), ClusterIPs: []string{want.String()},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt(80)}}}}
	if err := tenant.Create(ctx, svc); err != nil {
		return fmt.Errorf("an ordinary Service that asks for an address must still be created: %w", err)
	}
	defer func() { _ = admin.Delete(context.Background(), svc) }()
	if svc.Spec.ClusterIP == want.String() {
		return fmt.Errorf("the Service got the address it asked for, %s", want)
	}
	// The address stays the provider's: its own Service can have it.
	own := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "provider-pinned"},
		Spec: corev1.ServiceSpec{ClusterIP: want.String(), Ports: []corev1.ServicePort{{Port: 53, TargetPort: intstr.FromInt(53)}}}}
	if err := admin.Create(ctx, own); err != nil {
		return fmt.Errorf("the provider's own Service cannot have %s: %w", want, err)
	}
	_ = admin.Delete(context.Background(), own)
	return nil
}

// metadataConfined: a ShadowPod's labels and annotations in domains the
// provider does not allow (a network plugin's, a mesh's, a label the
// provider's policies could select on, Annex's own) do not reach its pod;
// the allowed ones do, and the pod runs.
func metadataConfined(ctx context.Context, tenant, admin client.Client, ns string) error {
	sp := shadowPod(ns, "labelled", nil)
	sp.Spec.PodLabels = map[string]string{"app": "web", "app.kubernetes.io/name": "web",
		"networking.example.org/role": "admin", "annex.dev/shadowpod": "someone-else"}
	sp.Spec.PodAnnotations = map[string]string{"note": "hi", "k8s.v1.cni.cncf.io/networks": "macvlan",
		"cni.projectcalico.org/ipAddrs": `["10.0.0.1"]`, "sidecar.istio.io/inject": "true"}
	if err := tenant.Create(ctx, sp); err != nil {
		return fmt.Errorf("a ShadowPod with such labels must still be created: %w", err)
	}
	defer func() { _ = admin.Delete(context.Background(), sp) }()
	if err := waitPod(ctx, admin, client.ObjectKeyFromObject(sp)); err != nil {
		return err
	}
	pod := &corev1.Pod{}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(sp), pod); err != nil {
		return err
	}
	for _, k := range []string{"networking.example.org/role"} {
		if _, ok := pod.Labels[k]; ok {
			return fmt.Errorf("the pod carries label %s", k)
		}
	}
	if pod.Labels["annex.dev/shadowpod"] != sp.Name {
		return fmt.Errorf("the pod's annex.dev/shadowpod label is %q", pod.Labels["annex.dev/shadowpod"])
	}
	for _, k := range []string{"k8s.v1.cni.cncf.io/networks", "cni.projectcalico.org/ipAddrs", "sidecar.istio.io/inject"} {
		if _, ok := pod.Annotations[k]; ok {
			return fmt.Errorf("the pod carries annotation %s", k)
		}
	}
	if pod.Labels["app"] != "web" || pod.Labels["app.kubernetes.io/name"] != "web" || pod.Annotations["note"] != "hi" {
		return fmt.Errorf("allowed labels or annotations are missing: %v %v", pod.Labels, pod.Annotations)
	}
	// And a label added later is filtered the same way.
	if err := tenant.Get(ctx, client.ObjectKeyFromObject(sp), sp); err != nil {
		return err
	}
	sp.Spec.PodLabels["policy.example.org/allow-egress"] = "true"
	sp.Spec.PodLabels["tier"] = "front"
	if err := tenant.Update(ctx, sp); err != nil {
		return err
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if err := admin.Get(ctx, client.ObjectKeyFromObject(sp), pod); err != nil {
			return err
		}
		if pod.Labels["tier"] == "front" {
			if _, ok := pod.Labels["policy.example.org/allow-egress"]; ok {
				return errors.New("the pod carries label policy.example.org/allow-egress added later")
			}
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return errors.New("the allowed label added later did not reach the pod in 20s")
}

// objectKeysRemoved: a tenant's Service, ConfigMap and Secret (created,
// then updated) keep only the label and annotation keys the provider allows
// (annex-tenant-metadata-keys): a label that makes kube-proxy skip the
// Service, external-dns's and a load balancer's annotations, a scrape
// annotation and annex.dev keys of the tenant's choosing are gone from what
// the provider stores, the allowed keys and the consumer's ownership labels
// stay. kind is "Service", "ConfigMap" or "Secret".
func objectKeysRemoved(ctx context.Context, tenant, admin client.Client, ns, kind string) error {
	labels := map[string]string{"app": "web", "app.kubernetes.io/name": "web",
		"service.kubernetes.io/service-proxy-name": "none", "annex.dev/shadowpod": "someone-else",
		"annex.dev/managed-by": "annex", "annex.dev/remote-cluster-id": "alpha"}
	annotations := map[string]string{"note": "kept", "external-dns.alpha.kubernetes.io/hostname": "www.example.com",
		"service.beta.kubernetes.io/aws-load-balancer-internal": "false", "prometheus.io/scrape": "true",
		"annex.dev/transit-address": "10.70.0.9"}
	var obj client.Object
	meta := metav1.ObjectMeta{Namespace: ns, Name: "keys-" + strings.ToLower(kind)}
	switch kind {
	case "Service":
		obj = &corev1.Service{ObjectMeta: meta, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt(80)}}}}
	case "ConfigMap":
		obj = &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"k": "v"}}
	default:
		obj = &corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"k": []byte("v")}}
	}
	check := func(when string) error {
		stored := obj.DeepCopyObject().(client.Object)
		if err := admin.Get(ctx, client.ObjectKeyFromObject(obj), stored); err != nil {
			return err
		}
		wantLabels := map[string]string{"app": "web", "app.kubernetes.io/name": "web", "annex.dev/managed-by": "annex", "annex.dev/remote-cluster-id": "alpha"}
		if !maps.Equal(stored.GetLabels(), wantLabels) || !maps.Equal(stored.GetAnnotations(), map[string]string{"note": "kept"}) {
			return fmt.Errorf("%s %s %s: stored with labels %v and annotations %v, want labels %v and annotations note only",
				when, kind, obj.GetName(), stored.GetLabels(), stored.GetAnnotations(), wantLabels)
		}
		return nil
	}
	obj.SetLabels(maps.Clone(labels))
	obj.SetAnnotations(maps.Clone(annotations))
	if err := tenant.Create(ctx, obj); err != nil {
		return fmt.Errorf("a %s with such keys must still be created: %w", kind, err)
	}
	defer func() { _ = admin.Delete(context.Background(), obj) }()
	if err := check("created"); err != nil {
		return err
	}
	obj.SetLabels(maps.Clone(labels))
	obj.SetAnnotations(maps.Clone(annotations))
	if err := tenant.Update(ctx, obj); err != nil {
		return fmt.Errorf("update: %w", err)
	}
	return check("updated")
}

// tokenSecretRefused: a tenant cannot have the provider's token controller
// fill a Secret with a token of a ServiceAccount of the provider: the
// annotation naming the ServiceAccount is removed
// (annex-tenant-metadata-keys), and the API server refuses such a Secret
// without it.
func tokenSecretRefused(ctx context.Context, tenant client.Client, ns string) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "steal-token",
		Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}}, Type: corev1.SecretTypeServiceAccountToken}
	return refused(tenant.Create(ctx, s), corev1.ServiceAccountNameKey)
}
