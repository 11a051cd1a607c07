package localclusterproxy

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// headerTimeout bounds how long a client may take to send its CONNECT.
const headerTimeout = 10 * time.Second

// networkConfig is what `network` is told on its command line.
type networkConfig struct {
	socket    string
	hostFD    int
	allowed   []netip.Prefix // dialled from the process's own namespace
	readyFile string
}

func parseNetwork(args []string, stderr io.Writer) (networkConfig, error) {
	fs := flag.NewFlagSet(Name+" network", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c networkConfig
	var allow string
	fs.StringVar(&c.socket, "egress-socket", "", "Unix socket to serve HTTP CONNECT on (kube-apiserver's egress selector, selection \"cluster\"); made with mode 0600, replacing a stale one")
	fs.IntVar(&c.hostFD, "host-netns-fd", -1, "inherited descriptor of the host's network namespace: CONNECTs to 127.0.0.0/8 are dialled from there (kwok, virtual nodes)")
	fs.StringVar(&allow, "allow", "", "comma-separated CIDRs dialled from this process's own network namespace (the cluster's node and pod networks); CONNECTs to any other address are refused")
	fs.StringVar(&c.readyFile, "ready-file", "", "file written once the socket is served")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s network --egress-socket=PATH --host-netns-fd=N --allow=CIDR[,CIDR] [--ready-file=PATH]\n\n"+
			"Serves the API server's egress into a cluster's node network. Start it in the\n"+
			"network namespace that holds the cluster's node bridge: the namespace lives as\n"+
			"long as this process.\n\n", Name)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.socket == "" {
		return c, errors.New("--egress-socket is required")
	}
	if c.hostFD < 0 {
		return c, errors.New("--host-netns-fd is required")
	}
	for s := range strings.SplitSeq(allow, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return c, fmt.Errorf("--allow: %w", err)
		}
		c.allowed = append(c.allowed, p.Masked())
	}
	return c, nil
}

func runNetwork(args []string, stderr io.Writer, log *slog.Logger) error {
	c, err := parseNetwork(args, stderr)
	if err != nil {
		return err
	}
	host, err := newNSDialer(c.hostFD)
	if err != nil {
		return fmt.Errorf("--host-netns-fd: %w", err)
	}
	if err := os.Remove(c.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale socket: %w", err)
	}
	ln, err := net.Listen("unix", c.socket)
	if err != nil {
		return err
	}
	if err := os.Chmod(c.socket, 0o600); err != nil {
		return err
	}
	p := &connectProxy{log: log, host: host, here: hereDialer{}, allowed: c.allowed}
	if c.readyFile != "" {
		if err := os.WriteFile(c.readyFile, []byte("ready\n"), 0o644); err != nil {
			return err
		}
	}
	log.Info("Serving the API server's egress", "socket", c.socket, "allowed", c.allowed, "loopback", "host network namespace")
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		s := <-sigs
		log.Info("Stopping", "signal", s.String())
		_ = ln.Close()
	}()
	err = p.serve(ln)
	_ = os.Remove(c.socket)
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// connectProxy serves HTTP CONNECT: loopback destinations are dialled with
// host, destinations in allowed with here, anything else is refused.
type connectProxy struct {
	log     *slog.Logger
	host    netnsDialer
	here    netnsDialer
	allowed []netip.Prefix
}

func (p *connectProxy) serve(ln net.Listener) error {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return err
		}
		go p.handle(conn)
	}
}

// dialerFor picks how to reach addr ("ip:port"); an error says why it may
// not be reached at all.
func (p *connectProxy) dialerFor(addr string) (netnsDialer, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("destination %q is not an IP address and port (names are not resolved)", addr)
	}
	ip := ap.Addr().Unmap()
	if ip.Is4() && ip.IsLoopback() {
		return p.host, nil
	}
	for _, n := range p.allowed {
		if n.Contains(ip) {
			return p.here, nil
		}
	}
	return nil, fmt.Errorf("destination %s is outside the cluster's networks %v and loopback", ip, p.allowed)
}

func (p *connectProxy) handle(conn net.Conn) {
	_ = conn.SetReadDeadline(time.Now().Add(headerTimeout))
	br := bufio.NewReader(conn)
	req, err := http.ReadRequest(br)
	if err != nil {
		_ = conn.Close()
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	reply := func(code int, msg string) {
		fmt.Fprintf(conn, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n%s\n", code, http.StatusText(code), msg)
		_ = conn.Close()
	}
	if req.Method != http.MethodConnect {
		reply(http.StatusMethodNotAllowed, "only CONNECT is served")
		return
	}
	dst := req.Host
	if dst == "" {
		dst = req.RequestURI
	}
	d, err := p.dialerFor(dst)
	if err != nil {
		p.log.Info("Refused a CONNECT", "destination", dst, "reason", err.Error())
		reply(http.StatusForbidden, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	up, err := d.DialContext(ctx, "tcp", dst)
	cancel()
	if err != nil {
		p.log.Info("CONNECT failed", "destination", dst, "err", err.Error())
		reply(http.StatusBadGateway, err.Error())
		return
	}
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		_ = conn.Close()
		_ = up.Close()
		return
	}
	splice(&bufferedConn{Conn: conn, r: br}, up)
}

// bufferedConn reads through the reader that parsed the request, which may
// hold bytes the client sent after it.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

func (c *bufferedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}
