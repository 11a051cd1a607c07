package tenantquota

import (
	"maps"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// BudgetKeys are the short keys of --tenant-object-budget.
var BudgetKeys = map[string]corev1.ResourceName{
	"configmaps":             corev1.ResourceConfigMaps,
	"secrets":                corev1.ResourceSecrets,
	"services":               corev1.ResourceServices,
	"pods":                   corev1.ResourcePods,
	"persistentvolumeclaims": corev1.ResourcePersistentVolumeClaims,
}

// DefaultBudget is each consumer's budget in all its remote namespaces
// together. With the admission policies' default sizes (256 KiB of data and
// 64 KiB of metadata per ConfigMap or Secret, 64 KiB of metadata per
// Service) it bounds what one tenant stores in these kinds to about
// 160 MiB, however many namespaces it has (docs/security.md, "Bytes").
// Every namespace holds the ConfigMap kube-root-ca.crt, which counts too.
func DefaultBudget() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceConfigMaps: resource.MustParse("250"),
		corev1.ResourceSecrets:    resource.MustParse("250"),
		corev1.ResourceServices:   resource.MustParse("100"),
	}
}

// BindFlags registers --tenant-object-budget on fs; budget starts as
// DefaultBudget.
func BindFlags(fs *pflag.FlagSet, budget *corev1.ResourceList) {
	*budget = DefaultBudget()
	fs.Var((*budgetFlag)(budget), "tenant-object-budget",
		"object counts one consumer may store in all its remote namespaces together, divided among them by the ResourceQuota "+ShareQuotaName+" of each, as key=count pairs that replace the defaults (an empty value turns the budget off); keys: "+
			strings.Join(sortedKeys(), ", ")+" or count/<resource>.<group>")
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
