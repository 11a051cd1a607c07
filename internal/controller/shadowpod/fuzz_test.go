package shadowpod

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

// FuzzAdmission runs what the provider's agent does with a tenant's pod
// spec before it creates the pod (Validate, ApplyDefaultRequests,
// PodRequests, CheckQuota) on arbitrary specs: nothing panics, every
// container without cpu or memory gets the defaults, and a pod that is
// admitted never takes the consumer over its grant nor asks for a resource
// the grant does not name and the provider does not leave unmetered.
func FuzzAdmission(f *testing.F) {
	for _, seed := range []string{
		`{"containers":[{"name":"c","image":"nginx"}]}`,
		`{"containers":[{"name":"c","resources":{"requests":{"cpu":"3","memory":"1Gi"}}}]}`,
		`{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}`,
		`{"initContainers":[{"name":"i","restartPolicy":"Always","resources":{"requests":{"cpu":"1"}}}],"containers":[{"name":"c"}]}`,
		`{"resources":{"requests":{"cpu":"500m"}},"containers":[{"name":"c","resources":{"requests":{"ephemeral-storage":"1Gi"}}}]}`,
		`{"hostNetwork":true,"containers":[{"name":"c","securityContext":{"privileged":true}}]}`,
	} {
		f.Add([]byte(seed), int64(4000), int64(8), int64(2000))
	}
	defaults := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}
	f.Fuzz(func(t *testing.T, data []byte, grantMilliCPU, grantGi, usedMilliCPU int64) {
		var spec corev1.PodSpec
		if err := json.Unmarshal(data, &spec); err != nil {
			return
		}
		_ = Validate(&offloadingv1alpha1.ShadowPodSpec{Pod: spec}, false)
		ApplyDefaultRequests(&spec, defaults)
		podLevel := func(name corev1.ResourceName) bool {
			return spec.Resources != nil && (has(spec.Resources.Requests, name) || has(spec.Resources.Limits, name))
		}
		for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
			for _, c := range cs {
				for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
					if !podLevel(name) && !has(c.Resources.Requests, name) && !has(c.Resources.Limits, name) {
						t.Fatalf("container %q has no %s after the defaults", c.Name, name)
					}
				}
			}
		}
		request := PodRequests(&spec)
		for _, q := range request {
			if q.Sign() < 0 {
				return // the API server refuses negative quantities itself
			}
		}
		g := Grant{Slices: 1, Unmetered: []corev1.ResourceName{corev1.ResourceEphemeralStorage}, Resources: corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewMilliQuantity(abs(grantMilliCPU), resource.DecimalSI),
			corev1.ResourceMemory: *resource.NewQuantity(abs(grantGi%1024)<<30, resource.BinarySI),
			corev1.ResourcePods:   *resource.NewQuantity(10, resource.DecimalSI),
		}}
		used := corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(abs(usedMilliCPU), resource.DecimalSI)}
		if CheckQuota("c", request, used, g) != "" {
			return
		}
		for name, q := range request {
			if q.IsZero() {
				continue
			}
			granted, named := g.Resources[name]
			if !named {
				if name != corev1.ResourceEphemeralStorage {
					t.Fatalf("admitted with %s %s, which the grant does not name", name, q.String())
				}
				continue
			}
			total := used[name].DeepCopy()
			total.Add(q)
			if total.Cmp(granted) > 0 {
				t.Fatalf("admitted over the grant: %s %s + %s used > %s", name, q.String(), used.Name(name, resource.DecimalSI).String(), granted.String())
			}
		}
	})
}

func abs(n int64) int64 {
	if n < 0 {
		if n == -n { // the smallest int64
			return 0
		}
		return -n
	}
	return n
}
