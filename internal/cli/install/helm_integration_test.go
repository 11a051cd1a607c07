package install

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/chart"
	"github.com/annexhq/annex/internal/cli"
	"github.com/annexhq/annex/internal/cli/uninstall"
	"github.com/annexhq/annex/internal/localcluster"
	"github.com/annexhq/annex/internal/localcluster/clustertest"
)

// chartDir is charts/annex in this repository, for the helm CLI.
var chartDir = filepath.Join("..", "..", "..", "charts", "annex")

// TestHelmAndInstallAgree installs Annex into one real cluster with the
// helm CLI and the chart, then, after helm uninstall, with annexctl
// install's code, and checks that both leave the same objects: the same
// names and kinds and the same contents, but for what Helm adds (its
// labels and annotations) and what the API server keeps for itself. On the
// way it checks what only Helm does: the cluster ID derived by lookup, the
// global default PriorityClass found by lookup, the provider policy left as
// the operator edited it by an upgrade, a different cluster ID refused,
// the CRDs left by helm uninstall; and what annexctl uninstall leaves.
func TestHelmAndInstallAgree(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	lc := clustertest.Start(ctx, t, localcluster.Options{Name: "helm", PodCIDR: "10.201.0.0/16", ServiceCIDR: "10.97.0.0/16", Nodes: 1})
	c := clustertest.Connect(ctx, t, lc)
	kubeconfig := lc.KubeconfigPath()
	helm := func(args ...string) (string, error) {
		t.Helper()
		return clustertest.RunHelm(ctx, t, kubeconfig, args...)
	}
	mustHelm := func(args ...string) {
		t.Helper()
		if out, err := helm(args...); err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	// A global default PriorityClass: both paths must allow it to tenants.
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "everyone"}, Value: 10, GlobalDefault: true}
	clustertest.Must(t, c.Client.Create(ctx, pc))

	// The same install both ways; no cluster ID: derived from kube-system.
	o := DefaultOptions()
	o.PodCIDR, o.ServiceCIDR, o.ExternalCIDR = "10.201.0.0/16", "10.97.0.0/16", "10.71.0.0/16"
	o.Image, o.GatewayEndpoint, o.GatewayNode = "example.invalid/annex-agent:test", "192.0.2.10", "helm-worker-0"
	values := []string{"--set", "podCIDR=" + o.PodCIDR, "--set", "serviceCIDR=" + o.ServiceCIDR, "--set", "externalCIDR=" + o.ExternalCIDR,
		"--set", "image.repository=example.invalid/annex-agent", "--set", "image.tag=test",
		"--set", "gateway.endpoint=" + o.GatewayEndpoint, "--set", "gateway.node=" + o.GatewayNode}

	mustHelm(append([]string{"install", "annex", chartDir, "--namespace", "default"}, values...)...)
	withHelm := snapshot(ctx, t, c)

	ks := &unstructured.Unstructured{}
	ks.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"})
	clustertest.Must(t, c.Client.Get(ctx, client.ObjectKey{Name: "kube-system"}, ks))
	identity := withHelm[key("ConfigMap", corev1alpha1.AgentNamespace, corev1alpha1.ClusterIdentityConfigMapName)]
	if got, want := identity["data"].(map[string]any)["clusterID"], "cluster-"+string(ks.GetUID())[:8]; got != want {
		t.Errorf("helm install: cluster ID %v, want %s (derived from kube-system's UID)", got, want)
	}
	policyKey := key("ConfigMap", corev1alpha1.AgentNamespace, ProviderPolicyName)
	if got := withHelm[policyKey]["data"].(map[string]any)[PolicyKeyPriorityClasses]; got != "everyone" {
		t.Errorf("helm install: %s %q, want the global default everyone", PolicyKeyPriorityClasses, got)
	}

	// The operator edits the policy; an upgrade (a new image) keeps it.
	policy := &unstructured.Unstructured{}
	policy.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"})
	clustertest.Must(t, c.Client.Get(ctx, client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: ProviderPolicyName}, policy))
	clustertest.Must(t, unstructured.SetNestedField(policy.Object, "gpu", "data", PolicyKeyRuntimeClasses))
	clustertest.Must(t, c.Client.Update(ctx, policy))
	mustHelm(append([]string{"upgrade", "annex", chartDir, "--namespace", "default"}, append(values, "--set", "image.tag=test2")...)...)
	upgraded := snapshot(ctx, t, c)
	if got := upgraded[policyKey]["data"].(map[string]any)[PolicyKeyRuntimeClasses]; got != "gpu" {
		t.Errorf("after helm upgrade, %s = %q, want the operator's gpu", PolicyKeyRuntimeClasses, got)
	}
	if got := deploymentImage(t, upgraded); got != "example.invalid/annex-agent:test2" {
		t.Errorf("after helm upgrade, image %s, want example.invalid/annex-agent:test2", got)
	}
	out, err := helm(append([]string{"upgrade", "annex", chartDir, "--namespace", "default"}, append(values, "--set", "clusterID=other")...)...)
	if err == nil || !strings.Contains(out, "changing its cluster ID to \"other\" would break its peerings") {
		t.Errorf("helm upgrade with another cluster ID: %v\n%s", err, out)
	}

	// helm uninstall removes everything but the CRDs (Helm never deletes
	// those of crds/).
	mustHelm("uninstall", "annex", "--namespace", "default", "--wait")
	waitGone(ctx, t, c, "Namespace", "", corev1alpha1.AgentNamespace)
	left := snapshot(ctx, t, c)
	var leftKeys []string
	for k := range left {
		leftKeys = append(leftKeys, k)
	}
	sort.Strings(leftKeys)
	var wantLeft []string
	for k := range withHelm {
		if strings.HasPrefix(k, "CustomResourceDefinition/") {
			wantLeft = append(wantLeft, k)
		}
	}
	sort.Strings(wantLeft)
	if diff := cmp.Diff(wantLeft, leftKeys); diff != "" {
		t.Errorf("after helm uninstall (-want: the CRDs +left):\n%s", diff)
	}

	// annexctl install, the same options.
	var buf bytes.Buffer
	if err := Run(ctx, cli.IOStreams{Out: &buf, ErrOut: &buf}, c, o); err != nil {
		t.Fatalf("annexctl install: %v\n%s", err, buf.String())
	}
	withInstall := snapshot(ctx, t, c)
	if diff := cmp.Diff(withHelm, withInstall); diff != "" {
		t.Errorf("objects of helm install and of annexctl install differ (-helm +annexctl):\n%s", diff)
	}

	// annexctl uninstall leaves none of them.
	buf.Reset()
	if err := uninstall.Run(ctx, cli.IOStreams{Out: &buf, ErrOut: &buf}, c, uninstall.Options{Timeout: 2 * time.Minute}); err != nil {
		t.Fatalf("annexctl uninstall: %v\n%s", err, buf.String())
	}
	if left := snapshot(ctx, t, c); len(left) > 0 {
		var keys []string
		for k := range left {
			keys = append(keys, k)
		}
		t.Errorf("after annexctl uninstall, left: %v", keys)
	}
}

func key(kind, namespace, name string) string {
	if namespace == "" {
		return kind + "/" + name
	}
	return kind + "/" + namespace + "/" + name
}

// snapshot returns Annex's objects in the cluster by kind/namespace/name,
// without what Helm adds and what the API server keeps: every object the
// chart renders and every CRD of crds/, and every object of the kinds the
// chart puts in annex-system that is there.
func snapshot(ctx context.Context, t *testing.T, c *cli.Cluster) map[string]map[string]any {
	t.Helper()
	r, err := chart.Render(ctx, chart.Values{ClusterID: "any", Agent: true, GatewayEndpoint: "192.0.2.1"})
	clustertest.Must(t, err)
	objs := append([]*unstructured.Unstructured{}, r.CRDs...)
	for _, tpl := range r.Templates {
		objs = append(objs, tpl.Objects...)
	}
	out := map[string]map[string]any{}
	add := func(u *unstructured.Unstructured) {
		m := u.DeepCopy().Object
		for _, f := range [][]string{{"status"}, {"metadata", "uid"}, {"metadata", "resourceVersion"}, {"metadata", "creationTimestamp"},
			{"metadata", "generation"}, {"metadata", "managedFields"}, {"metadata", "labels", "app.kubernetes.io/managed-by"},
			{"metadata", "annotations", "meta.helm.sh/release-name"}, {"metadata", "annotations", "meta.helm.sh/release-namespace"},
			{"metadata", "annotations", "deployment.kubernetes.io/revision"}} {
			unstructured.RemoveNestedField(m, f...)
		}
		for _, f := range []string{"labels", "annotations"} {
			if v, ok, _ := unstructured.NestedMap(m, "metadata", f); ok && len(v) == 0 {
				unstructured.RemoveNestedField(m, "metadata", f)
			}
		}
		out[key(u.GetKind(), u.GetNamespace(), u.GetName())] = m
	}
	for _, o := range objs {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		err := c.Client.Get(ctx, client.ObjectKeyFromObject(o), got)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			t.Fatalf("get %s %s: %v", o.GetKind(), o.GetName(), err)
		default:
			add(got)
		}
	}
	for _, kind := range []string{"ConfigMap", "ServiceAccount", "Secret", "Service", "Role", "RoleBinding", "Deployment"} {
		list := &unstructured.UnstructuredList{}
		gv := "v1"
		switch kind {
		case "Role", "RoleBinding":
			gv = "rbac.authorization.k8s.io/v1"
		case "Deployment":
			gv = "apps/v1"
		}
		list.SetAPIVersion(gv)
		list.SetKind(kind + "List")
		clustertest.Must(t, c.Client.List(ctx, list, client.InNamespace(corev1alpha1.AgentNamespace)))
		for i := range list.Items {
			if u := &list.Items[i]; u.GetName() != "kube-root-ca.crt" {
				u.SetAPIVersion(gv)
				u.SetKind(kind)
				add(u)
			}
		}
	}
	return out
}

func deploymentImage(t *testing.T, objs map[string]map[string]any) string {
	t.Helper()
	d := &unstructured.Unstructured{Object: objs[key("Deployment", corev1alpha1.AgentNamespace, "annex-agent")]}
	containers, _, err := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if err != nil || len(containers) == 0 {
		t.Fatalf("agent Deployment's containers: %v, %v", containers, err)
	}
	return fmt.Sprint(containers[0].(map[string]any)["image"])
}

func waitGone(ctx context.Context, t *testing.T, c *cli.Cluster, kind, namespace, name string) {
	t.Helper()
	clustertest.Eventually(t, 2*time.Minute, kind+" "+name+" deleted", func() error {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("v1")
		u.SetKind(kind)
		err := c.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, u)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("still there (deletionTimestamp %v)", u.GetDeletionTimestamp())
		}
		return err
	})
}
