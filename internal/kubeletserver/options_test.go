package kubeletserver

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestOptions(t *testing.T) {
	tests := []struct {
		args    []string
		want    Options
		wantErr string
	}{
		{args: nil, want: Options{Port: DefaultPort}},
		{args: []string{"--kubelet-port=0"}, want: Options{Port: 0}},
		{args: []string{"--kubelet-cert-file=c", "--kubelet-key-file=k"}, want: Options{Port: DefaultPort, CertFile: "c", KeyFile: "k"}},
		{args: []string{"--kubelet-cert-file=c"}, wantErr: "must be given together"},
		{args: []string{"--kubelet-port=70000"}, wantErr: "between 0 and 65535"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			o := DefaultOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.BindFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := o.Validate()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Validate() = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || o != tt.want {
				t.Errorf("options %+v (%v), want %+v", o, err, tt.want)
			}
		})
	}
}
