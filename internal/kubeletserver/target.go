package kubeletserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/virtualnode"
)

// target is where a local pod runs: its virtual node, the provider behind
// it, and the pod's namespace there (the remote pod has the local pod's
// name).
type target struct {
	// Node is the local pod's node; set as soon as it is known, even when
	// resolution fails later (authorization needs it).
	Node            string
	ProviderID      string
	Namespace, Pod  string // the local pod
	RemoteNamespace string
	// Config reaches the provider, without a call timeout (streams).
	Config *rest.Config
}

// resolveError is a failed resolution: the HTTP status and message the
// caller gets.
type resolveError struct {
	code int
	msg  string
}

func (e *resolveError) Error() string { return e.msg }

func notFound(format string, args ...any) error {
	return &resolveError{code: http.StatusNotFound, msg: fmt.Sprintf(format, args...)}
}

// resolve maps the local pod namespace/name to its target: the pod's Node
// must be a virtual node (label type=virtual-node; annex.dev/remote-cluster-id
// names the provider), the namespace must have a Ready remote namespace on
// that provider (NamespaceOffloading status) and the provider must be
// usable. Local objects are read uncached: a log request is rare, a cache
// of every pod is not cheap.
func (s *Server) resolve(ctx context.Context, namespace, name string) (*target, error) {
	t := &target{Namespace: namespace, Pod: name}
	pod := &corev1.Pod{}
	if err := s.local.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return t, notFound("pod %s/%s not found", namespace, name)
		}
		return t, fmt.Errorf("read pod %s/%s: %w", namespace, name, err)
	}
	if pod.Spec.NodeName == "" {
		return t, notFound("pod %s/%s is not scheduled yet", namespace, name)
	}
	t.Node = pod.Spec.NodeName
	node := &corev1.Node{}
	if err := s.local.Get(ctx, client.ObjectKey{Name: t.Node}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return t, notFound("node %s of pod %s/%s not found", t.Node, namespace, name)
		}
		return t, fmt.Errorf("read node %s: %w", t.Node, err)
	}
	t.ProviderID = node.Labels[corev1alpha1.LabelRemoteClusterID]
	if node.Labels[virtualnode.LabelNodeType] != virtualnode.NodeTypeVirtual || t.ProviderID == "" {
		return t, notFound("pod %s/%s runs on node %s, which is not an Annex virtual node: this endpoint serves only offloaded pods", namespace, name, t.Node)
	}
	var err error
	if t.RemoteNamespace, err = s.readyRemoteNamespace(ctx, namespace, t.ProviderID); err != nil {
		return t, err
	}
	if t.RemoteNamespace == "" {
		return t, notFound("namespace %s has no Ready remote namespace on provider %s: pod %s is not running there", namespace, t.ProviderID, name)
	}
	if t.Config, err = s.remotes.RESTConfig(t.ProviderID); err != nil {
		return t, &resolveError{code: http.StatusBadGateway,
			msg: fmt.Sprintf("pod %s/%s runs on provider %s, which cannot be reached now: %v", namespace, name, t.ProviderID, err)}
	}
	return t, nil
}

// statusOf is the HTTP status a resolution error is answered with.
func statusOf(err error) (int, string) {
	var re *resolveError
	if errors.As(err, &re) {
		return re.code, re.msg
	}
	return http.StatusInternalServerError, err.Error()
}
