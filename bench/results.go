package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/annexhq/annex/internal/localcluster"
	"github.com/annexhq/annex/internal/remote"
)

// Results is everything one run measured; it is written as JSON as is.
type Results struct {
	Environment Environment     `json:"environment"`
	Config      Config          `json:"config"`
	Targets     []TargetResult  `json:"targets"`
	Bursts      []BurstTrial    `json:"bursts,omitempty"`
	Streams     []StreamRun     `json:"streams,omitempty"`
	Fresh       []FreshTrial    `json:"fresh,omitempty"`
	Tenants     []TenantTrial   `json:"tenants,omitempty"`
	TenantBytes *TenantBytes    `json:"tenantBytes,omitempty"`
	Failures    []FailureTrial  `json:"failures,omitempty"`
	Failovers   []FailoverTrial `json:"failovers,omitempty"`
	Unpeers     []UnpeerTrial   `json:"unpeers,omitempty"`
	Windows     []IdleWindow    `json:"windows,omitempty"`
	Tunnel      *TunnelResult   `json:"tunnel,omitempty"`
	Profiles    []Profile       `json:"profiles,omitempty"`
	Errors      []string        `json:"errors,omitempty"`
	// Notes is what a person wrote about the run (-notes).
	Notes string `json:"notes,omitempty"`
}

// Environment says where and when the numbers were taken.
type Environment struct {
	Date            time.Time `json:"date"`
	DurationSeconds float64   `json:"durationSeconds"`
	GitCommit       string    `json:"gitCommit"`
	GitDirty        bool      `json:"gitDirty"`
	GoVersion       string    `json:"goVersion"`
	OS              string    `json:"os"`
	Arch            string    `json:"arch"`
	CPUs            int       `json:"cpus"`
	KubeVersion     string    `json:"kubeVersion"`
	// LoadAverage is /proc/loadavg's 1, 5 and 15 minute averages when the
	// run started.
	LoadAverage string `json:"loadAverage"`
	// OtherAPIServers is the most kube-apiserver processes of other runs
	// or people seen on the machine at any phase boundary: when not 0, the
	// numbers are skewed by their load.
	OtherAPIServers int `json:"otherAPIServers"`
	// ProviderNodes is the number of kwok nodes of the provider.
	ProviderNodes int `json:"providerNodes"`
	// PeerProbe is how the agents probe their peers (their defaults).
	PeerProbe PeerProbe `json:"peerProbe"`
	// PinnedSkipped says why the pinned burst placement did not run
	// although asked for (fewer than 2 CPUs).
	PinnedSkipped string `json:"pinnedSkipped,omitempty"`
}

// PeerProbe are the agents' peer health probe settings.
type PeerProbe struct {
	Interval         Duration `json:"interval"`
	Timeout          Duration `json:"timeout"`
	FailureThreshold int      `json:"failureThreshold"`
	SuccessThreshold int      `json:"successThreshold"`
}

func newEnvironment(start time.Time) Environment {
	env := Environment{
		Date: start.UTC(), GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
		CPUs: runtime.NumCPU(), KubeVersion: localcluster.KubeVersion, LoadAverage: loadAverage(),
	}
	probe := remote.DefaultOptions()
	env.PeerProbe = PeerProbe{Interval: Duration(probe.ProbeInterval), Timeout: Duration(probe.ProbeTimeout),
		FailureThreshold: probe.FailureThreshold, SuccessThreshold: probe.SuccessThreshold}
	if out, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		env.GitCommit = strings.TrimSpace(string(out))
	}
	if out, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil {
		env.GitDirty = len(strings.TrimSpace(string(out))) > 0
	}
	return env
}

// TargetResult is one goal of issue #9 and how this run did against it.
type TargetResult struct {
	Key    string `json:"key"`
	What   string `json:"what"`
	How    string `json:"how"`
	Result string `json:"result"`
	Target string `json:"target"`
	// Met is nil when the run did not measure it.
	Met *bool `json:"met"`
	// Why explains a miss.
	Why string `json:"why,omitempty"`
}

// missed reports whether the run measured t and missed it.
func (t TargetResult) missed() bool { return t.Met != nil && !*t.Met }

func (t TargetResult) met() string {
	switch {
	case t.Met == nil:
		return "not measured"
	case *t.Met:
		return "yes"
	}
	return "**no**"
}

// stamp names a run's files: the UTC start time.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T1504Z") }

// writeResults writes <stamp>.json and <stamp>.md into dir and copies the
// Markdown to latest.md, unless the run measured nothing (a failed set-up):
// latest.md, which the README links, keeps the last run with numbers.
func writeResults(dir string, r *Results, md string, json []byte) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	s := stamp(r.Environment.Date)
	type file struct {
		name string
		data []byte
	}
	files := []file{{s + ".json", json}, {s + ".md", []byte(md)}}
	if r.measured() {
		files = append(files, file{"latest.md", []byte(md)})
	}
	var written []string
	for _, f := range files {
		path := fmt.Sprintf("%s/%s", strings.TrimRight(dir, "/"), f.name)
		if err := os.WriteFile(path, f.data, 0o644); err != nil {
			return written, err
		}
		written = append(written, path)
	}
	return written, nil
}

// measured reports whether the run has a number of any target.
func (r *Results) measured() bool {
	for _, t := range r.Targets {
		if t.Met != nil {
			return true
		}
	}
	return false
}
