package v1alpha1

import "testing"

func TestRemoteNamespaceName(t *testing.T) {
	tests := []struct {
		strategy NamespaceMappingStrategy
		want     string
	}{
		{strategy: NamespaceMappingDefaultName, want: "demo-alpha"},
		{strategy: "", want: "demo-alpha"},
		{strategy: NamespaceMappingEnforceSameName, want: "demo"},
	}
	for _, tc := range tests {
		t.Run(string(tc.strategy), func(t *testing.T) {
			if got := RemoteNamespaceName(tc.strategy, "demo", "alpha"); got != tc.want {
				t.Errorf("RemoteNamespaceName(%q) = %q, want %q", tc.strategy, got, tc.want)
			}
		})
	}
}
