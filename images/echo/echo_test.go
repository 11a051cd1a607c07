package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var testID = identity{Hostname: "host-1", Pod: "echo-abc", Namespace: "demo", Node: "node-1"}

// step is one request to the server and what it must answer.
type step struct {
	path   string
	status int
	body   string // exact body; for "/" the JSON reply is compared instead
}

func TestHandlers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"probes start ok", []step{
			{"/healthz", 200, "ok\n"},
			{"/readyz", 200, "ok\n"},
		}},
		{"readiness fails and recovers, liveness unaffected", []step{
			{"/ready?state=fail", 200, "state fail\n"},
			{"/readyz", 503, "failing (switched by a request)\n"},
			{"/healthz", 200, "ok\n"},
			{"/ready?state=ok", 200, "state ok\n"},
			{"/readyz", 200, "ok\n"},
		}},
		{"liveness fails, readiness unaffected", []step{
			{"/health?state=fail", 200, "state fail\n"},
			{"/healthz", 503, "failing (switched by a request)\n"},
			{"/readyz", 200, "ok\n"},
		}},
		{"bad toggles", []step{
			{"/ready", 400, "want ?state=fail or ?state=ok\n"},
			{"/health?state=maybe", 400, "want ?state=fail or ?state=ok\n"},
			{"/readyz", 200, "ok\n"},
		}},
		{"bad exit codes", []step{
			{"/exit", 400, "want /exit?code=N with N in 0-255\n"},
			{"/exit?code=256", 400, "want /exit?code=N with N in 0-255\n"},
			{"/exit?code=-1", 400, "want /exit?code=N with N in 0-255\n"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			s := newServer(testID, slog.New(slog.NewTextHandler(&logs, nil)))
			h := s.handler()
			for _, st := range tc.steps {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, st.path, nil))
				if rec.Code != st.status || rec.Body.String() != st.body {
					t.Fatalf("GET %s = %d %q, want %d %q", st.path, rec.Code, rec.Body.String(), st.status, st.body)
				}
			}
			if n := strings.Count(logs.String(), "msg=request"); n != len(tc.steps) {
				t.Errorf("%d request log lines for %d requests:\n%s", n, len(tc.steps), logs.String())
			}
		})
	}
}

func TestRoot(t *testing.T) {
	for _, tc := range []struct {
		name string
		id   identity
		want string
	}{
		{"all set", testID, `{"hostname":"host-1","pod":"echo-abc","namespace":"demo","node":"node-1","remote":"10.1.2.3:4567"}`},
		{"no pod env", identity{Hostname: "h"}, `{"hostname":"h","remote":"10.1.2.3:4567"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(tc.id, slog.New(slog.DiscardHandler))
			req := httptest.NewRequest(http.MethodGet, "/any/path", nil)
			req.RemoteAddr = "10.1.2.3:4567"
			rec := httptest.NewRecorder()
			s.handler().ServeHTTP(rec, req)
			if diff := cmp.Diff(tc.want+"\n", rec.Body.String()); diff != "" || rec.Code != 200 {
				t.Errorf("GET / = %d (-want +got):\n%s", rec.Code, diff)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
}

// TestServeExit runs the server on a real listener: /exit?code=3 is answered,
// then serve returns 3; a second server ends with 0 when its context ends.
func TestServeExit(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	s := newServer(testID, slog.New(slog.NewTextHandler(&logs, nil)))
	done := make(chan int, 1)
	go func() { done <- s.serve(context.Background(), ln, 5*time.Second) }()

	resp, err := http.Get("http://" + ln.Addr().String() + "/exit?code=3")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "exiting with code 3\n" {
		t.Fatalf("/exit?code=3 = %d %q", resp.StatusCode, body)
	}
	select {
	case code := <-done:
		if code != 3 {
			t.Fatalf("serve returned %d, want 3", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after /exit")
	}

	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- newServer(testID, slog.New(slog.DiscardHandler)).serve(ctx, ln2, time.Second) }()
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve returned %d after its context ended, want 0", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after its context ended")
	}
}

func TestGet(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			<-r.Context().Done() // until the client gives up
		case "/broken":
			http.Error(w, "broken", http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("hello"))
	}))
	defer srv.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + closed.Addr().String() + "/"
	_ = closed.Close()

	for _, tc := range []struct {
		name      string
		args      []string
		code      int
		stdout    string
		stderrHas string
	}{
		{"ok", []string{srv.URL + "/"}, 0, "hello", ""},
		{"server error", []string{srv.URL + "/broken"}, 1, "broken\n", "500 Internal Server Error"},
		{"timeout", []string{"-timeout", "200ms", srv.URL + "/slow"}, 1, "", "context deadline exceeded"},
		{"refused", []string{refused}, 1, "", "connection refused"},
		{"no url", nil, 2, "", "usage: echo-server get"},
		{"two urls", []string{srv.URL, srv.URL}, 2, "", "usage: echo-server get"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := get(context.Background(), tc.args, &stdout, &stderr)
			if code != tc.code || stdout.String() != tc.stdout || !strings.Contains(stderr.String(), tc.stderrHas) {
				t.Fatalf("get %v = %d, stdout %q, stderr %q; want %d, %q, stderr containing %q",
					tc.args, code, stdout.String(), stderr.String(), tc.code, tc.stdout, tc.stderrHas)
			}
		})
	}
}

func TestDial(t *testing.T) {
	open, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close() //nolint:errcheck // test listener
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := closed.Addr().String()
	_ = closed.Close()
	for _, tc := range []struct {
		name      string
		args      []string
		code      int
		stdoutHas string
		stderrHas string
	}{
		{"connected", []string{open.Addr().String()}, 0, "connected to " + open.Addr().String(), ""},
		{"refused", []string{"-timeout", "1s", refused}, 1, "", "connection refused"},
		{"no address", nil, 2, "", "usage: echo-server dial"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := dial(context.Background(), tc.args, &stdout, &stderr)
			if code != tc.code || !strings.Contains(stdout.String(), tc.stdoutHas) || !strings.Contains(stderr.String(), tc.stderrHas) {
				t.Fatalf("dial %v = %d, stdout %q, stderr %q; want %d, stdout containing %q, stderr containing %q",
					tc.args, code, stdout.String(), stderr.String(), tc.code, tc.stdoutHas, tc.stderrHas)
			}
		})
	}
}

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string
	}{
		{[]string{"say", "hello", "from", "beta"}, 0, "hello from beta\n"},
		{[]string{"say"}, 0, "\n"},
		{[]string{"frobnicate"}, 2, ""},
		{[]string{"burn"}, 2, ""},
		{[]string{"burn", "forever"}, 2, ""},
		{[]string{"burn", "2h"}, 2, ""},
		{[]string{"burn", "-1s"}, 2, ""},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(tc.args, &stdout, &stderr); code != tc.code || stdout.String() != tc.stdout {
			t.Errorf("run %v = %d, %q; want %d, %q (stderr %q)", tc.args, code, stdout.String(), tc.code, tc.stdout, stderr.String())
		}
	}
	var burned bytes.Buffer
	if code := run([]string{"burn", "50ms"}, &burned, io.Discard); code != 0 || !strings.HasPrefix(burned.String(), "burned ") {
		t.Errorf("burn 50ms = %d %q", code, burned.String())
	}
	var stdout bytes.Buffer
	if code := run([]string{"help"}, &stdout, io.Discard); code != 0 || !strings.Contains(stdout.String(), "/exit?code=N") {
		t.Errorf("help = %d %q", code, stdout.String())
	}
}
