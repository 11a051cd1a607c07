// Command pause is the CRI sandbox ("pause") image of Annex's local clusters.
// It is PID 1 of every pod: it holds the pod's namespaces open, reaps the
// zombies re-parented to it, and exits 0 on SIGTERM or SIGINT. Built into
// annex.dev/pause by internal/ociimage; static, no shell, no files.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "usage: pause (no arguments): waits for SIGTERM or SIGINT, reaping children, then exits 0")
		os.Exit(2)
	}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	fmt.Fprintln(os.Stderr, "pause: waiting for SIGTERM or SIGINT")
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every child that has exited; signals coalesce, so one
// SIGCHLD may stand for several children.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
