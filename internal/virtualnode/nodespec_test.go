package virtualnode

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/version"
	"github.com/annexhq/annex/internal/virtualnode/podreflector"
)

var created = metav1.NewTime(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))

func TestBuildNode(t *testing.T) {
	spec := &corev1alpha1.VirtualNodeSpec{
		ClusterID: "beta",
		Resources: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourcePods: resource.MustParse("110")},
		Labels:    map[string]string{"region": "eu", "type": "overridden"},
		Taints:    []corev1.Taint{{Key: "example.com/x", Value: "y", Effect: corev1.TaintEffectNoExecute}},
	}
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: ReasonProviderReachable, LastTransitionTime: created}
	got := buildNode(nodeParams{Name: "annex-beta", ClusterID: "beta", NodeIP: "127.0.0.1", KubeletPort: 10250, Spec: spec, Ready: ready, Created: created})
	pressure := func(ty corev1.NodeConditionType) corev1.NodeCondition {
		return corev1.NodeCondition{Type: ty, Status: corev1.ConditionFalse, Reason: reasonManagedByProvider,
			Message: "provider beta manages its own resources", LastTransitionTime: created}
	}
	want := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "annex-beta", Annotations: map[string]string{AnnotationResourceMetricsPath: "/metrics/resource/annex-beta"}, Labels: map[string]string{
			"type": "virtual-node", corev1alpha1.LabelRemoteClusterID: "beta", corev1.LabelHostname: "annex-beta",
			corev1.LabelOSStable: "linux", corev1.LabelNodeExcludeBalancers: "true", "region": "eu",
		}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: corev1alpha1.TaintKeyVirtualNode, Value: "beta", Effect: corev1.TaintEffectNoSchedule},
			{Key: "example.com/x", Value: "y", Effect: corev1.TaintEffectNoExecute},
		}},
		Status: corev1.NodeStatus{
			Capacity:        spec.Resources,
			Allocatable:     spec.Resources,
			Phase:           corev1.NodeRunning,
			Conditions:      []corev1.NodeCondition{ready, pressure(corev1.NodeMemoryPressure), pressure(corev1.NodeDiskPressure), pressure(corev1.NodePIDPressure)},
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
			NodeInfo: corev1.NodeSystemInfo{OperatingSystem: "linux", KubeletVersion: version.Version,
				OSImage: "Annex virtual node for provider beta", ContainerRuntimeVersion: "annex://" + version.Version},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("buildNode (-want +got):\n%s", diff)
	}
}

func TestReadyCondition(t *testing.T) {
	carried := &corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: ReasonProviderReachable, LastTransitionTime: created}
	tests := []struct {
		st      podreflector.Reachability
		carried *corev1.NodeCondition
		status  corev1.ConditionStatus
		reason  string
	}{
		{podreflector.Reachable, nil, corev1.ConditionTrue, ReasonProviderReachable},
		{podreflector.Unreachable, carried, corev1.ConditionFalse, corev1alpha1.ReasonProviderUnreachable},
		{podreflector.PermanentlyUnreachable, nil, corev1.ConditionFalse, corev1alpha1.ReasonProviderUnreachable},
		{podreflector.Unknown, nil, corev1.ConditionUnknown, ReasonProviderReachabilityUnknown},
		{podreflector.Unknown, carried, corev1.ConditionTrue, ReasonProviderReachable},
	}
	for _, tt := range tests {
		got := readyCondition("beta", tt.st, tt.carried)
		if got.Type != corev1.NodeReady || got.Status != tt.status || got.Reason != tt.reason {
			t.Errorf("readyCondition(%s, carried=%v) = %+v", tt.st, tt.carried != nil, got)
		}
		if tt.st == podreflector.Unreachable && got.Message != "provider beta is unreachable: its API server fails its health probes; the pods on this node are marked NotReady" {
			t.Errorf("message %q must name the provider", got.Message)
		}
	}
}

func taint(key, value string, effect corev1.TaintEffect) corev1.Taint {
	return corev1.Taint{Key: key, Value: value, Effect: effect}
}

func TestMergeTaints(t *testing.T) {
	vn := taint(corev1alpha1.TaintKeyVirtualNode, "beta", corev1.TaintEffectNoSchedule)
	extra := taint("example.com/x", "y", corev1.TaintEffectNoSchedule)
	notReady := taint(corev1.TaintNodeNotReady, "", corev1.TaintEffectNoExecute)
	tests := []struct {
		name     string
		current  []corev1.Taint
		previous []taintID
		wanted   []corev1.Taint
		want     []corev1.Taint
		changed  bool
	}{
		{name: "fresh node", wanted: []corev1.Taint{vn, extra}, want: []corev1.Taint{vn, extra}, changed: true},
		{name: "in place", current: []corev1.Taint{vn, notReady, extra}, previous: []taintID{idOf(vn), idOf(extra)},
			wanted: []corev1.Taint{vn, extra}, want: []corev1.Taint{vn, notReady, extra}},
		{name: "a spec taint removed; others' taints kept", current: []corev1.Taint{vn, notReady, extra},
			previous: []taintID{idOf(vn), idOf(extra)}, wanted: []corev1.Taint{vn}, want: []corev1.Taint{vn, notReady}, changed: true},
		{name: "a value changed", current: []corev1.Taint{taint("example.com/x", "old", corev1.TaintEffectNoSchedule), vn},
			previous: []taintID{idOf(vn), idOf(extra)}, wanted: []corev1.Taint{vn, extra}, want: []corev1.Taint{extra, vn}, changed: true},
		{name: "an administrator's taint with our key is taken over", current: []corev1.Taint{notReady, extra},
			wanted: []corev1.Taint{vn, extra}, want: []corev1.Taint{notReady, extra, vn}, changed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, changed := mergeTaints(tt.current, tt.previous, tt.wanted)
			if diff := cmp.Diff(tt.want, got); diff != "" || changed != tt.changed {
				t.Errorf("mergeTaints changed=%v (want %v) (-want +got):\n%s", changed, tt.changed, diff)
			}
		})
	}
	ids := decodeApplied(encodeApplied([]corev1.Taint{vn, extra}))
	if diff := cmp.Diff([]taintID{idOf(vn), idOf(extra)}, ids); diff != "" {
		t.Errorf("applied taints round trip:\n%s", diff)
	}
	if decodeApplied("not json") != nil {
		t.Error("garbage must decode as nothing")
	}
}

func TestOptions(t *testing.T) {
	o := DefaultOptions()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	o.BindFlags(fs)
	if err := fs.Parse([]string{"--virtual-node-ip=10.0.0.5", "--virtual-node-workers=8", "--virtual-node-lease-duration=20s"}); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.NodeIP != "10.0.0.5" || o.Workers != 8 || o.LeaseDuration != 20*time.Second {
		t.Errorf("flags not bound: %+v", o)
	}
	bad := Options{NodeIP: "localhost", Workers: 0, LeaseDuration: 1500 * time.Millisecond, StatusUpdateInterval: -1}
	if err := bad.Validate(); err == nil {
		t.Error("invalid options accepted")
	}
	if d := (Options{}).withDefaults(); d.NodeIP != "127.0.0.1" || d.PodIPTranslator == nil || mustIP(d.PodIPTranslator("beta", "1.2.3.4")) != "1.2.3.4" {
		t.Errorf("defaults: %+v", d)
	}
}

func TestVirtualNodeCondition(t *testing.T) {
	tests := []struct {
		registered bool
		st         podreflector.Reachability
		status     metav1.ConditionStatus
		reason     string
	}{
		{false, podreflector.Reachable, metav1.ConditionFalse, corev1alpha1.ReasonNodeNotRegistered},
		{true, podreflector.Reachable, metav1.ConditionTrue, corev1alpha1.ReasonNodeRegistered},
		{true, podreflector.Unknown, metav1.ConditionUnknown, corev1alpha1.ReasonNodeRegistered},
		{true, podreflector.Unreachable, metav1.ConditionFalse, corev1alpha1.ReasonProviderUnreachable},
		{true, podreflector.PermanentlyUnreachable, metav1.ConditionFalse, corev1alpha1.ReasonProviderUnreachable},
	}
	for _, tt := range tests {
		status, reason, _ := virtualNodeCondition(tt.registered, tt.st, "annex-beta", "beta")
		if status != tt.status || reason != tt.reason {
			t.Errorf("virtualNodeCondition(%v, %s) = %s %s", tt.registered, tt.st, status, reason)
		}
	}
}

func TestReconcilerLookups(t *testing.T) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, corev1alpha1.AddToScheme, offloadingv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	nso := func(ns string, entries ...offloadingv1alpha1.ProviderNamespaceStatus) *offloadingv1alpha1.NamespaceOffloading {
		return &offloadingv1alpha1.NamespaceOffloading{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: offloadingv1alpha1.NamespaceOffloadingName},
			Status:     offloadingv1alpha1.NamespaceOffloadingStatus{RemoteNamespaces: entries},
		}
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(
		nso("demo", offloadingv1alpha1.ProviderNamespaceStatus{ClusterID: "beta", RemoteNamespace: "demo-alpha", Phase: offloadingv1alpha1.RemoteNamespaceReady},
			offloadingv1alpha1.ProviderNamespaceStatus{ClusterID: "gamma", RemoteNamespace: "demo-alpha", Phase: offloadingv1alpha1.RemoteNamespaceReady}),
		nso("pending", offloadingv1alpha1.ProviderNamespaceStatus{ClusterID: "beta", RemoteNamespace: "pending-alpha", Phase: offloadingv1alpha1.RemoteNamespacePending}),
		nso("same", offloadingv1alpha1.ProviderNamespaceStatus{ClusterID: "beta", RemoteNamespace: "same", Phase: offloadingv1alpha1.RemoteNamespaceReady}),
		&corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "beta"}, Spec: corev1alpha1.ForeignClusterSpec{ClusterID: "beta"},
			Status: corev1alpha1.ForeignClusterStatus{Conditions: []metav1.Condition{{Type: corev1alpha1.ConditionAPIServerReachable, Status: metav1.ConditionFalse}}}},
		&corev1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "gamma-fc"}, Spec: corev1alpha1.ForeignClusterSpec{ClusterID: "gamma", Unreachable: true}},
	).Build()
	r := &Reconciler{client: c}
	ctx := context.Background()
	got, err := r.namespacesFor(ctx, "beta")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"demo": "demo-alpha", "same": "same"}, got); diff != "" {
		t.Errorf("namespacesFor (-want +got):\n%s", diff)
	}
	for _, tt := range []struct {
		id                  string
		permanent, reported bool
	}{{"beta", false, true}, {"gamma", true, false}, {"gone", true, true}} {
		p, down, err := r.foreignClusterState(ctx, tt.id)
		if err != nil || p != tt.permanent || down != tt.reported {
			t.Errorf("foreignClusterState(%s) = %v, %v, %v", tt.id, p, down, err)
		}
	}
}

func mustIP(ip string, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return ip
}
