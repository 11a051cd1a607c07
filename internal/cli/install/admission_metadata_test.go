package install

import (
	"context"
	"maps"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// testMetadataKeys checks admission/metadata-keys.yaml against a real API
// server, whose provider policy lets annotations of metallb.universe.tf
// and service.beta.kubernetes.io through (TestTenantAdmission sets it): a
// tenant's Services, ConfigMaps and Secrets keep keys without a domain,
// those of the allowed domains and subdomains, and the two labels marking
// the consumer's copies; every other key is removed on creation and on
// update. The provider's own writes keep every key.
func testMetadataKeys(ctx context.Context, t *testing.T, admin, tenant client.Client) {
	labels := map[string]string{
		"app": "web", "app.kubernetes.io/name": "web", "charts.helm.sh/chart": "web-1",
		"annex.dev/managed-by": "annex", "annex.dev/remote-cluster-id": "c1",
		"service.kubernetes.io/service-proxy-name": "none", // kube-proxy would skip the Service
		"annex.dev/shadowpod":                      "x",
		"evil.annex.dev/x":                         "y",
		"app.kubernetes.io.evil.com/name":          "lookalike",
	}
	annotations := map[string]string{
		"note":                             "kept",
		"metallb.universe.tf/address-pool": "allowed-by-the-test's-policy",
		"external-dns.alpha.kubernetes.io/hostname": "evil.example.com",
		"prometheus.io/scrape":                      "true",
		"kubernetes.io/service-account.name":        "default",
		"annex.dev/use-direct-connections":          "true",
	}
	wantLabels := map[string]string{"app": "web", "app.kubernetes.io/name": "web", "charts.helm.sh/chart": "web-1",
		"annex.dev/managed-by": "annex", "annex.dev/remote-cluster-id": "c1"}
	wantAnnotations := map[string]string{"note": "kept", "metallb.universe.tf/address-pool": "allowed-by-the-test's-policy"}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: remoteNS, Name: name, Labels: maps.Clone(labels), Annotations: maps.Clone(annotations)}
	}
	svc := clusterIPService("keys")
	svc.ObjectMeta = meta("keys")
	for _, tc := range []struct {
		name string
		obj  client.Object
	}{
		{"Service", svc},
		{"ConfigMap", &corev1.ConfigMap{ObjectMeta: meta("keys"), Data: map[string]string{"k": "v"}}},
		{"Secret", &corev1.Secret{ObjectMeta: meta("keys"), Data: map[string][]byte{"k": []byte("v")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := tc.obj.DeepCopyObject().(client.Object)
			if err := tenant.Create(ctx, obj, client.DryRunAll); err != nil {
				t.Fatalf("create: %v", err)
			}
			check(t, "tenant's creation", obj, wantLabels, wantAnnotations)

			obj = tc.obj.DeepCopyObject().(client.Object)
			obj.SetLabels(nil)
			obj.SetAnnotations(nil)
			if err := tenant.Create(ctx, obj); err != nil {
				t.Fatalf("create: %v", err)
			}
			defer func() { _ = admin.Delete(ctx, obj) }()
			obj.SetLabels(maps.Clone(labels))
			obj.SetAnnotations(maps.Clone(annotations))
			if err := tenant.Update(ctx, obj); err != nil {
				t.Fatalf("update: %v", err)
			}
			check(t, "tenant's update", obj, wantLabels, wantAnnotations)

			obj = tc.obj.DeepCopyObject().(client.Object)
			obj.SetName("admins")
			if err := admin.Create(ctx, obj, client.DryRunAll); err != nil {
				t.Fatalf("admin's create: %v", err)
			}
			check(t, "provider admin's creation", obj, labels, annotations)
		})
	}
}

func check(t *testing.T, what string, obj client.Object, labels, annotations map[string]string) {
	t.Helper()
	if diff := cmp.Diff(labels, obj.GetLabels()); diff != "" {
		t.Errorf("%s: labels (-want +got):\n%s", what, diff)
	}
	if diff := cmp.Diff(annotations, obj.GetAnnotations()); diff != "" {
		t.Errorf("%s: annotations (-want +got):\n%s", what, diff)
	}
}
