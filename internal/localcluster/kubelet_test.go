package localcluster

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"sigs.k8s.io/yaml"
)

func TestWriteKwokDebugging(t *testing.T) {
	l := layout{dir: t.TempDir()}
	now := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	if err := writeKwokDebugging(l, "beta", now); err != nil {
		t.Fatal(err)
	}
	log, err := os.ReadFile(l.kwokLog())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(log), "2026-01-02T03:04:05.000000006Z stdout F hello from beta kwok\n"; got != want {
		t.Errorf("log = %q, want %q", got, want)
	}
	data, err := os.ReadFile(l.kwokConfig())
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, doc := range strings.Split(string(data), "---\n")[1:] {
		var m struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("document %q: %v", doc, err)
		}
		if m.APIVersion != kwokAPIVersion {
			t.Errorf("apiVersion %q", m.APIVersion)
		}
		kinds = append(kinds, m.Kind)
	}
	if strings.Join(kinds, ",") != "ClusterLogs,ClusterExec,ClusterPortForward" {
		t.Errorf("kinds %v", kinds)
	}
	for _, want := range []string{l.kwokLog(), l.kwokDir(), KwokExecEnv} {
		if !strings.Contains(string(data), want) {
			t.Errorf("configuration does not mention %s:\n%s", want, data)
		}
	}
}

func TestWriteKwokOptions(t *testing.T) {
	l := layout{dir: t.TempDir()}
	if err := writeKwokOptions(l); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(l.kwokOptions())
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := yaml.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	// kwok applies no defaults to a KwokConfiguration read from a file:
	// a parallelism left out is 0, and kwok exits ("node leases
	// parallelism must be greater than 0").
	want := map[string]any{
		"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration",
		"metadata": map[string]any{"name": "localcluster"},
		"options": map[string]any{
			"podPlayStageParallelism": float64(kwokPodWorkers), "nodePlayStageParallelism": float64(4),
			"nodeLeaseParallelism": float64(4), "podsOnNodeSyncParallelism": float64(1),
			"enablePodsOnNodeSyncListPager": true, "enablePodsOnNodeSyncStreamWatch": false,
			"enableDebuggingHandlers": true, "enableProfilingHandler": true, "enableContentionProfiling": false,
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("options.yaml (-want +got):\n%s", diff)
	}
}

// checkKwokLogsAndExec reads the logs of a kwok pod and execs a command in
// it through the API server, as kubectl logs and kubectl exec do.
func checkKwokLogsAndExec(ctx context.Context, t *testing.T, c *Cluster, cfg *rest.Config, ns, pod string) {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	logs, err := cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of %s/%s: %v", ns, pod, err)
	}
	if !strings.Contains(string(logs), KwokLogLine(c.Name())) {
		t.Errorf("logs of %s/%s = %q, want %q", ns, pod, logs, KwokLogLine(c.Name()))
	}
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: []string{"printenv", KwokExecEnv}, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	exec, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		t.Fatalf("exec in %s/%s: %v (stderr %q)", ns, pod, err, stderr.String())
	}
	if got := strings.TrimSpace(stdout.String()); got != c.Name() {
		t.Errorf("exec printenv %s = %q, want %q", KwokExecEnv, got, c.Name())
	}
}
