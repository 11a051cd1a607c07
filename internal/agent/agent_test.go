package agent

import (
	"os"
	"path/filepath"
	"testing"
)

// A --kubeconfig gets the same client settings as the in-cluster
// configuration: no client-side rate limit.
func TestRESTConfigKubeconfigNotThrottled(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kubeconfig := `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u
  user: {token: t}
contexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
`
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.Kubeconfig = path
	cfg, err := o.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QPS != -1 || cfg.RateLimiter != nil {
		t.Errorf("QPS = %v, RateLimiter = %v; want -1 and none (client-side rate limiting off)", cfg.QPS, cfg.RateLimiter)
	}
}
