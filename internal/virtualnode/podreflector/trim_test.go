package podreflector

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/randfill"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/podstatus"
)

// TestTrimPod: the pod informers' caches keep of a provider's pod its key,
// deletion, controller UID and the status fields the consumer reads.
func TestTrimPod(t *testing.T) {
	now := metav1.Now()
	status := corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: "10.0.0.7", PodIPs: []corev1.PodIP{{IP: "10.0.0.7"}},
		Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Ready: true}},
		HostIP:            "192.0.2.1", HostIPs: []corev1.HostIP{{IP: "192.0.2.1"}}, QOSClass: corev1.PodQOSBestEffort,
	}
	pod := func(owners ...metav1.OwnerReference) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "r", Name: "p", UID: "pod-uid", ResourceVersion: "9",
				Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"a": "b"},
				DeletionTimestamp: &now, OwnerReferences: owners,
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
			Spec:   corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "i"}}},
			Status: status,
		}
	}
	kept := corev1.PodStatus{Phase: status.Phase, PodIP: status.PodIP, PodIPs: status.PodIPs,
		Conditions: status.Conditions, ContainerStatuses: status.ContainerStatuses}
	meta := metav1.ObjectMeta{Namespace: "r", Name: "p", ResourceVersion: "9", DeletionTimestamp: &now}
	for _, tc := range []struct {
		name string
		in   any
		want any
	}{
		{name: "controlled by a ShadowPod", in: pod(
			metav1.OwnerReference{Kind: "ReplicaSet", Name: "rs", UID: "rs-uid"},
			metav1.OwnerReference{Kind: "ShadowPod", Name: "p", UID: "sp-uid", Controller: ptr.To(true)}),
			want: &providerPod{ObjectMeta: meta, controller: "sp-uid", status: kept}},
		{name: "no controller", in: pod(metav1.OwnerReference{Kind: "ShadowPod", Name: "p", UID: "sp-uid"}),
			want: &providerPod{ObjectMeta: meta, status: kept}},
		{name: "a tombstone is left alone", in: "tombstone", want: "tombstone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := trimPod(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(providerPod{})); diff != "" {
				t.Errorf("trimPod (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTrimShadowPod: the ShadowPod informers' caches keep neither the pod
// spec (but its grace period) nor labels and managed fields.
func TestTrimShadowPod(t *testing.T) {
	sp := &offloadingv1alpha1.ShadowPod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "r", Name: "p", UID: "sp-uid",
			Labels:        map[string]string{corev1alpha1.LabelRemoteClusterID: "alpha"},
			Annotations:   map[string]string{AnnotationOriginUID: "u1"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "annex"}}},
		Spec: offloadingv1alpha1.ShadowPodSpec{
			Pod: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](5),
				Containers: []corev1.Container{{Name: "c", Image: "i"}}},
			PodLabels: map[string]string{"app": "web"}, PodAnnotations: map[string]string{"x": "y"},
		},
		Status: offloadingv1alpha1.ShadowPodStatus{Phase: corev1.PodSucceeded},
	}
	want := &offloadingv1alpha1.ShadowPod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "r", Name: "p", UID: "sp-uid",
			Annotations: map[string]string{AnnotationOriginUID: "u1"}},
		Spec: offloadingv1alpha1.ShadowPodSpec{
			Pod:       corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](5)},
			PodLabels: map[string]string{"app": "web"}, PodAnnotations: map[string]string{"x": "y"},
		},
		Status: offloadingv1alpha1.ShadowPodStatus{Phase: corev1.PodSucceeded},
	}
	got, err := trimShadowPod(sp)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("trimShadowPod (-want +got):\n%s", diff)
	}
}

// TestTrimPodKeepsWhatIsRead: whatever a provider's pod's status holds,
// what the reflector computes from the cached providerPod is what it
// computed from the whole pod (a field podstatus starts to read must be
// kept by trimPod too).
func TestTrimPodKeepsWhatIsRead(t *testing.T) {
	f := randfill.NewWithSeed(1).NilChance(0.2).NumElements(0, 3)
	for i := range 200 {
		pod := &corev1.Pod{}
		f.Fill(&pod.Status)
		if i%2 == 0 {
			pod.Status.Phase = corev1.PodPending // Starting's interesting case
		}
		got, err := trimPod(pod)
		if err != nil {
			t.Fatal(err)
		}
		cached := got.(*providerPod)
		if diff := cmp.Diff(podstatus.FromPod(pod), podstatus.FromStatus(&cached.status)); diff != "" {
			t.Fatalf("status from the cached pod differs (-whole +cached):\n%s", diff)
		}
		if a, b := podstatus.Starting(&pod.Status), podstatus.Starting(&cached.status); a != b {
			t.Fatalf("Starting: whole pod %v, cached %v", a, b)
		}
	}
}
