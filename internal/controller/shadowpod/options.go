package shadowpod

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/annexhq/annex/internal/controller/fairqueue"
	"github.com/annexhq/annex/internal/controller/resourceslice"
)

// Options are the provider's pod policy.
type Options struct {
	// AllowPrivileged lets consumers run pods that Validate otherwise
	// refuses (host namespaces, hostPath, privileged containers, ...).
	AllowPrivileged bool
	// DefaultRequests are the cpu and memory requests given to every
	// container of a consumer's pod that neither requests nor limits them
	// (ApplyDefaultRequests), before the quota check: a BestEffort pod is
	// counted, and scheduled, for what it is given. Empty: none.
	DefaultRequests corev1.ResourceList
	// UnmeteredResources are the resources, other than cpu, memory and
	// pods, that a consumer's pods may request although its accepted
	// ResourceSlices do not name them: this cluster's own scheduling and
	// quotas bound them. Any other resource a grant does not name is refused.
	UnmeteredResources []corev1.ResourceName
	// PodLabelDomains and PodAnnotationDomains are the domains of the
	// prefixed label and annotation keys of spec.podLabels and
	// spec.podAnnotations that a consumer's pods carry here (keys without
	// a domain always do; see allowedKey). Other controllers of the
	// provider act on prefixed keys (network plugins, meshes, policies
	// selecting on labels): they are the provider's to allow.
	PodLabelDomains      []string
	PodAnnotationDomains []string
	// PendingRequeue is how soon to look again while a previous pod of the
	// same name is being deleted (DefaultPendingRequeue).
	PendingRequeue time.Duration
	// MaxConcurrentReconciles is the number of workers
	// (DefaultMaxConcurrentReconciles). Only the quota check of each
	// admission is serialized, per consumer; pod creations and status
	// mirroring run in parallel. The workers take the consumers' keys in
	// turn (fairqueue.NewQueue).
	MaxConcurrentReconciles int
	// Sync bounds, per consumer, the pod patches that carry a ShadowPod's
	// label and annotation changes to its pod (--tenant-sync-rate): a
	// consumer may change them as often as its API server lets it. Nil:
	// no bound.
	Sync *fairqueue.Limiter
}

// DefaultOptions are the options of an agent started without flags: the
// default requests are cpu=100m,memory=128Mi, nothing is unmetered, pods
// carry the labels of DefaultPodLabelDomains and no annotation with a
// domain.
func DefaultOptions() Options {
	return Options{DefaultRequests: corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("100m"),
		corev1.ResourceMemory: resource.MustParse("128Mi"),
	}, PodLabelDomains: slices.Clone(DefaultPodLabelDomains)}
}

// BindFlags registers --allow-privileged-shadowpods,
// --tenant-default-requests and --tenant-unmetered-resources on fs, with
// o's values as defaults.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.AllowPrivileged, "allow-privileged-shadowpods", o.AllowPrivileged,
		"let consumers run pods that use host namespaces, hostPath volumes, host ports, privileged containers, privilege escalation, capabilities beyond the runtime's defaults or unconfined security profiles (refused by default)")
	fs.Var(&resourceListFlag{list: &o.DefaultRequests}, "tenant-default-requests",
		`cpu and memory requests given to every container of a consumer's pod that neither requests nor limits them, before its quota check (for example "cpu=100m,memory=128Mi"); empty: none, and BestEffort pods take nothing from the consumer's quota but a pod`)
	fs.StringSliceVar(&o.PodLabelDomains, "tenant-pod-label-domains", o.PodLabelDomains,
		`comma-separated domains whose label keys (DOMAIN/name, and those of its subdomains) a consumer's pods may carry here; keys without a domain always may, annex.dev keys never; the others are left out of the pod, with a Warning Event MetadataDropped on its ShadowPod`)
	fs.StringSliceVar(&o.PodAnnotationDomains, "tenant-pod-annotation-domains", o.PodAnnotationDomains,
		`comma-separated domains whose annotation keys a consumer's pods may carry here (network plugins, meshes and other controllers act on annotations: none by default); keys without a domain always may, annex.dev keys never`)
	fs.Var(&resourceNamesFlag{names: &o.UnmeteredResources}, "tenant-unmetered-resources",
		`comma-separated resources (other than cpu, memory and pods) that consumers' pods may request although their accepted ResourceSlices do not grant them, left to this cluster's own scheduling and quotas (for example "ephemeral-storage"); a pod requesting any other resource its consumer was not granted is refused`)
}

// Validate checks the options.
func (o *Options) Validate() error {
	var errs []error
	for name, q := range o.DefaultRequests {
		if name != corev1.ResourceCPU && name != corev1.ResourceMemory {
			errs = append(errs, fmt.Errorf("--tenant-default-requests: %s: only cpu and memory have defaults", name))
		}
		if q.Sign() < 0 {
			errs = append(errs, fmt.Errorf("--tenant-default-requests: %s: %s is negative", name, q.String()))
		}
	}
	for _, name := range o.UnmeteredResources {
		if slices.Contains(quotaResources, name) {
			errs = append(errs, fmt.Errorf("--tenant-unmetered-resources: %s is always checked against the consumer's grant", name))
		}
	}
	return errors.Join(errs...)
}

// resourceListFlag is a pflag.Value for a ResourceList ("cpu=1,memory=1Gi").
type resourceListFlag struct{ list *corev1.ResourceList }

func (v *resourceListFlag) String() string {
	if v.list == nil {
		return ""
	}
	return resourceslice.FormatResourceList(*v.list)
}

func (v *resourceListFlag) Set(s string) error {
	l, err := resourceslice.ParseResourceList(s)
	if err != nil {
		return err
	}
	*v.list = l
	return nil
}

func (v *resourceListFlag) Type() string { return "resources" }

// resourceNamesFlag is a pflag.Value for a list of resource names
// ("ephemeral-storage,hugepages-2Mi").
type resourceNamesFlag struct{ names *[]corev1.ResourceName }

func (v *resourceNamesFlag) String() string {
	if v.names == nil {
		return ""
	}
	parts := make([]string, 0, len(*v.names))
	for _, n := range *v.names {
		parts = append(parts, string(n))
	}
	return strings.Join(parts, ",")
}

func (v *resourceNamesFlag) Set(s string) error {
	var out []corev1.ResourceName
	if s = strings.TrimSpace(s); s != "" {
		for _, part := range strings.Split(s, ",") {
			name := corev1.ResourceName(strings.TrimSpace(part))
			switch {
			case name == "" || strings.ContainsAny(string(name), " \t="):
				return fmt.Errorf("%q is not a resource name", part)
			case slices.Contains(out, name):
				return fmt.Errorf("resource %s is given twice", name)
			}
			out = append(out, name)
		}
	}
	*v.names = out
	return nil
}

func (v *resourceNamesFlag) Type() string { return "names" }
