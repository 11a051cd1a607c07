package localcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// stateVersion is bumped when state.json changes incompatibly.
const stateVersion = 1

// stateFileName is the name of the state file inside the cluster directory.
const stateFileName = "state.json"

// state is what Start records in <dir>/state.json so that another process can
// re-attach to the cluster with Load: enough to signal every component
// (pid + start time, so a recycled pid is never signalled) and to restart the
// API server with exactly the same command line.
type state struct {
	Version     int    `json:"version"`
	Name        string `json:"name"`
	BinDir      string `json:"binDir"`
	PodCIDR     string `json:"podCIDR"`
	ServiceCIDR string `json:"serviceCIDR"`
	Nodes       int    `json:"nodes"`
	Detach      bool   `json:"detach"`
	AuditWrites bool   `json:"auditWrites,omitempty"`
	Profiling   bool   `json:"profiling,omitempty"`
	// Real nodes (see realnode.go); CgroupParent holds their cgroups in
	// every hierarchy.
	RealNodes       int      `json:"realNodes,omitempty"`
	NodeNetworkCIDR string   `json:"nodeNetworkCIDR,omitempty"`
	CgroupParent    string   `json:"cgroupParent,omitempty"`
	PauseImage      string   `json:"pauseImage,omitempty"`
	Images          []string `json:"images,omitempty"`
	// MetricsServer: metrics-server runs in real node 0 (see
	// metricsserver.go).
	MetricsServer bool `json:"metricsServer,omitempty"`
	// NetworkPolicies: kube-router's firewall runs on every real node
	// (see networkpolicy.go).
	NetworkPolicies bool             `json:"networkPolicies,omitempty"`
	Ports           ports            `json:"ports"`
	Components      []componentState `json:"components"`
}

// ports are the loopback ports the cluster's components listen on.
type ports struct {
	EtcdClient        int `json:"etcdClient"`
	EtcdPeer          int `json:"etcdPeer"`
	APIServer         int `json:"apiServer"`
	ControllerManager int `json:"controllerManager"`
	Scheduler         int `json:"scheduler"`
	Kwok              int `json:"kwok"`
}

// componentState is one component's process as last started.
type componentState struct {
	Name   string   `json:"name"`
	Binary string   `json:"binary"`
	Args   []string `json:"args"`
	Log    string   `json:"log"`
	PID    int      `json:"pid"`
	// StartTime is the process start time in clock ticks since boot
	// (/proc/<pid>/stat field 22); together with PID it identifies the
	// process.
	StartTime uint64 `json:"startTime"`
	// ChildPID and ChildStartTime identify, for a process of a real node,
	// the program nsenter runs there (nsenter's child, in the node's PID
	// namespace), which may outlive nsenter for a moment.
	ChildPID       int    `json:"childPID,omitempty"`
	ChildStartTime uint64 `json:"childStartTime,omitempty"`
}

// component returns the named component's entry, or nil.
func (s *state) component(name string) *componentState {
	for i := range s.Components {
		if s.Components[i].Name == name {
			return &s.Components[i]
		}
	}
	return nil
}

// setComponent replaces the named component's entry or appends it.
func (s *state) setComponent(cs componentState) {
	if p := s.component(cs.Name); p != nil {
		*p = cs
		return
	}
	s.Components = append(s.Components, cs)
}

func writeState(dir string, s *state) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, stateFileName), append(data, '\n'), 0o644)
}

func readState(dir string) (*state, error) {
	data, err := os.ReadFile(filepath.Join(dir, stateFileName))
	if err != nil {
		return nil, err
	}
	var s state
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, stateFileName), err)
	}
	if s.Version != stateVersion {
		return nil, fmt.Errorf("%s: unsupported state version %d (want %d)", filepath.Join(dir, stateFileName), s.Version, stateVersion)
	}
	if s.Name == "" {
		return nil, fmt.Errorf("%s: no cluster name", filepath.Join(dir, stateFileName))
	}
	return &s, nil
}

// writeFileAtomic writes data to a temporary file in the same directory,
// syncs it and renames it over path, so readers never see a partial file.
func writeFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil { // best-effort cleanup: err is what the caller gets
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return errors.Join(err, os.Remove(f.Name()))
	}
	return nil
}
