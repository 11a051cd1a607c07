package podreflector

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// localReadTimeout bounds fullPod's reads.
const localReadTimeout = 10 * time.Second

// fullPod reads pod whole from the local API server, for its ShadowPod
// (the cache may hold only podstatus.StatusSpec of its spec). The read is served
// from the API server's watch cache (resourceVersion 0), which is at least
// as recent as the informer that delivered pod when both come from the
// same API server; when it is not (another API server lagging), the read
// goes to etcd. nil without error: the pod is gone or was replaced by
// another of the same name, whose events queue the key again.
func (r *Reflector) fullPod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, localReadTimeout)
	defer cancel()
	pods := r.cfg.Local.CoreV1().Pods(pod.Namespace)
	got, err := pods.Get(ctx, pod.Name, metav1.GetOptions{ResourceVersion: "0"})
	if apierrors.IsNotFound(err) || (err == nil && got.UID != pod.UID) {
		got, err = pods.Get(ctx, pod.Name, metav1.GetOptions{})
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	case got.UID != pod.UID:
		return nil, nil
	}
	return got, nil
}
