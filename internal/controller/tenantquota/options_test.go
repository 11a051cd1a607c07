package tenantquota

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
	for _, tc := range []struct {
		name       string
		args       []string
		want       Options
		wantErr    string
		wantString string
	}{
		{name: "defaults", want: DefaultOptions(),
			wantString: "configmaps=250,secrets=250,services=100,shadowendpointslices=200"},
		{name: "a budget replaces the defaults", args: []string{"--tenant-object-budget=secrets=10, count/jobs.batch=5,shadowpods=1e3"},
			want: Options{Budget: corev1.ResourceList{corev1.ResourceSecrets: q("10"), "count/jobs.batch": q("5"), ResourceShadowPods: q("1e3")},
				ShadowPodsPerGrantedPod: DefaultShadowPodsPerGrantedPod},
			wantString: "count/jobs.batch=5,secrets=10,shadowpods=1e3"},
		{name: "an empty budget", args: []string{"--tenant-object-budget=", "--tenant-shadowpods-per-granted-pod=0"},
			want: Options{Budget: corev1.ResourceList{}}},
		{name: "not a count", args: []string{"--tenant-object-budget=secrets=1.5"}, wantErr: "is not a count"},
		{name: "negative", args: []string{"--tenant-object-budget=secrets=-1"}, wantErr: "is not a count"},
		{name: "not a quantity", args: []string{"--tenant-object-budget=secrets=many"}, wantErr: "secrets:"},
		{name: "unknown key", args: []string{"--tenant-object-budget=events=5"}, wantErr: `"events" is not one of`},
		{name: "twice", args: []string{"--tenant-object-budget=secrets=1,secrets=2"}, wantErr: `"secrets" given twice`},
		{name: "no count", args: []string{"--tenant-object-budget=secrets"}, wantErr: "is not key=count"},
		{name: "negative ShadowPods per pod", args: []string{"--tenant-shadowpods-per-granted-pod=-1"}, wantErr: "must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.BindFlags(fs)
			err := fs.Parse(tc.args)
			if err == nil {
				err = o.Validate()
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, o, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
			if got := fs.Lookup("tenant-object-budget").Value.String(); got != tc.wantString {
				t.Errorf("--tenant-object-budget reads %q, want %q", got, tc.wantString)
			}
		})
	}
}
