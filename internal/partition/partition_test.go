package partition

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// quiet is how long a held connection must stay unanswered.
const quiet = 300 * time.Millisecond

// echoServer echoes every line back on 127.0.0.1 until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(c, c)
				_ = c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func newProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// roundTrip sends a line and returns the answer, or the error of the read
// (a timeout after quiet).
func roundTrip(c net.Conn, msg string) (string, error) {
	if err := c.SetDeadline(time.Now().Add(quiet)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	return line[:len(line)-1], nil
}

func mustEcho(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	got, err := roundTrip(c, msg)
	if err != nil || got != msg {
		t.Fatalf("echo of %q: got %q, %v", msg, got, err)
	}
}

// closedByPeer asserts that c was closed by the other end: a read returns
// at once (EOF or a reset), not a timeout.
func closedByPeer(t *testing.T, c net.Conn, what string) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(2 * time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Read(make([]byte, 1))
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: want the connection closed, read returned %v", what, err)
	}
}

func unanswered(t *testing.T, c net.Conn, what string) {
	t.Helper()
	got, err := roundTrip(c, "anyone?")
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: want no answer within %s, got %q, %v", what, quiet, got, err)
	}
}

func waitConns(t *testing.T, p *Proxy, want int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for p.Conns() != want {
		if time.Now().After(deadline) {
			t.Fatalf("Conns() = %d, want %d", p.Conns(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestProxy(t *testing.T) {
	p := newProxy(t, echoServer(t))
	if p.URL() != "https://"+p.Addr() {
		t.Errorf("URL() = %q, Addr() = %q", p.URL(), p.Addr())
	}
	if host, _, err := net.SplitHostPort(p.Addr()); err != nil || host != "127.0.0.1" {
		t.Errorf("Addr() = %q: want 127.0.0.1:<port>", p.Addr())
	}

	// Healed: it forwards.
	a := dial(t, p)
	mustEcho(t, a, "one")
	b := dial(t, p)
	mustEcho(t, b, "two")
	waitConns(t, p, 2)

	// Cut: the open connections are closed, a new one is accepted but
	// never answered.
	p.Cut()
	closedByPeer(t, a, "open connection after Cut")
	closedByPeer(t, b, "open connection after Cut")
	held := dial(t, p)
	unanswered(t, held, "new connection after Cut")
	waitConns(t, p, 1)
	p.Cut() // cutting twice changes nothing
	unanswered(t, dial(t, p), "new connection after a second Cut")

	// Heal: the held connections are closed, new ones forwarded.
	p.Heal()
	closedByPeer(t, held, "held connection after Heal")
	c := dial(t, p)
	mustEcho(t, c, "three")
	waitConns(t, p, 1)
	p.Heal() // healing a healed proxy leaves open connections alone
	mustEcho(t, c, "four")

	// Close: every connection closed, nothing accepted any more.
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	closedByPeer(t, c, "open connection after Close")
	if conn, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		_ = conn.Close()
		t.Fatal("dial after Close succeeded")
	}
	if p.Conns() != 0 {
		t.Errorf("Conns() after Close = %d", p.Conns())
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestProxyCloseWhileCut: Close also ends the held connections.
func TestProxyCloseWhileCut(t *testing.T) {
	p := newProxy(t, echoServer(t))
	p.Cut()
	held := dial(t, p)
	waitConns(t, p, 1)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	closedByPeer(t, held, "held connection after Close")
}

// TestProxyTargetDown: a connection the target refuses is closed.
func TestProxyTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := ln.Addr().String()
	_ = ln.Close()
	p := newProxy(t, target)
	closedByPeer(t, dial(t, p), "connection to a target that refuses")
	waitConns(t, p, 0)
}

func TestNewTargets(t *testing.T) {
	for _, tc := range []struct {
		target, want string
		wantErr      bool
	}{
		{target: "127.0.0.1:6443", want: "127.0.0.1:6443"},
		{target: "https://127.0.0.1:6443", want: "127.0.0.1:6443"},
		{target: "https://127.0.0.1:6443/some/path", want: "127.0.0.1:6443"},
		{target: "127.0.0.1", wantErr: true},
		{target: "https://127.0.0.1", wantErr: true},
	} {
		t.Run(tc.target, func(t *testing.T) {
			p, err := New(tc.target)
			if tc.wantErr {
				if err == nil {
					_ = p.Close()
					t.Fatalf("New(%q): want an error", tc.target)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = p.Close() }()
			if p.target != tc.want {
				t.Errorf("target %q, want %q", p.target, tc.want)
			}
		})
	}
}
