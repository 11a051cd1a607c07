package install

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/agent"
	"github.com/annexhq/annex/internal/cli"
	"github.com/annexhq/annex/internal/cli/peer"
	"github.com/annexhq/annex/internal/controller/remotenamespace"
	"github.com/annexhq/annex/internal/localcluster"
	"github.com/annexhq/annex/internal/localcluster/clustertest"
)

// TestTenantBytes installs into a real API server and, as a consumer's
// ServiceAccount (its tenant namespace set up as `annexctl peer` does, a
// remote namespace bound to ClusterRole annex-remote-consumer as the
// provider's agent does), tries every case of bytesCases and
// tenantNamespaceCases: each oversize object is refused with HTTP 422 naming
// its rule, the others pass. The bounds follow the provider policy
// ConfigMap, and its defaults hold when it lacks the keys. Then the tenant
// writes its maximum in the remote namespace under a ResourceQuota like
// annex-tenant-quota (ConfigMaps and Secrets of the largest size with the
// most metadata) and the test measures what the API server
// stores and what the provider agent's cache (agent.NewManager, watching
// Secrets and ConfigMaps as its controllers do) holds of it.
func TestTenantBytes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	lc := clustertest.Start(ctx, t, localcluster.Options{Name: "bytes", PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12", Nodes: 1,
		BeforeControllers: clustertest.ApplyCRDs})
	c := clustertest.Connect(ctx, t, lc)
	o := DefaultOptions()
	o.ClusterID, o.LocalAgent = "prov", true
	var out bytes.Buffer
	if err := Run(ctx, cli.IOStreams{Out: &out, ErrOut: &out}, c, o); err != nil {
		t.Fatalf("install: %v\n%s", err, out.String())
	}

	admin := c.Client
	const consumer = "c1"
	tenantNS := corev1alpha1.TenantNamespaceName(consumer)
	objs := peer.TenantObjects(tenantNS, consumer)
	objs = append(objs,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: remoteNS, Labels: map[string]string{
			corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex, corev1alpha1.LabelRemoteClusterID: consumer}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "annex-consumer", Namespace: remoteNS},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "annex-remote-consumer"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: corev1alpha1.ConsumerServiceAccountName, Namespace: tenantNS}}})
	for _, obj := range objs {
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
		}
	}
	tenant := impersonate(t, c, tenantNS, corev1alpha1.ConsumerServiceAccountName)

	// A tenant may not create Events (ClusterRole annex-remote-consumer):
	// no ResourceQuota could count them. To check the bound of
	// annex-tenant-events all the same, the test grants the right in the
	// remote namespace, as an operator might.
	if err := tenant.Create(ctx, bytesEvent(remoteNS, "ev-rbac", "hello"), client.DryRunAll); !apierrors.IsForbidden(err) {
		t.Errorf("a tenant's Event: %v, want Forbidden (RBAC)", err)
	}
	for _, obj := range []client.Object{
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "test-events", Namespace: remoteNS},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-events", Namespace: remoteNS},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "test-events"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: corev1alpha1.ConsumerServiceAccountName, Namespace: tenantNS}}},
	} {
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	poll(ctx, t, "the test's grant of Events", func() error {
		return tenant.Create(ctx, bytesEvent(remoteNS, "ev-rbac", "hello"), client.DryRunAll)
	})

	names := []string{"annex-tenant-metadata", "annex-tenant-configmaps", "annex-tenant-secrets",
		"annex-tenant-events", "annex-tenant-shadowendpointslices", "annex-tenant-namespace-metadata"}
	for _, name := range names {
		p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		poll(ctx, t, "type checking of "+name, func() error {
			if err := admin.Get(ctx, client.ObjectKey{Name: name}, p); err != nil {
				return err
			}
			if p.Status.TypeChecking == nil || p.Status.ObservedGeneration != p.Generation {
				return errors.New("not type-checked yet")
			}
			return nil
		})
		for _, w := range p.Status.TypeChecking.ExpressionWarnings {
			t.Errorf("%s: %s: %s", name, w.FieldRef, w.Warning)
		}
	}

	dryRun := func(obj client.Object) error { return tenant.Create(ctx, obj, client.DryRunAll) }
	t.Run("cases", func(t *testing.T) {
		run := func(ns string, cases []bytesCase) {
			// A policy takes a moment to take effect: the refusals are
			// waited for, then the admissions are checked.
			for _, tc := range cases {
				if tc.want != "" {
					t.Run(tc.name, func(t *testing.T) {
						pollRefused(ctx, t, tc.want, func() error { return dryRun(tc.obj(ns)) })
					})
				}
			}
			for _, tc := range cases {
				if tc.want == "" {
					t.Run(tc.name, func(t *testing.T) { checkAPIRefusal(t, dryRun(tc.obj(ns)), "", false) })
				}
			}
		}
		run(remoteNS, bytesCases())
		run(tenantNS, tenantNamespaceCases(consumer))
	})

	t.Run("provider policy", func(t *testing.T) {
		key := client.ObjectKey{Namespace: corev1alpha1.AgentNamespace, Name: ProviderPolicyName}
		cm := &corev1.ConfigMap{}
		if err := admin.Get(ctx, key, cm); err != nil {
			t.Fatal(err)
		}
		orig := cm.DeepCopy()
		t.Cleanup(func() {
			now := &corev1.ConfigMap{}
			if err := admin.Get(context.Background(), key, now); err == nil {
				now.Data = orig.Data
				_ = admin.Update(context.Background(), now)
			}
		})
		cm200 := func() client.Object {
			return bytesConfigMap(remoteNS, "cm-200k", map[string]string{"k": filler(200 * kib)}, nil)
		}
		cm300 := func() client.Object {
			return bytesConfigMap(remoteNS, "cm-300k", map[string]string{"k": filler(300 * kib)}, nil)
		}
		// The operator lowers the bound: the next ConfigMap is checked against it.
		cm.Data[PolicyKeyMaxDataBytes] = "102400"
		if err := admin.Update(ctx, cm); err != nil {
			t.Fatal(err)
		}
		pollRefused(ctx, t, "over the 102400 this provider allows per ConfigMap", func() error { return dryRun(cm200()) })
		// A ConfigMap of an older install, without the keys: the defaults.
		delete(cm.Data, PolicyKeyMaxDataBytes)
		delete(cm.Data, PolicyKeyMaxMetadataBytes)
		delete(cm.Data, PolicyKeyMaxEventBytes)
		if err := admin.Update(ctx, cm); err != nil {
			t.Fatal(err)
		}
		poll(ctx, t, "a 200 KiB ConfigMap to be admitted with the default bound", func() error { return dryRun(cm200()) })
		checkAPIRefusal(t, dryRun(cm300()), "over the 262144 this provider allows per ConfigMap", false)
		checkAPIRefusal(t, dryRun(annotated(cm200(), 100*kib)), "over the 65536 this provider allows per object", false)
		checkAPIRefusal(t, dryRun(bytesEvent(remoteNS, "ev", filler(5*kib))), "over the 4096 this provider allows per Event", false)
	})

	t.Run("a tenant at its maximum", func(t *testing.T) {
		tenantAtItsMaximum(ctx, t, c, admin, tenant)
	})
}

// tenantAtItsMaximum fills the remote namespace as a tenant would to store
// the most: under a ResourceQuota like annex-tenant-quota (smaller counts,
// the same mechanism), ConfigMaps and Secrets of the largest data with the
// most metadata the policies allow. It checks that the quota and the policies stop the tenant, measures
// what the API server stores (each object as JSON), and what the provider
// agent's cache holds of it.
func tenantAtItsMaximum(ctx context.Context, t *testing.T, c *cli.Cluster, admin, tenant client.Client) {
	const objects = 20
	// The namespace's kube-root-ca.crt counts as one of its ConfigMaps.
	poll(ctx, t, "kube-root-ca.crt in "+remoteNS, func() error {
		return admin.Get(ctx, client.ObjectKey{Namespace: remoteNS, Name: "kube-root-ca.crt"}, &corev1.ConfigMap{})
	})
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: remoteNS, Name: remotenamespace.QuotaName},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
			corev1.ResourceConfigMaps: *resource.NewQuantity(objects+1, resource.DecimalSI),
			corev1.ResourceSecrets:    *resource.NewQuantity(objects, resource.DecimalSI),
		}}}
	if err := admin.Create(ctx, quota); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "the quota to be counted", func() error {
		if err := admin.Get(ctx, client.ObjectKeyFromObject(quota), quota); err != nil {
			return err
		}
		for name := range quota.Spec.Hard {
			if _, ok := quota.Status.Used[name]; !ok {
				return fmt.Errorf("%s not counted yet", name)
			}
		}
		return nil
	})

	// The largest objects the policies admit: data of exactly
	// tenantMaxDataBytes, metadata of exactly tenantMaxMetadataBytes.
	data := filler(DefaultMaxDataBytes - 1) // and a one-byte key
	largest := func(o client.Object) client.Object { return annotated(o, DefaultMaxMetadataBytes) }
	fill := func(kind string, mk func(i int) client.Object) int {
		n := 0
		for i := 0; ; i++ {
			err := tenant.Create(ctx, mk(i))
			if err == nil {
				n++
				continue
			}
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota") {
				t.Fatalf("%s %d: %v, want a refusal by the quota", kind, i, err)
			}
			t.Logf("%s %d refused: %v", kind, i, err)
			return n
		}
	}
	cms := fill("ConfigMap", func(i int) client.Object {
		return largest(bytesConfigMap(remoteNS, fmt.Sprintf("max-%02d", i), map[string]string{"k": data}, nil))
	})
	secrets := fill("Secret", func(i int) client.Object {
		return largest(bytesSecret(remoteNS, fmt.Sprintf("max-%02d", i), map[string][]byte{"k": []byte(data)}))
	})
	if cms != objects || secrets != objects {
		t.Errorf("the tenant stored %d ConfigMaps and %d Secrets; want the quota's %d and %d", cms, secrets, objects, objects)
	}
	// One byte more is refused, whatever the quota.
	checkAPIRefusal(t, tenant.Create(ctx, largest(bytesConfigMap(remoteNS, "over", map[string]string{"k": data + "x"}, nil)), client.DryRunAll),
		"annex-tenant-configmaps", false)

	// What the API server stores of the tenant's objects, as JSON (etcd holds
	// them as protobuf, of the same order for strings).
	stored := map[string]int{}
	perObject := map[string]int{}
	measure := func(kind string, list client.ObjectList, each func() []client.Object) {
		if err := admin.List(ctx, list, client.InNamespace(remoteNS)); err != nil {
			t.Fatal(err)
		}
		for _, o := range each() {
			if o.GetName() == "kube-root-ca.crt" {
				continue
			}
			b, err := json.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			stored[kind] += len(b)
			perObject[kind] = max(perObject[kind], len(b))
		}
	}
	cmList, secretList := &corev1.ConfigMapList{}, &corev1.SecretList{}
	measure("ConfigMap", cmList, func() (out []client.Object) {
		for i := range cmList.Items {
			out = append(out, &cmList.Items[i])
		}
		return out
	})
	measure("Secret", secretList, func() (out []client.Object) {
		for i := range secretList.Items {
			out = append(out, &secretList.Items[i])
		}
		return out
	})
	// A Secret's data is base64 in JSON (4/3); 4 KiB for the rest of an
	// object (name, UID, timestamps, managedFields).
	bound := map[string]int{
		"ConfigMap": DefaultMaxDataBytes + DefaultMaxMetadataBytes + 4*kib,
		"Secret":    DefaultMaxDataBytes*4/3 + DefaultMaxMetadataBytes + 4*kib,
	}
	count := map[string]int{"ConfigMap": objects, "Secret": objects}
	total := 0
	for kind, b := range bound {
		t.Logf("the API server stores %d bytes of the tenant's %ss (%d at most per object, bound %d × %d = %d)",
			stored[kind], kind, perObject[kind], count[kind], b, count[kind]*b)
		if perObject[kind] > b || stored[kind] > count[kind]*b {
			t.Errorf("%s: %d bytes stored, %d for one object; want at most %d per object", kind, stored[kind], perObject[kind], b)
		}
		total += stored[kind]
	}

	// What the provider agent's cache holds of them: its manager, with the
	// metadata informers of Secrets and ConfigMaps its controllers start
	// (credentials, foreigncluster, reflection).
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	opts := agent.DefaultOptions()
	opts.LeaderElect, opts.MetricsBindAddress, opts.HealthProbeAddress = false, "0", "0"
	mgr, err := agent.NewManager(c.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	cacheCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		if err := mgr.GetCache().Start(cacheCtx); err != nil {
			t.Errorf("cache: %v", err)
		}
	}()
	metaOf := func(kind string) *metav1.PartialObjectMetadataList {
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(kind + "List"))
		return l
	}
	for _, kind := range []string{"Secret", "ConfigMap"} {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(kind))
		if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("the agent's cache did not sync")
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	cached, cachedObjects := 0, 0
	for _, kind := range []string{"Secret", "ConfigMap"} {
		l := metaOf(kind)
		if err := mgr.GetCache().List(ctx, l, client.InNamespace(remoteNS)); err != nil {
			t.Fatal(err)
		}
		for i := range l.Items {
			b, err := json.Marshal(&l.Items[i])
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > kib {
				t.Errorf("the agent's cache holds %d bytes of %s %s: %s", len(b), kind, l.Items[i].Name, b[:min(len(b), 300)])
			}
			cached += len(b)
			cachedObjects++
		}
	}
	t.Logf("the agent's cache holds %d bytes of the tenant's %d Secrets and ConfigMaps (the API server stores %d bytes of them, %d in all); its heap went from %d to %d bytes while its cache synced",
		cached, cachedObjects, stored["ConfigMap"]+stored["Secret"], total, before.HeapAlloc, after.HeapAlloc)
	if cachedObjects < 2*objects {
		t.Errorf("the agent's cache holds %d of the tenant's Secrets and ConfigMaps, want %d", cachedObjects, 2*objects)
	}
}
