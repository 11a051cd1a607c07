package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// procState is what /proc says about a component's process.
type procState int

const (
	procDead procState = iota
	procRunning
	procPaused
)

// logMarker starts the line this package writes into a component's log before
// each start, so the tail of one run can be told from earlier runs.
const logMarker = "=== localcluster: "

// process is a component process started by this Go process. Processes of a
// cluster attached with Load have no process value: they are tracked through
// /proc only.
type process struct {
	pid       int
	startTime uint64
	done      chan struct{} // closed once the process has exited and been reaped
}

// spawnSpec is one component command line.
type spawnSpec struct {
	name    string
	binary  string
	args    []string
	logPath string
	detach  bool
	// cloneflags are namespaces the process starts in (new ones), e.g.
	// syscall.CLONE_NEWNET.
	cloneflags uintptr
	// extraFiles are passed to the process as descriptors 3, 4, ...
	extraFiles []*os.File
	// env replaces variables of this process's environment (KEY=value).
	env []string
}

// spawnRequests feeds the spawner goroutine (see spawnAttached).
var (
	spawnOnce     sync.Once
	spawnRequests chan spawnRequest
)

type spawnRequest struct {
	cmd  *exec.Cmd
	errc chan error
}

// spawnAttached starts cmd from a goroutine locked to its OS thread for the
// whole life of this process. PR_SET_PDEATHSIG fires when the *thread* that
// forked the child exits, not the process; the Go runtime may retire threads
// (e.g. when a locked goroutine exits), so forking from an arbitrary thread
// could kill a component while the test is still running. A permanently
// locked, never-exiting thread only dies with the process.
func spawnAttached(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnRequests = make(chan spawnRequest)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for r := range spawnRequests {
				r.errc <- r.cmd.Start()
			}
		}()
	})
	errc := make(chan error, 1)
	spawnRequests <- spawnRequest{cmd: cmd, errc: errc}
	return <-errc
}

// spawn starts a component with stdout and stderr appended to its log file.
// Attached processes (detach false) get SIGKILL when this process dies;
// detached ones run in their own session and outlive it. Either way the
// component leads its own process group.
func spawn(spec spawnSpec) (*process, error) {
	logf, err := os.OpenFile(spec.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer func() { _ = logf.Close() }() // the child has its own descriptor
	fmt.Fprintf(logf, "%s%s starting %s %s\n", logMarker, time.Now().Format(time.RFC3339), spec.binary, strings.Join(spec.args, " "))

	cmd := exec.Command(spec.binary, spec.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(componentEnv(os.Environ()), spec.env...)
	cmd.ExtraFiles = spec.extraFiles
	if spec.detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Cloneflags: spec.cloneflags}
		err = cmd.Start()
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Cloneflags: spec.cloneflags}
		err = spawnAttached(cmd)
	}
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.name, err)
	}
	p := &process{pid: cmd.Process.Pid, done: make(chan struct{})}
	if st, err := readProcStat(p.pid); err == nil {
		p.startTime = st.startTime
	}
	go func() {
		_ = cmd.Wait() // reap; the exit status is in the log
		close(p.done)
	}()
	return p, nil
}

// componentEnv drops variables that would make a component talk to another
// cluster than the one it is given on its command line.
func componentEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if strings.HasPrefix(kv, "KUBECONFIG=") || strings.HasPrefix(kv, "ETCDCTL_") || strings.HasPrefix(kv, "ETCD_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// procStat is the part of /proc/<pid>/stat this package uses.
type procStat struct {
	state     byte
	startTime uint64
}

func readProcStat(pid int) (procStat, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(data)
}

// parseProcStat parses /proc/<pid>/stat. The command name (field 2) is in
// parentheses and may itself contain spaces and parentheses, so fields are
// counted from the last ')'.
func parseProcStat(data []byte) (procStat, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return procStat{}, errors.New("malformed /proc stat: no ')'")
	}
	fields := strings.Fields(string(data[i+1:]))
	// fields[0] is field 3 (state); field 22 (starttime) is fields[19].
	if len(fields) < 20 || len(fields[0]) != 1 {
		return procStat{}, errors.New("malformed /proc stat: too few fields")
	}
	start, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("malformed /proc stat starttime: %w", err)
	}
	return procStat{state: fields[0][0], startTime: start}, nil
}

// stateOf reports whether the process identified by pid and start time is
// running, stopped (SIGSTOP) or gone. A zombie counts as gone, and so does a
// pid now used by another process (different start time).
func stateOf(pid int, startTime uint64) procState {
	if pid <= 0 {
		return procDead
	}
	st, err := readProcStat(pid)
	if err != nil {
		return procDead
	}
	if startTime != 0 && st.startTime != startTime {
		return procDead
	}
	switch st.state {
	case 'Z', 'X', 'x':
		// A thread-group leader turns zombie as soon as its own thread
		// exits; the process (and its sockets) is gone only once every
		// thread has.
		// A task directory that cannot be read (the process is being torn
		// down) counts as still exiting, not as gone.
		if tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task"); err != nil || len(tasks) > 1 {
			return procRunning
		}
		return procDead
	case 'T', 't':
		return procPaused
	default:
		return procRunning
	}
}

// errNotRunning is returned when signalling a process that is gone.
var errNotRunning = errors.New("not running")

// signal sends sig to the component's process group (each component leads
// its own), after checking that the pid still belongs to it.
func signal(pid int, startTime uint64, sig syscall.Signal) error {
	if stateOf(pid, startTime) == procDead {
		return errNotRunning
	}
	target := pid
	if pgid, err := syscall.Getpgid(pid); err == nil && pgid == pid {
		target = -pid
	}
	err := syscall.Kill(target, sig)
	if errors.Is(err, syscall.ESRCH) {
		return errNotRunning
	}
	return err
}

// waitState polls until the process reaches want (procDead or procPaused),
// done is closed (the child was reaped), or ctx ends.
func waitState(ctx context.Context, pid int, startTime uint64, done <-chan struct{}, want procState) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if stateOf(pid, startTime) == want {
			return nil
		}
		select {
		case <-done:
			if want == procDead {
				return nil
			}
			return errNotRunning
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// freePorts returns n distinct loopback TCP ports that were free a moment
// ago. They are found by listening on port 0 and closing; a component may
// still lose the race for one, which callers handle by retrying.
func freePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	out := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// logTail returns up to n last lines of the component log written since the
// component was last started.
func logTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }() // read only
	const max = 64 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > max {
		if _, err := f.Seek(fi.Size()-max, io.SeekStart); err != nil {
			return ""
		}
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return ""
	}
	return tailLines(string(data), n)
}

// tailLines keeps the lines after the last start marker and returns the last
// n of them.
func tailLines(s string, n int) string {
	if i := strings.LastIndex(s, logMarker); i >= 0 {
		if j := strings.IndexByte(s[i:], '\n'); j >= 0 {
			s = s[i+j+1:]
		} else {
			s = ""
		}
	}
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// addrInUse reports whether a component's log says it could not bind.
func addrInUse(log string) bool {
	return strings.Contains(log, "address already in use")
}

// ProcessStartTime returns the start time of pid (field 22 of
// /proc/<pid>/stat), which tells a process apart from a later one that reuses
// its PID. Other processes the tools start (the sandbox's agents) use it too.
func ProcessStartTime(pid int) (uint64, error) {
	st, err := readProcStat(pid)
	return st.startTime, err
}

// ProcessAlive reports whether the process pid that started at startTime
// still runs (a stopped one counts; a zombie or a reused PID does not).
func ProcessAlive(pid int, startTime uint64) bool {
	return startTime != 0 && stateOf(pid, startTime) != procDead
}

// FreeAddr returns a loopback address whose port was free a moment ago.
func FreeAddr() (string, error) {
	ports, err := freePorts(1)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), nil
}
