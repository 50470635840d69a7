package probe

import (
	"crypto/tls"
	"net/http/httptrace"
	"sync"
	"time"
)

// tracer records the connection's events through net/http/httptrace. Its
// hooks may run on the transport's dialing goroutines, also after Do
// returned (a dial abandoned at the timeout), hence the lock; Run reads a
// snapshot.
type tracer struct {
	mu  sync.Mutex
	now func() time.Time
	t   trace
}

// trace is what happened on the connection, by the clock Run was given.
type trace struct {
	dnsHost          string
	dnsStart, dnsEnd time.Time
	dnsAddrs         []string
	dnsErr           error
	// connStart is the first dial attempt; connEnd the successful one or,
	// while none succeeded, the last failure (connErr, at connAddr).
	connStart, connEnd time.Time
	connAddr           string
	connErr            error
	connected          bool
	tlsStart, tlsEnd   time.Time
	tlsState           *tls.ConnectionState
	tlsErr             error
	gotConn            time.Time
	wrote              time.Time
	firstByte          time.Time
}

func newTracer(now func() time.Time) *tracer { return &tracer{now: now} }

func (tr *tracer) record(f func(t *trace, now time.Time)) {
	now := tr.now()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	f(&tr.t, now)
}

func (tr *tracer) snapshot() trace {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	t := tr.t
	t.dnsAddrs = append([]string(nil), t.dnsAddrs...)
	return t
}

func (tr *tracer) clientTrace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		DNSStart: func(i httptrace.DNSStartInfo) {
			tr.record(func(t *trace, now time.Time) {
				if t.dnsStart.IsZero() {
					t.dnsStart, t.dnsHost = now, i.Host
				}
			})
		},
		DNSDone: func(i httptrace.DNSDoneInfo) {
			tr.record(func(t *trace, now time.Time) {
				t.dnsEnd, t.dnsErr = now, i.Err
				for _, a := range i.Addrs {
					t.dnsAddrs = append(t.dnsAddrs, a.String())
				}
			})
		},
		ConnectStart: func(_, addr string) {
			tr.record(func(t *trace, now time.Time) {
				if t.connStart.IsZero() {
					t.connStart = now
				}
				if !t.connected {
					t.connAddr = addr
				}
			})
		},
		ConnectDone: func(_, addr string, err error) {
			tr.record(func(t *trace, now time.Time) {
				switch {
				case t.connected:
				case err == nil:
					t.connected, t.connEnd, t.connAddr, t.connErr = true, now, addr, nil
				default:
					t.connEnd, t.connAddr, t.connErr = now, addr, err
				}
			})
		},
		TLSHandshakeStart: func() {
			tr.record(func(t *trace, now time.Time) { t.tlsStart = now })
		},
		TLSHandshakeDone: func(s tls.ConnectionState, err error) {
			tr.record(func(t *trace, now time.Time) {
				t.tlsEnd, t.tlsErr = now, err
				if err == nil {
					t.tlsState = &s
				}
			})
		},
		GotConn: func(httptrace.GotConnInfo) {
			tr.record(func(t *trace, now time.Time) { t.gotConn = now })
		},
		WroteRequest: func(httptrace.WroteRequestInfo) {
			tr.record(func(t *trace, now time.Time) { t.wrote = now })
		},
		GotFirstResponseByte: func() {
			tr.record(func(t *trace, now time.Time) { t.firstByte = now })
		},
	}
}
