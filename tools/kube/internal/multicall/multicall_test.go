package multicall

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestResolve(t *testing.T) {
	names := []string{"etcd", "kube-apiserver", "kubectl"}
	tests := []struct {
		name     string
		args     []string
		wantName string
		wantArgs []string
		wantErr  string
	}{
		{name: "symlink", args: []string{"/cache/bin/kube-apiserver", "--help"}, wantName: "kube-apiserver", wantArgs: []string{"/cache/bin/kube-apiserver", "--help"}},
		{name: "bare symlink name", args: []string{"kubectl"}, wantName: "kubectl", wantArgs: []string{"kubectl"}},
		{name: "symlink name wins over argument", args: []string{"bin/etcd", "kubectl"}, wantName: "etcd", wantArgs: []string{"bin/etcd", "kubectl"}},
		{name: "first argument", args: []string{"/cache/bin/kube", "kubectl", "version", "--client"}, wantName: "kubectl", wantArgs: []string{"kubectl", "version", "--client"}},
		{name: "no command", args: []string{"/cache/bin/kube"}, wantErr: "commands: etcd, kube-apiserver, kubectl"},
		{name: "unknown command", args: []string{"kube", "kubelet"}, wantErr: "`kube <command> [args...]`"},
		{name: "flag instead of command", args: []string{"kube", "--help"}, wantErr: "commands:"},
		{name: "empty", args: nil, wantErr: "no command line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gotName, gotArgs, err := Resolve(tt.args, names)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Resolve(%q) error = %v, want one containing %q", tt.args, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve(%q): %v", tt.args, err)
			}
			if gotName != tt.wantName {
				t.Errorf("Resolve(%q) name = %q, want %q", tt.args, gotName, tt.wantName)
			}
			if diff := cmp.Diff(tt.wantArgs, gotArgs); diff != "" {
				t.Errorf("Resolve(%q) args (-want +got):\n%s", tt.args, diff)
			}
		})
	}
}
