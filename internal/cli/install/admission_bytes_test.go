package install

import (
	"fmt"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

// The cases of the byte bounds (admission/tenant-bytes.yaml), shared by the
// CEL test below and the test against a real API server
// (admission_bytes_integration_test.go).

const (
	kib = 1 << 10
	mib = 1 << 20
)

// filler is a string of n bytes.
func filler(n int) string { return strings.Repeat("x", n) }

// bytesCase is an object a tenant writes; want is "" when it is admitted,
// else text the refusal contains (the policy is named by its prefix).
type bytesCase struct {
	name string
	obj  func(ns string) client.Object
	want string
}

func bytesConfigMap(ns, name string, data map[string]string, binary map[string][]byte) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data, BinaryData: binary}
}

func bytesSecret(ns, name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
}

func annotated(o client.Object, size int) client.Object {
	// A key without a domain: admission/metadata-keys.yaml removes those of
	// domains the provider does not allow before the size is checked.
	o.SetAnnotations(map[string]string{"blob": filler(size - len("blob"))})
	return o
}

func bytesEvent(ns, name, message string) *corev1.Event {
	return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		InvolvedObject: corev1.ObjectReference{Kind: "ShadowPod", APIVersion: "offloading.annex.dev/v1alpha1", Namespace: ns, Name: "web-0"},
		Reason:         "Offloaded", Message: message, Type: corev1.EventTypeNormal,
		Source: corev1.EventSource{Component: "annex-consumer"}}
}

// bytesSES is a ShadowEndpointSlice of n IPv4 endpoints, each with a target
// reference and the given hostname.
func bytesSES(ns, name string, n int, hostname string) *offloadingv1alpha1.ShadowEndpointSlice {
	eps := make([]discoveryv1.Endpoint, n)
	for i := range eps {
		eps[i] = discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.244.%d.%d", i/250, i%250+1)},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "web", Name: fmt.Sprintf("web-%d", i)}}
		if hostname != "" {
			eps[i].Hostname = &hostname
		}
	}
	port, proto := int32(80), corev1.ProtocolTCP
	return &offloadingv1alpha1.ShadowEndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: offloadingv1alpha1.ShadowEndpointSliceSpec{Template: offloadingv1alpha1.EndpointSliceTemplate{
			Labels:      map[string]string{discoveryv1.LabelServiceName: "web"},
			AddressType: discoveryv1.AddressTypeIPv4, Endpoints: eps,
			Ports: []discoveryv1.EndpointPort{{Name: ptr("http"), Port: &port, Protocol: &proto}}}}}
}

func ptr[T any](v T) *T { return &v }

// bytesCases are the objects a tenant writes in its remote namespace ns.
func bytesCases() []bytesCase {
	return []bytesCase{
		// ConfigMaps: data and binaryData, keys and values.
		{name: "ConfigMap of 200 KiB", obj: func(ns string) client.Object {
			return bytesConfigMap(ns, "cm-200k", map[string]string{"app.conf": filler(200 * kib)}, nil)
		}},
		{name: "ConfigMap of exactly 256 KiB", obj: func(ns string) client.Object {
			return bytesConfigMap(ns, "cm-256k", map[string]string{"k": filler(256*kib - 1)}, nil)
		}},
		{name: "ConfigMap one byte over 256 KiB", obj: func(ns string) client.Object {
			return bytesConfigMap(ns, "cm-256k1", map[string]string{"k": filler(256 * kib)}, nil)
		}, want: "annex-tenant-configmaps: data and binaryData are 262145 bytes"},
		{name: "ConfigMap of 1000 KiB", obj: func(ns string) client.Object {
			return bytesConfigMap(ns, "cm-1m", map[string]string{"a": filler(500 * kib), "b": filler(500 * kib)}, nil)
		}, want: "annex-tenant-configmaps: data and binaryData are 1024002 bytes"},
		{name: "ConfigMap of 200 KiB data and 100 KiB binaryData", obj: func(ns string) client.Object {
			return bytesConfigMap(ns, "cm-binary", map[string]string{"a": filler(200 * kib)}, map[string][]byte{"b": []byte(filler(100 * kib))})
		}, want: "annex-tenant-configmaps: data and binaryData are 307202 bytes"},
		{name: "ConfigMap of 10000 small keys", obj: func(ns string) client.Object {
			data := map[string]string{}
			for i := range 10000 {
				data[fmt.Sprintf("key-%05d", i)] = filler(20)
			}
			return bytesConfigMap(ns, "cm-keys", data, nil)
		}, want: "annex-tenant-configmaps: data and binaryData are 290000 bytes"},

		// Secrets: data (stringData is merged into it before admission).
		{name: "Secret of 200 KiB", obj: func(ns string) client.Object {
			return bytesSecret(ns, "s-200k", map[string][]byte{"tls.crt": []byte(filler(200 * kib))})
		}},
		{name: "Secret of exactly 256 KiB in values of every base64 padding", obj: func(ns string) client.Object {
			return bytesSecret(ns, "s-pad", map[string][]byte{"a": []byte(filler(100*kib - 1)), "b": []byte(filler(100*kib - 2)),
				"c": []byte(filler(56*kib - 4)), "d": []byte("xyz")})
		}},
		{name: "Secret one byte over 256 KiB in values of every base64 padding", obj: func(ns string) client.Object {
			return bytesSecret(ns, "s-pad1", map[string][]byte{"a": []byte(filler(100*kib - 1)), "b": []byte(filler(100*kib - 2)),
				"c": []byte(filler(56*kib - 4)), "d": []byte("xyzw")})
		}, want: "annex-tenant-secrets: data is 262145 bytes"},
		{name: "Secret of 300 KiB", obj: func(ns string) client.Object {
			return bytesSecret(ns, "s-300k", map[string][]byte{"blob": []byte(filler(300 * kib))})
		}, want: "annex-tenant-secrets: data is 307204 bytes"},

		// Metadata of every kind.
		{name: "ConfigMap with 60 KiB of annotations", obj: func(ns string) client.Object {
			return annotated(bytesConfigMap(ns, "cm-ann-60k", map[string]string{"a": "b"}, nil), 60*kib)
		}},
		{name: "ConfigMap with 100 KiB of annotations", obj: func(ns string) client.Object {
			return annotated(bytesConfigMap(ns, "cm-ann-100k", map[string]string{"a": "b"}, nil), 100*kib)
		}, want: "annex-tenant-metadata: metadata.labels, annotations, finalizers and ownerReferences are 102400 bytes"},
		{name: "Secret with 100 KiB of annotations", obj: func(ns string) client.Object {
			return annotated(bytesSecret(ns, "s-ann", nil), 100*kib)
		}, want: "annex-tenant-metadata: metadata.labels, annotations, finalizers and ownerReferences are 102400 bytes"},
		{name: "Service with 100 KiB of annotations", obj: func(ns string) client.Object {
			return annotated(clusterIPServiceIn(ns, "svc-ann"), 100*kib)
		}, want: "annex-tenant-metadata: metadata.labels, annotations, finalizers and ownerReferences are 102400 bytes"},
		{name: "Service with 2000 labels", obj: func(ns string) client.Object {
			svc := clusterIPServiceIn(ns, "svc-labels")
			svc.Labels = map[string]string{}
			for i := range 2000 {
				svc.Labels[fmt.Sprintf("label-with-pad-%07d", i)] = filler(20) // keys of 22 bytes
			}
			return svc
		}, want: "annex-tenant-metadata: metadata.labels, annotations, finalizers and ownerReferences are 84000 bytes"},
		{name: "ShadowPod with 100 KiB of annotations", obj: func(ns string) client.Object {
			sp := shadowPod("sp-ann")
			sp.Namespace = ns
			return annotated(sp, 100*kib)
		}, want: "annex-tenant-metadata: "},
		{name: "ShadowPod with 60 KiB of environment", obj: func(ns string) client.Object {
			sp := shadowPod("sp-env")
			sp.Namespace = ns
			sp.Spec.Pod.Containers[0].Env = []corev1.EnvVar{{Name: "BLOB", Value: filler(60 * kib)}}
			return sp
		}},
		{name: "ShadowPod with 70 KiB of environment", obj: func(ns string) client.Object {
			sp := shadowPod("sp-env")
			sp.Namespace = ns
			sp.Spec.Pod.Containers[0].Env = []corev1.EnvVar{{Name: "BLOB", Value: filler(70 * kib)}}
			return sp
		}, want: "annex-tenant-podspecs: spec.pod is 7"},
		{name: "ShadowPod with 1 MiB in a probe's command", obj: func(ns string) client.Object {
			sp := shadowPod("sp-probe")
			sp.Namespace = ns
			sp.Spec.Pod.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{filler(1 << 20)}}}}
			return sp
		}, want: "annex-tenant-podspecs: "},
		{name: "ShadowEndpointSlice with 3000 finalizers", obj: func(ns string) client.Object {
			ses := bytesSES(ns, "ses-fin", 1, "")
			for i := range 3000 {
				ses.Finalizers = append(ses.Finalizers, fmt.Sprintf("example.com/finalizer-%04d", i))
			}
			return ses
		}, want: "annex-tenant-metadata: metadata.labels, annotations, finalizers and ownerReferences are 78000 bytes"},

		// Events.
		{name: "Event with a 1 KiB message", obj: func(ns string) client.Object {
			return bytesEvent(ns, "ev-1k", filler(kib))
		}},
		{name: "Event with a 1 MiB message", obj: func(ns string) client.Object {
			return bytesEvent(ns, "ev-1m", filler(mib))
		}, want: "annex-tenant-events: the Event's strings"},
		{name: "Event with a 10 KiB field path", obj: func(ns string) client.Object {
			ev := bytesEvent(ns, "ev-path", "m")
			ev.InvolvedObject.FieldPath = filler(10 * kib)
			return ev
		}, want: "annex-tenant-events: the Event's strings"},
		{name: "Event with 8 KiB of annotations", obj: func(ns string) client.Object {
			return annotated(bytesEvent(ns, "ev-ann", "m"), 8*kib)
		}, want: "annex-tenant-events: the Event's strings"},

		// ShadowEndpointSlices.
		{name: "ShadowEndpointSlice of 1000 endpoints", obj: func(ns string) client.Object {
			return bytesSES(ns, "ses-1000", 1000, "")
		}},
		{name: "ShadowEndpointSlice of 1000 endpoints with 253-byte hostnames", obj: func(ns string) client.Object {
			return bytesSES(ns, "ses-hostnames", 1000, filler(63)+"."+filler(63)+"."+filler(63)+"."+filler(61))
		}, want: "annex-tenant-shadowendpointslices: spec.template.endpoints and ports hold"},
	}
}

func clusterIPServiceIn(ns, name string) *corev1.Service {
	svc := clusterIPService(name)
	svc.Namespace = ns
	return svc
}

// tenantNamespaceCases are the objects a tenant writes in its tenant
// namespace ns as consumer c.
func tenantNamespaceCases(c string) []bytesCase {
	replica := func(o client.Object) client.Object {
		o.SetLabels(map[string]string{corev1alpha1.LabelRemoteClusterID: c})
		o.SetAnnotations(map[string]string{"annex.dev/origin-namespace": "annex-peer-prov"})
		return o
	}
	slice := func(ns, name string) client.Object {
		return replica(&corev1alpha1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1alpha1.ResourceSliceSpec{ConsumerClusterID: c, ProviderClusterID: "prov",
				Resources: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}})
	}
	blob := func(o client.Object, n int) client.Object {
		a := o.GetAnnotations()
		a["example.com/blob"] = filler(n)
		o.SetAnnotations(a)
		return o
	}
	return []bytesCase{
		{name: "ResourceSlice", obj: func(ns string) client.Object { return slice(ns, "rs") }},
		{name: "ResourceSlice with 100 KiB of annotations", obj: func(ns string) client.Object {
			return blob(slice(ns, "rs-ann"), 100*kib)
		}, want: "annex-tenant-namespace-metadata: metadata.labels, annotations, finalizers and ownerReferences are"},
		{name: "RemoteNamespace with 100 KiB of annotations", obj: func(ns string) client.Object {
			return blob(replica(&offloadingv1alpha1.RemoteNamespace{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rn-ann"},
				Spec: offloadingv1alpha1.RemoteNamespaceSpec{SourceNamespace: "web", RemoteNamespace: "web-" + c}}), 100*kib)
		}, want: "annex-tenant-namespace-metadata: "},
		{name: "heartbeat Lease with 100 KiB of annotations", obj: func(ns string) client.Object {
			return annotated(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "annex-consumer-heartbeat"}}, 100*kib)
		}, want: "annex-tenant-namespace-metadata: "},
	}
}

// bytesPolicyFor names the policies that judge a case's object.
func bytesPoliciesFor(o client.Object) []string {
	switch o.(type) {
	case *corev1.ConfigMap:
		return []string{"annex-tenant-metadata", "annex-tenant-configmaps"}
	case *corev1.Secret:
		return []string{"annex-tenant-metadata", "annex-tenant-secrets"}
	case *corev1.Event:
		return []string{"annex-tenant-metadata", "annex-tenant-events"}
	case *offloadingv1alpha1.ShadowEndpointSlice:
		return []string{"annex-tenant-metadata", "annex-tenant-shadowendpointslices"}
	case *offloadingv1alpha1.ShadowPod:
		return []string{"annex-tenant-metadata", "annex-tenant-podspecs"}
	case *corev1alpha1.ResourceSlice, *offloadingv1alpha1.RemoteNamespace, *coordinationv1.Lease:
		return []string{"annex-tenant-namespace-metadata"}
	default:
		return []string{"annex-tenant-metadata"}
	}
}

// bytesObject is o with its Secret data or ConfigMap binaryData as bytes
// rather than the base64 strings of its JSON (which the API server hands a
// policy): the policies count both the same.
func bytesObject(t *testing.T, o client.Object) map[string]any {
	t.Helper()
	u := toUnstructured(t, o)
	asBytes := func(field string, m map[string][]byte) {
		if m == nil {
			return
		}
		out := map[string]any{}
		for k, v := range m {
			out[k] = v
		}
		u[field] = out
	}
	switch o := o.(type) {
	case *corev1.Secret:
		asBytes("data", o.Data)
	case *corev1.ConfigMap:
		asBytes("binaryData", o.BinaryData)
	}
	return u
}

func TestTenantBytesPolicies(t *testing.T) {
	policies, _ := tenantPolicies(t)
	compiled := map[string]*celPolicy{}
	for _, name := range []string{"annex-tenant-metadata", "annex-tenant-configmaps", "annex-tenant-secrets",
		"annex-tenant-events", "annex-tenant-shadowendpointslices", "annex-tenant-namespace-metadata", "annex-tenant-podspecs"} {
		p, ok := policies[name]
		if !ok {
			t.Fatalf("no policy %s", name)
		}
		compiled[name] = compilePolicy(t, p)
	}
	eval := func(t *testing.T, o client.Object, params any) []string {
		var msgs []string
		for _, name := range bytesPoliciesFor(o) {
			msgs = append(msgs, compiled[name].eval(t, "CREATE", toUnstructured(t, o), nil, params)...)
		}
		return msgs
	}
	cases := append(bytesCases(), tenantNamespaceCases("c1")...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkRefusal(t, eval(t, tc.obj(remoteNS), defaultParams(t)), tc.want)
		})
	}

	// The operator's values, and what an older ConfigMap (without the keys)
	// or a value that is not a count means: the defaults.
	cm200 := bytesConfigMap(remoteNS, "cm", map[string]string{"k": filler(200 * kib)}, nil)
	cm300 := bytesConfigMap(remoteNS, "cm", map[string]string{"k": filler(300 * kib)}, nil)
	withData := func(data map[string]string) map[string]any {
		cm := providerPolicy(t)
		for k, v := range data {
			cm.Data[k] = v
		}
		if data == nil {
			cm.Data = nil
		}
		return toUnstructured(t, cm)
	}
	older := providerPolicy(t)
	delete(older.Data, PolicyKeyMaxDataBytes)
	delete(older.Data, PolicyKeyMaxMetadataBytes)
	delete(older.Data, PolicyKeyMaxEventBytes)
	for _, tc := range []struct {
		name   string
		obj    client.Object
		params any
		want   string
	}{
		{name: "lowered data bound", obj: cm200, params: withData(map[string]string{PolicyKeyMaxDataBytes: "102400"}),
			want: "annex-tenant-configmaps: data and binaryData are 204801 bytes (keys and values), over the 102400 this provider allows per ConfigMap"},
		{name: "raised data bound", obj: cm300, params: withData(map[string]string{PolicyKeyMaxDataBytes: "524288"})},
		{name: "ConfigMap without the keys: default admits", obj: cm200, params: toUnstructured(t, older)},
		{name: "ConfigMap without the keys: default refuses", obj: cm300, params: toUnstructured(t, older), want: "over the 262144"},
		{name: "ConfigMap without data", obj: cm300, params: withData(nil), want: "over the 262144"},
		{name: "a value that is not a count means the default", obj: cm300, params: withData(map[string]string{PolicyKeyMaxDataBytes: "1Mi"}), want: "over the 262144"},
		{name: "lowered metadata bound", obj: annotated(cm200.DeepCopy(), 2*kib),
			params: withData(map[string]string{PolicyKeyMaxMetadataBytes: "1024"}), want: "annex-tenant-metadata: metadata.labels, annotations, finalizers and ownerReferences are 2048 bytes, over the 1024"},
		{name: "raised event bound", obj: bytesEvent(remoteNS, "ev", filler(10*kib)), params: withData(map[string]string{PolicyKeyMaxEventBytes: "16384"})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkRefusal(t, eval(t, tc.obj, tc.params), tc.want)
		})
	}

	// Values as bytes count as their base64 does.
	for _, tc := range bytesCases() {
		o := tc.obj(remoteNS)
		if _, ok := o.(*corev1.Secret); !ok && !strings.Contains(tc.name, "binaryData") {
			continue
		}
		t.Run(tc.name+" (as bytes)", func(t *testing.T) {
			var msgs []string
			for _, name := range bytesPoliciesFor(o) {
				msgs = append(msgs, compiled[name].eval(t, "CREATE", bytesObject(t, o), nil, defaultParams(t))...)
			}
			checkRefusal(t, msgs, tc.want)
		})
	}
}

// TestTenantBytesDefaults: the defaults the chart writes into the provider
// policy are those the policies fall back to.
func TestTenantBytesDefaults(t *testing.T) {
	cm := providerPolicy(t)
	for key, want := range map[string]int{PolicyKeyMaxMetadataBytes: DefaultMaxMetadataBytes,
		PolicyKeyMaxDataBytes: DefaultMaxDataBytes, PolicyKeyMaxEventBytes: DefaultMaxEventBytes, PolicyKeyMaxPodBytes: DefaultMaxPodBytes} {
		if got := cm.Data[key]; got != fmt.Sprint(want) {
			t.Errorf("provider policy %s = %q, want %d", key, got, want)
		}
	}
	policies, _ := tenantPolicies(t)
	for name, p := range policies {
		for _, v := range p.Spec.Variables {
			for key, def := range map[string]int{PolicyKeyMaxMetadataBytes: DefaultMaxMetadataBytes,
				PolicyKeyMaxDataBytes: DefaultMaxDataBytes, PolicyKeyMaxEventBytes: DefaultMaxEventBytes, PolicyKeyMaxPodBytes: DefaultMaxPodBytes} {
				if strings.Contains(v.Expression, "params.data."+key) && !strings.HasSuffix(strings.TrimSpace(v.Expression), fmt.Sprintf(": %d", def)) {
					t.Errorf("%s: variable %s reads %s but does not default to %d: %s", name, v.Name, key, def, v.Expression)
				}
			}
		}
	}
}
