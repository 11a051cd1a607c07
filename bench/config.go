package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Config is what one run measures and how often.
type Config struct {
	Scale string `json:"scale"`
	// BurstSizes are the Deployment sizes of the offload burst.
	BurstSizes []int `json:"burstSizes"`
	// BurstTrials is how many times each size runs in each mode.
	BurstTrials int `json:"burstTrials"`
	// FailurePods is the number of offloaded pods behind the Service of the
	// failure-reaction trials; FailureTrials the trials per fault.
	FailurePods   int `json:"failurePods"`
	FailureTrials int `json:"failureTrials"`
	// UnpeerSizes are the numbers of offloaded pods of the forced-unpeer
	// trials; UnpeerTrials the trials per size.
	UnpeerSizes  []int `json:"unpeerSizes"`
	UnpeerTrials int   `json:"unpeerTrials"`
	// FootprintPods is the number of offloaded pods of the footprint and
	// churn measurement.
	FootprintPods int `json:"footprintPods"`
	// Settle is how long the clusters are left alone before an idle
	// window; Window is how long the window lasts.
	Settle Duration `json:"settle"`
	Window Duration `json:"window"`
	// Phases limits the run to some phases (all when empty).
	Phases []string `json:"phases,omitempty"`
	// Placements are the placements every burst trial runs in
	// (placementShared, placementPinned; empty in runs from before: shared
	// only).
	Placements []string `json:"placements,omitempty"`
	// StreamRate is the pods per second of the pod-startup stream, in each
	// mode, for StreamDuration (both zero in runs from before the phase).
	StreamRate     float64  `json:"streamRate,omitempty"`
	StreamDuration Duration `json:"streamDuration,omitempty"`
	// FreshTrials is how many times the fresh-namespace burst runs in each
	// mode, with FreshPods pods (zero in runs from before the phase).
	FreshTrials int `json:"freshTrials,omitempty"`
	FreshPods   int `json:"freshPods,omitempty"`
	// FailoverTrials is how many times each fault of the failover phase
	// runs (zero in runs from before the phase).
	FailoverTrials int `json:"failoverTrials,omitempty"`
	// TenantTrials is how many times the tenants phase runs in each mode
	// (tenant A quiet, tenant A flooding), with a burst of TenantPods pods
	// of tenant B; tenant A changes the annotations of TenantFloodPods
	// ShadowPods with TenantFloodWriters writers and TenantChurners create
	// and delete ShadowPods (all zero in runs from before the phase).
	TenantTrials       int `json:"tenantTrials,omitempty"`
	TenantPods         int `json:"tenantPods,omitempty"`
	TenantFloodPods    int `json:"tenantFloodPods,omitempty"`
	TenantFloodWriters int `json:"tenantFloodWriters,omitempty"`
	TenantChurners     int `json:"tenantChurners,omitempty"`
	// AgentArgs are extra flags of both agents (e.g. -v=1 to see why
	// something waits); a run with any is customized.
	AgentArgs []string `json:"agentArgs,omitempty"`
}

// Phase names, in the order they run.
const (
	phaseTunnel    = "tunnel"
	phaseIdle      = "idle"
	phaseBurst     = "burst"
	phaseStream    = "stream"
	phaseFresh     = "fresh"
	phaseTenants   = "tenants"
	phaseFootprint = "footprint"
	phaseFailure   = "failure"
	phaseFailover  = "failover"
	phaseUnpeer    = "unpeer"
)

// stream, fresh and tenants run after burst (which normally takes the
// footprint window with the pods of its last N=1000 trial) and before the
// failure, failover and unpeer phases, which kill the provider's API server
// and peer again. failover runs before unpeer, whose provider agent removes
// a tenant silent for 10 s (a partition of the failover phase would lose it).
var allPhases = []string{phaseTunnel, phaseIdle, phaseBurst, phaseStream, phaseFresh, phaseTenants, phaseFootprint, phaseFailure, phaseFailover, phaseUnpeer}

// presets are the scales `make bench BENCH_SCALE=...` chooses from.
var presets = map[string]Config{
	"small": {
		BurstSizes: []int{10, 100, 1000}, BurstTrials: 3,
		FailurePods: 100, FailureTrials: 3,
		UnpeerSizes: []int{10, 100}, UnpeerTrials: 1,
		FootprintPods: 1000,
		Settle:        Duration(5 * time.Second), Window: Duration(30 * time.Second),
		StreamRate: 20, StreamDuration: Duration(time.Minute),
		FreshTrials: 3, FreshPods: 20,
		FailoverTrials: 1,
		TenantTrials:   5, TenantPods: 100, TenantFloodPods: 40, TenantFloodWriters: 8, TenantChurners: 1,
	},
	"full": {
		BurstSizes: []int{10, 100, 1000, 5000}, BurstTrials: 3,
		FailurePods: 100, FailureTrials: 20,
		UnpeerSizes: []int{10, 100}, UnpeerTrials: 3,
		// Issue #20's memory target is at 5000 offloaded pods: the last
		// shared offloaded trial of N=5000 keeps its pods for the window.
		FootprintPods: 5000,
		Settle:        Duration(30 * time.Second), Window: Duration(60 * time.Second),
		StreamRate: 20, StreamDuration: Duration(5 * time.Minute),
		FreshTrials: 5, FreshPods: 20,
		FailoverTrials: 3,
		TenantTrials:   5, TenantPods: 500, TenantFloodPods: 100, TenantFloodWriters: 16, TenantChurners: 1,
	},
}

// configFromFlags reads the scale and the overrides (for quick runs while
// developing: tiny sizes, one trial, one phase).
func configFromFlags(fs *flag.FlagSet, args []string) (Config, options, error) {
	var o options
	scale := fs.String("scale", "small", "preset: small (under 10 minutes on 2 cores with -placements shared, plus about 5 for stream and fresh) or full (about 45 minutes with -placements shared, plus about 15 for stream and fresh); the pinned placement runs the bursts again")
	sizes := fs.String("sizes", "", "override the burst sizes, e.g. 5,20")
	trials := fs.Int("trials", 0, "override the trials per burst size and mode")
	failurePods := fs.Int("failure-pods", 0, "override the number of pods behind the failure-reaction Service")
	failureTrials := fs.Int("failure-trials", 0, "override the trials per fault")
	unpeerSizes := fs.String("unpeer-sizes", "", "override the forced-unpeer sizes, e.g. 5")
	unpeerTrials := fs.Int("unpeer-trials", 0, "override the trials per forced-unpeer size")
	footprintPods := fs.Int("footprint-pods", 0, "override the offloaded pods of the footprint and churn window")
	settle := fs.Duration("settle", 0, "override the quiet time before an idle window")
	window := fs.Duration("window", 0, "override the length of an idle window")
	streamRate := fs.Float64("stream-rate", 0, "override the pods per second of the pod-startup stream (small and full: 20)")
	streamDuration := fs.Duration("stream-duration", 0, "override how long the pod-startup stream runs in each mode (small: 1m, full: 5m)")
	freshTrials := fs.Int("fresh-trials", 0, "override the trials per mode of the burst into a fresh namespace (small: 3, full: 5)")
	freshPods := fs.Int("fresh-pods", 0, "override the pods of the burst into a fresh namespace (20)")
	failoverTrials := fs.Int("failover-trials", 0, "override the trials per fault (killed, partitioned) of the failover phase (small: 1, about 2½ minutes; full: 3)")
	tenantTrials := fs.Int("tenant-trials", 0, "override the trials per mode (tenant A quiet, tenant A flooding) of the tenants phase (small and full: 5)")
	tenantPods := fs.Int("tenant-pods", 0, "override the pods of tenant B's burst in the tenants phase (small: 100, full: 500)")
	tenantFloodPods := fs.Int("tenant-flood-pods", 0, "override the ShadowPods whose annotations tenant A changes in the tenants phase (small: 40, full: 100)")
	tenantWriters := fs.Int("tenant-flood-writers", 0, "override tenant A's concurrent annotation writers in the tenants phase (small: 8, full: 16)")
	tenantChurners := fs.Int("tenant-churners", -1, "override tenant A's concurrent ShadowPod creators (each deletes what it made 5 creations before) in the tenants phase (small and full: 1; 0: none)")
	phases := fs.String("phases", "", "run only these phases (comma-separated: "+strings.Join(allPhases, ",")+")")
	placements := fs.String("placements", strings.Join(allPlacements, ","), "run every burst trial in these placements (comma-separated): "+
		"shared (every process on every CPU) and pinned (the consumer's processes on one CPU, the provider's on another; needs 2 CPUs)")
	agentArgs := fs.String("agent-args", "", "extra flags of both agents, space-separated (e.g. -v=1: the reflector logs requeues and provider sessions)")
	fs.StringVar(&o.out, "out", "bench/results", "directory the results are written to")
	fs.StringVar(&o.bin, "bin", "bin", "directory holding annexctl and annex-agent (make build)")
	fs.StringVar(&o.kubeBin, "kube-bin", "", "directory holding the Kubernetes binaries (default: make tools' cache)")
	fs.BoolVar(&o.keep, "keep", false, "keep the clusters' temporary directory (logs) even when the run succeeds")
	fs.DurationVar(&o.waitIdle, "wait-idle", 0, "wait up to this long for other kube-apiserver processes on this machine to go away before starting")
	fs.StringVar(&o.render, "render", "", "measure nothing: render the Markdown of an earlier run's JSON again (next to it, and latest.md)")
	fs.StringVar(&o.notes, "notes", "", "a Markdown file whose text goes into the results as Notes (with -render: replaces them)")
	if err := fs.Parse(args); err != nil {
		return Config{}, o, err
	}
	if fs.NArg() > 0 {
		return Config{}, o, fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	c, ok := presets[*scale]
	if !ok {
		return c, o, fmt.Errorf("-scale %q: use small or full", *scale)
	}
	c.Scale = *scale
	var err error
	if *sizes != "" {
		if c.BurstSizes, err = parseSizes(*sizes); err != nil {
			return c, o, fmt.Errorf("-sizes: %w", err)
		}
	}
	if *unpeerSizes != "" {
		if c.UnpeerSizes, err = parseSizes(*unpeerSizes); err != nil {
			return c, o, fmt.Errorf("-unpeer-sizes: %w", err)
		}
	}
	override := func(dst *int, v int) {
		if v > 0 {
			*dst = v
		}
	}
	override(&c.BurstTrials, *trials)
	override(&c.FailurePods, *failurePods)
	override(&c.FailureTrials, *failureTrials)
	override(&c.UnpeerTrials, *unpeerTrials)
	override(&c.FootprintPods, *footprintPods)
	override(&c.FreshTrials, *freshTrials)
	override(&c.FreshPods, *freshPods)
	override(&c.FailoverTrials, *failoverTrials)
	override(&c.TenantTrials, *tenantTrials)
	override(&c.TenantPods, *tenantPods)
	override(&c.TenantFloodPods, *tenantFloodPods)
	override(&c.TenantFloodWriters, *tenantWriters)
	if *tenantChurners >= 0 {
		c.TenantChurners = *tenantChurners
	}
	if *streamRate < 0 || *streamDuration < 0 {
		return c, o, errors.New("-stream-rate and -stream-duration must be positive")
	}
	if *streamRate > 0 {
		c.StreamRate = *streamRate
	}
	if *streamDuration > 0 {
		c.StreamDuration = Duration(*streamDuration)
	}
	if *settle > 0 {
		c.Settle = Duration(*settle)
	}
	if *window > 0 {
		c.Window = Duration(*window)
	}
	c.AgentArgs = strings.Fields(*agentArgs)
	if *phases != "" {
		for p := range strings.SplitSeq(*phases, ",") {
			p = strings.TrimSpace(p)
			if !contains(allPhases, p) {
				return c, o, fmt.Errorf("-phases: unknown phase %q (phases: %s)", p, strings.Join(allPhases, ","))
			}
			c.Phases = append(c.Phases, p)
		}
	}
	for p := range strings.SplitSeq(*placements, ",") {
		p = strings.TrimSpace(p)
		if !contains(allPlacements, p) {
			return c, o, fmt.Errorf("-placements: unknown placement %q (placements: %s)", p, strings.Join(allPlacements, ","))
		}
		if !contains(c.Placements, p) {
			c.Placements = append(c.Placements, p)
		}
	}
	if c.Scale != "small" && c.Scale != "full" || len(c.BurstSizes) == 0 {
		return c, o, errors.New("no burst sizes")
	}
	return c, o, nil
}

// options are the run's settings that do not change what is measured.
type options struct {
	out, bin, kubeBin string
	render, notes     string
	keep              bool
	waitIdle          time.Duration
}

// runs reports whether phase p is part of this run.
func (c Config) runs(p string) bool { return len(c.Phases) == 0 || contains(c.Phases, p) }

// needsClusters reports whether a phase of this run needs the clusters
// (all but tunnel do).
func (c Config) needsClusters() bool {
	for _, p := range allPhases {
		if p != phaseTunnel && c.runs(p) {
			return true
		}
	}
	return false
}

// custom reports whether the run departs from its preset. The stream,
// fresh and failover settings count only when set: runs from before those
// phases have none.
func (c Config) custom() bool {
	p := presets[c.Scale]
	newer := c.StreamRate > 0 && (c.StreamRate != p.StreamRate || c.StreamDuration != p.StreamDuration) ||
		c.FreshTrials > 0 && (c.FreshTrials != p.FreshTrials || c.FreshPods != p.FreshPods) ||
		c.FailoverTrials > 0 && c.FailoverTrials != p.FailoverTrials ||
		c.TenantTrials > 0 && fmt.Sprint(c.TenantTrials, c.TenantPods, c.TenantFloodPods, c.TenantFloodWriters, c.TenantChurners) !=
			fmt.Sprint(p.TenantTrials, p.TenantPods, p.TenantFloodPods, p.TenantFloodWriters, p.TenantChurners)
	return fmt.Sprint(p.BurstSizes, p.BurstTrials, p.FailurePods, p.FailureTrials, p.UnpeerSizes, p.UnpeerTrials, p.FootprintPods, p.Settle, p.Window) !=
		fmt.Sprint(c.BurstSizes, c.BurstTrials, c.FailurePods, c.FailureTrials, c.UnpeerSizes, c.UnpeerTrials, c.FootprintPods, c.Settle, c.Window) ||
		newer || len(c.Phases) > 0 || len(c.AgentArgs) > 0 || fmt.Sprint(c.placements()) != fmt.Sprint(allPlacements) && len(c.Placements) > 0
}

// placements are the placements of the burst trials: those asked for, or
// shared only in runs from before placements existed.
func (c Config) placements() []string {
	if len(c.Placements) == 0 {
		return []string{placementShared}
	}
	return c.Placements
}

// maxPods is the most pods the provider runs at once.
func (c Config) maxPods() int {
	m := 0
	for _, n := range c.BurstSizes {
		m = max(m, n)
	}
	for _, n := range c.UnpeerSizes {
		m = max(m, n)
	}
	return max(m, c.FootprintPods, c.FailurePods, c.streamAlive(), c.FreshPods, c.TenantPods+c.TenantFloodPods+c.TenantChurners*churnKeep)
}

// streamAlive is about the most pods the stream keeps at once: every pod
// lives from its creation to streamLinger after it started, plus its
// deletion; 15 s of the stream leaves room for slow starts.
func (c Config) streamAlive() int {
	if c.StreamRate <= 0 {
		return 0
	}
	return int(math.Ceil(c.StreamRate * 15))
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Duration is a time.Duration that reads as "30s" in JSON.
type Duration time.Duration

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes the duration as Go prints it.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads what MarshalText writes.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = Duration(v)
	return err
}
