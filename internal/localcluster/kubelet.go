package localcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// What the API server needs to reach kubelets (kwok's, and the virtual
// nodes' of an agent): it verifies their serving certificates with the
// cluster CA and authenticates to them with a client certificate, which
// they authorize with a SubjectAccessReview. kwok serves container logs and
// exec for every pod it runs.

// kubeletClientUser is the user the API server authenticates as to kubelets.
const kubeletClientUser = "kube-apiserver-kubelet-client"

// kubeletClientBinding grants kubeletClientUser the kubelet API
// (nodes/proxy, nodes/log, ...), as a kubelet authorizes it.
const kubeletClientBinding = "localcluster:kube-apiserver-kubelet-client"

// KwokExecEnv is set, to the cluster's name, in the environment of the
// commands exec'ed in kwok pods.
const KwokExecEnv = "ANNEX_LOCALCLUSTER"

// KwokLogLine is the line every container of a kwok pod of cluster name has
// in its log.
func KwokLogLine(cluster string) string { return "hello from " + cluster + " kwok" }

// kwokAPIVersion is the API version of kwok's configuration kinds.
const kwokAPIVersion = "kwok.x-k8s.io/v1alpha1"

// kwokConfigAPIVersion is the API version of kwok's KwokConfiguration.
const kwokConfigAPIVersion = "config.kwok.x-k8s.io/v1alpha1"

func (l layout) kwokDir() string     { return filepath.Join(l.dir, "kwok") }
func (l layout) kwokLog() string     { return filepath.Join(l.kwokDir(), "container.log") }
func (l layout) kwokConfig() string  { return filepath.Join(l.kwokDir(), "debugging.yaml") }
func (l layout) kwokOptions() string { return filepath.Join(l.kwokDir(), "options.yaml") }

// kwokPodWorkers is how many pods kwok plays a stage for at once (its
// podPlayStageParallelism). kwok's default, 4 for all its nodes together,
// made kwok the queue of a cluster under load: each stage is one request
// (a status patch, a deletion), and once the API server answers in
// 100 ms, 4 workers play 40 stages a second, fewer than a stream of 20
// pods a second needs; pods then waited seconds to be Running that real
// kubelets, one per node and a worker per pod, would not have made wait.
const kwokPodWorkers = 32

// writeKwokOptions writes kwok's KwokConfiguration. kwok defaults nothing
// in one read from a file, so it holds every option kwok's defaulting
// (v0.8.0) sets that no flag of kwokArgs does, with kwok's default values
// except podPlayStageParallelism (kwokPodWorkers).
func writeKwokOptions(l layout) error {
	if err := os.MkdirAll(l.kwokDir(), 0o755); err != nil {
		return err
	}
	data, err := yaml.Marshal(map[string]any{
		"apiVersion": kwokConfigAPIVersion, "kind": "KwokConfiguration",
		"metadata": map[string]any{"name": "localcluster"},
		"options": map[string]any{
			"podPlayStageParallelism":         kwokPodWorkers,
			"nodePlayStageParallelism":        4,
			"nodeLeaseParallelism":            4,
			"podsOnNodeSyncParallelism":       1,
			"enablePodsOnNodeSyncListPager":   true,
			"enablePodsOnNodeSyncStreamWatch": false,
			"enableDebuggingHandlers":         true,
			"enableProfilingHandler":          true,
			"enableContentionProfiling":       false,
		},
	})
	if err != nil {
		return err
	}
	return writeFileAtomic(l.kwokOptions(), data, 0o644)
}

// writeKwokDebugging writes the log every kwok container serves (in the
// CRI log format kwok reads) and kwok's configuration serving it
// (ClusterLogs), running exec'ed commands (ClusterExec) and echoing what
// is sent to a forwarded port (ClusterPortForward). kwok runs them
// on this host, as the user running the cluster, in the kwok directory:
// these clusters are throw-away test clusters on loopback.
func writeKwokDebugging(l layout, cluster string, now time.Time) error {
	if err := os.MkdirAll(l.kwokDir(), 0o755); err != nil {
		return err
	}
	line := fmt.Sprintf("%s stdout F %s\n", now.UTC().Format(time.RFC3339Nano), KwokLogLine(cluster))
	if err := writeFileAtomic(l.kwokLog(), []byte(line), 0o644); err != nil {
		return err
	}
	meta := map[string]any{"name": "localcluster"}
	docs := []map[string]any{
		{
			"apiVersion": kwokAPIVersion, "kind": "ClusterLogs", "metadata": meta,
			"spec": map[string]any{"logs": []any{map[string]any{
				"logsFile": l.kwokLog(), "previousLogsFile": l.kwokLog(),
			}}},
		},
		{
			"apiVersion": kwokAPIVersion, "kind": "ClusterExec", "metadata": meta,
			"spec": map[string]any{"execs": []any{map[string]any{
				"local": map[string]any{
					"workDir": l.kwokDir(),
					"envs":    []any{map[string]any{"name": KwokExecEnv, "value": cluster}},
				},
			}}},
		},
		{
			// Every port of every kwok pod echoes what it gets (`cat`).
			"apiVersion": kwokAPIVersion, "kind": "ClusterPortForward", "metadata": meta,
			"spec": map[string]any{"forwards": []any{map[string]any{"command": []any{"cat"}}}},
		},
	}
	var out []byte
	for _, d := range docs {
		data, err := yaml.Marshal(d)
		if err != nil {
			return err
		}
		out = append(append(out, "---\n"...), data...)
	}
	return writeFileAtomic(l.kwokConfig(), out, 0o644)
}

// bindKubeletClient lets the API server's kubelet client use the kubelet
// API: kubelets (and virtual nodes) authorize its requests with a
// SubjectAccessReview.
func bindKubeletClient(ctx context.Context, cs kubernetes.Interface) error {
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: kubeletClientBinding},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:kubelet-api-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: kubeletClientUser}},
	}
	_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("bind the API server's kubelet client: %w", err)
	}
	return nil
}
