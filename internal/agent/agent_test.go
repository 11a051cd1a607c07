package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

// A --kubeconfig gets the same client settings as the in-cluster
// configuration: no client-side rate limit.
func TestRESTConfigKubeconfigNotThrottled(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kubeconfig := `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u
  user: {token: t}
contexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
`
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.Kubeconfig = path
	cfg, err := o.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QPS != -1 || cfg.RateLimiter != nil {
		t.Errorf("QPS = %v, RateLimiter = %v; want -1 and none (client-side rate limiting off)", cfg.QPS, cfg.RateLimiter)
	}
	if !cfg.DisableCompression {
		t.Error("DisableCompression = false; want true (no gzip next to the API server)")
	}
}

// The cache keeps of a pod what the agent's controllers read: metadata
// without managedFields, podstatus.StatusSpec of the spec with the
// resources the provider's quota counts, and the status.
func TestTrimPod(t *testing.T) {
	now := metav1.Now()
	resources := corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
		Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "demo", Name: "web", UID: "u1", ResourceVersion: "7", DeletionTimestamp: &now,
			Labels:          map[string]string{"app": "web"},
			Annotations:     map[string]string{corev1alpha1.AnnotationTransitAddress: "10.99.0.1"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ShadowPod", Name: "web", UID: "s1"}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubelet"}},
		},
		Spec: corev1.PodSpec{NodeName: "annex-beta", Containers: []corev1.Container{{Name: "app", Image: "nginx",
			Env: []corev1.EnvVar{{Name: "A", Value: "b"}}, Resources: resources}}, Volumes: []corev1.Volume{{Name: "data"}},
			Overhead: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	want := pod.DeepCopy()
	want.ManagedFields = nil
	want.Spec = corev1.PodSpec{NodeName: "annex-beta", Containers: []corev1.Container{{Name: "app", Image: "nginx", Resources: resources}},
		Overhead: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}}
	got, err := TrimPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("TrimPod (-want +got):\n%s", diff)
	}
	if got, _ := TrimPod("not a pod"); got != "not a pod" {
		t.Errorf("TrimPod changed a non-pod: %v", got)
	}
}

// A controller's restriction of the pod cache keeps the trimming.
func TestCacheByObjectTrimsPods(t *testing.T) {
	sel := labels.SelectorFromSet(labels.Set{"a": "b"})
	for _, extra := range [][]map[client.Object]cache.ByObject{nil, {{&corev1.Pod{}: {Label: sel}}}} {
		var pod *cache.ByObject
		for k, v := range cacheByObject(extra...) {
			if _, ok := k.(*corev1.Pod); ok {
				pod = &v
			}
		}
		switch {
		case pod == nil || pod.Transform == nil:
			t.Errorf("extra %v: pods not trimmed: %+v", extra, pod)
		case extra != nil && (pod.Label == nil || pod.Label.String() != sel.String()):
			t.Errorf("extra %v: the label selector was lost: %+v", extra, pod)
		}
	}
}

func TestGoMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    int64
		wantErr bool
	}{
		{name: "nothing set", env: map[string]string{}, want: 0},
		{name: "container limit", env: map[string]string{MemoryLimitEnv: "536870912"}, want: 483183820},
		{name: "GOMEMLIMIT wins", env: map[string]string{MemoryLimitEnv: "536870912", "GOMEMLIMIT": "100MiB"}, want: 0},
		{name: "not bytes", env: map[string]string{MemoryLimitEnv: "512Mi"}, wantErr: true},
		{name: "zero", env: map[string]string{MemoryLimitEnv: "0"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := GoMemoryLimit(func(k string) string { return tc.env[k] })
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want an error: %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("limit (-want +got):\n%s", diff)
			}
		})
	}
}

// The cache keeps of a Secret or ConfigMap only what its watchers read: no
// data, no labels or annotations but Annex's own, whatever the tenant wrote.
func TestTrimTrigger(t *testing.T) {
	now := metav1.Now()
	meta := metav1.ObjectMeta{
		Namespace: "web-c1", Name: "blob", UID: "u1", ResourceVersion: "7", Generation: 2, DeletionTimestamp: &now,
		Labels: map[string]string{corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex, corev1alpha1.LabelRemoteClusterID: "c1",
			"app": strings.Repeat("x", 63)},
		Annotations:     map[string]string{"example.com/blob": strings.Repeat("x", 200<<10)},
		Finalizers:      []string{"example.com/f"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "ShadowPod", Name: "web", UID: "s1"}},
		ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "tenant"}},
	}
	want := metav1.ObjectMeta{Namespace: "web-c1", Name: "blob", UID: "u1", ResourceVersion: "7", Generation: 2, DeletionTimestamp: &now,
		Labels: map[string]string{corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex, corev1alpha1.LabelRemoteClusterID: "c1"}}
	for _, tc := range []struct {
		obj  client.Object
		want client.Object
	}{
		{obj: &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: meta},
			want: &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: want}},
		{obj: &corev1.Secret{ObjectMeta: meta, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"k": make([]byte, 200<<10)}},
			want: &corev1.Secret{ObjectMeta: want, Type: corev1.SecretTypeOpaque}},
		{obj: &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"k": "v"}, BinaryData: map[string][]byte{"b": {1}}},
			want: &corev1.ConfigMap{ObjectMeta: want}},
	} {
		got, err := TrimTrigger(tc.obj.DeepCopyObject())
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("TrimTrigger(%T) (-want +got):\n%s", tc.obj, diff)
		}
	}
	if got, _ := TrimTrigger("not an object"); got != "not an object" {
		t.Errorf("TrimTrigger changed a non-object: %v", got)
	}
}

// Secrets and ConfigMaps are trimmed whatever a controller adds; what it
// adds (a selector) is kept.
func TestCacheByObjectTrimsSecretsAndConfigMaps(t *testing.T) {
	sel := labels.SelectorFromSet(labels.Set{"a": "b"})
	for _, extra := range [][]map[client.Object]cache.ByObject{nil, {{&corev1.Secret{}: {Label: sel}}}} {
		found := map[string]cache.ByObject{}
		for k, v := range cacheByObject(extra...) {
			switch k.(type) {
			case *corev1.Secret:
				found["Secret"] = v
			case *corev1.ConfigMap:
				found["ConfigMap"] = v
			}
		}
		for _, kind := range []string{"Secret", "ConfigMap"} {
			v, ok := found[kind]
			if !ok || v.Transform == nil {
				t.Errorf("extra %v: %s not trimmed: %+v", extra, kind, v)
				continue
			}
			got, _ := v.Transform(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "x",
				Annotations: map[string]string{"a": "b"}}})
			if len(got.(*metav1.PartialObjectMetadata).Annotations) != 0 {
				t.Errorf("extra %v: %s transform kept annotations", extra, kind)
			}
		}
		if extra != nil && (found["Secret"].Label == nil || found["Secret"].Label.String() != sel.String()) {
			t.Errorf("extra %v: the label selector was lost: %+v", extra, found["Secret"])
		}
	}
}
