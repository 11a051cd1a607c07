package podstatus

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

func TestFromPodUnschedulable(t *testing.T) {
	unschedulable := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
		Message: "0/1 nodes are available: 1 Insufficient cpu."}
	const msg = "the provider cannot schedule this pod: 0/1 nodes are available: 1 Insufficient cpu. It stays Pending until the provider has room for it; " +
		"to run it elsewhere, delete it (its controller makes a new one) or change the namespace's NamespaceOffloading"
	for _, tc := range []struct {
		name                string
		s                   corev1.PodStatus
		wantReason, wantMsg string
	}{
		{name: "cannot be scheduled", s: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{unschedulable}},
			wantReason: offloadingv1alpha1.ReasonProviderUnschedulable, wantMsg: msg},
		{name: "scheduled: nothing to say", s: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}}},
		{name: "the pod's own reason wins", s: corev1.PodStatus{Phase: corev1.PodPending, Reason: "UnexpectedAdmissionError", Message: "m", Conditions: []corev1.PodCondition{unschedulable}},
			wantReason: "UnexpectedAdmissionError", wantMsg: "m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := FromPod(&corev1.Pod{Status: tc.s})
			if diff := cmp.Diff([]string{tc.wantReason, tc.wantMsg}, []string{got.Reason, got.Message}); diff != "" {
				t.Errorf("reason and message (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStarting(t *testing.T) {
	waiting := func(reason string) []corev1.ContainerStatus {
		return []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}}
	}
	tests := []struct {
		name string
		s    corev1.PodStatus
		want bool
	}{
		{"just created", corev1.PodStatus{}, true},
		{"pending", corev1.PodStatus{Phase: corev1.PodPending}, true},
		{"scheduled, creating", corev1.PodStatus{Phase: corev1.PodPending,
			Conditions:        []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}},
			ContainerStatuses: waiting("ContainerCreating")}, true},
		{"initializing", corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: waiting("PodInitializing")}, true},
		{"unschedulable", corev1.PodStatus{Phase: corev1.PodPending,
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable"}}}, false},
		{"image pull error", corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: waiting("ErrImagePull")}, false},
		{"init container running", corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{{Name: "init",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}, false},
		{"evicted", corev1.PodStatus{Phase: corev1.PodPending, Reason: "UnexpectedAdmissionError"}, false},
		{"running", corev1.PodStatus{Phase: corev1.PodRunning}, false},
		{"failed", corev1.PodStatus{Phase: corev1.PodFailed}, false},
	}
	for _, tt := range tests {
		if got := Starting(&tt.s); got != tt.want {
			t.Errorf("%s: Starting = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestStatusSpec(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	grace := int64(7)
	full := corev1.PodSpec{
		NodeName:                      "annex-beta",
		RestartPolicy:                 corev1.RestartPolicyOnFailure,
		TerminationGracePeriodSeconds: &grace,
		ReadinessGates:                []corev1.PodReadinessGate{{ConditionType: "example.com/ready"}},
		InitContainers: []corev1.Container{{Name: "sidecar", Image: "proxy:1", RestartPolicy: &always,
			Env: []corev1.EnvVar{{Name: "A", Value: "b"}}}},
		Containers: []corev1.Container{{Name: "app", Image: "app:1", Command: []string{"run"},
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
		Volumes:     []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		Tolerations: []corev1.Toleration{{Key: "virtual-node.annex.dev/not-allowed", Operator: corev1.TolerationOpExists}},
	}
	want := corev1.PodSpec{
		NodeName:                      "annex-beta",
		RestartPolicy:                 corev1.RestartPolicyOnFailure,
		TerminationGracePeriodSeconds: &grace,
		ReadinessGates:                []corev1.PodReadinessGate{{ConditionType: "example.com/ready"}},
		InitContainers:                []corev1.Container{{Name: "sidecar", Image: "proxy:1", RestartPolicy: &always}},
		Containers:                    []corev1.Container{{Name: "app", Image: "app:1"}},
	}
	if diff := cmp.Diff(want, StatusSpec(&full)); diff != "" {
		t.Errorf("StatusSpec (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(corev1.PodSpec{}, StatusSpec(&corev1.PodSpec{})); diff != "" {
		t.Errorf("StatusSpec of an empty spec (-want +got):\n%s", diff)
	}
}
