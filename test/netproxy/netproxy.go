// Package netproxy is a TCP proxy for failure tests: each edihub replica
// reaches the Kubernetes API server (or PostgreSQL) through its own proxy,
// and a test cuts one replica off by blackholing its proxy, as a network
// partition would: bytes stop flowing in both directions, connections hang
// rather than fail fast, and new connections are accepted but go nowhere.
package netproxy

import (
	"net"
	"sync"
	"time"
)

// Proxy forwards TCP connections from a loopback listener to a target.
type Proxy struct {
	target string
	ln     net.Listener

	mu     sync.Mutex
	delay  time.Duration
	cut    bool
	resume chan struct{} // closed when the cut ends
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// Start listens on a free 127.0.0.1 port and forwards to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, resume: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.resume)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut blackholes the proxy: no byte moves in either direction on existing
// or new connections until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cut {
		p.cut = true
		p.resume = make(chan struct{})
	}
}

// SetDelay holds every chunk for d before forwarding it, in both
// directions (0: none), as a slow network would. A test uses it to stretch
// a transaction's round trips so that it can act while one is open.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Restore ends a cut. Connections that survived it carry on.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		p.cut = false
		close(p.resume)
	}
}

// SetTarget sends new connections to target (host:port) from now on, as
// a service address repointed to a promoted database would; connections
// already open keep their old peer (Reset ends them).
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// Reset closes every open connection (as a peer restart would) without
// stopping the proxy.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	if p.cut {
		p.cut = false
		close(p.resume)
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

// gate blocks while the proxy is cut; it returns false once closed.
func (p *Proxy) gate() bool {
	p.mu.Lock()
	ch, closed := p.resume, p.closed
	p.mu.Unlock()
	if closed {
		return false
	}
	<-ch
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	// A new connection during a cut is accepted and then goes nowhere.
	if !p.gate() {
		return
	}
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	server, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	done := make(chan struct{}, 2)
	go func() { p.pipe(server, client); done <- struct{}{} }()
	go func() { p.pipe(client, server); done <- struct{}{} }()
	<-done
	// One side ended: end the other so both goroutines return.
	client.Close()
	server.Close()
	<-done
}

// pipe copies src to dst in chunks, holding each chunk while cut.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			d := p.delay
			p.mu.Unlock()
			if d > 0 {
				time.Sleep(d)
			}
			if !p.gate() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed connection: serve ends the other side
		}
	}
}
