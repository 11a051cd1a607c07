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

// ValidateNewName checks, beyond ValidateRequest, whether the namespace
// remote that consumer asks for (for its namespace source) may be created on
// this provider; peers are the cluster IDs of this provider's peers (the
// tenant namespaces), consumer's included or not. It returns "" when it may,
// otherwise a message naming the rule. An existing namespace that is already
// the consumer's (Owner) is kept without this check: these rules decide who
// gets a name first, not who keeps one.
//
// The rules:
//   - EnforceSameName (remote == source) only with allowSameName
//     (--allow-same-name-namespaces).
//   - A name never reads as another peer's DefaultName. DefaultName names
//     "<source>-<C>" are ambiguous when cluster IDs end alike: consumer "c"
//     with namespace "a-b" and consumer "b-c" with namespace "a" both ask
//     for "a-b-c". Such a name belongs to the peer with the longer ID ("b-c"
//     here, for which it is the plain reading): the peer with the shorter
//     one is refused. An EnforceSameName name ending in "-<peer>" is refused
//     for every other peer.
func ValidateNewName(source, remote, consumer string, allowSameName bool, peers []string) string {
	sameName := remote == source
	if sameName && !allowSameName {
		return fmt.Sprintf("spec.remoteNamespace %q (EnforceSameName) is not allowed on this provider (it was not started with --allow-same-name-namespaces): ask for %q (DefaultName)",
			remote, source+"-"+consumer)
	}
	for _, p := range peers {
		if p == consumer || !strings.HasSuffix(remote, "-"+p) || len(remote) == len(p)+1 {
			continue
		}
		if sameName {
			return fmt.Sprintf("spec.remoteNamespace %q (EnforceSameName) is refused: it reads as the DefaultName of a namespace of another cluster this provider is peered with", remote)
		}
		if len(p) > len(consumer) {
			return fmt.Sprintf("spec.remoteNamespace %q is refused: it also reads as the DefaultName of a namespace of another cluster this provider is peered with, whose cluster ID is longer and keeps such names (rename namespace %q)",
				remote, source)
		}
	}
	return ""
}
