package localclusterproxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseNode(t *testing.T) {
	base := []string{"--host-netns-fd=3", "--api-listen=172.31.0.254:6443", "--api-target=127.0.0.1:6443"}
	tests := []struct {
		name    string
		args    []string
		want    nodeConfig
		wantErr string
	}{
		{
			name: "full",
			args: append(base, "--tmpfs=/run", "--tmpfs=/var/lib", "--sysctl-file=vm/overcommit_memory=/d/om", "--sysctl-file=/kernel/panic/=/d/p", "--ready-file=/d/ready"),
			want: nodeConfig{
				hostFD:    3,
				apiListen: netip.MustParseAddrPort("172.31.0.254:6443"),
				apiTarget: netip.MustParseAddrPort("127.0.0.1:6443"),
				tmpfs:     []string{"/run", "/var/lib"},
				sysctls:   []sysctlFile{{key: "vm/overcommit_memory", file: "/d/om"}, {key: "kernel/panic", file: "/d/p"}},
				readyFile: "/d/ready",
			},
		},
		{name: "no host netns", args: []string{"--api-listen=1.2.3.4:1", "--api-target=127.0.0.1:1"}, wantErr: "--host-netns-fd is required"},
		{name: "target not loopback", args: []string{"--host-netns-fd=3", "--api-listen=1.2.3.4:1", "--api-target=10.0.0.1:1"}, wantErr: "must be a loopback address"},
		{name: "bad listen", args: []string{"--host-netns-fd=3", "--api-listen=nope", "--api-target=127.0.0.1:1"}, wantErr: "--api-listen"},
		{name: "relative tmpfs", args: append(base, "--tmpfs=var/lib"), wantErr: "clean absolute path"},
		{name: "tmpfs on root", args: append(base, "--tmpfs=/"), wantErr: "clean absolute path"},
		{name: "net sysctl", args: append(base, "--sysctl-file=net/ipv4/ip_forward=/x"), wantErr: "outside net/"},
		{name: "escaping sysctl", args: append(base, "--sysctl-file=../etc/passwd=/x"), wantErr: "KEY=FILE"},
		{name: "sysctl without file", args: append(base, "--sysctl-file=vm/overcommit_memory"), wantErr: "KEY=FILE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseNode(tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseNode error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(nodeConfig{}, sysctlFile{}), cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("parseNode (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseNetwork(t *testing.T) {
	got, err := parseNetwork([]string{"--egress-socket=/d/egress.sock", "--host-netns-fd=4", "--allow=172.31.0.0/24, 10.244.1.7/16"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := networkConfig{socket: "/d/egress.sock", hostFD: 4, allowed: []netip.Prefix{netip.MustParsePrefix("172.31.0.0/24"), netip.MustParsePrefix("10.244.0.0/16")}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(networkConfig{}), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("parseNetwork (-want +got):\n%s", diff)
	}
	for _, args := range [][]string{
		{"--host-netns-fd=4"},
		{"--egress-socket=/s"},
		{"--egress-socket=/s", "--host-netns-fd=4", "--allow=10.0.0.0/33"},
	} {
		if _, err := parseNetwork(args, io.Discard); err == nil {
			t.Errorf("parseNetwork(%q) succeeded", args)
		}
	}
}

func TestRunUsage(t *testing.T) {
	var out strings.Builder
	if code := run([]string{Name}, &out); code != 2 || !strings.Contains(out.String(), "network|node") {
		t.Errorf("run without a mode = %d, %q", code, out.String())
	}
	out.Reset()
	if code := run([]string{Name, "bogus"}, &out); code != 2 || !strings.Contains(out.String(), `unknown mode "bogus"`) {
		t.Errorf("run bogus = %d, %q", code, out.String())
	}
	out.Reset()
	if code := run([]string{Name, "node", "--help"}, &out); code != 0 || !strings.Contains(out.String(), "PID 1 of a real node") {
		t.Errorf("node --help = %d, %q", code, out.String())
	}
}

// namedDialer dials like hereDialer and records that it was chosen.
type namedDialer struct {
	name string
	used chan string
}

func (d namedDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d.used <- d.name
	return hereDialer{}.DialContext(ctx, network, addr)
}

func TestDialerFor(t *testing.T) {
	host, here := namedDialer{name: "host"}, namedDialer{name: "here"}
	p := &connectProxy{host: host, here: here, allowed: []netip.Prefix{netip.MustParsePrefix("172.31.0.0/24"), netip.MustParsePrefix("10.244.0.0/16")}}
	tests := []struct {
		addr, want string
	}{
		{"127.0.0.1:10250", "host"},
		{"127.9.9.9:1", "host"},
		{"172.31.0.2:10250", "here"},
		{"10.244.3.4:8080", "here"},
		{"[::ffff:10.244.3.4]:8080", "here"},
		{"172.31.1.2:10250", "refused"},
		{"8.8.8.8:53", "refused"},
		{"[::1]:80", "refused"},
		{"localhost:10250", "refused"},
		{"10.244.3.4", "refused"},
	}
	for _, tt := range tests {
		d, err := p.dialerFor(tt.addr)
		got := "refused"
		if err == nil {
			got = d.(namedDialer).name
		}
		if got != tt.want {
			t.Errorf("dialerFor(%q) = %s (%v), want %s", tt.addr, got, err, tt.want)
		}
	}
}

// TestConnectProxy runs the proxy on a Unix socket against a loopback echo
// server: a CONNECT there is spliced both ways (with a half-close), others
// are refused with a status saying why.
func TestConnectProxy(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = echo.Close() })
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() {
				data, _ := io.ReadAll(c)
				_, _ = c.Write([]byte("echo:" + string(data)))
				_ = c.Close()
			}()
		}
	}()
	sock := filepath.Join(t.TempDir(), "egress.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	used := make(chan string, 10)
	p := &connectProxy{
		log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		host:    namedDialer{name: "host", used: used},
		here:    namedDialer{name: "here", used: used},
		allowed: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
	}
	go func() { _ = p.serve(ln) }()

	roundTrip := func(t *testing.T, request string) (*http.Response, net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, request); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp, c, br
	}

	t.Run("loopback through the host namespace", func(t *testing.T) {
		addr := echo.Addr().String()
		resp, c, br := roundTrip(t, fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\nhello", addr, addr))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT %s: %s", addr, resp.Status)
		}
		if got := <-used; got != "host" {
			t.Errorf("dialled from %s, want host", got)
		}
		_ = c.(*net.UnixConn).CloseWrite()
		got, err := io.ReadAll(br)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != "echo:hello" {
			t.Errorf("through the tunnel: %q, want %q", got, "echo:hello")
		}
	})
	for _, tt := range []struct {
		name, request string
		code          int
		body          string
	}{
		{"outside the cluster", "CONNECT 8.8.8.8:53 HTTP/1.1\r\nHost: 8.8.8.8:53\r\n\r\n", http.StatusForbidden, "outside the cluster's networks"},
		{"a name", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", http.StatusForbidden, "names are not resolved"},
		{"not CONNECT", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusMethodNotAllowed, "only CONNECT"},
		{"nothing listens", "CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n", http.StatusBadGateway, "refused"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, _, _ := roundTrip(t, tt.request)
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.code || !strings.Contains(string(body), tt.body) {
				t.Errorf("%s: %s %q, want %d and %q", strings.SplitN(tt.request, "\r", 2)[0], resp.Status, body, tt.code, tt.body)
			}
		})
	}
}

// TestNSDialer dials a loopback server through a descriptor of this
// process's own namespace (what the host's is to the proxies).
func TestNSDialer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("setns needs root")
	}
	ns, err := os.Open("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	d, err := newNSDialer(int(ns.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	f, err := os.CreateTemp(t.TempDir(), "plain")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	if _, err := newNSDialer(int(f.Fd())); err == nil || !strings.Contains(err.Error(), "not a namespace") {
		t.Errorf("newNSDialer(plain file) = %v, want a not-a-namespace error", err)
	}
}
