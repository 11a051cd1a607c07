package shadowpod

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// quotaResources are always checked: a consumer whose accepted ResourceSlices
// do not name one of them was granted none of it.
var quotaResources = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods}

// PodRequests returns what a pod with spec counts against its consumer's
// quota: its effective requests as the Kubernetes scheduler computes them
// (regular containers and restartable init containers, "sidecars", add up;
// an ordinary init container runs alone, beside the sidecars started before
// it, so the pod needs the larger of the two; pod-level requests replace the
// containers' cpu and memory; overhead is added), plus pods=1. A container
// limit without a request counts as the request, as the API server would
// default it.
func PodRequests(spec *corev1.PodSpec) corev1.ResourceList {
	sum := corev1.ResourceList{}
	for i := range spec.Containers {
		add(sum, containerRequests(&spec.Containers[i]))
	}
	sidecars, initPeak := corev1.ResourceList{}, corev1.ResourceList{}
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		r := containerRequests(c)
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			add(sum, r)
			add(sidecars, r)
			maxInto(initPeak, sidecars)
			continue
		}
		running := sidecars.DeepCopy()
		add(running, r)
		maxInto(initPeak, running)
	}
	maxInto(sum, initPeak)
	if spec.Resources != nil {
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if q, ok := spec.Resources.Requests[name]; ok {
				sum[name] = q.DeepCopy()
			} else if q, ok := spec.Resources.Limits[name]; ok {
				sum[name] = q.DeepCopy()
			}
		}
	}
	add(sum, spec.Overhead)
	sum[corev1.ResourcePods] = *resource.NewQuantity(1, resource.DecimalSI)
	return sum
}

// containerRequests returns c's requests, a limit standing in for a missing
// request.
func containerRequests(c *corev1.Container) corev1.ResourceList {
	out := c.Resources.Requests.DeepCopy()
	if out == nil {
		out = corev1.ResourceList{}
	}
	for name, q := range c.Resources.Limits {
		if _, ok := out[name]; !ok {
			out[name] = q.DeepCopy()
		}
	}
	return out
}

// CheckQuota decides whether a pod requesting request fits the consumer's
// quota: used is the sum of PodRequests over the consumer's other admitted,
// unfinished ShadowPods, granted the sum of status.resources of its accepted
// ResourceSlices (acceptedSlices of them). cpu, memory and pods are always
// checked (a resource the grants do not name is granted zero); any other
// resource is checked when the grants name it, and otherwise left to this
// cluster's own scheduling and quotas. It returns "" when the pod fits,
// otherwise a message naming the field and the rule.
func CheckQuota(consumer string, request, used, granted corev1.ResourceList, acceptedSlices int) string {
	if acceptedSlices == 0 {
		return fmt.Sprintf("consumer %s has no accepted ResourceSlice on this provider: no pod of it may run here", consumer)
	}
	names := slices.Clone(quotaResources)
	for name := range granted {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var over []string
	for _, name := range names {
		req, ok := request[name]
		if !ok || req.IsZero() {
			continue
		}
		total := used[name].DeepCopy()
		total.Add(req)
		if g := granted[name]; total.Cmp(g) > 0 {
			u := used[name]
			over = append(over, fmt.Sprintf("%s %s requested + %s in use exceeds %s granted", name, req.String(), u.String(), g.String()))
		}
	}
	if len(over) == 0 {
		return ""
	}
	return fmt.Sprintf("spec.pod: the requests of its containers would take consumer %s over the resources granted by its accepted ResourceSlices: %s",
		consumer, strings.Join(over, "; "))
}

func add(sum, l corev1.ResourceList) {
	for name, q := range l {
		cur := sum[name]
		cur.Add(q)
		sum[name] = cur
	}
}

func maxInto(dst, l corev1.ResourceList) {
	for name, q := range l {
		if cur, ok := dst[name]; !ok || q.Cmp(cur) > 0 {
			dst[name] = q.DeepCopy()
		}
	}
}
