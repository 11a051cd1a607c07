package podreflector

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A pod is offloaded only once the ConfigMaps and Secrets it needs exist in
// its remote namespace (the reflection controller copies them there), so
// that it never starts on the provider without them. "Needs" means every
// non-optional reference: volumes (configMap, secret, projected sources),
// envFrom and env valueFrom, of init, regular and ephemeral containers.
// imagePullSecrets are not waited for (a kubelet does not wait for them
// either). The ServiceAccount token volume needs nothing: the provider
// mints a token of its own ServiceAccount (see internal/controller/shadowpod).

// dependency is an object a pod needs on the provider.
type dependency struct {
	kind string // "ConfigMap" or "Secret"
	name string
}

func (d dependency) String() string { return d.kind + " " + d.name }

// podDependencies lists the ConfigMaps and Secrets spec needs, sorted and
// without duplicates.
func podDependencies(spec *corev1.PodSpec) []dependency {
	var out []dependency
	add := func(kind, name string, optional *bool) {
		if name != "" && (optional == nil || !*optional) {
			out = append(out, dependency{kind: kind, name: name})
		}
	}
	for _, v := range spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			add("ConfigMap", v.ConfigMap.Name, v.ConfigMap.Optional)
		case v.Secret != nil:
			add("Secret", v.Secret.SecretName, v.Secret.Optional)
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil {
					add("ConfigMap", s.ConfigMap.Name, s.ConfigMap.Optional)
				}
				if s.Secret != nil {
					add("Secret", s.Secret.Name, s.Secret.Optional)
				}
			}
		}
	}
	containers := slices.Concat(spec.InitContainers, spec.Containers)
	for _, ec := range spec.EphemeralContainers {
		containers = append(containers, corev1.Container{Env: ec.Env, EnvFrom: ec.EnvFrom})
	}
	for _, c := range containers {
		for _, e := range c.EnvFrom {
			if e.ConfigMapRef != nil {
				add("ConfigMap", e.ConfigMapRef.Name, e.ConfigMapRef.Optional)
			}
			if e.SecretRef != nil {
				add("Secret", e.SecretRef.Name, e.SecretRef.Optional)
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
				add("ConfigMap", r.Name, r.Optional)
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil {
				add("Secret", r.Name, r.Optional)
			}
		}
	}
	slices.SortFunc(out, func(a, b dependency) int { return strings.Compare(a.String(), b.String()) })
	return slices.Compact(out)
}

// dependencyRetry is how soon a pod waiting for its dependencies is
// looked at again.
const dependencyRetry = time.Second

// dependencyTTL is how long an object seen on the provider is assumed to
// still be there, so that a burst of pods sharing a ConfigMap costs one read.
const dependencyTTL = 30 * time.Second

// seenDependencies remembers when objects were last seen on the provider.
type seenDependencies struct {
	mu   sync.Mutex
	seen map[string]time.Time // "<remote namespace>/<kind> <name>"
}

// remember records that key was seen at now, dropping expired entries once
// the map grows.
func (s *seenDependencies) remember(key string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]time.Time{}
	}
	if len(s.seen) >= 4096 {
		for k, at := range s.seen {
			if now.Sub(at) >= dependencyTTL {
				delete(s.seen, k)
			}
		}
	}
	s.seen[key] = now
}

// missingDependencies returns the dependencies of pod that do not exist in
// remoteNS on the provider. Each read is a metadata-only GET bounded by
// ctx (the session's, whose client has the call timeout).
func (r *Reflector) missingDependencies(ctx context.Context, c client.Client, remoteNS string, pod *corev1.Pod) ([]dependency, error) {
	var missing []dependency
	now := r.cfg.Clock.Now()
	for _, d := range podDependencies(&pod.Spec) {
		key := remoteNS + "/" + d.String()
		r.deps.mu.Lock()
		at, ok := r.deps.seen[key]
		r.deps.mu.Unlock()
		if ok && now.Sub(at) < dependencyTTL {
			continue
		}
		obj := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: d.kind}}
		err := c.Get(ctx, client.ObjectKey{Namespace: remoteNS, Name: d.name}, obj)
		switch {
		case apierrors.IsNotFound(err):
			missing = append(missing, d)
		case err != nil:
			return nil, fmt.Errorf("read %s in %s on provider %s: %w", d, remoteNS, r.cfg.ProviderID, err)
		default:
			r.deps.remember(key, now)
		}
	}
	return missing, nil
}
