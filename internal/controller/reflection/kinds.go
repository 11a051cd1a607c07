package reflection

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/directconn"
)

const (
	// RootCAConfigMapName is the ConfigMap every namespace gets from its own
	// cluster; it is never reflected.
	RootCAConfigMapName = "kube-root-ca.crt"

	// endpointSliceManagedByLabel names the controller that manages an
	// EndpointSlice; the provider's controller sets its own.
	endpointSliceManagedByLabel = "endpointslice.kubernetes.io/managed-by"
	// annexEndpointSliceManager is its value on EndpointSlices that Annex
	// creates from ShadowEndpointSlices (this cluster acting as a provider).
	annexEndpointSliceManager = "annex.dev"
)

func newReflector(k Kind) reflector {
	switch k {
	case KindService:
		return serviceReflector{}
	case KindConfigMap:
		return configMapReflector{}
	case KindSecret:
		return secretReflector{}
	case KindEndpointSlice:
		return endpointSliceReflector{}
	}
	panic(fmt.Sprintf("reflection: unknown kind %q", k))
}

func pointers[T any, PT interface {
	*T
	client.Object
}](items []T, keep func(PT) bool) []client.Object {
	var out []client.Object
	for i := range items {
		if p := PT(&items[i]); keep(p) {
			out = append(out, p)
		}
	}
	return out
}

func all[PT client.Object](PT) bool { return true }

// Services.

type serviceReflector struct{}

func (serviceReflector) object() client.Object { return &corev1.Service{} }

// reflectService reports whether a local Service is reflected. The
// default/kubernetes Service points at this cluster's API server and every
// cluster has its own. An ExternalName Service is not reflected: it is a DNS
// alias that would point the provider's own DNS wherever the consumer says
// (see reportExternalNames).
func reflectService(s *corev1.Service) bool {
	return reflectable(s) && !(s.Namespace == metav1.NamespaceDefault && s.Name == "kubernetes") &&
		s.Spec.Type != corev1.ServiceTypeExternalName
}

func (serviceReflector) list(ctx context.Context, r *Reconciler, ns string) ([]client.Object, error) {
	list := &corev1.ServiceList{}
	if err := r.reader.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	r.reportExternalNames(ns, list.Items)
	return pointers(list.Items, reflectService), nil
}

// ReasonExternalNameNotReflected is the reason of the Warning Event recorded
// on a local ExternalName Service, which is never reflected.
const ReasonExternalNameNotReflected = "ExternalNameNotReflected"

// reportExternalNames records a Warning Event on every ExternalName Service
// of namespace ns that would otherwise be reflected, once per Service and
// generation.
func (r *Reconciler) reportExternalNames(ns string, services []corev1.Service) {
	now := map[string]externalName{}
	var report []*corev1.Service
	r.mu.Lock()
	seen := r.externalNames[ns]
	for i := range services {
		s := &services[i]
		if s.Spec.Type != corev1.ServiceTypeExternalName || !reflectable(s) {
			continue
		}
		en := externalName{uid: s.UID, generation: s.Generation}
		now[s.Name] = en
		if seen[s.Name] != en {
			report = append(report, s)
		}
	}
	if len(now) == 0 {
		delete(r.externalNames, ns)
	} else {
		r.externalNames[ns] = now
	}
	r.mu.Unlock()
	for _, s := range report {
		r.recorder.Eventf(s, nil, corev1.EventTypeWarning, ReasonExternalNameNotReflected, "Reflect",
			"Service %s/%s is of type ExternalName: not reflected to providers (a provider only accepts ClusterIP and headless Services from its consumers); pods offloaded there cannot resolve it",
			s.Namespace, s.Name)
	}
}

type externalName struct {
	uid        types.UID
	generation int64
}

func (serviceReflector) listRemote(ctx context.Context, c client.Client, ns string) ([]client.Object, error) {
	list := &corev1.ServiceList{}
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	return pointers(list.Items, all), nil
}

func (serviceReflector) desired(_ context.Context, _ *Reconciler, _ string, o client.Object) client.Object {
	return remoteService(o.(*corev1.Service))
}

// remoteService returns the remote copy of s. A provider only accepts
// ClusterIP and headless Services from its consumers, so the copy is built
// from an allow-list of fields: type ClusterIP whatever the local type (a
// NodePort or LoadBalancer Service is exposed outside by the consumer, not
// by its providers), headless when s is, its ports without node ports, and
// its session affinity, publishNotReadyAddresses, internal traffic policy and
// traffic distribution. Everything else is left out: the selector (the
// provider's EndpointSlice controller must leave the copy alone), what the
// API server allocates (cluster IPs, IP families: the provider picks those
// its network supports), and what exposes a Service outside its cluster
// (externalIPs, load-balancer fields, externalTrafficPolicy, node ports,
// healthCheckNodePort). The annotations are s's but the ones that configure
// load balancers or external DNS (see copiedServiceAnnotations).
func remoteService(s *corev1.Service) *corev1.Service {
	in := s.Spec.DeepCopy()
	spec := corev1.ServiceSpec{
		Type:                     corev1.ServiceTypeClusterIP,
		Ports:                    in.Ports,
		SessionAffinity:          in.SessionAffinity,
		SessionAffinityConfig:    in.SessionAffinityConfig,
		PublishNotReadyAddresses: in.PublishNotReadyAddresses,
		InternalTrafficPolicy:    in.InternalTrafficPolicy,
		TrafficDistribution:      in.TrafficDistribution,
	}
	if in.ClusterIP == corev1.ClusterIPNone {
		spec.ClusterIP, spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
	}
	for i := range spec.Ports {
		spec.Ports[i].NodePort = 0
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Labels: copiedLabels(s), Annotations: copiedServiceAnnotations(s)},
		Spec:       spec,
	}
}

// copiedServiceAnnotations returns the annotations of s that go to its
// remote copy: copiedAnnotations without those whose key names a load
// balancer ("load-balancer" or "loadbalancer" in any case, as cloud
// providers and MetalLB spell them) or belongs to external-dns: both would
// make the provider expose the Service outside.
func copiedServiceAnnotations(s *corev1.Service) map[string]string {
	out := copiedAnnotations(s)
	for k := range out {
		if exposingAnnotation(k) {
			delete(out, k)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// exposingAnnotation reports whether a Service annotation key configures
// exposure outside the cluster.
func exposingAnnotation(key string) bool {
	k := strings.ToLower(key)
	return strings.Contains(k, "load-balancer") || strings.Contains(k, "loadbalancer") ||
		strings.HasPrefix(k, "external-dns.alpha.kubernetes.io/")
}

func (serviceReflector) apply(d, r client.Object) (client.Object, bool) {
	return applyService(d.(*corev1.Service), r.(*corev1.Service))
}

// applyService returns remote with desired's spec, keeping the cluster IPs
// and IP families the provider's API server allocated for remote (as the API
// server itself does on update), so that a copy that is up to date compares
// equal. A copy of another type (made by an older Annex) becomes ClusterIP:
// what only that type had is dropped with it.
func applyService(desired, remote *corev1.Service) (*corev1.Service, bool) {
	spec := *desired.Spec.DeepCopy()
	cur := remote.Spec
	if cur.Type != corev1.ServiceTypeExternalName {
		if (spec.ClusterIP == corev1.ClusterIPNone) != (cur.ClusterIP == corev1.ClusterIPNone) {
			return nil, true // headless or not is immutable
		}
		spec.ClusterIP, spec.ClusterIPs = cur.ClusterIP, cur.ClusterIPs
		spec.IPFamilies, spec.IPFamilyPolicy = cur.IPFamilies, cur.IPFamilyPolicy
	}
	out := remote.DeepCopy()
	out.Spec = spec
	return out, false
}

// ConfigMaps.

type configMapReflector struct{}

func (configMapReflector) object() client.Object { return &corev1.ConfigMap{} }

func reflectConfigMap(c *corev1.ConfigMap) bool {
	return reflectable(c) && c.Name != RootCAConfigMapName
}

func (configMapReflector) list(ctx context.Context, r *Reconciler, ns string) ([]client.Object, error) {
	list := &corev1.ConfigMapList{}
	if err := r.live.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	return pointers(list.Items, reflectConfigMap), nil
}

func (configMapReflector) listRemote(ctx context.Context, c client.Client, ns string) ([]client.Object, error) {
	list := &corev1.ConfigMapList{}
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	return pointers(list.Items, all), nil
}

func (configMapReflector) desired(_ context.Context, _ *Reconciler, _ string, o client.Object) client.Object {
	c := o.(*corev1.ConfigMap)
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, Labels: copiedLabels(c), Annotations: copiedAnnotations(c)},
		Data:       c.DeepCopy().Data,
		BinaryData: c.DeepCopy().BinaryData,
		Immutable:  c.Immutable,
	}
}

func (configMapReflector) apply(d, r client.Object) (client.Object, bool) {
	desired, remote := d.(*corev1.ConfigMap), r.(*corev1.ConfigMap)
	out := remote.DeepCopy()
	out.Data, out.BinaryData, out.Immutable = desired.Data, desired.BinaryData, desired.Immutable
	if isTrue(remote.Immutable) && !apiequality.Semantic.DeepEqual(out, remote) {
		return nil, true
	}
	return out, false
}

// Secrets.

type secretReflector struct{}

func (secretReflector) object() client.Object { return &corev1.Secret{} }

func reflectSecret(s *corev1.Secret) bool {
	return reflectable(s) && s.Type != corev1.SecretTypeServiceAccountToken
}

func (secretReflector) list(ctx context.Context, r *Reconciler, ns string) ([]client.Object, error) {
	list := &corev1.SecretList{}
	if err := r.live.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	return pointers(list.Items, reflectSecret), nil
}

func (secretReflector) listRemote(ctx context.Context, c client.Client, ns string) ([]client.Object, error) {
	list := &corev1.SecretList{}
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	return pointers(list.Items, all), nil
}

func (secretReflector) desired(_ context.Context, _ *Reconciler, _ string, o client.Object) client.Object {
	s := o.(*corev1.Secret)
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Labels: copiedLabels(s), Annotations: copiedAnnotations(s)},
		Type:       s.Type,
		Data:       s.DeepCopy().Data,
		Immutable:  s.Immutable,
	}
}

func (secretReflector) apply(d, r client.Object) (client.Object, bool) {
	desired, remote := d.(*corev1.Secret), r.(*corev1.Secret)
	if desired.Type != remote.Type {
		return nil, true // the type is immutable
	}
	out := remote.DeepCopy()
	out.Data, out.Immutable = desired.Data, desired.Immutable
	if isTrue(remote.Immutable) && !apiequality.Semantic.DeepEqual(out, remote) {
		return nil, true
	}
	return out, false
}

func isTrue(b *bool) bool { return b != nil && *b }

// EndpointSlices.

type endpointSliceReflector struct{}

func (endpointSliceReflector) object() client.Object { return &discoveryv1.EndpointSlice{} }

// list returns the EndpointSlices of the Services that are reflected, except
// the ones Annex made here as a provider.
func (endpointSliceReflector) list(ctx context.Context, r *Reconciler, ns string) ([]client.Object, error) {
	services := &corev1.ServiceList{}
	if err := r.reader.List(ctx, services, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	reflected := map[string]bool{}
	for i := range services.Items {
		if reflectService(&services.Items[i]) {
			reflected[services.Items[i].Name] = true
		}
	}
	slices := &discoveryv1.EndpointSliceList{}
	if err := r.reader.List(ctx, slices, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	return pointers(slices.Items, func(s *discoveryv1.EndpointSlice) bool {
		return reflectable(s) &&
			reflected[s.Labels[discoveryv1.LabelServiceName]] &&
			s.Labels[endpointSliceManagedByLabel] != annexEndpointSliceManager
	}), nil
}

func (endpointSliceReflector) listRemote(ctx context.Context, c client.Client, ns string) ([]client.Object, error) {
	list := &offloadingv1alpha1.ShadowEndpointSliceList{}
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	return pointers(list.Items, all), nil
}

func (endpointSliceReflector) desired(ctx context.Context, r *Reconciler, provider string, o client.Object) client.Object {
	s := o.(*discoveryv1.EndpointSlice)
	out, err := shadowEndpointSlice(ctx, r.opts.Translator, provider, s, r.directConnections(ctx, s))
	if errors.Is(err, directconn.ErrTooLarge) {
		r.recorder.Eventf(s, nil, corev1.EventTypeWarning, "DirectConnectionsOmitted", "Reflect",
			"the direct-connections data for provider %s is over %d bytes: left out, its endpoints on other providers are reached through this cluster", provider, directconn.MaxSize)
	}
	return out
}

// directConnections says whether the Service of s asks for direct
// connections.
func (r *Reconciler) directConnections(ctx context.Context, s *discoveryv1.EndpointSlice) bool {
	name := s.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return false
	}
	svc := &corev1.Service{}
	if err := r.reader.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: name}, svc); err != nil {
		return false
	}
	return svc.Annotations[corev1alpha1.AnnotationUseDirectConnections] == "true"
}

// shadowEndpointSlice returns the ShadowEndpointSlice that carries s to
// provider. Its template has the labels of s (but the managed-by label, which
// the provider sets), and the endpoints of s that tr keeps for provider.
// With direct, and a tr that is a DirectConnector, it is annotated with the
// direct-connections data of the endpoints on other providers; data over
// directconn.MaxSize is left out and ErrTooLarge returned with the slice.
func shadowEndpointSlice(ctx context.Context, tr EndpointTranslator, provider string, s *discoveryv1.EndpointSlice, direct bool) (*offloadingv1alpha1.ShadowEndpointSlice, error) {
	labels := copiedLabels(s)
	delete(labels, endpointSliceManagedByLabel)
	dc, _ := tr.(DirectConnector)
	var eps []discoveryv1.Endpoint
	var entries []directconn.Entry
	for _, ep := range s.Endpoints {
		clean, origin := sanitizeEndpoint(ep)
		out, keep := tr.Translate(ctx, provider, clean, origin)
		if !keep {
			continue
		}
		eps = append(eps, out)
		if direct && dc != nil {
			if e, ok := dc.DirectConnection(ctx, provider, clean, origin, out); ok {
				entries = append(entries, e)
			}
		}
	}
	out := &offloadingv1alpha1.ShadowEndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name},
		Spec: offloadingv1alpha1.ShadowEndpointSliceSpec{Template: offloadingv1alpha1.EndpointSliceTemplate{
			Labels:      labels,
			AddressType: s.AddressType,
			Endpoints:   eps,
			Ports:       s.DeepCopy().Ports,
		}},
	}
	if svc := s.Labels[discoveryv1.LabelServiceName]; svc != "" {
		out.Labels = map[string]string{discoveryv1.LabelServiceName: svc}
	}
	data, err := directconn.Encode(entries)
	if data != "" {
		out.Annotations = map[string]string{corev1alpha1.AnnotationDirectConnectionsData: data}
	}
	return out, err
}

func (endpointSliceReflector) apply(d, r client.Object) (client.Object, bool) {
	desired, remote := d.(*offloadingv1alpha1.ShadowEndpointSlice), r.(*offloadingv1alpha1.ShadowEndpointSlice)
	if desired.Spec.Template.AddressType != remote.Spec.Template.AddressType {
		return nil, true // addressType is immutable
	}
	out := remote.DeepCopy()
	out.Spec = *desired.Spec.DeepCopy()
	return out, false
}
