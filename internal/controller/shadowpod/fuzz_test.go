package shadowpod

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/agent"
	"github.com/annexhq/annex/internal/controller/resourceslice"
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
		errs := Validate(&offloadingv1alpha1.ShadowPodSpec{Pod: spec}, false)
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
		if len(errs) > 0 {
			return // refused: never counted
		}
		request := PodRequests(&spec)
		for name, q := range request {
			if q.Sign() < 0 {
				t.Fatalf("admitted with a negative %s %s", name, q.String())
			}
		}
		// The quota counts pods from the agent's cache, which keeps them
		// trimmed: the count must be the same.
		cached, err := agent.TrimPod(&corev1.Pod{Spec: *spec.DeepCopy()})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(request, PodRequests(&cached.(*corev1.Pod).Spec), cmpRL); diff != "" {
			t.Fatalf("PodRequests of the pod as the agent caches it (-full +cached):\n%s", diff)
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

// FuzzCounting drives the serialized part of admission (Validate, then
// reserve and settle, as create does) with adversarial quantities: negative,
// zero, huge, fractional, with every suffix. Each admitted ShadowPod's pod is
// created or its creation fails, as the fuzzer chooses. Whatever the
// sequence: the pods created never take more than the grant, and the usage
// bound, when there is one, is never below what the created pods take (it
// is an upper bound; were it lower, the admissions after it would be
// checked against room that does not exist).
func FuzzCounting(f *testing.F) {
	f.Add("3", "-8", "3", "100u", uint8(0b010))
	f.Add("1n", "0", "1P", "2E", uint8(0))
	f.Add("-1", "500m", "1.5", "4e-3", uint8(0b111))
	f.Add("7Ki", "1e3m", "0.0001", "+2", uint8(0b101))
	f.Fuzz(func(t *testing.T, q0, q1, q2, q3 string, fails uint8) {
		ctx := context.Background()
		c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(remoteNS(ns, "alpha"),
			slice(t, "peering", "alpha", corev1alpha1.ResourceSliceAccepted, "cpu=4,memory=8Gi,pods=10")).Build()
		r := New(c, events.NewFakeRecorder(100), Options{})
		grant := resource.MustParse("4")
		created := resource.Quantity{}
		for i, s := range []string{q0, q1, q2, q3} {
			q, err := resource.ParseQuantity(s)
			if err != nil {
				continue
			}
			sp := shadowPod(t, ns, fmt.Sprintf("p%d", i), "")
			sp.Spec.Pod.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: q}
			if errs := Validate(&sp.Spec, false); len(errs) > 0 {
				if q.Sign() >= 0 && q.Cmp(resourceslice.MaxQuantity) <= 0 {
					t.Fatalf("cpu %s refused: %v", s, errs)
				}
				continue
			}
			if q.Sign() < 0 || q.Cmp(resourceslice.MaxQuantity) > 0 {
				t.Fatalf("cpu %s passed Validate", s)
			}
			msg, _, err := r.reserve(ctx, sp, "alpha", PodRequests(&sp.Spec.Pod))
			if err != nil {
				t.Fatal(err)
			}
			if msg != "" {
				continue
			}
			key := client.ObjectKeyFromObject(sp)
			if fails&(1<<i) != 0 {
				r.settle(key, "alpha", nil)
			} else {
				pod, _, err := r.desiredPod(sp)
				if err != nil {
					t.Fatal(err)
				}
				if err := c.Create(ctx, pod); err != nil {
					t.Fatal(err)
				}
				r.settle(key, "alpha", pod)
				req := PodRequests(&pod.Spec)
				created.Add(*req.Cpu())
			}
			if created.Cmp(grant) > 0 {
				t.Fatalf("pods created take cpu %s, over the %s granted", created.String(), grant.String())
			}
			if b := r.tenant("alpha").bound; b.used != nil && b.used.Cpu().Cmp(created) < 0 {
				t.Fatalf("usage bound cpu %s is below the %s the created pods take", b.used.Cpu().String(), created.String())
			}
		}
	})
}
