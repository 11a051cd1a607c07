// Command bench measures Annex on fresh local clusters and writes the
// results to bench/results/: <date>.json (every trial's raw numbers and the
// environment), <date>.md (tables saying what was measured, how, the result,
// the target and whether it was met) and latest.md (a copy of the newest
// Markdown). Where a target is missed, pprof profiles of the agents that
// explain it are saved next to them.
//
// First, before any cluster runs:
//
//   - tunnel: pod-to-pod TCP throughput and round trips across an Annex
//     network link (two annex-gateway processes, WireGuard), the same from a
//     pod on a non-gateway node through the fabric (internal/fabric), and a
//     plain veth, on network namespaces of its own (needs root).
//
// Then it starts a consumer (alpha) and a provider (beta) with
// internal/localcluster in a temporary directory, installs Annex, runs both
// agents as local processes (with --pprof-bind-address) and peers them. Then,
// in this order:
//
//   - idle: an idle window with nothing offloaded (footprint, churn);
//   - burst: Deployments of N pods created offloaded and directly on the
//     provider, interleaved, timed until every pod is Ready, each trial in
//     two placements: shared (every process on every CPU) and pinned (the
//     consumer's processes on one CPU, the provider's on another);
//   - stream: SIG Scalability's pod startup SLO under a steady stream of
//     pods (20/s), offloaded then directly on the provider: create call to
//     the pod seen Running through a watch, p50/p90/p99;
//   - fresh: a Deployment of 20 pods created 1 s after its namespace's
//     offload was requested, against the same in a fresh namespace of the
//     provider: time to the first and to every pod Ready;
//   - tenants: a second consumer (gamma, tenant A) peered with the same
//     provider writes there with its tenant credential as fast as it can
//     (annotation changes of its ShadowPods, ShadowPods created and
//     deleted) while the consumer (tenant B) offloads a burst: B's pods'
//     offloading latency with A quiet and with A flooding;
//   - footprint: an idle window with many offloaded pods: agent RSS and CPU
//     from /proc, API writes from rest_client_requests_total and, attributed
//     by object, from watches on both API servers;
//   - failure: a Service's offloaded pods while the provider's API server is
//     killed or paused, until the endpoints are withdrawn, and after the
//     resume until they are back;
//   - failover: a StatefulSet in a namespace offloaded with failover
//     (F = 10 s, T = 25 s) on a provider that is killed or partitioned (the
//     consumer reaching it through an internal/partition proxy, cut): time
//     until every member runs Ready on the consumer's own node, and the
//     samples (every 100 ms) in which one member ran in both places;
//   - unpeer: `annexctl unpeer --force` with a dead provider.
//
// The clusters and agents are stopped at the end, also on failure and on
// Ctrl-C. Timings are reported, never asserted: `make test` does not run
// this. Usage:
//
//	make bench BENCH_SCALE=small   # or: go run ./bench -scale small
//	go run ./bench -sizes 5 -trials 1 -failure-trials 1 -unpeer-sizes 5 -footprint-pods 5 -out /tmp/bench
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/annexhq/annex/internal/localcluster"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	// controller-runtime's clients log nothing the benchmark needs, and
	// complain on stderr when no logger is set.
	ctrllog.SetLogger(logr.Discard())
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "bench measures Annex on fresh local clusters and writes bench/results/ (see docs/bench.md).\n\nUsage: go run ./bench [flags]\n\nFlags:\n")
		fs.PrintDefaults()
	}
	cfg, o, err := configFromFlags(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	notes := ""
	if o.notes != "" {
		data, err := os.ReadFile(o.notes)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		notes = string(data)
	}
	if o.render != "" {
		if err := render(o.render, notes); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		return 0
	}
	if o.kubeBin == "" {
		o.kubeBin = localcluster.DefaultBinDir()
	}
	if err := localcluster.CheckBinaries(o.kubeBin); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	for _, b := range []string{"annexctl", "annex-agent"} {
		if _, err := os.Stat(filepath.Join(o.bin, b)); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s missing in %s: run `make build`\n", b, o.bin)
			return 1
		}
	}
	if o.bin, err = filepath.Abs(o.bin); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if o.waitIdle > 0 {
		if err := waitForIdleMachine(ctx, o.waitIdle); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
	}
	start := time.Now()
	dir, err := os.MkdirTemp("", "annex-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	logFile, err := os.Create(filepath.Join(dir, "bench.log"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer func() { _ = logFile.Close() }() // the log is best effort (see logger)
	l := &logger{start: start, file: logFile}
	r := &Results{Environment: newEnvironment(start), Config: cfg, Notes: notes}
	r.Environment.ProviderNodes = providerNodes(cfg.maxPods())
	r.Environment.OtherAPIServers = otherAPIServers(dir)
	l.printf("Annex benchmarks, scale %s (temporary directory %s, log %s)", cfg.Scale, dir, logFile.Name())
	if r.Environment.OtherAPIServers > 0 {
		l.printf("WARNING: %d other kube-apiserver processes run on this machine: the numbers will be skewed", r.Environment.OtherAPIServers)
	}

	failed := measure(ctx, l, dir, o, cfg, r)
	interrupted := ctx.Err() != nil
	if interrupted {
		l.printf("interrupted: stopping the clusters; no results written")
	} else {
		r.Environment.DurationSeconds = time.Since(start).Round(time.Second).Seconds()
		if err := finish(r, o.out, l); err != nil {
			l.printf("writing the results: %v", err)
			failed = true
		}
	}
	if failed || interrupted || o.keep {
		l.printf("kept %s (cluster and agent logs, bench.log)", dir)
	} else {
		_ = os.RemoveAll(dir)
	}
	switch {
	case interrupted:
		return 130
	case failed:
		return 1
	}
	return 0
}

// measure starts the clusters, runs the phases and stops the clusters; it
// reports whether something failed (recorded in r.Errors).
func measure(ctx context.Context, l *logger, dir string, o options, cfg Config, r *Results) (failed bool) {
	fail := func(phase string, err error) {
		if err == nil || ctx.Err() != nil {
			return
		}
		failed = true
		r.Errors = append(r.Errors, fmt.Sprintf("%s: %v", phase, err))
		l.printf("%s: ERROR: %v", phase, err)
	}
	if cfg.runs(phaseTunnel) && ctx.Err() == nil {
		// First, while no cluster runs: it needs none, and measures CPU-bound
		// traffic.
		t, err := runTunnel(ctx, l, dir, o.bin)
		r.Tunnel = t
		fail(phaseTunnel, err)
	}
	if !cfg.needsClusters() || ctx.Err() != nil {
		return failed
	}
	e, err := startEnv(ctx, l, dir, o.bin, o.kubeBin, cfg)
	defer func() {
		l.printf("stopping the clusters")
		e.stop()
	}()
	if err != nil {
		fail("set-up", err)
		return true
	}
	if err := e.offload(ctx, offloadNS); err != nil {
		fail("set-up", err)
		return true
	}
	others := func() {
		r.Environment.OtherAPIServers = max(r.Environment.OtherAPIServers, otherAPIServers(dir))
	}
	// quiet waits for the machine to be quiet before a phase (see
	// phaseQuietMax) and says so when it had to wait.
	quiet := func(phase string) {
		waited, err := waitQuiet(ctx, quietBusy, quietFor, phaseQuietMax)
		switch {
		case err != nil:
		case waited >= phaseQuietMax:
			l.printf("%s: the machine is still busy after %s; starting anyway", phase, phaseQuietMax)
		case waited > 5*time.Second:
			l.printf("%s: waited %.0fs for a quiet machine", phase, waited.Seconds())
		}
	}

	if cfg.runs(phaseIdle) && ctx.Err() == nil {
		w, err := measureWindow(ctx, e, cfg, "no offloaded pods", 0)
		fail(phaseIdle, err)
		if err == nil {
			r.Windows = append(r.Windows, w)
		}
		others()
	}
	footprintDone := false
	if cfg.runs(phaseBurst) && ctx.Err() == nil {
		var err error
		footprintDone, err = runBursts(ctx, e, cfg, r)
		fail(phaseBurst, err)
		others()
	}
	if cfg.runs(phaseStream) && cfg.StreamRate > 0 && cfg.StreamDuration > 0 && ctx.Err() == nil {
		quiet(phaseStream)
		fail(phaseStream, runStreams(ctx, e, cfg, r))
		others()
	}
	if cfg.runs(phaseFresh) && cfg.FreshTrials > 0 && cfg.FreshPods > 0 && ctx.Err() == nil {
		quiet(phaseFresh)
		fail(phaseFresh, runFresh(ctx, e, cfg, r))
		others()
	}
	if cfg.runs(phaseTenants) && cfg.TenantTrials > 0 && cfg.TenantPods > 0 && ctx.Err() == nil {
		quiet(phaseTenants)
		fail(phaseTenants, runTenants(ctx, e, cfg, r))
		others()
	}
	if cfg.runs(phaseFootprint) && !footprintDone && ctx.Err() == nil {
		quiet(phaseFootprint)
		fail(phaseFootprint, runFootprint(ctx, e, cfg, r))
		others()
	}
	if cfg.runs(phaseFailure) && ctx.Err() == nil {
		quiet(phaseFailure)
		trials, err := runFailures(ctx, e, cfg)
		r.Failures = append(r.Failures, trials...)
		fail(phaseFailure, err)
		if err == nil && missed(evaluate(r), keyDetection, keyRecovery) {
			for _, s := range summarizeFailures(r.Failures) {
				if s.Detection.P99 <= targetDetection && s.RecoveryAfterAPI.P99 <= targetRecovery {
					continue
				}
				e.log.printf("failure: %s provider missed a target: one more trial with the agents profiled", s.Fault)
				est := time.Duration((s.Detection.P50+s.Recovery.P50+3)*float64(time.Second)) + 3*time.Second
				t, profiles, err := profileFailure(ctx, e, cfg, s.Fault, est)
				r.Failures = append(r.Failures, t)
				r.Profiles = append(r.Profiles, profiles...)
				fail(phaseFailure+" (profiled run)", err)
			}
		}
		if ctx.Err() == nil {
			fail(phaseFailure+" (clean-up)", failureCleanup(ctx, e, cfg.FailurePods))
		}
		others()
	}
	if cfg.runs(phaseFailover) && cfg.FailoverTrials > 0 && ctx.Err() == nil {
		quiet(phaseFailover)
		trials, err := runFailovers(ctx, e, cfg)
		r.Failovers = append(r.Failovers, trials...)
		fail(phaseFailover, err)
		others()
	}
	if cfg.runs(phaseUnpeer) && ctx.Err() == nil {
		quiet(phaseUnpeer)
		trials, err := runUnpeers(ctx, e, cfg)
		r.Unpeers = append(r.Unpeers, trials...)
		fail(phaseUnpeer, err)
		// A profile explains a slow unpeer, not one that leaves something.
		n, slowest := 0, 0.0
		for _, t := range trials {
			if d := max(t.CommandSeconds, t.CleanSeconds); d > slowest {
				n, slowest = t.N, d
			}
		}
		if err == nil && slowest > targetUnpeer {
			last := trials[len(trials)-1]
			est := time.Duration(slowest*float64(time.Second)) + 20*time.Second
			e.log.printf("forced unpeer: target missed: one more trial (N=%d) with the agents profiled", n)
			t, profiles, err := profileUnpeer(ctx, e, &last, n, est)
			r.Unpeers = append(r.Unpeers, t)
			r.Profiles = append(r.Profiles, profiles...)
			fail(phaseUnpeer+" (profiled run)", err)
		}
		others()
	}
	return failed
}

// runFootprint offloads cfg.FootprintPods pods (profiling the agents
// meanwhile, for the burst ratio target), measures the footprint window and
// deletes them. It is used when the burst phase did not keep the pods of one
// of its trials for it.
func runFootprint(ctx context.Context, e *env, cfg Config, r *Results) error {
	n := cfg.FootprintPods
	t := BurstTrial{N: n, Mode: modeOffloaded}
	name := "footprint"
	profiles, err := e.profileDuring(ctx, keyRatio, fmt.Sprintf("an offloaded burst of %d pods (the footprint phase's)", n), profileEstimate(r, n), func() error {
		return burstUp(ctx, e, &t, name)
	})
	r.Profiles = append(r.Profiles, profiles...)
	if err != nil {
		return err
	}
	e.log.printf("footprint: %d offloaded pods Ready after %.1fs (agents profiled meanwhile)", n, t.AllReadySeconds)
	err = runFootprintWindow(ctx, e, cfg, r, n)
	return errors.Join(err, burstDown(ctx, e, &t, name))
}

// runFootprintWindow measures the idle window with n offloaded pods Ready
// and takes a heap profile of the consumer's agent.
func runFootprintWindow(ctx context.Context, e *env, cfg Config, r *Results, n int) error {
	win, err := measureWindow(ctx, e, cfg, fmt.Sprintf("%d offloaded pods", n), n)
	if err != nil {
		return err
	}
	r.Windows = append(r.Windows, win)
	p, err := e.captureProfile(ctx, e.agents[consumerName], keyRSS, "heap", fmt.Sprintf("with %d offloaded pods, after the idle window", n), 0)
	if err != nil {
		return err
	}
	r.Profiles = append(r.Profiles, p)
	return nil
}

// finish evaluates the targets, copies the profiles of missed targets and
// writes the results.
func finish(r *Results, out string, l *logger) error {
	r.Targets = evaluate(r)
	s := stamp(r.Environment.Date)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	var kept []Profile
	for _, p := range r.Profiles {
		if !slices.ContainsFunc(r.Targets, func(t TargetResult) bool { return t.missed() && p.explains(t.Key) }) {
			continue
		}
		if err := saveProfile(&p, out, s); err != nil {
			return err
		}
		kept = append(kept, p)
	}
	r.Profiles = kept
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	files, err := writeResults(out, r, markdown(r, out), append(data, '\n'))
	for _, f := range files {
		l.printf("wrote %s", f)
	}
	for _, p := range kept {
		l.printf("wrote %s and %s", filepath.Join(out, p.File), filepath.Join(out, p.Top))
	}
	for _, t := range r.Targets {
		l.printf("target %-13s %-40s (target %s): %s", t.Key, orDash(t.Result), t.Target, t.met())
	}
	return err
}

// render writes the Markdown of the results in path (a <stamp>.json) again,
// with the liveness writes counted and the targets evaluated again from the
// raw numbers and, if notes is not empty, these notes.
func render(path, notes string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	r := &Results{}
	if err := json.Unmarshal(data, r); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for i := range r.Windows {
		r.Windows[i].countLiveness() // as this version of the benchmark counts them
	}
	r.Targets = evaluate(r)
	if notes != "" {
		r.Notes = notes
	}
	for i := range r.Profiles {
		if err := writeTop(&r.Profiles[i], filepath.Dir(path)); err != nil {
			return err
		}
	}
	if data, err = json.MarshalIndent(r, "", "  "); err != nil {
		return err
	}
	files, err := writeResults(filepath.Dir(path), r, markdown(r, filepath.Dir(path)), append(data, '\n'))
	for _, f := range files {
		fmt.Println("wrote", f)
	}
	return err
}

// waitForIdleMachine waits until no kube-apiserver runs on this machine.
func waitForIdleMachine(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		n := otherAPIServers("")
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d kube-apiserver processes still running after %s", n, timeout)
		}
		fmt.Printf("waiting for %d other kube-apiserver processes to go away (up to %s)\n", n, time.Until(deadline).Round(time.Second))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(30 * time.Second):
		}
	}
}
