package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Profile is a pprof profile taken from an agent during the run. It is
// copied next to the results (raw, and as `go tool pprof -top` text) only
// when the target it belongs to is missed.
type Profile struct {
	// Target is the key of the TargetResult the profile explains.
	Target string `json:"target"`
	Agent  string `json:"agent"`
	// Component is "kube-apiserver" for a profile of the cluster's API
	// server (Agent names the cluster then); empty for the agent's.
	Component string `json:"component,omitempty"`
	Kind      string `json:"kind"` // cpu, heap or goroutine
	When      string `json:"when"`
	// File and Top are the names in the results directory once copied.
	File string `json:"file,omitempty"`
	Top  string `json:"top,omitempty"`
	tmp  string
}

// explains reports whether p explains the target of key: the target it
// was taken for; a failure trial's, detection and recovery; and the
// profiled offloaded burst's (shared placement), the shared ratio at every
// size and, an agent's, the agents' CPU per pod.
func (p Profile) explains(key string) bool {
	switch {
	case p.Target == key:
		return true
	case strings.HasPrefix(p.Target, "failure-"):
		return key == keyDetection || key == keyRecovery
	case p.Target == keyRatio:
		return strings.HasPrefix(key, keyRatio+"-") && !strings.HasPrefix(key, keyRatioPinned) ||
			key == keyAgentCPU && p.Component == ""
	}
	return false
}

// apiServer is Profile.Component of an API server's profile.
const apiServer = "kube-apiserver"

// name is what the profile's files are named after: the cluster, and the
// component unless it is the agent.
func (p Profile) name() string {
	if p.Component == "" {
		return p.Agent
	}
	return p.Agent + "-" + p.Component
}

// of says whose profile it is, e.g. "the beta agent".
func (p Profile) of() string {
	if p.Component == "" {
		return "the " + p.Agent + " agent"
	}
	return p.Agent + "'s " + p.Component
}

// pprofPaths are the agent endpoints of each kind.
var pprofPaths = map[string]string{
	"cpu":       "/debug/pprof/profile?seconds=%d",
	"heap":      "/debug/pprof/heap",
	"goroutine": "/debug/pprof/goroutine",
}

// captureProfile fetches one profile from agent a into the run's temporary
// directory (for cpu, over seconds).
func (e *env) captureProfile(ctx context.Context, a *agentProc, target, kind, when string, seconds int) (Profile, error) {
	p := Profile{Target: target, Agent: a.cluster.Name(), Kind: kind, When: when}
	path := pprofPaths[kind]
	if kind == "cpu" {
		path = fmt.Sprintf(path, seconds)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(seconds)*time.Second+30*time.Second)
	defer cancel()
	//nolint:gosec // G704: a loopback address the benchmark picked for its own agent's pprof endpoint
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.pprofAddr+path, nil)
	if err != nil {
		return p, err
	}
	resp, err := http.DefaultClient.Do(req) //nolint:gosec // G704: see above
	if err != nil {
		return p, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return p, fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
	}
	return p, e.storeProfile(&p, resp.Body)
}

// captureAPIServerProfile takes a CPU profile of k's API server over
// seconds (its /debug/pprof, served with localcluster's Profiling, read
// with the admin credentials) into the run's temporary directory.
func (e *env) captureAPIServerProfile(ctx context.Context, k *kube, target, when string, seconds int) (Profile, error) {
	p := Profile{Target: target, Agent: k.Name(), Component: apiServer, Kind: "cpu", When: when}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(seconds)*time.Second+30*time.Second)
	defer cancel()
	// The profile takes longer than k.cs's 30 s bound on every request:
	// a client of its own, bounded by ctx.
	cfg := rest.CopyConfig(k.cfg)
	cfg.Timeout = 0
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return p, err
	}
	data, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
		Param("seconds", fmt.Sprint(seconds)).DoRaw(ctx)
	if err != nil {
		return p, fmt.Errorf("profile of %s: %w", p.of(), err)
	}
	return p, e.storeProfile(&p, bytes.NewReader(data))
}

// storeProfile writes a profile read from r into the run's temporary
// directory and records its file in p.
func (e *env) storeProfile(p *Profile, r io.Reader) error {
	dir := filepath.Join(e.dir, "profiles")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, fmt.Sprintf("%s-%s-%s-*.pb.gz", p.Target, p.name(), p.Kind))
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	p.tmp = f.Name()
	return nil
}

// profileDuring runs fn while taking a CPU profile of both agents over about
// d and a goroutine profile of each agent halfway through; for the burst
// ratio, the startup SLO and the tenants' target, also a CPU profile of
// both API servers (the
// failure and unpeer trials kill the provider's, so there is nothing to
// profile there).
func (e *env) profileDuring(ctx context.Context, target, when string, d time.Duration, fn func() error) ([]Profile, error) {
	secs := max(int(d.Seconds()+0.5), 2)
	var mu sync.Mutex
	var out []Profile
	var errs []error
	var wg sync.WaitGroup
	add := func(p Profile, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
			return
		}
		out = append(out, p)
	}
	for _, name := range []string{consumerName, providerName} {
		a := e.agents[name]
		if target == keyRatio || target == keyStartupSLO || target == keyTenants {
			wg.Go(func() { add(e.captureAPIServerProfile(ctx, a.cluster, target, when, secs)) })
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			add(e.captureProfile(ctx, a, target, "cpu", when, secs))
		}()
		go func() {
			defer wg.Done()
			select {
			case <-time.After(d / 2):
			case <-ctx.Done():
				return
			}
			add(e.captureProfile(ctx, a, target, "goroutine", when+", halfway", 0))
		}()
	}
	err := fn()
	wg.Wait()
	return out, errors.Join(append(errs, err)...)
}

// saveProfile copies a profile into the results directory as
// <stamp>-<target>-<agent>-<kind>.pb.gz, with `go tool pprof -top` text
// next to it.
func saveProfile(p *Profile, outDir, stamp string) error {
	base := fmt.Sprintf("%s-%s-%s-%s", stamp, p.Target, p.name(), p.Kind)
	data, err := os.ReadFile(p.tmp)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(outDir, base+".pb.gz"), data, 0o644); err != nil {
		return err
	}
	p.File, p.Top = base+".pb.gz", base+".top.txt"
	return writeTop(p, outDir)
}

// topNodes is how many lines each section of a .top.txt keeps.
const topNodes = 60

// writeTop writes the .top.txt of a saved profile: flat first, then
// cumulative without the runtime's own frames, which shows what Annex's
// code spends the time (or parks the goroutines) in.
func writeTop(p *Profile, outDir string) error {
	header := fmt.Sprintf("# %s profile of %s (%s), for target %q\n", p.Kind, p.of(), p.When, p.Target)
	var text []byte
	for _, args := range [][]string{{"-top"}, {"-top", "-cum", `-hide=^runtime\.|^internal/runtime`}} {
		args = append(args, fmt.Sprintf("-nodecount=%d", topNodes))
		if p.Kind == "heap" {
			args = append(args, "-sample_index=inuse_space")
		}
		out, err := exec.Command("go", append(append([]string{"tool", "pprof"}, args...), filepath.Join(outDir, p.File))...).Output()
		if err != nil {
			return fmt.Errorf("go tool pprof %s %s: %w", strings.Join(args, " "), p.File, err)
		}
		text = append(text, fmt.Sprintf("%s# go tool pprof %s %s\n\n", header, strings.Join(args, " "), p.File)...)
		text = append(append(text, out...), '\n')
		header = ""
	}
	return os.WriteFile(filepath.Join(outDir, p.Top), text, 0o644)
}
