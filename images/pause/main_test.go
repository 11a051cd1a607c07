package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMain lets the test binary run as pause (the process under test).
func TestMain(m *testing.M) {
	if os.Getenv("PAUSE_TEST_RUN_MAIN") == "1" {
		if os.Getenv("PAUSE_TEST_ORPHANS") == "1" {
			makeOrphans()
		}
		main()
		return
	}
	os.Exit(m.Run())
}

// startPause runs main in a child process; the channel yields its exit code.
func startPause(t *testing.T, args ...string) (*os.Process, <-chan int) {
	t.Helper()
	return start(t, nil, args...)
}

// startPauseEnv is startPause with more environment variables.
func startPauseEnv(t *testing.T, env ...string) (*os.Process, <-chan int) {
	t.Helper()
	return start(t, env)
}

func start(t *testing.T, env []string, args ...string) (*os.Process, <-chan int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...) //nolint:gosec // the test binary itself
	cmd.Env = append(append(os.Environ(), "PAUSE_TEST_RUN_MAIN=1"), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	// Signals sent before the handlers are installed would kill it: wait
	// for its first line (or its end, with arguments).
	_, _ = bufio.NewReader(stderr).ReadString('\n')
	exited := make(chan int, 1)
	go func() {
		_ = cmd.Wait()
		exited <- cmd.ProcessState.ExitCode()
	}()
	return cmd.Process, exited
}

func waitExit(t *testing.T, exited <-chan int) int {
	t.Helper()
	select {
	case code := <-exited:
		return code
	case <-time.After(10 * time.Second):
		t.Fatal("pause did not exit")
		return -1
	}
}

func TestSignalsEndPause(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			p, exited := startPause(t)
			// A SIGCHLD (no child to reap) must not end it.
			if err := p.Signal(syscall.SIGCHLD); err != nil {
				t.Fatal(err)
			}
			select {
			case code := <-exited:
				t.Fatalf("pause exited (code %d) on SIGCHLD", code)
			case <-time.After(300 * time.Millisecond):
			}
			if err := p.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if code := waitExit(t, exited); code != 0 {
				t.Fatalf("exit code %d after %v, want 0", code, sig)
			}
		})
	}
}

func TestArgumentsRefused(t *testing.T) {
	_, exited := startPause(t, "extra")
	if code := waitExit(t, exited); code != 2 {
		t.Fatalf("exit code %d with an argument, want 2", code)
	}
}

// makeOrphans makes this process a child subreaper (as PID 1 of a pod is a
// reaper) and starts a shell that exits at once, leaving a sleep behind:
// both end as this process's children, and exit while main runs.
func makeOrphans() {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		panic(err)
	}
	if _, err := os.StartProcess("/bin/sh", []string{"sh", "-c", "sleep 0.3 & exit 0"}, &os.ProcAttr{}); err != nil {
		panic(err)
	}
}

// zombies lists the children of pid that have exited and not been reaped.
func zombies(t *testing.T, pid int) []string {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range stats {
		data, err := os.ReadFile(p) //nolint:gosec // /proc
		if err != nil {
			continue // gone
		}
		// pid (comm) state ppid ...
		s := string(data)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[0] == "Z" && f[1] == fmt.Sprint(pid) {
			out = append(out, s[:strings.LastIndexByte(s, ')')+1])
		}
	}
	return out
}

func TestReapsChildren(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("needs /bin/sh to make orphans")
	}
	p, exited := startPauseEnv(t, "PAUSE_TEST_ORPHANS=1")
	time.Sleep(time.Second) // the shell exits at once, the sleep after 0.3 s
	if z := zombies(t, p.Pid); len(z) != 0 {
		t.Fatalf("pause left zombie children: %v", z)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, exited); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
}
