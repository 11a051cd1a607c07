package podreflector

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

var (
	t0  = metav1.NewTime(time.Date(2025, 1, 1, 10, 0, 0, 0, time.UTC))
	t1  = metav1.NewTime(time.Date(2025, 1, 1, 10, 0, 5, 0, time.UTC))
	now = metav1.NewTime(time.Date(2025, 1, 1, 11, 0, 0, 0, time.UTC))
)

func cond(t corev1.PodConditionType, s corev1.ConditionStatus, reason string, at metav1.Time) corev1.PodCondition {
	return corev1.PodCondition{Type: t, Status: s, Reason: reason, LastTransitionTime: at}
}

func offloaded(at metav1.Time) corev1.PodCondition {
	return corev1.PodCondition{Type: ConditionOffloaded, Status: corev1.ConditionTrue, Reason: ReasonShadowPodCreated,
		Message: "running on provider beta as ShadowPod demo-alpha/web", LastTransitionTime: at}
}

func shadow(status offloadingv1alpha1.ShadowPodStatus) *offloadingv1alpha1.ShadowPod {
	return &offloadingv1alpha1.ShadowPod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo-alpha", Name: "web", Annotations: map[string]string{AnnotationOriginUID: "uid-1"}},
		Status:     status,
	}
}

func TestTranslateStatus(t *testing.T) {
	running := corev1.ContainerStatus{Name: "c", Ready: true, RestartCount: 3, Started: new(true),
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t0}}}
	remoteRunning := offloadingv1alpha1.ShadowPodStatus{
		Phase: corev1.PodRunning, PodIP: "10.246.0.7", PodIPs: []corev1.PodIP{{IP: "10.246.0.7"}}, StartTime: &t0,
		Conditions: []corev1.PodCondition{
			cond(corev1.PodScheduled, corev1.ConditionTrue, "", t0),
			cond(corev1.PodInitialized, corev1.ConditionTrue, "", t0),
			cond(corev1.ContainersReady, corev1.ConditionTrue, "", t1),
			cond(corev1.PodReady, corev1.ConditionTrue, "", t1),
		},
		ContainerStatuses: []corev1.ContainerStatus{running},
	}
	localScheduled := cond(corev1.PodScheduled, corev1.ConditionTrue, "", t0)
	translator := remapTranslator(t)

	tests := []struct {
		name  string
		local corev1.Pod
		sp    *offloadingv1alpha1.ShadowPod
		ips   PodIPTranslator
		want  corev1.PodStatus
	}{{
		name: "fresh ShadowPod without status: Pending, Offloaded",
		local: corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort,
			Conditions: []corev1.PodCondition{localScheduled}}},
		sp: shadow(offloadingv1alpha1.ShadowPodStatus{}),
		want: corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort, HostIP: "127.0.0.1",
			HostIPs: []corev1.HostIP{{IP: "127.0.0.1"}}, Conditions: []corev1.PodCondition{localScheduled, offloaded(now)}},
	}, {
		name: "running: phase, IPs, start time, restarts and conditions come from the provider",
		local: corev1.Pod{Spec: podSpec("c"), Status: corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort,
			Conditions: []corev1.PodCondition{localScheduled, offloaded(t0),
				{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI"}}}},
		sp:  shadow(remoteRunning),
		ips: translator,
		want: corev1.PodStatus{
			Phase: corev1.PodRunning, QOSClass: corev1.PodQOSBestEffort, HostIP: "127.0.0.1", HostIPs: []corev1.HostIP{{IP: "127.0.0.1"}},
			PodIP: "100.64.0.7", PodIPs: []corev1.PodIP{{IP: "100.64.0.7"}}, StartTime: &t0,
			ContainerStatuses: []corev1.ContainerStatus{running},
			Conditions: []corev1.PodCondition{
				cond(corev1.PodInitialized, corev1.ConditionTrue, "", t0),
				cond(corev1.ContainersReady, corev1.ConditionTrue, "", t1),
				cond(corev1.PodReady, corev1.ConditionTrue, "", t1),
				localScheduled,
				{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI"},
				offloaded(t0),
			},
		},
	}, {
		name: "the provider's pod lost its Ready condition: so does the local pod",
		local: corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			localScheduled, cond(corev1.PodReady, corev1.ConditionFalse, ReasonProviderUnreachable, t1), offloaded(t0)}}},
		sp: shadow(offloadingv1alpha1.ShadowPodStatus{Phase: corev1.PodPending}),
		want: corev1.PodStatus{Phase: corev1.PodPending, HostIP: "127.0.0.1", HostIPs: []corev1.HostIP{{IP: "127.0.0.1"}},
			Conditions: []corev1.PodCondition{localScheduled, offloaded(t0)}},
	}, {
		name:  "refused by the provider: Failed with its reason and message",
		local: corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}},
		sp: shadow(offloadingv1alpha1.ShadowPodStatus{Phase: corev1.PodFailed, Reason: offloadingv1alpha1.ReasonQuotaExceeded,
			Message: "the consumer's ShadowPods would exceed its accepted ResourceSlices"}),
		want: corev1.PodStatus{Phase: corev1.PodFailed, Reason: offloadingv1alpha1.ReasonQuotaExceeded,
			Message: "the consumer's ShadowPods would exceed its accepted ResourceSlices",
			HostIP:  "127.0.0.1", HostIPs: []corev1.HostIP{{IP: "127.0.0.1"}}, Conditions: []corev1.PodCondition{offloaded(now)}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			local := tt.local.DeepCopy()
			got, problems := TranslateStatus(local, tt.sp, tt.sp.Status, StatusContext{ProviderID: "beta", NodeIP: "127.0.0.1", IPs: tt.ips, Now: now})
			if len(problems) > 0 {
				t.Errorf("TranslateStatus found problems in an honest status: %v", problems)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("TranslateStatus (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(&tt.local, local); diff != "" {
				t.Errorf("TranslateStatus modified the local pod:\n%s", diff)
			}
		})
	}
}

func TestTranslateStatusReadinessGates(t *testing.T) {
	gate := corev1.PodConditionType("example.com/lb-ready")
	sp := shadow(offloadingv1alpha1.ShadowPodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
		cond(corev1.PodReady, corev1.ConditionTrue, "", t1)}})
	local := &corev1.Pod{Spec: corev1.PodSpec{ReadinessGates: []corev1.PodReadinessGate{{ConditionType: gate}}}}
	sc := StatusContext{ProviderID: "beta", Now: now}

	got, _ := TranslateStatus(local, sp, sp.Status, sc)
	if c := getPodCondition(&got, corev1.PodReady); c == nil || c.Status != corev1.ConditionFalse || c.Reason != ReasonReadinessGatesNotReady {
		t.Fatalf("gate not set: Ready %+v", c)
	}
	local.Status.Conditions = []corev1.PodCondition{{Type: gate, Status: corev1.ConditionTrue}}
	got, _ = TranslateStatus(local, sp, sp.Status, sc)
	if c := getPodCondition(&got, corev1.PodReady); c == nil || c.Status != corev1.ConditionTrue {
		t.Fatalf("gate True: Ready %+v", c)
	}
	if c := getPodCondition(&got, gate); c == nil || c.Status != corev1.ConditionTrue {
		t.Fatalf("the gate's condition is not kept: %+v", c)
	}
}

func TestMarkUnavailable(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{
				cond(corev1.PodScheduled, corev1.ConditionTrue, "", t0),
				cond(corev1.ContainersReady, corev1.ConditionTrue, "", t0),
				cond(corev1.PodReady, corev1.ConditionTrue, "", t0),
			},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Ready: true, RestartCount: 2}},
		},
	}
	if !MarkUnavailable(pod, "beta", false, now) {
		t.Fatal("MarkUnavailable: nothing to write")
	}
	msg := "provider beta is unreachable: the pod's state on it is unknown"
	want := corev1.PodStatus{Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{
			cond(corev1.PodScheduled, corev1.ConditionTrue, "", t0),
			{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: ReasonProviderUnreachable, Message: msg, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: ReasonProviderUnreachable, Message: msg, LastTransitionTime: now},
		},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Ready: false, RestartCount: 2}},
	}
	if diff := cmp.Diff(want, pod.Status); diff != "" {
		t.Errorf("MarkUnavailable status (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"app": "web", corev1alpha1.LabelRemoteUnavailable: "true"}, pod.Labels); diff != "" {
		t.Errorf("MarkUnavailable labels (-want +got):\n%s", diff)
	}

	// Marking again later changes nothing: no write, no new transition time.
	again := pod.DeepCopy()
	MarkUnavailable(again, "beta", false, metav1.NewTime(now.Add(time.Minute)))
	if diff := cmp.Diff(pod, again); diff != "" {
		t.Errorf("MarkUnavailable is not idempotent (-first +second):\n%s", diff)
	}

	// Permanently unreachable: another message, same transition time.
	perm := pod.DeepCopy()
	MarkUnavailable(perm, "beta", true, metav1.NewTime(now.Add(time.Minute)))
	if c := getPodCondition(&perm.Status, corev1.PodReady); c.LastTransitionTime != now || c.Message == msg {
		t.Errorf("permanent marking: %+v", c)
	}

	ClearUnavailable(pod)
	if _, ok := pod.Labels[corev1alpha1.LabelRemoteUnavailable]; ok {
		t.Error("ClearUnavailable kept the label")
	}

	finished := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}
	if MarkUnavailable(finished, "beta", false, now) || finished.Labels != nil {
		t.Error("a finished pod must be left alone")
	}
}
