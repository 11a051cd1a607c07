package remotenamespace

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

// reservedPrefixes are name prefixes a consumer can never ask for: they
// belong to Kubernetes itself and to Annex (tenant namespaces, annex-system).
var reservedPrefixes = []string{"kube-", "annex-"}

// reservedNames are names a consumer can never ask for (kube-system,
// kube-public and kube-node-lease are covered by the "kube-" prefix).
var reservedNames = []string{"default"}

// ValidateRequest checks a consumer's request for namespace remote on this
// provider, made for its namespace source. It returns "" when the name is
// acceptable, otherwise a message naming the field and the rule. It does not
// look at existing namespaces (see Owner for that).
//
// The rules: remote is "<source>-<consumer>" (DefaultName) or "<source>"
// (EnforceSameName), a valid DNS label, not "default" and not starting with
// "kube-" or "annex-".
func ValidateRequest(source, remote, consumer string) string {
	if source == "" {
		return "spec.sourceNamespace must not be empty"
	}
	if remote != source+"-"+consumer && remote != source {
		return fmt.Sprintf("spec.remoteNamespace %q must be %q (DefaultName) or %q (EnforceSameName)",
			remote, source+"-"+consumer, source)
	}
	if errs := validation.IsDNS1123Label(remote); len(errs) > 0 {
		return fmt.Sprintf("spec.remoteNamespace %q is not a valid namespace name: %s", remote, strings.Join(errs, "; "))
	}
	for _, n := range reservedNames {
		if remote == n {
			return fmt.Sprintf("spec.remoteNamespace %q is reserved on this provider", remote)
		}
	}
	for _, p := range reservedPrefixes {
		if strings.HasPrefix(remote, p) {
			return fmt.Sprintf("spec.remoteNamespace %q is reserved on this provider: names starting with %q cannot be requested", remote, p)
		}
	}
	return ""
}

// Owner reports whether the existing namespace ns is the remote namespace
// of source for consumer: it must carry annex.dev/remote-cluster-id=<consumer>,
// annex.dev/managed-by=annex and annex.dev/source-namespace=<source>. When it
// is not, the message says whose it is, for the RemoteNamespace's status.
func Owner(ns *corev1.Namespace, consumer, source string) (bool, string) {
	l := ns.Labels
	switch {
	case l[corev1alpha1.LabelManagedBy] != corev1alpha1.ManagedByAnnex:
		return false, fmt.Sprintf("namespace %s already exists on this provider and is not managed by Annex", ns.Name)
	case l[corev1alpha1.LabelRemoteClusterID] != consumer:
		return false, fmt.Sprintf("namespace %s already exists on this provider and belongs to another cluster", ns.Name)
	case ns.Annotations[AnnotationSourceNamespace] != source:
		return false, fmt.Sprintf("namespace %s already exists on this provider for another namespace of this consumer (%q)",
			ns.Name, ns.Annotations[AnnotationSourceNamespace])
	}
	return true, ""
}
