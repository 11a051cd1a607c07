package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTenantTarget(t *testing.T) {
	trial := func(mode string, pods ...float64) TenantTrial {
		tt := TenantTrial{Mode: mode, N: len(pods), PodSeconds: pods, Latency: latency(pods), AllReadySeconds: pods[len(pods)-1], CPUBusy: 0.5}
		if mode == tenantFlooding {
			tt.Flood = &FloodStats{Seconds: 2, Patches: 1000, Creates: 50, Deletes: 50}
		}
		return tt
	}
	type result struct {
		Met    *bool
		Result string
	}
	tests := []struct {
		name   string
		trials []TenantTrial
		want   result
	}{
		{name: "not measured", want: result{}},
		{name: "within 20 %", trials: []TenantTrial{trial(tenantQuiet, 1, 2, 5), trial(tenantFlooding, 1, 3, 6)},
			want: result{ptrTo(true), "1.20 (p99 6.00 s flooding vs 5.00 s quiet; p50 3.00 s vs 2.00 s; p50 over the trials; tenant A wrote 550/s)"}},
		{name: "one slow trial does not decide", trials: []TenantTrial{trial(tenantQuiet, 1, 9), trial(tenantQuiet, 1, 2), trial(tenantQuiet, 1, 2),
			trial(tenantFlooding, 1, 3), trial(tenantFlooding, 1, 3), trial(tenantFlooding, 1, 2)},
			want: result{ptrTo(false), "1.50 (p99 3.00 s flooding vs 2.00 s quiet; p50 1.00 s vs 1.00 s; p50 over the trials; tenant A wrote 550/s)"}},
		{name: "a failed trial misses", trials: []TenantTrial{trial(tenantQuiet, 1, 2), trial(tenantFlooding, 1, 2), {Mode: tenantFlooding, Error: "timeout"}},
			want: result{ptrTo(false), "1.00 (p99 2.00 s flooding vs 2.00 s quiet; p50 1.00 s vs 1.00 s; p50 over the trials; tenant A wrote 550/s); 1 trials failed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tenantTarget(&Results{Tenants: tt.trials})
			if diff := cmp.Diff(tt.want, result{got.Met, got.Result}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if got.missed() && !strings.Contains(got.Why, "CPUs were") {
				t.Errorf("a miss is not explained: %q", got.Why)
			}
		})
	}
}
