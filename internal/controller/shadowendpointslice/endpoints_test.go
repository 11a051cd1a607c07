package shadowendpointslice

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

func pod(name, ip string, phase corev1.PodPhase) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{Phase: phase}}
	if ip != "" {
		p.Status.PodIP = ip
		p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	}
	return p
}

func TestLocalIPs(t *testing.T) {
	pods := []corev1.Pod{
		pod("running", "10.1.0.1", corev1.PodRunning),
		pod("pending", "", corev1.PodPending),
		pod("done", "10.1.0.2", corev1.PodSucceeded),
		pod("failed", "10.1.0.3", corev1.PodFailed),
		func() corev1.Pod {
			p := pod("dual", "10.1.0.4", corev1.PodRunning)
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: "fd00::4"})
			return p
		}(),
	}
	want := map[string]bool{"10.1.0.1": true, "10.1.0.4": true, "fd00::4": true}
	if diff := cmp.Diff(want, LocalIPs(pods)); diff != "" {
		t.Errorf("LocalIPs() (-want +got):\n%s", diff)
	}
}

func TestEndpoints(t *testing.T) {
	ep := func(addrs ...string) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: addrs, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}, Zone: ptr.To("z1")}
	}
	withConsumerFields := func(e discoveryv1.Endpoint) discoveryv1.Endpoint {
		e.NodeName = ptr.To("annex-beta")
		e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "kube-system", Name: "etcd"}
		e.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z1"}}}
		e.DeprecatedTopology = map[string]string{"k": "v"}
		return e
	}
	local := map[string]bool{"10.1.0.1": true}
	tests := []struct {
		name        string
		in          []discoveryv1.Endpoint
		want        []discoveryv1.Endpoint
		wantDropped int
	}{
		{name: "none", want: []discoveryv1.Endpoint{}},
		{name: "remote endpoints kept", in: []discoveryv1.Endpoint{ep("10.2.0.1"), ep("10.3.0.1")},
			want: []discoveryv1.Endpoint{ep("10.2.0.1"), ep("10.3.0.1")}},
		{name: "endpoints of this cluster's pods dropped", in: []discoveryv1.Endpoint{ep("10.2.0.1"), ep("10.1.0.1"), ep("10.3.0.1", "10.1.0.1")},
			want: []discoveryv1.Endpoint{ep("10.2.0.1")}, wantDropped: 2},
		{name: "fields naming the consumer's nodes and pods cleared", in: []discoveryv1.Endpoint{withConsumerFields(ep("10.2.0.1"))},
			want: []discoveryv1.Endpoint{ep("10.2.0.1")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, dropped := Endpoints(tc.in, local)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Endpoints() (-want +got):\n%s", diff)
			}
			if dropped != tc.wantDropped {
				t.Errorf("dropped = %d, want %d", dropped, tc.wantDropped)
			}
		})
	}
}

func TestValidateTemplateAndLabels(t *testing.T) {
	tmpl := &offloadingv1alpha1.EndpointSliceTemplate{Labels: map[string]string{
		discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io", "app": "web"}}
	if msg := ValidateTemplate(tmpl); msg != "" {
		t.Errorf("ValidateTemplate() = %q, want accepted", msg)
	}
	want := map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: ManagedBy, "app": "web"}
	if diff := cmp.Diff(want, Labels(tmpl)); diff != "" {
		t.Errorf("Labels() (-want +got):\n%s", diff)
	}
	if msg := ValidateTemplate(&offloadingv1alpha1.EndpointSliceTemplate{}); msg != "spec.template.labels must carry kubernetes.io/service-name: the EndpointSlice must belong to a Service" {
		t.Errorf("ValidateTemplate(no service name) = %q", msg)
	}
	tooMany := tmpl.DeepCopy()
	tooMany.Endpoints = make([]discoveryv1.Endpoint, MaxEndpoints+1)
	if msg := ValidateTemplate(tooMany); msg != "spec.template.endpoints has 1001 items: at most 1000" {
		t.Errorf("ValidateTemplate(1001 endpoints) = %q", msg)
	}
	tooMany = tmpl.DeepCopy()
	tooMany.Ports = make([]discoveryv1.EndpointPort, MaxPorts+1)
	if msg := ValidateTemplate(tooMany); msg != "spec.template.ports has 101 items: at most 100" {
		t.Errorf("ValidateTemplate(101 ports) = %q", msg)
	}
}
