package remotenamespace

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestValidateRequest(t *testing.T) {
	tests := []struct {
		name, source, remote string
		want                 string // substring of the message; "" means accepted
	}{
		{name: "DefaultName", source: "web", remote: "web-alpha"},
		{name: "EnforceSameName", source: "web", remote: "web"},
		{name: "DefaultName of default", source: "default", remote: "default-alpha"},
		{name: "another name", source: "web", remote: "shop", want: `spec.remoteNamespace "shop" must be "web-alpha" (DefaultName) or "web" (EnforceSameName)`},
		{name: "another consumer's name", source: "web", remote: "web-gamma", want: "must be"},
		{name: "empty source", source: "", remote: "-alpha", want: "spec.sourceNamespace must not be empty"},
		{name: "default", source: "default", remote: "default", want: `spec.remoteNamespace "default" is reserved`},
		{name: "kube-system", source: "kube-system", remote: "kube-system", want: `names starting with "kube-" cannot be requested`},
		{name: "kube-public DefaultName", source: "kube-public", remote: "kube-public-alpha", want: `starting with "kube-"`},
		{name: "a tenant namespace", source: "annex-tenant-gamma", remote: "annex-tenant-gamma", want: `starting with "annex-"`},
		{name: "annex-system", source: "annex-system", remote: "annex-system", want: `starting with "annex-"`},
		{name: "too long", source: strings.Repeat("a", 60), remote: strings.Repeat("a", 60) + "-alpha", want: "is not a valid namespace name"},
		{name: "not a DNS label", source: "Web", remote: "Web", want: "is not a valid namespace name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ValidateRequest(tc.source, tc.remote, "alpha")
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("ValidateRequest(%q, %q) = %q, want %q", tc.source, tc.remote, got, tc.want)
			}
		})
	}
}

func TestOwner(t *testing.T) {
	ns := func(labels, annotations map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "web-alpha", Labels: labels, Annotations: annotations}}
	}
	ours := map[string]string{"annex.dev/remote-cluster-id": "alpha", "annex.dev/managed-by": "annex"}
	src := map[string]string{AnnotationSourceNamespace: "web"}
	tests := []struct {
		name     string
		ns       *corev1.Namespace
		wantOurs bool
		wantMsg  string
	}{
		{name: "ours", ns: ns(ours, src), wantOurs: true},
		{name: "not managed", ns: ns(nil, nil),
			wantMsg: "namespace web-alpha already exists on this provider and is not managed by Annex"},
		{name: "consumer label without managed-by", ns: ns(map[string]string{"annex.dev/remote-cluster-id": "alpha"}, src),
			wantMsg: "namespace web-alpha already exists on this provider and is not managed by Annex"},
		{name: "another consumer", ns: ns(map[string]string{"annex.dev/remote-cluster-id": "gamma", "annex.dev/managed-by": "annex"}, src),
			wantMsg: "namespace web-alpha already exists on this provider and belongs to another cluster"},
		{name: "another source namespace", ns: ns(ours, map[string]string{AnnotationSourceNamespace: "web-alpha"}),
			wantMsg: `namespace web-alpha already exists on this provider for another namespace of this consumer ("web-alpha")`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gotOurs, gotMsg := Owner(tc.ns, "alpha", "web")
			if diff := cmp.Diff([]any{tc.wantOurs, tc.wantMsg}, []any{gotOurs, gotMsg}); diff != "" {
				t.Errorf("Owner() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateNewName(t *testing.T) {
	peers := []string{"alpha", "x-alpha", "gamma", "lpha"}
	tests := []struct {
		name, consumer, source, remote string
		allowSameName                  bool
		want                           string // substring of the message; "" means accepted
	}{
		{name: "DefaultName", consumer: "alpha", source: "web", remote: "web-alpha"},
		{name: "DefaultName of the longer ID", consumer: "x-alpha", source: "web", remote: "web-x-alpha"},
		{name: "DefaultName that reads as the longer ID's", consumer: "alpha", source: "web-x", remote: "web-x-alpha",
			want: `spec.remoteNamespace "web-x-alpha" is refused: it also reads as the DefaultName of a namespace of another cluster this provider is peered with, whose cluster ID is longer`},
		{name: "a suffix without a dash is no reading", consumer: "alpha", source: "web", remote: "web-alpha"},
		{name: "the peer's ID alone is no DefaultName", consumer: "alpha", source: "x", remote: "x-alpha"},
		{name: "EnforceSameName refused by default", consumer: "alpha", source: "web", remote: "web",
			want: `spec.remoteNamespace "web" (EnforceSameName) is not allowed on this provider (it was not started with --allow-same-name-namespaces): ask for "web-alpha" (DefaultName)`},
		{name: "EnforceSameName allowed", consumer: "alpha", source: "monitoring", remote: "monitoring", allowSameName: true},
		{name: "EnforceSameName of another peer's DefaultName", consumer: "alpha", source: "web-gamma", remote: "web-gamma", allowSameName: true,
			want: `(EnforceSameName) is refused: it reads as the DefaultName of a namespace of another cluster`},
		{name: "EnforceSameName of the consumer's own DefaultName form", consumer: "alpha", source: "web-alpha", remote: "web-alpha", allowSameName: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ValidateNewName(tc.source, tc.remote, tc.consumer, tc.allowSameName, peers)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("ValidateNewName(%q, %q, %q) = %q, want %q", tc.source, tc.remote, tc.consumer, got, tc.want)
			}
		})
	}
}
