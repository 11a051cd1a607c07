package remote

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"
)

const kubeconfigHeader = `apiVersion: v1
kind: Config
current-context: beta
contexts:
- name: beta
  context: {cluster: beta, user: alpha}
clusters:
- name: beta
  cluster:
`

func TestRESTConfigFromKubeconfig(t *testing.T) {
	tests := []struct {
		name    string
		data    string
		want    *rest.Config // Host, BearerToken, CAData only
		wantErr string
	}{
		{
			name: "token and embedded CA",
			data: kubeconfigHeader + `    server: https://127.0.0.1:6443
    certificate-authority-data: Q0E=
users:
- name: alpha
  user: {token: secret-token}
`,
			want: &rest.Config{Host: "https://127.0.0.1:6443", BearerToken: "secret-token",
				TLSClientConfig: rest.TLSClientConfig{CAData: []byte("CA")}},
		},
		{name: "empty", data: "", wantErr: "empty kubeconfig"},
		{name: "not a kubeconfig", data: "{", wantErr: "invalid kubeconfig"},
		{
			name: "exec plugin",
			data: kubeconfigHeader + `    server: https://127.0.0.1:6443
users:
- name: alpha
  user:
    exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: ["-c", "id"], interactiveMode: Never}
`,
			wantErr: "exec credential plugins are not allowed",
		},
		{
			name: "token file",
			data: kubeconfigHeader + `    server: https://127.0.0.1:6443
users:
- name: alpha
  user: {tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}
`,
			wantErr: "tokenFile names a local file",
		},
		{
			name: "CA file",
			data: kubeconfigHeader + `    server: https://127.0.0.1:6443
    certificate-authority: /etc/ca.crt
users:
- name: alpha
  user: {token: t}
`,
			wantErr: "certificate-authority names a local file",
		},
		{
			name: "auth provider",
			data: kubeconfigHeader + `    server: https://127.0.0.1:6443
users:
- name: alpha
  user:
    auth-provider: {name: oidc}
`,
			wantErr: "auth-provider plugins are not allowed",
		},
		{
			name: "no server",
			data: kubeconfigHeader + `    insecure-skip-tls-verify: true
users:
- name: alpha
  user: {token: t}
`,
			wantErr: `cluster "beta" has no server`,
		},
		{
			name:    "no current context",
			data:    "apiVersion: v1\nkind: Config\ncurrent-context: nope\n",
			wantErr: `current context "nope" not found`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := RESTConfigFromKubeconfig([]byte(tc.data))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := &rest.Config{Host: cfg.Host, BearerToken: cfg.BearerToken,
				TLSClientConfig: rest.TLSClientConfig{CAData: cfg.CAData}}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadyzURL(t *testing.T) {
	tests := []struct {
		host, want string
		wantErr    bool
	}{
		{host: "https://10.0.0.1:6443", want: "https://10.0.0.1:6443/readyz"},
		{host: "https://10.0.0.1:6443/", want: "https://10.0.0.1:6443/readyz"},
		{host: "10.0.0.1:6443", want: "https://10.0.0.1:6443/readyz"},
		{host: "https://proxy.example.com/k8s/clusters/beta", want: "https://proxy.example.com/k8s/clusters/beta/readyz"},
		{host: "", wantErr: true},
		{host: "https://", wantErr: true},
	}
	for _, tc := range tests {
		got, err := readyzURL(tc.host)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("readyzURL(%q) = %q, %v; want %q, error: %v", tc.host, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestSameConnection(t *testing.T) {
	base := func() *rest.Config {
		return &rest.Config{Host: "https://a", BearerToken: "t", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("ca")}}
	}
	tests := []struct {
		name   string
		mutate func(*rest.Config)
		want   bool
	}{
		{name: "equal", mutate: func(*rest.Config) {}, want: true},
		{name: "timeout and QPS do not matter", mutate: func(c *rest.Config) { c.Timeout, c.QPS = 1, 7 }, want: true},
		{name: "host", mutate: func(c *rest.Config) { c.Host = "https://b" }},
		{name: "token", mutate: func(c *rest.Config) { c.BearerToken = "u" }},
		{name: "token file", mutate: func(c *rest.Config) { c.BearerTokenFile = "/f" }},
		{name: "CA", mutate: func(c *rest.Config) { c.CAData = []byte("other") }},
		{name: "client certificate", mutate: func(c *rest.Config) { c.CertData = []byte("cert") }},
		{name: "client key", mutate: func(c *rest.Config) { c.KeyData = []byte("key") }},
	}
	for _, tc := range tests {
		c := base()
		tc.mutate(c)
		if got := SameConnection(base(), c); got != tc.want {
			t.Errorf("%s: SameConnection = %v, want %v", tc.name, got, tc.want)
		}
	}
}
