package remote

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
)

// Options tune peer health probing and remote calls.
type Options struct {
	// ProbeInterval is the time between the starts of two probes of a peer.
	// A probe that takes longer delays the next one: probes never overlap.
	ProbeInterval time.Duration
	// ProbeTimeout bounds one probe (connection, TLS handshake and answer).
	ProbeTimeout time.Duration
	// CallTimeout bounds every request made with a peer's client.
	CallTimeout time.Duration
	// StatusRefresh is how often lastProbeTime and probeLatency are written
	// while no condition changes; 0 (the default): never, they are written
	// with every condition change only. A refresh tells nothing a
	// controller acts on (the conditions do), and was the last periodic
	// write of a ForeignCluster at steady state.
	StatusRefresh time.Duration
	// FailureThreshold is the number of consecutive failed probes after which
	// a peer is unreachable.
	FailureThreshold int
	// SuccessThreshold is the number of consecutive successful probes after
	// which an unreachable peer is reachable again. The first verdict about a
	// peer needs a single success.
	SuccessThreshold int
}

// DefaultOptions returns the settings used when a flag is not given. They
// detect a dead peer within 2s and a hung one within DetectionBound() =
// 3.5s, and ignore a single lost probe.
func DefaultOptions() Options {
	return Options{
		ProbeInterval:    500 * time.Millisecond,
		ProbeTimeout:     time.Second,
		CallTimeout:      10 * time.Second,
		FailureThreshold: 3,
		SuccessThreshold: 2,
	}
}

// BindFlags registers the options on fs.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.ProbeInterval, "peer-probe-interval", o.ProbeInterval,
		"time between two health probes (GET /readyz) of a peer's API server")
	fs.DurationVar(&o.ProbeTimeout, "peer-probe-timeout", o.ProbeTimeout,
		"a health probe not answered within this time counts as failed (hung API server)")
	fs.IntVar(&o.FailureThreshold, "peer-failure-threshold", o.FailureThreshold,
		"consecutive failed probes after which a peer is unreachable (its virtual node goes NotReady)")
	fs.IntVar(&o.SuccessThreshold, "peer-success-threshold", o.SuccessThreshold,
		"consecutive successful probes after which an unreachable peer is reachable again")
	fs.DurationVar(&o.CallTimeout, "peer-call-timeout", o.CallTimeout,
		"timeout of every request made to a peer's API server")
	fs.DurationVar(&o.StatusRefresh, "peer-status-refresh", o.StatusRefresh,
		"how often a ForeignCluster's lastProbeTime and probeLatency are written while nothing else changes (0: only when a condition changes)")
}

// Validate reports the first invalid option.
func (o *Options) Validate() error {
	var errs []error
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"--peer-probe-interval", o.ProbeInterval},
		{"--peer-probe-timeout", o.ProbeTimeout},
		{"--peer-call-timeout", o.CallTimeout},
	} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", d.flag, d.v))
		}
	}
	if o.StatusRefresh < 0 {
		errs = append(errs, fmt.Errorf("--peer-status-refresh must not be negative, got %s", o.StatusRefresh))
	}
	if o.FailureThreshold < 1 {
		errs = append(errs, fmt.Errorf("--peer-failure-threshold must be at least 1, got %d", o.FailureThreshold))
	}
	if o.SuccessThreshold < 1 {
		errs = append(errs, fmt.Errorf("--peer-success-threshold must be at least 1, got %d", o.SuccessThreshold))
	}
	return errors.Join(errs...)
}

// DetectionBound is the longest time between a peer's API server dying or
// hanging and the peer being declared unreachable (not counting the status
// write): up to one interval until the next probe starts, then
// FailureThreshold probes that each take the longer of the interval and the
// timeout.
func (o *Options) DetectionBound() time.Duration {
	return o.ProbeInterval + time.Duration(o.FailureThreshold)*max(o.ProbeInterval, o.ProbeTimeout)
}

// withDefaults replaces zero values with the defaults.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.ProbeInterval == 0 {
		o.ProbeInterval = d.ProbeInterval
	}
	if o.ProbeTimeout == 0 {
		o.ProbeTimeout = d.ProbeTimeout
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = d.CallTimeout
	}
	if o.FailureThreshold == 0 {
		o.FailureThreshold = d.FailureThreshold
	}
	if o.SuccessThreshold == 0 {
		o.SuccessThreshold = d.SuccessThreshold
	}
	return o
}
