package main

import (
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
)

// Profile is a pprof profile taken from an agent during the run. It is
// copied next to the results (raw, and as `go tool pprof -top` text) only
// when the target it belongs to is missed.
type Profile struct {
	// Target is the key of the TargetResult the profile explains.
	Target string `json:"target"`
	Agent  string `json:"agent"`
	Kind   string `json:"kind"` // cpu, heap or goroutine
	When   string `json:"when"`
	// File and Top are the names in the results directory once copied.
	File string `json:"file,omitempty"`
	Top  string `json:"top,omitempty"`
	tmp  string
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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.pprofAddr+path, nil)
	if err != nil {
		return p, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return p, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return p, fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
	}
	dir := filepath.Join(e.dir, "profiles")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return p, err
	}
	f, err := os.CreateTemp(dir, fmt.Sprintf("%s-%s-%s-*.pb.gz", target, p.Agent, kind))
	if err != nil {
		return p, err
	}
	_, err = io.Copy(f, resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return p, err
	}
	p.tmp = f.Name()
	return p, nil
}

// profileDuring runs fn while taking a CPU profile of both agents over about
// d and a goroutine profile of each halfway through.
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
	base := fmt.Sprintf("%s-%s-%s-%s", stamp, p.Target, p.Agent, p.Kind)
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
	header := fmt.Sprintf("# %s profile of the %s agent (%s), for target %q\n", p.Kind, p.Agent, p.When, p.Target)
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
