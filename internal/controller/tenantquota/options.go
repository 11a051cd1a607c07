package tenantquota

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

// The quota resources of the custom kinds a tenant writes in its remote
// namespaces.
var (
	ResourceShadowPods           = corev1.ResourceName("count/shadowpods." + offloadingv1alpha1.GroupVersion.Group)
	ResourceShadowEndpointSlices = corev1.ResourceName("count/shadowendpointslices." + offloadingv1alpha1.GroupVersion.Group)
)

// BudgetKeys are the short keys of --tenant-object-budget.
var BudgetKeys = map[string]corev1.ResourceName{
	"configmaps":             corev1.ResourceConfigMaps,
	"secrets":                corev1.ResourceSecrets,
	"services":               corev1.ResourceServices,
	"pods":                   corev1.ResourcePods,
	"persistentvolumeclaims": corev1.ResourcePersistentVolumeClaims,
	"shadowpods":             ResourceShadowPods,
	"shadowendpointslices":   ResourceShadowEndpointSlices,
}

// DefaultBudget is each consumer's budget in all its remote namespaces
// together. With the admission policies' default sizes (256 KiB of data and
// 64 KiB of metadata per ConfigMap, Secret or ShadowEndpointSlice, 64 KiB
// of metadata per Service) it bounds what one tenant stores in these kinds
// to about 225 MiB, however many namespaces it has (docs/security.md,
// "Bytes"). Every namespace holds the ConfigMap kube-root-ca.crt, which
// counts too. ShadowPods follow the tenant's grant (Options).
func DefaultBudget() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceConfigMaps:    resource.MustParse("250"),
		corev1.ResourceSecrets:       resource.MustParse("250"),
		corev1.ResourceServices:      resource.MustParse("100"),
		ResourceShadowEndpointSlices: resource.MustParse("200"),
	}
}

// Defaults of Options: a tenant may store twice its granted pods, and 20
// more, as ShadowPods.
const (
	DefaultShadowPodsPerGrantedPod = 2
	ShadowPodsSlack                = 20
)

// Options are the budget of every consumer.
type Options struct {
	// Budget is the budget of each consumer (--tenant-object-budget); an
	// empty budget and no ShadowPodsPerGrantedPod turn the controller off.
	Budget corev1.ResourceList
	// ShadowPodsPerGrantedPod, when positive and Budget does not name
	// ShadowPods, makes a consumer's budget of ShadowPods that many times
	// its granted pods (the sum over its accepted ResourceSlices), plus
	// ShadowPodsSlack (--tenant-shadowpods-per-granted-pod).
	ShadowPodsPerGrantedPod int64
}

// DefaultOptions are DefaultBudget and DefaultShadowPodsPerGrantedPod.
func DefaultOptions() Options {
	return Options{Budget: DefaultBudget(), ShadowPodsPerGrantedPod: DefaultShadowPodsPerGrantedPod}
}

// Enabled reports whether there is a budget to divide.
func (o Options) Enabled() bool { return len(o.Budget) > 0 || o.ShadowPodsPerGrantedPod > 0 }

// BindFlags registers --tenant-object-budget and
// --tenant-shadowpods-per-granted-pod on fs.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.Var((*budgetFlag)(&o.Budget), "tenant-object-budget",
		"object counts one consumer may store in all its remote namespaces together, divided among them by the ResourceQuota "+ShareQuotaName+" of each, as key=count pairs that replace the defaults (an empty value leaves only the ShadowPods of --tenant-shadowpods-per-granted-pod); keys: "+
			strings.Join(sortedKeys(), ", ")+" or count/<resource>.<group>")
	fs.Int64Var(&o.ShadowPodsPerGrantedPod, "tenant-shadowpods-per-granted-pod", o.ShadowPodsPerGrantedPod,
		fmt.Sprintf("a consumer may store this many times its granted pods, plus %d, as ShadowPods in all its remote namespaces together (0: no such bound; shadowpods in --tenant-object-budget replaces it)", ShadowPodsSlack))
}

// Validate checks the options.
func (o Options) Validate() error {
	if o.ShadowPodsPerGrantedPod < 0 {
		return fmt.Errorf("--tenant-shadowpods-per-granted-pod must not be negative, got %d", o.ShadowPodsPerGrantedPod)
	}
	return nil
}

// budgetFlag is --tenant-object-budget.
type budgetFlag corev1.ResourceList

func (f *budgetFlag) String() string {
	short := map[corev1.ResourceName]string{}
	for k, name := range BudgetKeys {
		short[name] = k
	}
	var parts []string
	for _, name := range sortedNames(corev1.ResourceList(*f)) {
		q := (*f)[name]
		key := string(name)
		if s, ok := short[name]; ok {
			key = s
		}
		parts = append(parts, key+"="+q.String())
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

func (f *budgetFlag) Set(s string) error {
	l, err := ParseBudget(s)
	if err != nil {
		return err
	}
	*f = budgetFlag(l)
	return nil
}

func (f *budgetFlag) Type() string { return "counts" }

func sortedKeys() []string { return slices.Sorted(maps.Keys(BudgetKeys)) }

func sortedNames(l corev1.ResourceList) []corev1.ResourceName {
	return slices.Sorted(maps.Keys(l))
}
