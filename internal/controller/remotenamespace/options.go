package remotenamespace

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/annexhq/annex/internal/controller/tenantquota"
)

// PodSecurityLevel is a Pod Security Standards level, the value of the
// pod-security.kubernetes.io/enforce label of every remote namespace.
type PodSecurityLevel string

// The Pod Security Standards levels a provider may choose.
const (
	PodSecurityBaseline   PodSecurityLevel = "baseline"
	PodSecurityRestricted PodSecurityLevel = "restricted"
	PodSecurityPrivileged PodSecurityLevel = "privileged"
)

// Defaults of Options.
const (
	// DefaultPendingRequeue is how soon a RemoteNamespace is looked at again
	// while its namespace is being deleted or its quota being counted.
	DefaultPendingRequeue = 2 * time.Second
	// DefaultLimitRequeue is how soon a request refused because its consumer
	// has as many remote namespaces as it may have is looked at again.
	DefaultLimitRequeue = 30 * time.Second
	// DefaultMaxNamespacesPerTenant bounds the remote namespaces of one consumer.
	DefaultMaxNamespacesPerTenant = 100
	// DefaultPodSecurity is the Pod Security level of remote namespaces.
	DefaultPodSecurity = PodSecurityBaseline
)

// The quota resource names of the objects a consumer writes, counted by the
// ResourceQuotas this controller keeps (the remote namespaces' kinds are
// tenantquota's, whose budget counts them too).
var (
	ResourceShadowPods           = tenantquota.ResourceShadowPods
	ResourceShadowEndpointSlices = tenantquota.ResourceShadowEndpointSlices
)

// The quota resource names of the tenant namespace's kinds.
const (
	ResourceRemoteNamespaces corev1.ResourceName = "count/remotenamespaces.offloading.annex.dev"
	ResourceResourceSlices   corev1.ResourceName = "count/resourceslices.core.annex.dev"
)

// quotaKeys are the keys of --tenant-object-quota: each names a resource of
// the quota in every remote namespace (remote) or in the tenant namespace.
var quotaKeys = map[string]struct {
	name   corev1.ResourceName
	tenant bool
}{
	"pods":                   {name: corev1.ResourcePods},
	"shadowpods":             {name: ResourceShadowPods},
	"shadowendpointslices":   {name: ResourceShadowEndpointSlices},
	"services":               {name: corev1.ResourceServices},
	"services.nodeports":     {name: corev1.ResourceServicesNodePorts},
	"services.loadbalancers": {name: corev1.ResourceServicesLoadBalancers},
	"configmaps":             {name: corev1.ResourceConfigMaps},
	"secrets":                {name: corev1.ResourceSecrets},
	"remotenamespaces":       {name: ResourceRemoteNamespaces, tenant: true},
	"resourceslices":         {name: ResourceResourceSlices, tenant: true},
}

// DefaultObjectQuota is the hard limit of the ResourceQuota QuotaName in every
// remote namespace. A bench burst puts 5000 pods in one namespace: pods and
// ShadowPods leave room for twice that (a rollout of such a Deployment keeps
// old and new pods for a while); Services, ConfigMaps, Secrets and
// ShadowEndpointSlices are what a namespace of a few hundred workloads uses
// (the tenant's budget, tenantquota, bounds them for all its namespaces
// together too). NodePort and LoadBalancer Services are never allowed on a
// provider (0). Events cannot be counted: Kubernetes' quota system ignores
// them (k8s.io/kubernetes/pkg/quota/v1/install, DefaultIgnoredResources), so
// a quota naming count/events is never counted and would hold every remote
// namespace Pending; a tenant may not create Events there at all
// (ClusterRole annex-remote-consumer).
//
// The cluster counts a custom resource (count/shadowpods...) only once its
// quota controller has discovered the CRD (it looks every 30 s), and until
// then the API server refuses every object of the kind in a namespace whose
// quota names it: `annexctl install` waits for that (waitQuotaCounts), and a
// quota counted in part is written again (tenantquota.Recount).
func DefaultObjectQuota() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourcePods:                  resource.MustParse("10000"),
		ResourceShadowPods:                   resource.MustParse("10000"),
		ResourceShadowEndpointSlices:         resource.MustParse("1000"),
		corev1.ResourceServices:              resource.MustParse("200"),
		corev1.ResourceServicesNodePorts:     resource.MustParse("0"),
		corev1.ResourceServicesLoadBalancers: resource.MustParse("0"),
		corev1.ResourceConfigMaps:            resource.MustParse("500"),
		corev1.ResourceSecrets:               resource.MustParse("500"),
	}
}

// DefaultTenantObjectQuota is the hard limit of the ResourceQuota QuotaName in
// a tenant namespace annex-tenant-<C>, for a provider that gives a consumer
// at most maxNamespaces remote namespaces: twice that many RemoteNamespaces
// (refused requests stay stored until the consumer deletes them) and
// DefaultResourceSlicesPerTenant ResourceSlices.
func DefaultTenantObjectQuota(maxNamespaces int) corev1.ResourceList {
	return corev1.ResourceList{
		ResourceRemoteNamespaces: *resource.NewQuantity(2*int64(maxNamespaces), resource.DecimalSI),
		ResourceResourceSlices:   *resource.NewQuantity(DefaultResourceSlicesPerTenant, resource.DecimalSI),
	}
}

// DefaultResourceSlicesPerTenant is how many ResourceSlices a consumer may
// store in its tenant namespace by default: `annexctl peer` writes one, a
// consumer that asks for more capacity separately a few more.
const DefaultResourceSlicesPerTenant = 20

// DefaultRequests are the default container requests of the LimitRange
// LimitRangeName: what a container that asks for nothing is given.
func DefaultRequests() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("100m"),
		corev1.ResourceMemory: resource.MustParse("128Mi"),
	}
}

// Options tune the reconciler. The zero value of each field means its
// default.
type Options struct {
	// Clock stamps condition transition times (default: the real clock).
	Clock clock.PassiveClock
	// PendingRequeue is how soon to look again while a namespace is being
	// deleted or its quota counted (DefaultPendingRequeue).
	PendingRequeue time.Duration
	// LimitRequeue is how soon to look again at a request refused by
	// MaxNamespacesPerTenant (DefaultLimitRequeue).
	LimitRequeue time.Duration
	// Reader counts a consumer's namespaces before a new one is created,
	// past the cache, which may not hold the latest creations yet (default:
	// the reconciler's client). The manager's API reader is meant.
	Reader client.Reader

	// PodSecurity is the Pod Security Admission level enforced (and warned
	// and audited) in every remote namespace (DefaultPodSecurity).
	PodSecurity PodSecurityLevel
	// ShareQuota is set when the tenantquota controller divides each
	// consumer's budget: a consumer is granted access to a remote namespace
	// only once its ResourceQuota tenantquota.ShareQuotaName is counted.
	ShareQuota bool
	// AllowSameName lets consumers ask for EnforceSameName remote
	// namespaces (named like their own namespace); refused when false.
	AllowSameName bool
	// MaxNamespacesPerTenant bounds the remote namespaces of one consumer
	// (DefaultMaxNamespacesPerTenant).
	MaxNamespacesPerTenant int
	// ObjectQuota overrides entries of DefaultObjectQuota and adds others.
	ObjectQuota corev1.ResourceList
	// TenantObjectQuota overrides entries of DefaultTenantObjectQuota.
	TenantObjectQuota corev1.ResourceList
	// DefaultRequests are the default container requests of every remote
	// namespace's LimitRange: nil means DefaultRequests(), an empty list no
	// LimitRange (an existing one is deleted).
	DefaultRequests corev1.ResourceList
	// PodCIDR is this cluster's pod CIDR (the cluster identity's): the
	// NetworkPolicy of every remote namespace tells pods from the rest by
	// it. Invalid (unknown): no NetworkPolicy is kept.
	PodCIDR netip.Prefix
	// NoNetworkPolicy keeps no NetworkPolicy in remote namespaces
	// (--tenant-network-policy=false); existing ones are left as they are.
	NoNetworkPolicy bool
}

// DefaultOptions returns the options whose flags show their defaults. The
// quotas and default requests stay unset (their defaults are filled in by
// New: the tenant namespace's quota depends on MaxNamespacesPerTenant).
func DefaultOptions() Options {
	return Options{PodSecurity: DefaultPodSecurity, MaxNamespacesPerTenant: DefaultMaxNamespacesPerTenant}
}

// EffectiveDefaultRequests returns the default container requests the
// LimitRanges set: DefaultRequests, or its default when unset. The agent's
// own admission of ShadowPods applies the same.
func (o *Options) EffectiveDefaultRequests() corev1.ResourceList {
	if o.DefaultRequests == nil {
		return DefaultRequests()
	}
	return o.DefaultRequests.DeepCopy()
}

// complete fills in the defaults of unset fields.
func (o *Options) complete() {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.PendingRequeue <= 0 {
		o.PendingRequeue = DefaultPendingRequeue
	}
	if o.LimitRequeue <= 0 {
		o.LimitRequeue = DefaultLimitRequeue
	}
	if o.PodSecurity == "" {
		o.PodSecurity = DefaultPodSecurity
	}
	if o.MaxNamespacesPerTenant <= 0 {
		o.MaxNamespacesPerTenant = DefaultMaxNamespacesPerTenant
	}
	o.ObjectQuota = merged(DefaultObjectQuota(), o.ObjectQuota)
	o.TenantObjectQuota = merged(DefaultTenantObjectQuota(o.MaxNamespacesPerTenant), o.TenantObjectQuota)
	if o.DefaultRequests == nil {
		o.DefaultRequests = DefaultRequests()
	}
}

// merged returns defaults with the entries of overrides.
func merged(defaults, overrides corev1.ResourceList) corev1.ResourceList {
	maps.Copy(defaults, overrides)
	return defaults
}

// BindFlags registers the provider's tenant flags on fs:
// --tenant-pod-security, --allow-same-name-namespaces,
// --max-remote-namespaces-per-tenant, --tenant-object-quota and
// --tenant-default-requests.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.Var((*levelFlag)(&o.PodSecurity), "tenant-pod-security",
		"Pod Security Admission level enforced in every consumer's remote namespace: baseline or restricted; privileged only together with --allow-privileged-shadowpods")
	fs.BoolVar(&o.AllowSameName, "allow-same-name-namespaces", o.AllowSameName,
		"let consumers ask for remote namespaces named like their own namespace (EnforceSameName) instead of \"<namespace>-<consumer ID>\" (refused by default: such names may take one this cluster's operators need later)")
	fs.IntVar(&o.MaxNamespacesPerTenant, "max-remote-namespaces-per-tenant", o.MaxNamespacesPerTenant,
		"the most remote namespaces one consumer may have on this cluster")
	fs.Var(&quotaFlag{o: o}, "tenant-object-quota",
		"object counts of the ResourceQuota "+QuotaName+" kept in every consumer's remote namespace (and, for remotenamespaces and resourceslices, its tenant namespace), as key=count pairs that override the defaults; keys: "+
			strings.Join(slices.Sorted(maps.Keys(quotaKeys)), ", ")+" or any count/<resource>.<group> (remotenamespaces defaults to twice --max-remote-namespaces-per-tenant)")
	fs.Var((*negatedBool)(&o.NoNetworkPolicy), "tenant-network-policy",
		"keep the NetworkPolicy "+NetworkPolicyName+" in every consumer's remote namespace: only the consumer's own pods and addresses outside this cluster's pod CIDR (its gateway link, the nodes) get in; only the consumer's own pods, the cluster DNS and addresses outside the pod CIDR, the nodes' addresses and 169.254.0.0/16 are reached (enforced by the cluster's network plugin where it enforces NetworkPolicies; false leaves existing ones as they are)")
	fs.Lookup("tenant-network-policy").NoOptDefVal = "true"
}

// negatedBool is a boolean flag that sets the negation of its value.
type negatedBool bool

func (b *negatedBool) String() string { return strconv.FormatBool(!bool(*b)) }
func (b *negatedBool) Type() string   { return "bool" }
func (b *negatedBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*b = negatedBool(!v)
	return nil
}

// Validate checks the options, given whether --allow-privileged-shadowpods
// is set: the privileged Pod Security level needs it.
func (o *Options) Validate(allowPrivilegedShadowPods bool) error {
	switch o.PodSecurity {
	case "", PodSecurityBaseline, PodSecurityRestricted:
	case PodSecurityPrivileged:
		if !allowPrivilegedShadowPods {
			return fmt.Errorf("--tenant-pod-security=privileged needs --allow-privileged-shadowpods: without it the agent refuses every pod that only the privileged level admits")
		}
	default:
		return fmt.Errorf("--tenant-pod-security must be baseline, restricted or privileged, not %q", o.PodSecurity)
	}
	if o.MaxNamespacesPerTenant < 1 {
		return fmt.Errorf("--max-remote-namespaces-per-tenant must be at least 1, got %d", o.MaxNamespacesPerTenant)
	}
	return nil
}

// ParseDefaultRequests parses "cpu=100m,memory=128Mi": resource=quantity
// pairs of cpu, memory and ephemeral-storage, each positive and given once.
// An empty string is an empty (non-nil) list.
func ParseDefaultRequests(s string) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	for _, kv := range splitPairs(s) {
		k, v, ok := strings.Cut(kv, "=")
		name := corev1.ResourceName(strings.TrimSpace(k))
		if !ok {
			return nil, fmt.Errorf("%q is not resource=quantity", kv)
		}
		switch name {
		case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
		default:
			return nil, fmt.Errorf("%q: only cpu, memory and ephemeral-storage can have default requests", name)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%q given twice", name)
		}
		q, err := resource.ParseQuantity(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if q.Sign() <= 0 {
			return nil, fmt.Errorf("%s: %s is not positive", name, q.String())
		}
		out[name] = q
	}
	return out, nil
}

// parseObjectQuota parses "shadowpods=10000,services=200": key=count pairs,
// keys from quotaKeys or count/<resource>.<group> (a remote namespace's
// quota), counts non-negative integers. It returns the entries of the remote
// namespaces' quota and of the tenant namespace's.
func parseObjectQuota(s string) (remote, tenant corev1.ResourceList, err error) {
	remote, tenant = corev1.ResourceList{}, corev1.ResourceList{}
	for _, kv := range splitPairs(s) {
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok {
			return nil, nil, fmt.Errorf("%q is not key=count", kv)
		}
		key, known := quotaKeys[k]
		for _, qk := range quotaKeys {
			if string(qk.name) == k {
				key, known = qk, true
			}
		}
		if !known {
			gr, isCount := strings.CutPrefix(k, "count/")
			if !isCount || len(validation.IsQualifiedName(gr)) > 0 || !strings.Contains(gr, ".") {
				return nil, nil, fmt.Errorf("%q is not one of %s nor count/<resource>.<group>", k, strings.Join(slices.Sorted(maps.Keys(quotaKeys)), ", "))
			}
			key.name = corev1.ResourceName(k)
		}
		q, err := resource.ParseQuantity(strings.TrimSpace(v))
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", k, err)
		}
		if n, isInt := q.AsInt64(); !isInt || n < 0 {
			return nil, nil, fmt.Errorf("%s: %s is not a count (a non-negative integer)", k, q.String())
		}
		list := remote
		if key.tenant {
			list = tenant
		}
		if _, dup := list[key.name]; dup {
			return nil, nil, fmt.Errorf("%q given twice", k)
		}
		list[key.name] = q
	}
	return remote, tenant, nil
}

// splitPairs splits a comma-separated list, dropping empty items.
func splitPairs(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// FormatResourceList formats rl as sorted name=quantity pairs, the format
// the flags take; counts are written out in full (10000, not 10k).
func FormatResourceList(rl corev1.ResourceList) string {
	names := slices.Sorted(maps.Keys(rl))
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, string(n)+"="+formatQuantity(rl[n]))
	}
	return strings.Join(parts, ",")
}

// formatQuantity writes a decimal integer in full, anything else as the
// quantity's canonical form.
func formatQuantity(q resource.Quantity) string {
	if n, ok := q.AsInt64(); ok && q.Format == resource.DecimalSI {
		return strconv.FormatInt(n, 10)
	}
	return q.String()
}

// levelFlag is --tenant-pod-security.
type levelFlag PodSecurityLevel

func (f *levelFlag) String() string {
	if *f == "" {
		return string(DefaultPodSecurity)
	}
	return string(*f)
}

func (f *levelFlag) Set(s string) error {
	switch l := PodSecurityLevel(s); l {
	case PodSecurityBaseline, PodSecurityRestricted, PodSecurityPrivileged:
		*f = levelFlag(l)
		return nil
	}
	return fmt.Errorf("must be baseline, restricted or privileged")
}

func (f *levelFlag) Type() string { return "level" }

// quotaFlag is --tenant-object-quota.
type quotaFlag struct{ o *Options }

// String is the quota in the remote namespaces and the tenant namespace,
// with the defaults, keyed as the flag takes it.
func (f *quotaFlag) String() string {
	if f.o == nil {
		return ""
	}
	maxNS := f.o.MaxNamespacesPerTenant
	if maxNS <= 0 {
		maxNS = DefaultMaxNamespacesPerTenant
	}
	all := merged(DefaultObjectQuota(), f.o.ObjectQuota)
	maps.Copy(all, merged(DefaultTenantObjectQuota(maxNS), f.o.TenantObjectQuota))
	short := corev1.ResourceList{}
	for name, q := range all {
		for k, qk := range quotaKeys {
			if qk.name == name {
				name = corev1.ResourceName(k)
			}
		}
		short[name] = q
	}
	return FormatResourceList(short)
}

func (f *quotaFlag) Set(s string) error {
	remote, tenant, err := parseObjectQuota(s)
	if err != nil {
		return err
	}
	f.o.ObjectQuota, f.o.TenantObjectQuota = remote, tenant
	return nil
}

func (f *quotaFlag) Type() string { return "counts" }
