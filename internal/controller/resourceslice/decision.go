// Package resourceslice owns the provider side of resource negotiation: it
// answers the ResourceSlices that consumers replicate into their tenant
// namespaces ("annex-tenant-<consumer>") by accepting or denying them.
//
// It acts on the slices in tenant namespaces whose spec.providerClusterID is
// this cluster (so a cluster that is also a consumer leaves its own requests
// to other providers alone). A slice is accepted only when its namespace's
// annex.dev/remote-cluster-id label equals spec.consumerClusterID (a consumer
// may not speak for another) and every requested amount, added to what the
// consumer's other accepted slices were granted, fits both the per-consumer
// ceiling (--max-resources-per-consumer) and the provider's allocatable
// capacity summed over its Ready, schedulable, non-virtual nodes: the sum of
// a consumer's accepted slices never exceeds what the provider offers it,
// however many slices it sends (different consumers may together be
// offered more than the capacity: each one's pods are then bounded by its
// grant and by this cluster's scheduling). Decisions are taken one at a
// time, and each counts the answers this controller wrote that the cache
// may not show yet, so two slices sent together never both take the same
// room. A denial names the rule (per-consumer limit or allocatable
// capacity), each resource and the amounts. An accepted slice is granted
// exactly what it asks for. An accepted answer is kept for as long as the
// slice's spec does not change: capacity that shrinks later, or a lower
// ceiling after a restart, never revokes a grant.
package resourceslice

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

// Options are the provider's resource policy.
type Options struct {
	// MaxPerConsumer caps, per resource, the sum of what one consumer is
	// granted over all its ResourceSlices. A resource it does not name is
	// limited only by capacity; empty means no ceiling.
	MaxPerConsumer corev1.ResourceList

	// Clock stamps condition transition times (default: the real clock).
	Clock clock.PassiveClock
}

// BindFlags registers --max-resources-per-consumer on fs.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.Var(&resourceListValue{list: &o.MaxPerConsumer}, "max-resources-per-consumer",
		`most resources one consumer may be granted over all its ResourceSlices, as name=quantity pairs (for example "cpu=16,memory=64Gi,pods=200"); a resource not named is limited only by this cluster's capacity; empty means no limit`)
}

// ParseResourceList parses "name=quantity,name=quantity" (for example
// "cpu=16,memory=64Gi,pods=200"). The empty string gives an empty list.
func ParseResourceList(s string) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	s = strings.TrimSpace(s)
	if s == "" {
		return out, nil
	}
	for _, pair := range strings.Split(s, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || name == "" || value == "" {
			return nil, fmt.Errorf("%q is not name=quantity", pair)
		}
		if strings.ContainsAny(name, " \t") {
			return nil, fmt.Errorf("resource name %q contains a space", name)
		}
		if _, dup := out[corev1.ResourceName(name)]; dup {
			return nil, fmt.Errorf("resource %s is given twice", name)
		}
		qty, err := resource.ParseQuantity(value)
		if err != nil {
			return nil, fmt.Errorf("resource %s: %q is not a quantity: %w", name, value, err)
		}
		if qty.Sign() < 0 {
			return nil, fmt.Errorf("resource %s: %s is negative", name, value)
		}
		out[corev1.ResourceName(name)] = qty
	}
	return out, nil
}

// FormatResourceList is the inverse of ParseResourceList, with names sorted.
func FormatResourceList(l corev1.ResourceList) string {
	parts := make([]string, 0, len(l))
	for _, name := range sortedNames(l) {
		q := l[name]
		parts = append(parts, string(name)+"="+q.String())
	}
	return strings.Join(parts, ",")
}

// resourceListValue is a pflag.Value for a ResourceList.
type resourceListValue struct{ list *corev1.ResourceList }

func (v *resourceListValue) String() string {
	if v.list == nil {
		return ""
	}
	return FormatResourceList(*v.list)
}

func (v *resourceListValue) Set(s string) error {
	l, err := ParseResourceList(s)
	if err != nil {
		return err
	}
	*v.list = l
	return nil
}

func (v *resourceListValue) Type() string { return "resources" }

// Request is everything a decision about one ResourceSlice depends on.
type Request struct {
	// Slice is the ResourceSlice to answer.
	Slice *corev1alpha1.ResourceSlice
	// NamespaceConsumer is the annex.dev/remote-cluster-id label of the
	// slice's namespace ("" when the label is missing).
	NamespaceConsumer string
	// AlreadyAccepted is true when the slice is Accepted for its current
	// spec: the grant is kept without looking at limits or capacity again.
	AlreadyAccepted bool
	// Limit is the per-consumer ceiling (empty: none).
	Limit corev1.ResourceList
	// GrantedToConsumer is what the consumer's other accepted slices were
	// granted, those accepted but not yet seen in the cache included.
	GrantedToConsumer corev1.ResourceList
	// Capacity is the provider's allocatable capacity: what it offers one
	// consumer in all, over all of the consumer's slices.
	Capacity corev1.ResourceList
}

// Decision is the answer to a ResourceSlice.
type Decision struct {
	Accepted bool
	// Reason is one of the ResourceSlice condition reasons.
	Reason string
	// Message says why, naming resources and quantities.
	Message string
	// Granted is what is granted (nil unless Accepted).
	Granted corev1.ResourceList
}

// Decide answers a ResourceSlice. It is a pure function of its input.
func Decide(in Request) Decision {
	spec := in.Slice.Spec
	switch {
	case in.NamespaceConsumer == "":
		return deny(corev1alpha1.ReasonUnknownConsumer, fmt.Sprintf(
			"namespace %s has no %s label: it is not the tenant namespace of a peered consumer",
			in.Slice.Namespace, corev1alpha1.LabelRemoteClusterID))
	case spec.ConsumerClusterID != in.NamespaceConsumer:
		return deny(corev1alpha1.ReasonPolicyDenied, fmt.Sprintf(
			"spec.consumerClusterID is %q but namespace %s belongs to consumer %q: a consumer may not ask for resources on behalf of another",
			spec.ConsumerClusterID, in.Slice.Namespace, in.NamespaceConsumer))
	}
	if bad := InvalidQuantities(spec.Resources); len(bad) > 0 {
		return deny(corev1alpha1.ReasonPolicyDenied, "spec.resources: "+strings.Join(bad, "; "))
	}
	if in.AlreadyAccepted {
		return accept(spec.Resources)
	}

	var overLimit, overCapacity []string
	for _, name := range sortedNames(spec.Resources) {
		req := spec.Resources[name]
		granted := in.GrantedToConsumer[name]
		total := req.DeepCopy()
		total.Add(granted)
		// what says what the request is measured with: the request alone,
		// or with the consumer's other grants.
		what := fmt.Sprintf("requested %s %s", name, req.String())
		if !granted.IsZero() {
			what = fmt.Sprintf("requested %s %s plus %s already granted to consumer %s", name, req.String(), granted.String(), spec.ConsumerClusterID)
		}
		if limit, ok := in.Limit[name]; ok && total.Cmp(limit) > 0 {
			overLimit = append(overLimit, fmt.Sprintf("%s exceeds this provider's per-consumer limit %s", what, limit.String()))
		}
		if capacity := in.Capacity[name]; total.Cmp(capacity) > 0 {
			overCapacity = append(overCapacity, fmt.Sprintf("%s exceeds this provider's allocatable capacity %s", what, capacity.String()))
		}
	}
	switch {
	case len(overLimit) > 0:
		return deny(corev1alpha1.ReasonPolicyDenied, strings.Join(overLimit, "; "))
	case len(overCapacity) > 0:
		return deny(corev1alpha1.ReasonInsufficientResources, strings.Join(overCapacity, "; "))
	}
	return accept(spec.Resources)
}

// MaxQuantity bounds every quantity a tenant writes (a ResourceSlice's
// request, a pod's requests and limits): 10^15 of the resource's unit. It is
// far above any real node (a petabyte of memory, 10^15 CPUs), and low
// enough that a CPU quantity in millicores (10^18) still fits an int64, the
// type the scheduler, the kubelet and ResourceQuota count in: above it, those
// counts would overflow and wrap, and a huge request could turn small.
var MaxQuantity = resource.MustParse("1P")

// CheckQuantity returns why q is not a quantity a tenant may ask for (""
// when it is): negative, or over MaxQuantity.
func CheckQuantity(q resource.Quantity) string {
	switch {
	case q.Sign() < 0:
		return "is negative"
	case q.Cmp(MaxQuantity) > 0:
		return "is over " + MaxQuantity.String() + ", the most any quantity may be"
	}
	return ""
}

// InvalidQuantities returns, in name order, a message for every quantity of
// l that CheckQuantity refuses and every name that is not a resource name
// (a qualified name, as the API server checks for a pod's resources).
func InvalidQuantities(l corev1.ResourceList) []string {
	var out []string
	for _, name := range sortedNames(l) {
		if errs := validation.IsQualifiedName(string(name)); len(errs) > 0 {
			out = append(out, fmt.Sprintf("%q is not a resource name: %s", name, strings.Join(errs, ", ")))
			continue
		}
		q := l[name]
		if why := CheckQuantity(q); why != "" {
			out = append(out, fmt.Sprintf("%s %s %s", name, q.String(), why))
		}
	}
	return out
}

func accept(l corev1.ResourceList) Decision {
	return Decision{
		Accepted: true,
		Reason:   corev1alpha1.ReasonResourcesGranted,
		Message:  "granted " + FormatResourceList(l),
		Granted:  l.DeepCopy(),
	}
}

func deny(reason, msg string) Decision {
	return Decision{Reason: reason, Message: msg}
}

func sortedNames(l corev1.ResourceList) []corev1.ResourceName {
	names := make([]corev1.ResourceName, 0, len(l))
	for name := range l {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
