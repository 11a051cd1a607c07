package shadowpod

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/annexhq/annex/internal/controller/resourceslice"
)

// quotaResources are always checked: a consumer whose accepted ResourceSlices
// do not name one of them was granted none of it.
var quotaResources = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods}

// PodRequests returns what a pod with spec counts against its consumer's
// quota: its effective requests as the Kubernetes scheduler computes them
// (regular containers and restartable init containers, "sidecars", add up;
// an ordinary init container runs alone, beside the sidecars started before
// it, so the pod needs the larger of the two; pod-level requests replace the
// containers' for each resource they name; overhead is added), plus pods=1.
// A limit without a request counts as the request, as the API server would
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
		// The API server requires pod-level requests to cover the
		// containers' (which they replace): the larger is the same for a
		// valid pod, and never less than what runs.
		maxInto(sum, containerRequests(&corev1.Container{Resources: *spec.Resources}))
	}
	for name, q := range spec.Overhead {
		add(sum, corev1.ResourceList{name: canonical(name, q)})
	}
	sum[corev1.ResourcePods] = *resource.NewQuantity(1, resource.DecimalSI)
	return sum
}

// containerRequests returns c's requests, a limit standing in for a missing
// request, each in its canonical unit (canonical).
func containerRequests(c *corev1.Container) corev1.ResourceList {
	out := corev1.ResourceList{}
	for name, q := range c.Resources.Requests {
		out[name] = canonical(name, q)
	}
	for name, q := range c.Resources.Limits {
		if _, ok := out[name]; !ok {
			out[name] = canonical(name, q)
		}
	}
	return out
}

// canonical returns q rounded up to the unit the scheduler and the kubelet
// count name in: whole millicores for cpu, whole units (bytes, pods,
// devices) for everything else. A request of 1n CPU takes 1m of a node;
// counted as 1n, a thousand such pods would take a whole CPU while the
// grant saw a millionth of one. A quantity CheckQuantity refuses is left as
// it is (rounding it could overflow); it is never admitted.
func canonical(name corev1.ResourceName, q resource.Quantity) resource.Quantity {
	if resourceslice.CheckQuantity(q) != "" {
		return q.DeepCopy()
	}
	if name == corev1.ResourceCPU {
		return *resource.NewMilliQuantity(q.MilliValue(), resource.DecimalSI)
	}
	return *resource.NewQuantity(q.Value(), q.Format)
}

// Grant is what a consumer may use on this provider.
type Grant struct {
	// Resources is the sum of status.resources of the consumer's accepted
	// ResourceSlices.
	Resources corev1.ResourceList
	// Slices is the number of those slices.
	Slices int
	// Unmetered are the resources (other than cpu, memory and pods) that
	// this provider leaves to its own scheduling when Resources does not
	// name them (--tenant-unmetered-resources).
	Unmetered []corev1.ResourceName
}

// CheckQuota decides whether a pod requesting request fits the consumer's
// grant g, given used, what the consumer's pods take already (see
// Reconciler.usage). Every resource name is bounded: cpu, memory and pods
// are always checked (a resource the grant does not name is granted zero);
// any other resource is checked against the grant when the grant names it,
// is left to this cluster's own scheduling when the provider lists it in
// g.Unmetered, and is otherwise refused. It returns "" when the pod fits,
// otherwise a message naming the field, each resource and the rule.
func CheckQuota(consumer string, request, used corev1.ResourceList, g Grant) string {
	if g.Slices == 0 {
		return fmt.Sprintf("consumer %s has no accepted ResourceSlice on this provider: no pod of it may run here", consumer)
	}
	var over, ungranted []string
	for _, name := range sortedNames(request) {
		req := request[name]
		if req.IsZero() {
			continue
		}
		granted, named := g.Resources[name]
		if !named && !slices.Contains(quotaResources, name) {
			if !slices.Contains(g.Unmetered, name) {
				ungranted = append(ungranted, fmt.Sprintf("%s %s requested", name, req.String()))
			}
			continue
		}
		total := used[name].DeepCopy()
		total.Add(req)
		if total.Cmp(granted) > 0 {
			u := used[name]
			over = append(over, fmt.Sprintf("%s %s requested + %s in use exceeds %s granted", name, req.String(), u.String(), granted.String()))
		}
	}
	var msgs []string
	if len(ungranted) > 0 {
		msgs = append(msgs, fmt.Sprintf("spec.pod: its containers request resources that no accepted ResourceSlice of consumer %s grants and that this provider does not leave unmetered: %s",
			consumer, strings.Join(ungranted, ", ")))
	}
	if len(over) > 0 {
		msgs = append(msgs, fmt.Sprintf("spec.pod: the requests of its containers would take consumer %s over the resources granted by its accepted ResourceSlices: %s",
			consumer, strings.Join(over, "; ")))
	}
	return strings.Join(msgs, "; ")
}

// ApplyDefaultRequests gives every container (init containers and sidecars
// included) of spec that neither requests nor limits cpu or memory the
// request in defaults for it, so that a pod is counted, and scheduled, for
// what it runs (a BestEffort pod would otherwise take nothing from the
// quota). A resource that the pod-level resources name is left alone: there
// the pod-level value is what counts, and the containers' requests may not
// exceed it. Only cpu and memory in defaults are applied.
func ApplyDefaultRequests(spec *corev1.PodSpec, defaults corev1.ResourceList) {
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		q, ok := defaults[name]
		if !ok || q.IsZero() || (spec.Resources != nil && (has(spec.Resources.Requests, name) || has(spec.Resources.Limits, name))) {
			continue
		}
		for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
			for i := range cs {
				r := &cs[i].Resources
				if has(r.Requests, name) || has(r.Limits, name) {
					continue
				}
				if r.Requests == nil {
					r.Requests = corev1.ResourceList{}
				}
				r.Requests[name] = q.DeepCopy()
			}
		}
	}
}

func has(l corev1.ResourceList, name corev1.ResourceName) bool {
	_, ok := l[name]
	return ok
}

func sortedNames(l corev1.ResourceList) []corev1.ResourceName {
	names := make([]corev1.ResourceName, 0, len(l))
	for name := range l {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
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
