package agent

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
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
// without managedFields, podstatus.StatusSpec of the spec, and the status.
func TestTrimPod(t *testing.T) {
	now := metav1.Now()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "demo", Name: "web", UID: "u1", ResourceVersion: "7", DeletionTimestamp: &now,
			Labels:          map[string]string{"app": "web"},
			Annotations:     map[string]string{corev1alpha1.AnnotationTransitAddress: "10.99.0.1"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ShadowPod", Name: "web", UID: "s1"}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubelet"}},
		},
		Spec: corev1.PodSpec{NodeName: "annex-beta", Containers: []corev1.Container{{Name: "app", Image: "nginx",
			Env: []corev1.EnvVar{{Name: "A", Value: "b"}}}}, Volumes: []corev1.Volume{{Name: "data"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	want := pod.DeepCopy()
	want.ManagedFields = nil
	want.Spec = corev1.PodSpec{NodeName: "annex-beta", Containers: []corev1.Container{{Name: "app", Image: "nginx"}}}
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
