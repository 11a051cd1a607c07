package remotenamespace

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestFlags(t *testing.T) {
	q := resource.MustParse
	tests := []struct {
		name             string
		args             []string
		allowPrivileged  bool
		wantErr          string // substring of the parse or Validate error
		wantLevel        PodSecurityLevel
		wantSameName     bool
		wantMax          int
		wantQuota        corev1.ResourceList
		wantTenantQuota  corev1.ResourceList
		wantRequests     corev1.ResourceList
		wantLimitRange   bool
		wantFlagDefaults string
		requests         corev1.ResourceList // DefaultRequests set by the agent, nil: unset
	}{
		{
			name:            "defaults",
			wantLevel:       PodSecurityBaseline,
			wantMax:         100,
			wantQuota:       DefaultObjectQuota(),
			wantTenantQuota: corev1.ResourceList{ResourceRemoteNamespaces: q("200"), ResourceResourceSlices: q("20")},
			wantRequests:    corev1.ResourceList{corev1.ResourceCPU: q("100m"), corev1.ResourceMemory: q("128Mi")},
			wantLimitRange:  true,
		},
		{
			name: "everything set",
			args: []string{"--tenant-pod-security=restricted", "--allow-same-name-namespaces", "--max-remote-namespaces-per-tenant=10",
				"--tenant-object-quota=shadowpods=20, pods=30,count/jobs.batch=5,resourceslices=2,count/services.nodeports=0"},
			wantLevel:    PodSecurityRestricted,
			wantSameName: true,
			wantMax:      10,
			wantQuota: func() corev1.ResourceList {
				rl := DefaultObjectQuota()
				rl[ResourceShadowPods], rl[corev1.ResourcePods], rl["count/jobs.batch"], rl["count/services.nodeports"] = q("20"), q("30"), q("5"), q("0")
				return rl
			}(),
			wantTenantQuota: corev1.ResourceList{ResourceRemoteNamespaces: q("20"), ResourceResourceSlices: q("2")},
			wantRequests:    corev1.ResourceList{corev1.ResourceCPU: q("100m"), corev1.ResourceMemory: q("128Mi")},
			wantLimitRange:  true,
		},
		{
			name:            "full quota names, no default requests (set from shadowpod's --tenant-default-requests)",
			args:            []string{"--tenant-object-quota=count/remotenamespaces.offloading.annex.dev=3"},
			requests:        corev1.ResourceList{},
			wantLevel:       PodSecurityBaseline,
			wantMax:         100,
			wantQuota:       DefaultObjectQuota(),
			wantTenantQuota: corev1.ResourceList{ResourceRemoteNamespaces: q("3"), ResourceResourceSlices: q("20")},
			wantRequests:    corev1.ResourceList{},
		},
		{name: "privileged alone", args: []string{"--tenant-pod-security=privileged"},
			wantErr: "--tenant-pod-security=privileged needs --allow-privileged-shadowpods"},
		{name: "privileged with --allow-privileged-shadowpods", args: []string{"--tenant-pod-security=privileged"}, allowPrivileged: true,
			wantLevel: PodSecurityPrivileged, wantMax: 100, wantQuota: DefaultObjectQuota(),
			wantTenantQuota: corev1.ResourceList{ResourceRemoteNamespaces: q("200"), ResourceResourceSlices: q("20")},
			wantRequests:    DefaultRequests(), wantLimitRange: true},
		{name: "unknown level", args: []string{"--tenant-pod-security=lax"}, wantErr: "must be baseline, restricted or privileged"},
		{name: "no namespaces", args: []string{"--max-remote-namespaces-per-tenant=0"}, wantErr: "must be at least 1"},
		{name: "unknown quota key", args: []string{"--tenant-object-quota=events=5"}, wantErr: `"events" is not one of`},
		{name: "quota not a count", args: []string{"--tenant-object-quota=pods=1.5"}, wantErr: "is not a count"},
		{name: "negative quota", args: []string{"--tenant-object-quota=pods=-1"}, wantErr: "is not a count"},
		{name: "quota key twice", args: []string{"--tenant-object-quota=pods=1,pods=2"}, wantErr: `"pods" given twice`},
		{name: "quota without a count", args: []string{"--tenant-object-quota=pods"}, wantErr: "is not key=count"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.BindFlags(fs)
			err := fs.Parse(tc.args)
			if tc.requests != nil {
				o.DefaultRequests = tc.requests
			}
			if err == nil {
				err = o.Validate(tc.allowPrivileged)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			requests := o.EffectiveDefaultRequests()
			o.complete()
			got := []any{o.PodSecurity, o.AllowSameName, o.MaxNamespacesPerTenant, o.ObjectQuota, o.TenantObjectQuota, requests, len(o.DefaultRequests) > 0}
			want := []any{tc.wantLevel, tc.wantSameName, tc.wantMax, tc.wantQuota, tc.wantTenantQuota, tc.wantRequests, tc.wantLimitRange}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFlagDefaultsShown(t *testing.T) {
	o := DefaultOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.BindFlags(fs)
	for flag, want := range map[string]string{
		"tenant-pod-security":              "baseline",
		"max-remote-namespaces-per-tenant": "100",
		"tenant-object-quota":              "configmaps=500,pods=10000,remotenamespaces=200,resourceslices=20,secrets=500,services=200,services.loadbalancers=0,services.nodeports=0,shadowendpointslices=1000,shadowpods=10000",
	} {
		if got := fs.Lookup(flag).DefValue; got != want {
			t.Errorf("--%s default = %q, want %q", flag, got, want)
		}
	}
}
