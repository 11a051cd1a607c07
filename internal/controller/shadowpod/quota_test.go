package shadowpod

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/annexhq/annex/internal/agent"
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
		{name: "pod-level requests never count less than the containers'", spec: corev1.PodSpec{
			Resources:  &corev1.ResourceRequirements{Requests: rl(t, "cpu=1,hugepages-2Mi=4Mi")},
			Containers: []corev1.Container{container(t, "cpu=2", "hugepages-2Mi=2Mi")}},
			want: "cpu=2,hugepages-2Mi=4Mi,pods=1"},
		{name: "counted in the units the scheduler counts: whole millicores and bytes, rounded up", spec: corev1.PodSpec{
			Containers: []corev1.Container{container(t, "cpu=1n,memory=0.5", ""), container(t, "cpu=1500u,example.com/dev=100m", "")}},
			want: "cpu=3m,memory=1,example.com/dev=1,pods=1"},
		{name: "extended resources and hugepages of limits-only containers count", spec: corev1.PodSpec{
			Containers: []corev1.Container{container(t, "", "nvidia.com/gpu=1,hugepages-1Gi=2Gi,ephemeral-storage=1Gi")}},
			want: "nvidia.com/gpu=1,hugepages-1Gi=2Gi,ephemeral-storage=1Gi,pods=1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(rl(t, tc.want), PodRequests(&tc.spec), cmpRL); diff != "" {
				t.Errorf("PodRequests() (-want +got):\n%s", diff)
			}
			// The quota counts the pods of the agent's cache, trimmed
			// (agent.TrimPod): the same.
			cached, err := agent.TrimPod(&corev1.Pod{Spec: *tc.spec.DeepCopy()})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(rl(t, tc.want), PodRequests(&cached.(*corev1.Pod).Spec), cmpRL); diff != "" {
				t.Errorf("PodRequests() of the pod as the agent caches it (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckQuota(t *testing.T) {
	const (
		prefix     = "spec.pod: the requests of its containers would take consumer alpha over the resources granted by its accepted ResourceSlices: "
		notGranted = "spec.pod: its containers request resources that no accepted ResourceSlice of consumer alpha grants and that this provider does not leave unmetered: "
	)
	tests := []struct {
		name                   string
		request, used, granted string
		accepted               int
		unmetered              []corev1.ResourceName
		want                   string
	}{
		{name: "fits", request: "cpu=1,memory=1Gi,pods=1", used: "cpu=2,memory=2Gi,pods=2", granted: "cpu=4,memory=8Gi,pods=10", accepted: 1},
		{name: "fits exactly", request: "cpu=1,pods=1", used: "cpu=3,pods=9", granted: "cpu=4,memory=8Gi,pods=10", accepted: 2},
		{name: "nothing in use", request: "cpu=4,pods=1", granted: "cpu=4,memory=8Gi,pods=10", accepted: 1},
		{name: "cpu over", request: "cpu=2,pods=1", used: "cpu=3,pods=1", granted: "cpu=4,memory=8Gi,pods=10", accepted: 1,
			want: prefix + "cpu 2 requested + 3 in use exceeds 4 granted"},
		{name: "pods and memory over", request: "memory=1Gi,pods=1", used: "memory=8Gi,pods=10", granted: "cpu=4,memory=8Gi,pods=10", accepted: 1,
			want: prefix + "memory 1Gi requested + 8Gi in use exceeds 8Gi granted; pods 1 requested + 10 in use exceeds 10 granted"},
		{name: "cpu not granted at all", request: "cpu=100m,pods=1", granted: "memory=8Gi,pods=10", accepted: 1,
			want: prefix + "cpu 100m requested + 0 in use exceeds 0 granted"},
		{name: "cpu is checked even when the provider lists it as unmetered", request: "cpu=100m,pods=1", granted: "memory=8Gi,pods=10", accepted: 1,
			unmetered: []corev1.ResourceName{corev1.ResourceCPU},
			want:      prefix + "cpu 100m requested + 0 in use exceeds 0 granted"},
		{name: "a granted extended resource is checked", request: "nvidia.com/gpu=2,pods=1", used: "nvidia.com/gpu=1", granted: "cpu=4,memory=8Gi,pods=10,nvidia.com/gpu=2", accepted: 1,
			want: prefix + "nvidia.com/gpu 2 requested + 1 in use exceeds 2 granted"},
		{name: "a granted extended resource that fits", request: "nvidia.com/gpu=1,pods=1", used: "nvidia.com/gpu=1", granted: "cpu=4,memory=8Gi,pods=10,nvidia.com/gpu=2", accepted: 1},
		{name: "a resource the grant does not name is refused", request: "ephemeral-storage=10Gi,pods=1", granted: "cpu=4,memory=8Gi,pods=10", accepted: 1,
			want: notGranted + "ephemeral-storage 10Gi requested"},
		{name: "every ungranted resource is named", request: "hugepages-2Mi=64Mi,nvidia.com/gpu=1,example.com/dongle=1,pods=1", granted: "cpu=4,memory=8Gi,pods=10", accepted: 1,
			want: notGranted + "example.com/dongle 1 requested, hugepages-2Mi 64Mi requested, nvidia.com/gpu 1 requested"},
		{name: "a zero request of an ungranted resource is nothing", request: "nvidia.com/gpu=0,pods=1", granted: "cpu=4,memory=8Gi,pods=10", accepted: 1},
		{name: "a resource the provider leaves unmetered is not checked", request: "ephemeral-storage=10Gi,pods=1", granted: "cpu=4,memory=8Gi,pods=10", accepted: 1,
			unmetered: []corev1.ResourceName{corev1.ResourceEphemeralStorage}},
		{name: "an unmetered resource that the grant names is checked", request: "ephemeral-storage=10Gi,pods=1", granted: "cpu=4,memory=8Gi,pods=10,ephemeral-storage=5Gi", accepted: 1,
			unmetered: []corev1.ResourceName{corev1.ResourceEphemeralStorage},
			want:      prefix + "ephemeral-storage 10Gi requested + 0 in use exceeds 5Gi granted"},
		{name: "ungranted and over together", request: "cpu=5,nvidia.com/gpu=1,pods=1", granted: "cpu=4,memory=8Gi,pods=10", accepted: 1,
			want: notGranted + "nvidia.com/gpu 1 requested; " + prefix + "cpu 5 requested + 0 in use exceeds 4 granted"},
		{name: "no accepted ResourceSlice", request: "pods=1", accepted: 0,
			want: "consumer alpha has no accepted ResourceSlice on this provider: no pod of it may run here"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckQuota("alpha", rl(t, tc.request), rl(t, tc.used), Grant{Resources: rl(t, tc.granted), Slices: tc.accepted, Unmetered: tc.unmetered})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("CheckQuota() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestApplyDefaultRequests(t *testing.T) {
	defaults := "cpu=100m,memory=128Mi"
	sidecar := func(c corev1.Container) corev1.Container {
		c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		return c
	}
	tests := []struct {
		name     string
		defaults string
		spec     corev1.PodSpec
		want     corev1.PodSpec
		// wantRequests is PodRequests of the result.
		wantRequests string
	}{
		{
			name:         "BestEffort: every container gets both",
			defaults:     defaults,
			spec:         corev1.PodSpec{Containers: []corev1.Container{container(t, "", ""), container(t, "", "")}},
			want:         corev1.PodSpec{Containers: []corev1.Container{container(t, defaults, ""), container(t, defaults, "")}},
			wantRequests: "cpu=200m,memory=256Mi,pods=1",
		},
		{
			name:         "a request or a limit is kept; only what is missing is given",
			defaults:     defaults,
			spec:         corev1.PodSpec{Containers: []corev1.Container{container(t, "cpu=1", ""), container(t, "", "memory=1Gi"), container(t, "", "cpu=50m")}},
			want:         corev1.PodSpec{Containers: []corev1.Container{container(t, "cpu=1,memory=128Mi", ""), container(t, "cpu=100m", "memory=1Gi"), container(t, "memory=128Mi", "cpu=50m")}},
			wantRequests: "cpu=1150m,memory=1280Mi,pods=1",
		},
		{
			name:     "init containers and sidecars get them too",
			defaults: defaults,
			spec: corev1.PodSpec{InitContainers: []corev1.Container{container(t, "", ""), sidecar(container(t, "", ""))},
				Containers: []corev1.Container{container(t, "", "")}},
			want: corev1.PodSpec{InitContainers: []corev1.Container{container(t, defaults, ""), sidecar(container(t, defaults, ""))},
				Containers: []corev1.Container{container(t, defaults, "")}},
			wantRequests: "cpu=200m,memory=256Mi,pods=1",
		},
		{
			name:     "what the pod-level resources name is left to them",
			defaults: defaults,
			spec: corev1.PodSpec{Resources: &corev1.ResourceRequirements{Limits: rl(t, "cpu=50m")},
				Containers: []corev1.Container{container(t, "", ""), container(t, "", "")}},
			want: corev1.PodSpec{Resources: &corev1.ResourceRequirements{Limits: rl(t, "cpu=50m")},
				Containers: []corev1.Container{container(t, "memory=128Mi", ""), container(t, "memory=128Mi", "")}},
			wantRequests: "cpu=50m,memory=256Mi,pods=1",
		},
		{
			name:         "no defaults",
			spec:         corev1.PodSpec{Containers: []corev1.Container{container(t, "", "")}},
			want:         corev1.PodSpec{Containers: []corev1.Container{container(t, "", "")}},
			wantRequests: "pods=1",
		},
		{
			name:         "only cpu and memory are given",
			defaults:     "cpu=100m,ephemeral-storage=1Gi",
			spec:         corev1.PodSpec{Containers: []corev1.Container{container(t, "", "")}},
			want:         corev1.PodSpec{Containers: []corev1.Container{container(t, "cpu=100m", "")}},
			wantRequests: "cpu=100m,pods=1",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.spec.DeepCopy()
			ApplyDefaultRequests(got, rl(t, tc.defaults))
			if diff := cmp.Diff(tc.want, *got, cmpRL, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ApplyDefaultRequests() (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(rl(t, tc.wantRequests), PodRequests(got), cmpRL); diff != "" {
				t.Errorf("PodRequests() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOptions(t *testing.T) {
	tests := []struct {
		name          string
		args          []string
		wantDefaults  string
		wantUnmetered []corev1.ResourceName
		wantErr       bool
	}{
		{name: "defaults", wantDefaults: "cpu=100m,memory=128Mi"},
		{name: "set", args: []string{"--tenant-default-requests=cpu=50m", "--tenant-unmetered-resources=ephemeral-storage, hugepages-2Mi"},
			wantDefaults: "cpu=50m", wantUnmetered: []corev1.ResourceName{"ephemeral-storage", "hugepages-2Mi"}},
		{name: "empty: none", args: []string{"--tenant-default-requests=", "--tenant-unmetered-resources="}},
		{name: "a default other than cpu and memory", args: []string{"--tenant-default-requests=cpu=50m,ephemeral-storage=1Gi"}, wantErr: true},
		{name: "cpu cannot be unmetered", args: []string{"--tenant-unmetered-resources=cpu"}, wantErr: true},
		{name: "pods cannot be unmetered", args: []string{"--tenant-unmetered-resources=pods"}, wantErr: true},
		{name: "a name twice", args: []string{"--tenant-unmetered-resources=a,a"}, wantErr: true},
		{name: "an empty name", args: []string{"--tenant-unmetered-resources=a,,b"}, wantErr: true},
		{name: "not a quantity", args: []string{"--tenant-default-requests=cpu=lots"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.BindFlags(fs)
			err := fs.Parse(tc.args)
			if err == nil {
				err = o.Validate()
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want an error: %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if diff := cmp.Diff(rl(t, tc.wantDefaults), o.DefaultRequests, cmpRL, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("DefaultRequests (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantUnmetered, o.UnmeteredResources, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("UnmeteredResources (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRefusedByPodSecurity(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"Pod Security", apierrors.NewForbidden(gr, "p", errors.New(`violates PodSecurity "baseline:latest": probe or lifecycle host (container "c" uses probe or lifecycle host)`)), true},
		{"quota", apierrors.NewForbidden(gr, "p", errors.New("exceeded quota: annex-tenant-quota, requested: pods=1")), false},
		{"RuntimeClass not found", apierrors.NewForbidden(gr, "p", errors.New(`pod rejected: RuntimeClass "kata" not found`)), false},
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "p", nil), false},
		{"nil", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := refusedByPodSecurity(tc.err); got != tc.want {
				t.Errorf("refusedByPodSecurity(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
