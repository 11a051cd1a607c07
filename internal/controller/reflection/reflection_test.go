package reflection

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/remote"
)

func TestRemoteService(t *testing.T) {
	nodePort := func() *corev1.Service {
		s := service(ns, "np", nil)
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		s.Spec.Ports[0].NodePort = 30080
		s.Spec.ExternalIPs = []string{"192.0.2.7"}
		return s
	}
	lb := func() *corev1.Service {
		s := nodePort()
		s.Name = "lb"
		s.Annotations = map[string]string{
			"service.beta.kubernetes.io/aws-load-balancer-type":      "nlb",
			"cloud.google.com/load-balancer-type":                    "Internal",
			"metallb.universe.tf/loadBalancerIPs":                    "192.0.2.9",
			"service.beta.kubernetes.io/azure-LoadBalancer-internal": "true",
			"external-dns.alpha.kubernetes.io/hostname":              "web.example.com",
			"prometheus.io/scrape":                                   "true",
		}
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = 31000
		s.Spec.AllocateLoadBalancerNodePorts = ptrTo(true)
		s.Spec.LoadBalancerIP = "192.0.2.8"
		s.Spec.LoadBalancerSourceRanges = []string{"0.0.0.0/0"}
		s.Spec.LoadBalancerClass = ptrTo("example.com/lb")
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.1"}}
		return s
	}
	headless := func() *corev1.Service {
		s := service(ns, "db", nil)
		s.Spec.ClusterIP, s.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
		s.Spec.PublishNotReadyAddresses = true
		return s
	}
	affinity := func() *corev1.Service {
		s := service(ns, "sticky", nil)
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptrTo[int32](60)}}
		s.Spec.TrafficDistribution = ptrTo(corev1.ServiceTrafficDistributionPreferClose)
		s.Spec.Ports[0].AppProtocol = ptrTo("http")
		return s
	}
	clusterIP := service(ns, "web", map[string]string{
		"note": "keep", "kubectl.kubernetes.io/last-applied-configuration": "{}",
	})
	ports := []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}
	clusterIPSpec := corev1.ServiceSpec{
		Type: corev1.ServiceTypeClusterIP, SessionAffinity: corev1.ServiceAffinityNone,
		InternalTrafficPolicy: ptrTo(corev1.ServiceInternalTrafficPolicyCluster), Ports: ports,
	}

	tests := []struct {
		name string
		in   *corev1.Service
		want *corev1.Service
	}{{
		name: "ClusterIP: no selector, no cluster IPs, no IP families, kubectl annotations dropped",
		in:   clusterIP,
		want: &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"note": "keep"}},
			Spec:       clusterIPSpec,
		},
	}, {
		name: "NodePort becomes ClusterIP: no node ports, externalIPs or externalTrafficPolicy",
		in:   nodePort(),
		want: &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "np", Labels: map[string]string{"app": "np"}},
			Spec:       clusterIPSpec,
		},
	}, {
		name: "LoadBalancer becomes ClusterIP: no load-balancer fields, annotations or status",
		in:   lb(),
		want: &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "lb", Labels: map[string]string{"app": "np"}, Annotations: map[string]string{"prometheus.io/scrape": "true"}},
			Spec:       clusterIPSpec,
		},
	}, {
		name: "headless stays headless, publishNotReadyAddresses kept",
		in:   headless(),
		want: &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "db", Labels: map[string]string{"app": "db"}},
			Spec: corev1.ServiceSpec{
				Type: corev1.ServiceTypeClusterIP, ClusterIP: corev1.ClusterIPNone, ClusterIPs: []string{corev1.ClusterIPNone},
				SessionAffinity: corev1.ServiceAffinityNone, PublishNotReadyAddresses: true,
				InternalTrafficPolicy: ptrTo(corev1.ServiceInternalTrafficPolicyCluster), Ports: ports,
			},
		},
	}, {
		name: "session affinity, traffic distribution and appProtocol kept",
		in:   affinity(),
		want: &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "sticky", Labels: map[string]string{"app": "sticky"}},
			Spec: corev1.ServiceSpec{
				Type: corev1.ServiceTypeClusterIP, SessionAffinity: corev1.ServiceAffinityClientIP,
				SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptrTo[int32](60)}},
				TrafficDistribution:   ptrTo(corev1.ServiceTrafficDistributionPreferClose),
				InternalTrafficPolicy: ptrTo(corev1.ServiceInternalTrafficPolicyCluster),
				Ports:                 []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, AppProtocol: ptrTo("http")}},
			},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in.DeepCopy()
			got := remoteService(in)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("remote Service (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.in, in); diff != "" {
				t.Errorf("the local Service was modified (-before +after):\n%s", diff)
			}
			if msg := providerRefuses(got); msg != "" {
				t.Errorf("a provider would refuse the copy: %s", msg)
			}
		})
	}
}

// providerRefuses returns why a provider's admission (ClusterIP or headless
// Services only, nothing that exposes them outside) would refuse s, or "".
func providerRefuses(s *corev1.Service) string {
	sp := s.Spec
	switch {
	case sp.Type != "" && sp.Type != corev1.ServiceTypeClusterIP:
		return "type " + string(sp.Type)
	case len(sp.ExternalIPs) > 0, sp.LoadBalancerIP != "", len(sp.LoadBalancerSourceRanges) > 0, sp.LoadBalancerClass != nil,
		sp.ExternalTrafficPolicy != "", sp.HealthCheckNodePort != 0, sp.AllocateLoadBalancerNodePorts != nil, sp.ExternalName != "":
		return "an exposing field is set"
	}
	for _, p := range sp.Ports {
		if p.NodePort != 0 {
			return "a node port is set"
		}
	}
	for k := range s.Annotations {
		if exposingAnnotation(k) {
			return "annotation " + k
		}
	}
	return ""
}

// allocated returns s as the provider's API server stores it.
func allocated(s *corev1.Service, ip string, nodePort int32) *corev1.Service {
	out := s.DeepCopy()
	out.UID, out.ResourceVersion = "uid-remote", "7"
	if out.Spec.Type != corev1.ServiceTypeExternalName && out.Spec.ClusterIP != corev1.ClusterIPNone {
		out.Spec.ClusterIP, out.Spec.ClusterIPs = ip, []string{ip}
	}
	if out.Spec.Type != corev1.ServiceTypeExternalName {
		out.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
		out.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicySingleStack)
	}
	if out.Spec.Type == corev1.ServiceTypeNodePort || out.Spec.Type == corev1.ServiceTypeLoadBalancer {
		for i := range out.Spec.Ports {
			out.Spec.Ports[i].NodePort = nodePort + int32(i)
		}
	}
	if out.Spec.Type == corev1.ServiceTypeLoadBalancer && out.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		out.Spec.HealthCheckNodePort = 32000
	}
	return out
}

func TestApplyService(t *testing.T) {
	// asType is a copy of s as an older Annex reflected it, keeping its type.
	asType := func(s *corev1.Service, typ corev1.ServiceType) *corev1.Service {
		s = s.DeepCopy()
		s.Spec.Type = typ
		if typ != corev1.ServiceTypeClusterIP {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}
		if typ == corev1.ServiceTypeLoadBalancer {
			s.Spec.AllocateLoadBalancerNodePorts = ptrTo(true)
			s.Spec.LoadBalancerClass = ptrTo("example.com/lb")
		}
		return s
	}
	web := remoteService(service(ns, "web", nil))
	headless := web.DeepCopy()
	headless.Spec.ClusterIP, headless.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}

	tests := []struct {
		name         string
		desired      *corev1.Service
		remote       *corev1.Service
		want         *corev1.Service // nil: same as remote
		wantRecreate bool
	}{{
		name:    "up to date ClusterIP: allocated fields kept, nothing to write",
		desired: web,
		remote:  allocated(web, "10.100.0.5", 0),
	}, {
		name:    "up to date headless",
		desired: headless,
		remote:  allocated(headless, "", 0),
	}, {
		name:    "an older NodePort copy becomes ClusterIP without its node ports",
		desired: web,
		remote:  allocated(asType(web, corev1.ServiceTypeNodePort), "10.100.0.5", 30000),
		want:    allocated(web, "10.100.0.5", 0),
	}, {
		name:    "an older LoadBalancer copy becomes ClusterIP without its load-balancer fields",
		desired: web,
		remote:  allocated(asType(web, corev1.ServiceTypeLoadBalancer), "10.100.0.5", 30000),
		want:    allocated(web, "10.100.0.5", 0),
	}, {
		name:    "an older ExternalName copy becomes ClusterIP (the provider allocates its IP)",
		desired: web,
		remote: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "uid-remote", ResourceVersion: "7"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}},
		want: func() *corev1.Service {
			s := web.DeepCopy()
			s.UID, s.ResourceVersion = "uid-remote", "7"
			s.Labels = nil
			return s
		}(),
	}, {
		name: "a changed port is written",
		desired: func() *corev1.Service {
			s := web.DeepCopy()
			s.Spec.Ports[0].TargetPort = intstr.FromInt32(8080)
			return s
		}(),
		remote: allocated(web, "10.100.0.5", 0),
		want: func() *corev1.Service {
			s := allocated(web, "10.100.0.5", 0)
			s.Spec.Ports[0].TargetPort = intstr.FromInt32(8080)
			return s
		}(),
	}, {
		name:         "headless to ClusterIP must be re-created",
		desired:      web,
		remote:       allocated(headless, "", 0),
		wantRecreate: true,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, recreate := applyService(tc.desired, tc.remote)
			if recreate != tc.wantRecreate {
				t.Fatalf("recreate = %v, want %v", recreate, tc.wantRecreate)
			}
			if recreate {
				return
			}
			want := tc.want
			if want == nil {
				want = tc.remote
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("updated Service (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReconcileConfigMapsAndSecrets(t *testing.T) {
	data := map[string]string{"k": "v"}
	kubectl := map[string]string{"note": "n", "kubectl.kubernetes.io/last-applied-configuration": "{}"}
	immutable := func(c *corev1.ConfigMap) *corev1.ConfigMap { c.Immutable = ptrTo(true); return c }
	immutableSecret := func(s *corev1.Secret) *corev1.Secret { s.Immutable = ptrTo(true); return s }

	tests := []struct {
		name   string
		kind   Kind
		local  []client.Object
		remote []client.Object
		want   []client.Object
	}{{
		name: "ConfigMaps are copied with labels and annotations; kube-root-ca.crt, opted-out and Annex's own are not",
		kind: KindConfigMap,
		local: []client.Object{
			configMap(ns, "settings", map[string]string{"team": "a"}, kubectl, data),
			immutable(configMap(ns, "frozen", nil, nil, data)),
			configMap(ns, RootCAConfigMapName, nil, nil, map[string]string{"ca.crt": "consumer CA"}),
			configMap(ns, "private", nil, skip(), data),
			configMap(ns, "replica", map[string]string{corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}, nil, data),
			configMap("other", "elsewhere", nil, nil, data),
		},
		remote: []client.Object{
			configMap(remoteNS, RootCAConfigMapName, nil, nil, map[string]string{"ca.crt": "provider CA"}),
		},
		want: []client.Object{
			immutable(configMap(remoteNS, "frozen", ours(nil), nil, data)),
			configMap(remoteNS, RootCAConfigMapName, nil, nil, map[string]string{"ca.crt": "provider CA"}),
			configMap(remoteNS, "settings", ours(map[string]string{"team": "a"}), map[string]string{"note": "n"}, data),
		},
	}, {
		name: "Secrets are copied with their type; service-account tokens and opted-out ones are not",
		kind: KindSecret,
		local: []client.Object{
			secret(ns, "creds", corev1.SecretTypeOpaque, nil, map[string]string{"a": "b"}, data),
			secret(ns, "tls", corev1.SecretTypeTLS, nil, nil, map[string]string{"tls.crt": "c", "tls.key": "k"}),
			secret(ns, "sa-token", corev1.SecretTypeServiceAccountToken, nil, map[string]string{corev1.ServiceAccountNameKey: "default"}, data),
			secret(ns, "private", corev1.SecretTypeOpaque, nil, skip(), data),
		},
		want: []client.Object{
			secret(remoteNS, "creds", corev1.SecretTypeOpaque, ours(nil), map[string]string{"a": "b"}, data),
			secret(remoteNS, "tls", corev1.SecretTypeTLS, ours(nil), nil, map[string]string{"tls.crt": "c", "tls.key": "k"}),
		},
	}, {
		name: "out-of-date copies are updated",
		kind: KindConfigMap,
		local: []client.Object{
			configMap(ns, "settings", map[string]string{"v": "2"}, nil, map[string]string{"k": "new"}),
		},
		remote: []client.Object{
			configMap(remoteNS, "settings", ours(map[string]string{"v": "1"}), map[string]string{"old": "x"}, map[string]string{"k": "old"}),
		},
		want: []client.Object{
			configMap(remoteNS, "settings", ours(map[string]string{"v": "2"}), nil, map[string]string{"k": "new"}),
		},
	}, {
		name:   "a changed immutable ConfigMap is re-created",
		kind:   KindConfigMap,
		local:  []client.Object{immutable(configMap(ns, "frozen", nil, nil, map[string]string{"k": "new"}))},
		remote: []client.Object{immutable(configMap(remoteNS, "frozen", ours(nil), nil, map[string]string{"k": "old"}))},
		want:   []client.Object{immutable(configMap(remoteNS, "frozen", ours(nil), nil, map[string]string{"k": "new"}))},
	}, {
		name:   "a Secret whose type changed is re-created",
		kind:   KindSecret,
		local:  []client.Object{secret(ns, "s", corev1.SecretTypeTLS, nil, nil, map[string]string{"tls.crt": "c", "tls.key": "k"})},
		remote: []client.Object{secret(remoteNS, "s", corev1.SecretTypeOpaque, ours(nil), nil, map[string]string{"x": "y"})},
		want:   []client.Object{secret(remoteNS, "s", corev1.SecretTypeTLS, ours(nil), nil, map[string]string{"tls.crt": "c", "tls.key": "k"})},
	}, {
		name:   "a changed immutable Secret is re-created",
		kind:   KindSecret,
		local:  []client.Object{immutableSecret(secret(ns, "s", corev1.SecretTypeOpaque, nil, nil, map[string]string{"k": "new"}))},
		remote: []client.Object{immutableSecret(secret(remoteNS, "s", corev1.SecretTypeOpaque, ours(nil), nil, map[string]string{"k": "old"}))},
		want:   []client.Object{immutableSecret(secret(remoteNS, "s", corev1.SecretTypeOpaque, ours(nil), nil, map[string]string{"k": "new"}))},
	}, {
		name:   "adding the skip annotation deletes the copy",
		kind:   KindSecret,
		local:  []client.Object{secret(ns, "creds", corev1.SecretTypeOpaque, nil, skip(), data)},
		remote: []client.Object{secret(remoteNS, "creds", corev1.SecretTypeOpaque, ours(nil), nil, data)},
	}, {
		name: "copies whose local object is gone are deleted; the provider's and other consumers' objects are not",
		kind: KindConfigMap,
		remote: []client.Object{
			configMap(remoteNS, "stale", ours(nil), nil, data),
			configMap(remoteNS, "providers", nil, nil, data),
			configMap(remoteNS, "unlabelled-manager", map[string]string{corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}, nil, data),
			configMap(remoteNS, "other-consumer", map[string]string{corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex, corev1alpha1.LabelRemoteClusterID: "delta"}, nil, data),
		},
		want: []client.Object{
			configMap(remoteNS, "other-consumer", map[string]string{corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex, corev1alpha1.LabelRemoteClusterID: "delta"}, nil, data),
			configMap(remoteNS, "providers", nil, nil, data),
			configMap(remoteNS, "unlabelled-manager", map[string]string{corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}, nil, data),
		},
	}, {
		name: "a local object being deleted loses its copy",
		kind: KindConfigMap,
		local: []client.Object{func() client.Object {
			c := configMap(ns, "going", nil, nil, data)
			c.Finalizers = []string{"example.com/hold"}
			c.DeletionTimestamp = &metav1.Time{Time: metav1.Now().Time}
			return c
		}()},
		remote: []client.Object{configMap(remoteNS, "going", ours(nil), nil, data)},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			local := append([]client.Object{nso(ready(beta)), fc(beta, false)}, tc.local...)
			w := newWorld(t, local, map[string][]client.Object{beta: tc.remote})
			res := w.reconcile(tc.kind)
			if res.RequeueAfter != resync {
				t.Errorf("RequeueAfter = %v, want the resync period %v", res.RequeueAfter, resync)
			}
			if diff := cmp.Diff(tc.want, w.remoteObjects(beta, tc.kind)); diff != "" {
				t.Errorf("remote objects (-want +got):\n%s", diff)
			}
			if ev := w.events(); len(ev) != 0 {
				t.Errorf("unexpected events: %v", ev)
			}
			// Steady state: nothing more to write.
			before := w.writes[beta].count()
			w.reconcile(tc.kind)
			if n := w.writes[beta].count() - before; n != 0 {
				t.Errorf("second reconcile wrote %d times, want 0", n)
			}
		})
	}
}

func TestReconcileServices(t *testing.T) {
	web := service(ns, "web", map[string]string{"a": "b"})
	np := service(ns, "np", nil)
	np.Spec.Type = corev1.ServiceTypeNodePort
	np.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	np.Spec.Ports[0].NodePort = 30001
	private := service(ns, "private", skip())
	kubernetes := service(metav1.NamespaceDefault, "kubernetes", nil)
	ext := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ext", Generation: 1},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "metadata.google.internal"},
	}
	// An ExternalName copy an older Annex made: it goes.
	oldExt := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: remoteNS, Name: "ext", Labels: ours(nil)},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "metadata.google.internal"},
	}

	w := newWorld(t, []client.Object{nso(ready(beta)), fc(beta, false), web, np, private, kubernetes, ext},
		map[string][]client.Object{beta: {oldExt}})
	w.reconcile(KindService)
	wantEvents := []string{"Warning ExternalNameNotReflected Service " + ns + "/ext is of type ExternalName: not reflected to providers " +
		"(a provider only accepts ClusterIP and headless Services from its consumers); pods offloaded there cannot resolve it"}
	if diff := cmp.Diff(wantEvents, w.events()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	own := func(s *corev1.Service) *corev1.Service {
		s.Namespace = remoteNS
		s.Labels = ours(s.Labels)
		return s
	}
	want := []client.Object{own(remoteService(np)), own(remoteService(web))}
	if diff := cmp.Diff(want, w.remoteObjects(beta, KindService)); diff != "" {
		t.Fatalf("remote Services (-want +got):\n%s", diff)
	}

	// The provider's API server allocates: that is no reason to write again.
	rc := w.remotes.clients[beta]
	for _, name := range []string{"web", "np"} {
		s := &corev1.Service{}
		if err := rc.Get(ctx(t), types.NamespacedName{Namespace: remoteNS, Name: name}, s); err != nil {
			t.Fatal(err)
		}
		a := allocated(s, "10.100.0.9", 31000)
		s.Spec = a.Spec
		if err := rc.Update(ctx(t), s); err != nil {
			t.Fatal(err)
		}
	}
	before := w.writes[beta].count()
	w.reconcile(KindService)
	if n := w.writes[beta].count() - before; n != 0 {
		t.Errorf("reconcile after allocation wrote %d times, want 0", n)
	}
	if got := w.events(); len(got) != 0 {
		t.Errorf("the ExternalName Service was reported again: %q", got)
	}
}

func TestReconcileEndpointSlices(t *testing.T) {
	web := service(ns, "web", nil)
	private := service(ns, "private", skip())
	onConsumer := endpoint("10.0.0.1", "node-1", true)
	onConsumer.Hostname = ptrTo("web-0")
	onConsumer.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "web-0"}
	onConsumer.Zone = ptrTo("zone-a")
	onConsumer.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}}}
	onConsumer.DeprecatedTopology = map[string]string{"kubernetes.io/hostname": "node-1"}
	onBeta := endpoint("10.0.0.2", corev1alpha1.VirtualNodeName(beta), true)
	onGamma := endpoint("10.0.0.3", corev1alpha1.VirtualNodeName(gamma), false) // gamma failed: NotReady
	terminating := endpoint("10.0.0.4", "node-2", false)
	terminating.Conditions.Serving, terminating.Conditions.Terminating = ptrTo(true), ptrTo(true)
	ports := []discoveryv1.EndpointPort{{Name: ptrTo("http"), Port: ptrTo(int32(8080)), Protocol: ptrTo(corev1.ProtocolTCP)}}

	slice := func(name, svc string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		s := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
				endpointSliceManagedByLabel: "endpointslice-controller.k8s.io", "app": svc,
			}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   eps,
			Ports:       ports,
		}
		if svc != "" {
			s.Labels[discoveryv1.LabelServiceName] = svc
		}
		return s
	}
	noService := slice("orphan-x", "", onConsumer)
	ofAnnex := slice("mirror-x", "web", onConsumer)
	ofAnnex.Labels[endpointSliceManagedByLabel] = annexEndpointSliceManager

	clean := func(ep discoveryv1.Endpoint) discoveryv1.Endpoint {
		ep.NodeName, ep.Hostname, ep.TargetRef, ep.Hints, ep.DeprecatedTopology = nil, nil, nil, nil, nil
		return ep
	}
	shadow := func(name string, eps ...discoveryv1.Endpoint) *offloadingv1alpha1.ShadowEndpointSlice {
		return &offloadingv1alpha1.ShadowEndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: remoteNS, Name: name, Labels: ours(map[string]string{discoveryv1.LabelServiceName: "web"})},
			Spec: offloadingv1alpha1.ShadowEndpointSliceSpec{Template: offloadingv1alpha1.EndpointSliceTemplate{
				Labels:      map[string]string{discoveryv1.LabelServiceName: "web", "app": "web"},
				AddressType: discoveryv1.AddressTypeIPv4,
				Endpoints:   eps,
				Ports:       ports,
			}},
		}
	}
	stale := shadow("web-old")

	w := newWorld(t, []client.Object{
		nso(ready(beta), ready(gamma)), fc(beta, false), fc(gamma, false),
		web, private,
		slice("web-abc", "web", onConsumer, onBeta, onGamma, terminating),
		slice("private-abc", "private", onConsumer),
		noService, ofAnnex,
	}, map[string][]client.Object{beta: {stale}, gamma: nil})
	w.reconcile(KindEndpointSlice)

	for _, tc := range []struct {
		provider string
		want     []client.Object
	}{
		{beta, []client.Object{shadow("web-abc", clean(onConsumer), clean(onGamma), clean(terminating))}},
		{gamma, []client.Object{shadow("web-abc", clean(onConsumer), clean(onBeta), clean(terminating))}},
	} {
		if diff := cmp.Diff(tc.want, w.remoteObjects(tc.provider, KindEndpointSlice)); diff != "" {
			t.Errorf("ShadowEndpointSlices on %s (-want +got):\n%s", tc.provider, diff)
		}
	}

	// Opting the Service out removes its slices' shadows too.
	private.Annotations = nil
	web.Annotations = skip()
	if err := w.local.Update(ctx(t), web); err != nil {
		t.Fatal(err)
	}
	w.reconcile(KindEndpointSlice)
	if got := w.remoteObjects(beta, KindEndpointSlice); len(got) != 0 {
		t.Errorf("ShadowEndpointSlices on beta after opting out: %v", got)
	}
}

func TestShadowEndpointSliceUpdate(t *testing.T) {
	web := service(ns, "web", nil)
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: "web-abc", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{endpoint("10.0.0.1", "node-1", true)},
	}
	w := newWorld(t, []client.Object{nso(ready(beta)), fc(beta, false), web, s}, map[string][]client.Object{beta: nil})
	w.reconcile(KindEndpointSlice)

	// The pod fails its readiness probe: the shadow follows.
	s.Endpoints[0].Conditions.Ready = ptrTo(false)
	if err := w.local.Update(ctx(t), s); err != nil {
		t.Fatal(err)
	}
	w.reconcile(KindEndpointSlice)
	got := w.remoteObjects(beta, KindEndpointSlice)
	if len(got) != 1 {
		t.Fatalf("got %d ShadowEndpointSlices, want 1", len(got))
	}
	conds := got[0].(*offloadingv1alpha1.ShadowEndpointSlice).Spec.Template.Endpoints[0].Conditions
	if diff := cmp.Diff(discoveryv1.EndpointConditions{Ready: ptrTo(false), Serving: ptrTo(true), Terminating: ptrTo(false)}, conds); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}

	// IPv4 to IPv6 cannot be an update.
	s.AddressType = discoveryv1.AddressTypeIPv6
	s.Endpoints[0].Addresses = []string{"fd00::1"}
	if err := w.local.Update(ctx(t), s); err != nil {
		t.Fatal(err)
	}
	w.reconcile(KindEndpointSlice)
	got = w.remoteObjects(beta, KindEndpointSlice)
	if len(got) != 1 || got[0].(*offloadingv1alpha1.ShadowEndpointSlice).Spec.Template.AddressType != discoveryv1.AddressTypeIPv6 {
		t.Errorf("ShadowEndpointSlices after the address type changed: %v", got)
	}
}

func TestUnreachableProviderIsSkipped(t *testing.T) {
	cm := configMap(ns, "settings", nil, nil, map[string]string{"k": "v"})
	tests := []struct {
		name       string
		fcs        []client.Object
		clientErr  error
		wantClient bool // whether Remotes.Client may be asked at all
	}{
		{name: "ForeignCluster marked unreachable", fcs: []client.Object{fc(beta, true)}},
		{name: "ForeignCluster gone", fcs: nil},
		{name: "probes failing", fcs: []client.Object{fc(beta, false)}, clientErr: fmt.Errorf("remote: peer %q: %w", beta, remote.ErrPeerUnreachable), wantClient: true},
		{name: "permanently unreachable in the manager", fcs: []client.Object{fc(beta, false)}, clientErr: fmt.Errorf("remote: peer %q: %w", beta, remote.ErrPermanentlyUnreachable), wantClient: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			local := append([]client.Object{nso(ready(beta), ready(gamma)), fc(gamma, false), cm}, tc.fcs...)
			w := newWorld(t, local, map[string][]client.Object{gamma: nil})
			w.remotes.clients[beta] = forbidden(t, w.scheme, "beta")
			if tc.clientErr != nil {
				w.remotes.errs[beta] = tc.clientErr
			}
			for _, kind := range AllKinds() {
				res, err := w.r.reconcileKind(ctx(t), kind, ns)
				if err != nil {
					t.Fatalf("reconcile %s: %v", kind, err)
				}
				if res.RequeueAfter != resync {
					t.Errorf("%s: RequeueAfter = %v, want only the resync period %v (a transition brings us back)", kind, res.RequeueAfter, resync)
				}
			}
			if n := w.remotes.callsTo(beta); !tc.wantClient && n != 0 {
				t.Errorf("Remotes.Client(beta) called %d times, want 0", n)
			}
			// The reachable provider is served all the same.
			if got := w.remoteObjects(gamma, KindConfigMap); len(got) != 1 {
				t.Errorf("gamma has %d ConfigMaps, want 1", len(got))
			}
		})
	}
}

func TestNothingToDo(t *testing.T) {
	cm := configMap(ns, "settings", nil, nil, map[string]string{"k": "v"})
	tests := []struct {
		name  string
		local []client.Object
	}{
		{name: "namespace not offloaded", local: []client.Object{fc(beta, false), cm}},
		{name: "remote namespace pending", local: []client.Object{fc(beta, false), cm, nso(offloadingv1alpha1.ProviderNamespaceStatus{ClusterID: beta, Phase: offloadingv1alpha1.RemoteNamespacePending})}},
		{name: "offloading being deleted", local: []client.Object{fc(beta, false), cm, func() client.Object {
			o := nso(ready(beta))
			o.Finalizers = []string{"annex.dev/namespace-offloading"}
			o.DeletionTimestamp = &metav1.Time{Time: metav1.Now().Time}
			return o
		}()}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, tc.local, nil)
			w.remotes.clients[beta] = forbidden(t, w.scheme, "beta")
			for _, kind := range AllKinds() {
				res, err := w.r.reconcileKind(ctx(t), kind, ns)
				if err != nil || res != (reconcile.Result{}) {
					t.Errorf("reconcile %s = %v, %v; want nothing", kind, res, err)
				}
			}
			if n := w.remotes.callsTo(beta); n != 0 {
				t.Errorf("Remotes.Client(beta) called %d times, want 0", n)
			}
		})
	}
}

func TestConflictWithProviderObject(t *testing.T) {
	local := configMap(ns, "settings", nil, nil, map[string]string{"k": "consumer"})
	theirs := configMap(remoteNS, "settings", map[string]string{"owner": "provider"}, nil, map[string]string{"k": "provider"})
	w := newWorld(t, []client.Object{nso(ready(beta)), fc(beta, false), local}, map[string][]client.Object{beta: {theirs}})

	for range 3 {
		w.reconcile(KindConfigMap)
	}
	want := theirs.DeepCopy()
	normalize(want)
	if diff := cmp.Diff([]client.Object{want}, w.remoteObjects(beta, KindConfigMap)); diff != "" {
		t.Errorf("the provider's ConfigMap was touched (-want +got):\n%s", diff)
	}
	if n := w.writes[beta].count(); n != 0 {
		t.Errorf("%d remote writes, want 0", n)
	}
	wantEvents := []string{"Warning ReflectionConflict ConfigMap app-alpha/settings on provider beta exists and was not created by Annex for cluster alpha: not overwriting it"}
	if diff := cmp.Diff(wantEvents, w.events()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	// Once the provider's object is gone, the copy is made; a new conflict is
	// reported again.
	if err := w.remotes.clients[beta].Delete(ctx(t), theirs); err != nil {
		t.Fatal(err)
	}
	w.reconcile(KindConfigMap)
	if got := w.remoteObjects(beta, KindConfigMap); len(got) != 1 || got[0].GetLabels()[corev1alpha1.LabelManagedBy] != corev1alpha1.ManagedByAnnex {
		t.Errorf("remote ConfigMaps after the conflict was resolved: %v", got)
	}
	if ev := w.events(); len(ev) != 0 {
		t.Errorf("unexpected events: %v", ev)
	}
}

func TestRemoteErrorsDoNotStopOtherObjects(t *testing.T) {
	s := testScheme(t)
	failing := fake.NewClientBuilder().WithScheme(s).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
			if o.GetName() == "a" {
				return errors.New("boom")
			}
			return c.Create(ctx, o, opts...)
		},
	}).Build()
	w := newWorld(t, []client.Object{nso(ready(beta)), fc(beta, false),
		configMap(ns, "a", nil, nil, nil), configMap(ns, "b", nil, nil, nil)}, nil)
	w.remotes.clients[beta] = failing
	_, err := w.r.reconcileKind(ctx(t), KindConfigMap, ns)
	if err == nil {
		t.Fatal("reconcile succeeded, want the create error")
	}
	if got := w.remoteObjects(beta, KindConfigMap); len(got) != 1 || got[0].GetName() != "b" {
		t.Errorf("remote ConfigMaps: %v, want b only", got)
	}
}

func TestDefaultEndpointTranslator(t *testing.T) {
	ep := endpoint("10.0.0.1", "", true)
	tests := []struct {
		name     string
		tr       DefaultEndpointTranslator
		onNode   string
		wantKeep bool
	}{
		{name: "on a real node", onNode: "node-1", wantKeep: true},
		{name: "node unknown", onNode: "", wantKeep: true},
		{name: "on the provider's virtual node", onNode: "annex-beta", wantKeep: false},
		{name: "on another provider's virtual node", onNode: "annex-gamma", wantKeep: true},
		{name: "custom virtual node name", tr: DefaultEndpointTranslator{VirtualNodeName: func(id string) string { return "vk-" + id }}, onNode: "vk-beta", wantKeep: false},
		{name: "custom name, default-looking node", tr: DefaultEndpointTranslator{VirtualNodeName: func(id string) string { return "vk-" + id }}, onNode: "annex-beta", wantKeep: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, keep := tc.tr.Translate(context.Background(), beta, ep, EndpointOrigin{Node: tc.onNode})
			if keep != tc.wantKeep {
				t.Errorf("keep = %v, want %v", keep, tc.wantKeep)
			}
			if diff := cmp.Diff(ep, got); diff != "" {
				t.Errorf("endpoint changed (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRequests(t *testing.T) {
	other := nso(ready(gamma))
	other.Namespace = "other"
	w := newWorld(t, []client.Object{nso(ready(beta), ready(gamma)), other}, nil)
	c := t.Context()

	inOffloaded := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x"}}
	notOffloaded := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "plain", Name: "x"}}
	if diff := cmp.Diff([]reconcile.Request{request(KindSecret, ns)}, w.r.requestsForObject(c, KindSecret, inOffloaded)); diff != "" {
		t.Errorf("requests for an object of an offloaded namespace (-want +got):\n%s", diff)
	}
	if got := w.r.requestsForObject(c, KindSecret, notOffloaded); len(got) != 0 {
		t.Errorf("requests for an object of a plain namespace: %v", got)
	}

	want := []reconcile.Request{request(KindService, ns), request(KindService, "other")}
	got := w.r.requestsForProvider(c, KindService, gamma)
	if diff := cmp.Diff(want, got, cmpSortRequests); diff != "" {
		t.Errorf("requests for gamma (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]reconcile.Request{request(KindService, ns)}, w.r.requestsForProvider(c, KindService, beta)); diff != "" {
		t.Errorf("requests for beta (-want +got):\n%s", diff)
	}
}

var cmpSortRequests = cmpopts.SortSlices(func(a, b reconcile.Request) bool { return a.String() < b.String() })
