// Command echo-server is the test image of Annex's real-node sandbox and e2e
// tests (annex.dev/echo, built by internal/ociimage). With no arguments (or
// "serve") it serves HTTP on $PORT; "say" and "get" are shell-free commands
// to run under `kubectl exec`. Run `echo-server help` for the details.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
)

const usage = `usage:
  echo-server [serve]
      Serve HTTP on :$PORT (default 8080), one log line per request on stdout:
        /                  JSON: hostname, $POD_NAME, $POD_NAMESPACE, $NODE_NAME,
                           the caller's address
        /exit?code=N       reply, then exit with code N (0-255)
        /healthz, /readyz  200 "ok", or 503 once failed with
        /health?state=fail|ok, /ready?state=fail|ok
      Exits 0 on SIGTERM or SIGINT.
  echo-server say WORDS...
      Print the words, for a first ` + "`kubectl exec`" + `.
  echo-server get [-timeout 5s] URL
      GET URL and print the body; exit 1 when the request fails or the
      status is not 2xx.
  echo-server dial [-timeout 3s] HOST:PORT
      Open a TCP connection and close it; exit 1 when it is refused or
      times out (a network policy's drop).
  echo-server burn DURATION
      Keep one CPU busy for DURATION (a Go duration such as 90s, at most
      1h), then print how long it burned: CPU load for autoscaling tests.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serveMain(stdout, stderr)
	case "say":
		return say(args, stdout)
	case "get":
		return get(context.Background(), args, stdout, stderr)
	case "dial":
		return dial(context.Background(), args, stdout, stderr)
	case "burn":
		return burn(args, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "echo-server: unknown command %q\n%s", cmd, usage)
		return 2
	}
}

func serveMain(stdout, stderr io.Writer) int {
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	ln, err := net.Listen("tcp", ":"+port)
	if err != nil {
		fmt.Fprintf(stderr, "echo-server: listening on port %s ($PORT): %v\n", port, err)
		return 1
	}
	hostname, _ := os.Hostname()
	s := newServer(identity{
		Hostname:  hostname,
		Pod:       os.Getenv("POD_NAME"),
		Namespace: os.Getenv("POD_NAMESPACE"),
		Node:      os.Getenv("NODE_NAME"),
	}, slog.New(slog.NewTextHandler(stdout, nil)))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return s.serve(ctx, ln, 5*time.Second)
}
