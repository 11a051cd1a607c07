package v1alpha1

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNames(t *testing.T) {
	tests := []struct {
		name string
		vn   VirtualNode
		want map[string]string
	}{
		{
			name: "default node name",
			vn:   VirtualNode{Spec: VirtualNodeSpec{ClusterID: "beta"}},
			want: map[string]string{"node": "annex-beta", "tenant": "annex-tenant-beta", "peer": "annex-peer-beta"},
		},
		{
			name: "explicit node name",
			vn:   VirtualNode{Spec: VirtualNodeSpec{ClusterID: "beta", NodeName: "beta-gpu"}},
			want: map[string]string{"node": "beta-gpu", "tenant": "annex-tenant-beta", "peer": "annex-peer-beta"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]string{"node": tc.vn.NodeName(), "tenant": TenantNamespaceName(tc.vn.Spec.ClusterID), "peer": PeerNamespaceName(tc.vn.Spec.ClusterID)}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("names (-want +got):\n%s", diff)
			}
		})
	}
}

func TestIsReachable(t *testing.T) {
	reachable := func(s metav1.ConditionStatus) []metav1.Condition {
		return []metav1.Condition{{Type: ConditionAPIServerReachable, Status: s, Reason: ReasonProbeSucceeded}}
	}
	tests := []struct {
		name        string
		unreachable bool
		conditions  []metav1.Condition
		want        bool
	}{
		{name: "never probed", want: false},
		{name: "probe succeeded", conditions: reachable(metav1.ConditionTrue), want: true},
		{name: "probe failed", conditions: reachable(metav1.ConditionFalse), want: false},
		{name: "unknown", conditions: reachable(metav1.ConditionUnknown), want: false},
		{name: "marked unreachable wins over a stale True", unreachable: true, conditions: reachable(metav1.ConditionTrue), want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fc := &ForeignCluster{
				Spec:   ForeignClusterSpec{ClusterID: "beta", Unreachable: tc.unreachable},
				Status: ForeignClusterStatus{Conditions: tc.conditions},
			}
			if got := fc.IsReachable(); got != tc.want {
				t.Errorf("IsReachable() = %v, want %v", got, tc.want)
			}
		})
	}
}
