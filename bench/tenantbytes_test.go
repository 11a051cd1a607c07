package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTenantBytesTarget(t *testing.T) {
	base := TenantBytes{Admitted: map[string]int{"ConfigMap": 250, "ShadowPod": 80}, StoredBytes: 100 << 20, BoundBytes: 200 << 20,
		GrantedPods: 40, AgentRSSBefore: 80 << 20, AgentRSSAfter: 300 << 20}
	for _, tc := range []struct {
		name   string
		mutate func(*TenantBytes)
		want   string
		met    bool
	}{
		{name: "within both", want: "100.0 MiB stored (bound 200.0 MiB for a grant of 40 pods: 250 ConfigMaps, 80 ShadowPods); agent RSS 80 → 300 MiB", met: true},
		{name: "stored over the bound", mutate: func(tb *TenantBytes) { tb.StoredBytes = 201 << 20 }},
		{name: "agent over its limit", mutate: func(tb *TenantBytes) { tb.AgentRSSAfter = 513 << 20 }},
		{name: "an error", mutate: func(tb *TenantBytes) { tb.Error = "ConfigMap: boom" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := base
			tb.Admitted = map[string]int{"ConfigMap": 250, "ShadowPod": 80}
			if tc.mutate != nil {
				tc.mutate(&tb)
			}
			got := tenantBytesTarget(&Results{TenantBytes: &tb})
			if got.Met == nil || *got.Met != tc.met {
				t.Fatalf("met %v, want %v: %+v", got.Met, tc.met, got)
			}
			if tc.want != "" {
				if diff := cmp.Diff(tc.want, got.Result); diff != "" {
					t.Errorf("result (-want +got):\n%s", diff)
				}
			}
		})
	}
	if got := tenantBytesTarget(&Results{}); got.Met != nil {
		t.Errorf("not measured: met %v", *got.Met)
	}
}

// TestTenantBytesBound: the bound is docs/security.md's, for a grant of
// 50 pods about 270 MiB besides 2 KiB per object.
func TestTenantBytesBound(t *testing.T) {
	objects := int64(250 + 250 + 100 + 200 + 120)
	got := tenantBytesBound(50) - objects*2<<10
	want := int64(250*(320<<10) + 250*(320<<10) + 100*(64<<10) + 200*(320<<10) + 120*(384<<10))
	if got != want {
		t.Errorf("bound %d besides the per-object allowance, want %d", got, want)
	}
}
