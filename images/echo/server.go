package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// identity is what `/` answers about the server.
type identity struct {
	Hostname  string `json:"hostname"`
	Pod       string `json:"pod,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Node      string `json:"node,omitempty"`
}

// reply is the JSON body of `/`.
type reply struct {
	identity
	Remote string `json:"remote"` // the caller's address as the server saw it
}

// server is the HTTP test server. Liveness and readiness start ok and are
// switched by /health and /ready, so that a test can make probes fail.
type server struct {
	id        identity
	log       *slog.Logger
	unhealthy atomic.Bool
	unready   atomic.Bool
	exit      chan int // the code /exit asked for
}

func newServer(id identity, log *slog.Logger) *server {
	return &server{id: id, log: log, exit: make(chan int, 1)}
}

func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/", s.root)
	mux.HandleFunc("/exit", s.exitHandler)
	mux.HandleFunc("/healthz", probe(&s.unhealthy))
	mux.HandleFunc("/readyz", probe(&s.unready))
	mux.HandleFunc("/health", toggle(&s.unhealthy))
	mux.HandleFunc("/ready", toggle(&s.unready))
	return s.logged(mux)
}

func (s *server) root(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(reply{identity: s.id, Remote: r.RemoteAddr})
}

func (s *server) exitHandler(w http.ResponseWriter, r *http.Request) {
	code, err := strconv.Atoi(r.URL.Query().Get("code"))
	if err != nil || code < 0 || code > 255 {
		http.Error(w, "want /exit?code=N with N in 0-255", http.StatusBadRequest)
		return
	}
	select {
	case s.exit <- code:
		w.Header().Set("Connection", "close")
		fmt.Fprintf(w, "exiting with code %d\n", code)
	default:
		http.Error(w, "already exiting", http.StatusConflict)
	}
}

// probe answers 200 "ok", or 503 while failed is set.
func probe(failed *atomic.Bool) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if failed.Load() {
			http.Error(w, "failing (switched by a request)", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	}
}

// toggle sets failed from ?state=fail or ?state=ok.
func toggle(failed *atomic.Bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch state := r.URL.Query().Get("state"); state {
		case "fail", "ok":
			failed.Store(state == "fail")
			fmt.Fprintf(w, "state %s\n", state)
		default:
			http.Error(w, "want ?state=fail or ?state=ok", http.StatusBadRequest)
		}
	}
}

// statusWriter remembers the status code for the log line.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// logged logs one line per request.
func (s *server) logged(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		s.log.Info("request", "method", r.Method, "uri", r.URL.RequestURI(), "remote", r.RemoteAddr,
			"status", sw.status, "took", time.Since(start).Round(time.Microsecond))
	})
}

// serve serves on ln until ctx ends (exit code 0) or /exit is asked (its
// code); then it shuts down gracefully, giving requests in flight (the
// /exit reply among them) up to grace to finish.
func (s *server) serve(ctx context.Context, ln net.Listener, grace time.Duration) int {
	srv := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	s.log.Info("listening", "address", ln.Addr().String(), "identity", s.id)
	code := 0
	select {
	case <-ctx.Done():
		s.log.Info("signalled, shutting down")
	case code = <-s.exit:
		s.log.Info("exiting as asked", "code", code)
	case err := <-served:
		s.log.Error("serving failed", "err", err)
		return 1
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		s.log.Error("shutting down", "err", err)
	}
	return code
}
