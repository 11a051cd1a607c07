package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// say prints its arguments.
func say(args []string, stdout io.Writer) int {
	fmt.Fprintln(stdout, strings.Join(args, " "))
	return 0
}

// get GETs one URL and prints the body; 1 when the request fails or the
// status is not 2xx, 2 on bad usage. No proxy is used, whatever the
// environment says: the request goes where the URL says.
func get(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	url, timeout, ok := oneArgWithTimeout("get", "URL", 5*time.Second, "give up after this long (connecting and reading the reply)", args, stderr)
	if !ok {
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		fmt.Fprintf(stderr, "echo-server get: %v\n", err)
		return 2
	}
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "echo-server get: %v\n", err)
		return 1
	}
	defer resp.Body.Close() //nolint:errcheck // read-only
	if _, err := io.Copy(stdout, resp.Body); err != nil {
		fmt.Fprintf(stderr, "echo-server get %s: reading the reply: %v\n", url, err)
		return 1
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		fmt.Fprintf(stderr, "echo-server get %s: %s\n", url, resp.Status)
		return 1
	}
	return 0
}

// dial opens a TCP connection to HOST:PORT and closes it: 0 when it was
// opened, 1 when it was refused or timed out, 2 on bad usage. It tells a
// network policy's drop (a timeout) from a port nothing listens on
// (refused) in its message.
func dial(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	addr, timeout, ok := oneArgWithTimeout("dial", "HOST:PORT", 3*time.Second, "give up connecting after this long", args, stderr)
	if !ok {
		return 2
	}
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		fmt.Fprintf(stderr, "echo-server dial: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "connected to %s from %s\n", conn.RemoteAddr(), conn.LocalAddr())
	_ = conn.Close()
	return 0
}

// oneArgWithTimeout parses the arguments of command cmd: an optional
// -timeout (default def) and exactly one argument, named arg in the usage
// it prints to stderr when they are wrong (ok false).
func oneArgWithTimeout(cmd, arg string, def time.Duration, help string, args []string, stderr io.Writer) (string, time.Duration, bool) {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", def, help)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: echo-server %s [-timeout %s] %s\n", cmd, def, arg)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return "", 0, false
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return "", 0, false
	}
	return fs.Arg(0), *timeout, true
}

// maxBurn bounds burn, so a mistyped duration cannot keep a CPU busy for
// days.
const maxBurn = time.Hour

// burn keeps one CPU busy for the duration in args[0]; 2 on bad usage.
func burn(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: echo-server burn DURATION (for example 90s)")
		return 2
	}
	d, err := time.ParseDuration(args[0])
	if err != nil || d <= 0 || d > maxBurn {
		fmt.Fprintf(stderr, "echo-server burn: %q is not a duration between 0 and %s\n", args[0], maxBurn)
		return 2
	}
	start := time.Now()
	n := 0
	for time.Since(start) < d {
		for i := range 100000 {
			n += i & 1
		}
	}
	fmt.Fprintf(stdout, "burned %s (%d)\n", time.Since(start).Round(time.Millisecond), n%2)
	return 0
}
