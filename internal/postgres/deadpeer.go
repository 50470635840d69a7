package postgres

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"
)

// Why not TCP_USER_TIMEOUT: since Linux 5.11 it also ends a connection
// whose peer keeps its receive window closed for longer than the timeout,
// although the peer's kernel answers every window probe. A server that
// stops reading in the middle of a long COPY (paused, starved of CPU,
// waiting on its disk) is such a peer: alive, yet its connection was cut
// ("copy payload: unexpected EOF"). So the client side watches its
// connections itself and tells the two apart by whether the peer still
// acknowledges anything.

// tcpSample is what the kernel says of a connection at one moment.
type tcpSample struct {
	// unacked counts segments sent and not acknowledged.
	unacked uint32
	// probes counts window (or keepalive) probes sent and not answered;
	// any acknowledgement resets it.
	probes uint8
	// lastAckRecv is the time since the peer last acknowledged anything,
	// window probes included.
	lastAckRecv time.Duration
}

// peerSilent reports whether s shows a peer that has acknowledged nothing
// for d while it owes an acknowledgement: data in flight, or a window
// probe sent. A peer whose window is closed but who answers the probes is
// not silent, however long it stays closed. (A live peer's kernel answers
// window probes at most every 500 ms, net.ipv4.tcp_invalid_ratelimit, and
// the first probes come faster: for a second or so one may stay
// unanswered. So d below about 3 s may take a stalled server for dead.)
func peerSilent(s tcpSample, d time.Duration) bool {
	return s.lastAckRecv >= d && (s.unacked > 0 || s.probes > 0)
}

// watchedConn is a TCP connection to the database that is closed once
// its peer has been silent (peerSilent) on two checks in a row, d/4
// apart: a single check could fall between a window probe and its answer.
// Close stops the watch and waits for it.
type watchedConn struct {
	*net.TCPConn
	d         time.Duration
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	mu        sync.Mutex
	deadErr   error
}

func watchConn(c *net.TCPConn, d time.Duration) *watchedConn {
	w := &watchedConn{TCPConn: c, d: d, stop: make(chan struct{}), done: make(chan struct{})}
	go w.watch()
	return w
}

func (w *watchedConn) watch() {
	defer close(w.done)
	t := time.NewTicker(max(w.d/4, 50*time.Millisecond))
	defer t.Stop()
	silent := 0
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		s, err := tcpState(w.TCPConn)
		if err != nil {
			return // closed under us
		}
		if !peerSilent(s, w.d) {
			silent = 0
			continue
		}
		if silent++; silent < 2 {
			continue
		}
		w.mu.Lock()
		w.deadErr = fmt.Errorf("database server acknowledged nothing for %s (unacknowledged segments %d, unanswered probes %d)",
			s.lastAckRecv.Round(time.Millisecond), s.unacked, s.probes)
		w.mu.Unlock()
		_ = w.TCPConn.Close()
		return
	}
}

// dead wraps err with the reason the watch closed the connection, if it did.
func (w *watchedConn) dead(err error) error {
	if err == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.deadErr != nil {
		return fmt.Errorf("%v: %w", w.deadErr, err)
	}
	return err
}

func (w *watchedConn) Read(p []byte) (int, error) {
	n, err := w.TCPConn.Read(p)
	return n, w.dead(err)
}

func (w *watchedConn) Write(p []byte) (int, error) {
	n, err := w.TCPConn.Write(p)
	return n, w.dead(err)
}

func (w *watchedConn) Close() error {
	err := w.TCPConn.Close()
	w.closeOnce.Do(func() { close(w.stop) })
	<-w.done
	return err
}

// deadPeerDialer dials with TCP keepalives (an idle connection: probes
// after d/3, every d/6, three times) and watches each TCP connection for
// a peer silent for d (watchedConn) on systems that tell (Linux).
func deadPeerDialer(connectTimeout, d time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	dialer := &net.Dialer{
		Timeout: connectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: max(d/3, time.Second), Interval: max(d/6, time.Second), Count: 3,
		},
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc, ok := c.(*net.TCPConn)
		if !ok || !watchable {
			return c, nil // a Unix socket's peer is on this host
		}
		return watchConn(tc, d), nil
	}
}
