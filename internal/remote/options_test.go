package remote

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
)

func TestDefaultOptions(t *testing.T) {
	o := DefaultOptions()
	want := Options{
		ProbeInterval:    500 * time.Millisecond,
		ProbeTimeout:     time.Second,
		CallTimeout:      10 * time.Second,
		FailureThreshold: 3,
		SuccessThreshold: 2,
	}
	if diff := cmp.Diff(want, o); diff != "" {
		t.Errorf("DefaultOptions() (-want +got):\n%s", diff)
	}
	if err := o.Validate(); err != nil {
		t.Errorf("Validate(): %v", err)
	}
	// The contract: a dead or hung peer is detected within 5s, and one lost
	// probe is not enough.
	if b := o.DetectionBound(); b > 5*time.Second {
		t.Errorf("DetectionBound() = %s, want at most 5s", b)
	}
	if o.FailureThreshold < 2 {
		t.Errorf("FailureThreshold = %d: one lost probe would make a peer unreachable", o.FailureThreshold)
	}
	if diff := cmp.Diff(want, Options{}.withDefaults()); diff != "" {
		t.Errorf("Options{}.withDefaults() (-want +got):\n%s", diff)
	}
}

func TestBindFlags(t *testing.T) {
	o := DefaultOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.BindFlags(fs)
	err := fs.Parse([]string{
		"--peer-probe-interval=500ms", "--peer-probe-timeout=750ms", "--peer-failure-threshold=4",
		"--peer-success-threshold=1", "--peer-call-timeout=5s", "--peer-status-refresh=2m",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Options{
		ProbeInterval:    500 * time.Millisecond,
		ProbeTimeout:     750 * time.Millisecond,
		CallTimeout:      5 * time.Second,
		StatusRefresh:    2 * time.Minute,
		FailureThreshold: 4,
		SuccessThreshold: 1,
	}
	if diff := cmp.Diff(want, o); diff != "" {
		t.Errorf("options after parsing (-want +got):\n%s", diff)
	}
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Usage == "" {
			t.Errorf("flag --%s has no help text", f.Name)
		}
	})
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Options)
		wantErr bool
	}{
		{name: "defaults", mutate: func(*Options) {}},
		{name: "timeout longer than interval", mutate: func(o *Options) { o.ProbeTimeout = 3 * o.ProbeInterval }},
		{name: "zero interval", mutate: func(o *Options) { o.ProbeInterval = 0 }, wantErr: true},
		{name: "negative timeout", mutate: func(o *Options) { o.ProbeTimeout = -time.Second }, wantErr: true},
		{name: "zero call timeout", mutate: func(o *Options) { o.CallTimeout = 0 }, wantErr: true},
		{name: "zero refresh (off)", mutate: func(o *Options) { o.StatusRefresh = 0 }},
		{name: "negative refresh", mutate: func(o *Options) { o.StatusRefresh = -time.Second }, wantErr: true},
		{name: "zero failure threshold", mutate: func(o *Options) { o.FailureThreshold = 0 }, wantErr: true},
		{name: "zero success threshold", mutate: func(o *Options) { o.SuccessThreshold = 0 }, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			tc.mutate(&o)
			if err := o.Validate(); (err != nil) != tc.wantErr {
				t.Errorf("Validate() = %v, want error: %v", err, tc.wantErr)
			}
		})
	}
}

func TestDetectionBound(t *testing.T) {
	tests := []struct {
		interval, timeout time.Duration
		threshold         int
		want              time.Duration
	}{
		{interval: time.Second, timeout: time.Second, threshold: 3, want: 4 * time.Second},
		{interval: time.Second, timeout: 500 * time.Millisecond, threshold: 3, want: 4 * time.Second},
		{interval: 500 * time.Millisecond, timeout: 2 * time.Second, threshold: 2, want: 4500 * time.Millisecond},
	}
	for _, tc := range tests {
		o := Options{ProbeInterval: tc.interval, ProbeTimeout: tc.timeout, FailureThreshold: tc.threshold}
		if got := o.DetectionBound(); got != tc.want {
			t.Errorf("DetectionBound(%+v) = %s, want %s", o, got, tc.want)
		}
	}
}
