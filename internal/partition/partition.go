// Package partition owns the network partitions of tests and benchmarks: a
// TCP proxy on 127.0.0.1 that stands between a client (an agent reaching a
// peer's API server) and its target, forwards every connection while
// healed, and on Cut closes every connection and holds new ones accepted
// but unanswered, as a link that silently drops everything does (the
// client's dial succeeds, its TLS handshake or request times out), until
// Heal.
//
// It forwards bytes, nothing more: TLS goes through untouched, so a client
// verifying the target's certificate for 127.0.0.1 accepts it through the
// proxy too.
package partition

import (
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"time"
)

// dialTimeout bounds the dial of the target for one connection.
const dialTimeout = 2 * time.Second

// Proxy forwards the TCP connections made to Addr to a target until Cut.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	isCut  bool
	closed bool
	// clients are the accepted connections being forwarded (or about to
	// be); upstreams their connections to the target; held the connections
	// accepted while cut, never answered.
	clients   map[net.Conn]bool
	upstreams map[net.Conn]bool
	held      map[net.Conn]bool
	wg        sync.WaitGroup
}

// New starts a proxy on 127.0.0.1 (a free port) to target: host:port, or a
// URL whose host:port is taken (https://127.0.0.1:6443).
func New(target string) (*Proxy, error) {
	if u, err := url.Parse(target); err == nil && u.Host != "" {
		target = u.Host
	}
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, clients: map[net.Conn]bool{}, upstreams: map[net.Conn]bool{}, held: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is the proxy's address, 127.0.0.1:<port>.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is "https://" + Addr: what a client of an API server is pointed at.
func (p *Proxy) URL() string { return "https://" + p.Addr() }

// Conns is how many client connections are open through the proxy:
// forwarded ones, and held ones while cut.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.clients) + len(p.held)
}

// Cut partitions: it closes every connection, and holds the new ones
// unanswered until Heal.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.isCut = true
	conns := p.takeAll()
	p.mu.Unlock()
	closeAll(conns)
}

// Heal ends a partition: it closes the connections held meanwhile (their
// clients then dial again) and forwards new ones. Healing a healed proxy
// does nothing.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.isCut = false
	held := p.held
	p.held = map[net.Conn]bool{}
	p.mu.Unlock()
	closeAll(held)
}

// Close stops listening, closes every connection and waits until nothing
// of the proxy runs any more. It may be called more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	first := !p.closed
	p.closed = true
	conns := p.takeAll()
	p.mu.Unlock()
	var err error
	if first {
		err = p.ln.Close()
	}
	closeAll(conns)
	p.wg.Wait()
	return err
}

// takeAll empties the connection sets and returns what they held; p.mu is
// held.
func (p *Proxy) takeAll() map[net.Conn]bool {
	all := map[net.Conn]bool{}
	for _, set := range []map[net.Conn]bool{p.clients, p.upstreams, p.held} {
		for c := range set {
			all[c] = true
		}
	}
	p.clients, p.upstreams, p.held = map[net.Conn]bool{}, map[net.Conn]bool{}, map[net.Conn]bool{}
	return all
}

func closeAll(conns map[net.Conn]bool) {
	for c := range conns {
		_ = c.Close()
	}
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient accept error (too many open files): go on.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.mu.Lock()
		switch {
		case p.closed:
			p.mu.Unlock()
			_ = c.Close()
			continue
		case p.isCut:
			p.held[c] = true // unanswered until Heal or Close
			p.mu.Unlock()
			continue
		}
		p.clients[c] = true
		p.wg.Add(1)
		p.mu.Unlock()
		go p.forward(c)
	}
}

// forward dials the target for client c and copies both ways until either
// side closes (or a cut closes both).
func (p *Proxy) forward(c net.Conn) {
	defer p.wg.Done()
	up, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil {
		p.drop(c)
		return
	}
	p.mu.Lock()
	if !p.clients[c] { // cut or closed while dialing: c is closed already
		p.mu.Unlock()
		_ = up.Close()
		return
	}
	p.upstreams[up] = true
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// No half-close: one side done ends the connection.
		p.drop(dst)
		p.drop(src)
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}

// drop forgets c and closes it.
func (p *Proxy) drop(c net.Conn) {
	p.mu.Lock()
	delete(p.clients, c)
	delete(p.upstreams, c)
	p.mu.Unlock()
	_ = c.Close()
}
