package shadowpod

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// rl parses "cpu=1,memory=1Gi" ("" is an empty list).
func rl(t *testing.T, s string) corev1.ResourceList {
	t.Helper()
	out := corev1.ResourceList{}
	if s == "" {
		return out
	}
	for _, pair := range strings.Split(s, ",") {
		name, value, _ := strings.Cut(pair, "=")
		q, err := resource.ParseQuantity(value)
		if err != nil {
			t.Fatalf("%s: %v", pair, err)
		}
		out[corev1.ResourceName(name)] = q
	}
	return out
}

func container(t *testing.T, requests, limits string) corev1.Container {
	return corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Requests: rl(t, requests), Limits: rl(t, limits)}}
}

// cmpRL compares ResourceLists by value.
var cmpRL = cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })

func TestPodRequests(t *testing.T) {
	sidecar := func(c corev1.Container) corev1.Container {
		c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		return c
	}
	tests := []struct {
		name string
		spec corev1.PodSpec
		want string
	}{
		{name: "no requests: only the pod", spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}, want: "pods=1"},
		{name: "containers add up", spec: corev1.PodSpec{Containers: []corev1.Container{
			container(t, "cpu=500m,memory=1Gi", ""), container(t, "cpu=250m", "")}},
			want: "cpu=750m,memory=1Gi,pods=1"},
		{name: "a limit stands in for a missing request", spec: corev1.PodSpec{Containers: []corev1.Container{
			container(t, "cpu=100m", "cpu=1,memory=2Gi")}},
			want: "cpu=100m,memory=2Gi,pods=1"},
		{name: "a larger init container wins", spec: corev1.PodSpec{
			InitContainers: []corev1.Container{container(t, "cpu=2", ""), container(t, "memory=512Mi", "")},
			Containers:     []corev1.Container{container(t, "cpu=1,memory=1Gi", "")}},
			want: "cpu=2,memory=1Gi,pods=1"},
		{name: "sidecars run beside the containers and later init containers", spec: corev1.PodSpec{
			InitContainers: []corev1.Container{sidecar(container(t, "cpu=1", "")), container(t, "cpu=3", "")},
			Containers:     []corev1.Container{container(t, "cpu=1", "")}},
			want: "cpu=4,pods=1"},
		{name: "pod-level requests and overhead", spec: corev1.PodSpec{
			Resources:  &corev1.ResourceRequirements{Requests: rl(t, "cpu=2"), Limits: rl(t, "memory=4Gi")},
			Overhead:   rl(t, "cpu=100m,memory=64Mi"),
			Containers: []corev1.Container{container(t, "cpu=500m,memory=1Gi,nvidia.com/gpu=1", "")}},
			want: "cpu=2100m,memory=4160Mi,nvidia.com/gpu=1,pods=1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(rl(t, tc.want), PodRequests(&tc.spec), cmpRL); diff != "" {
				t.Errorf("PodRequests() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckQuota(t *testing.T) {
	const prefix = "spec.pod: the requests of its containers would take consumer alpha over the resources granted by its accepted ResourceSlices: "
	tests := []struct {
		name                   string
		request, used, granted string
		accepted               int
		want                   string
	}{
		{name: "fits", request: "cpu=1,memory=1Gi,pods=1", used: "cpu=2,memory=2Gi,pods=2", granted: "cpu=4,memory=8Gi,pods=10", accepted: 1},
		{name: "fits exactly", request: "cpu=1,pods=1", used: "cpu=3,pods=9", granted: "cpu=4,memory=8Gi,pods=10", accepted: 2},
		{name: "cpu over", request: "cpu=2,pods=1", used: "cpu=3,pods=1", granted: "cpu=4,memory=8Gi,pods=10", accepted: 1,
			want: prefix + "cpu 2 requested + 3 in use exceeds 4 granted"},
		{name: "pods and memory over", request: "memory=1Gi,pods=1", used: "memory=8Gi,pods=10", granted: "cpu=4,memory=8Gi,pods=10", accepted: 1,
			want: prefix + "memory 1Gi requested + 8Gi in use exceeds 8Gi granted; pods 1 requested + 10 in use exceeds 10 granted"},
		{name: "cpu not granted at all", request: "cpu=100m,pods=1", granted: "memory=8Gi,pods=10", accepted: 1,
			want: prefix + "cpu 100m requested + 0 in use exceeds 0 granted"},
		{name: "a granted extended resource is checked", request: "nvidia.com/gpu=2,pods=1", used: "nvidia.com/gpu=1", granted: "cpu=4,memory=8Gi,pods=10,nvidia.com/gpu=2", accepted: 1,
			want: prefix + "nvidia.com/gpu 2 requested + 1 in use exceeds 2 granted"},
		{name: "a resource the grants do not name is not checked", request: "ephemeral-storage=10Gi,pods=1", granted: "cpu=4,memory=8Gi,pods=10", accepted: 1},
		{name: "no accepted ResourceSlice", request: "pods=1", accepted: 0,
			want: "consumer alpha has no accepted ResourceSlice on this provider: no pod of it may run here"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckQuota("alpha", rl(t, tc.request), rl(t, tc.used), rl(t, tc.granted), tc.accepted)
			if got != tc.want {
				t.Errorf("CheckQuota() = %q\nwant %q", got, tc.want)
			}
		})
	}
}
