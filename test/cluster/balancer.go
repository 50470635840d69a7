package cluster

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Balancer is a round-robin HTTP proxy in front of replicas, as a load
// balancer would be: each request goes to the next backend in turn, and a
// backend that refuses the connection (a killed replica) is skipped for
// the next one; one that fails after the request went out is answered 502,
// for the sender to retry. Partners are configured with its URL, so their requests (documents,
// async MDNs) land on every replica and keep landing while one is down.
//
// With Watch it is the front door a Kubernetes Service with readiness
// probes and an ingress that retries make: backends whose readiness check
// fails are left out of the rotation until it passes again, and a request
// that a backend answers 503 or leaves unanswered for the try timeout is
// sent to the next one (edihub's 503 stores nothing, and a request stored
// twice is answered as the first time by its Message-ID).
type Balancer struct {
	ln  net.Listener
	srv *http.Server
	tr  *http.Transport

	mu       sync.Mutex
	backends []string
	next     int
	served   map[string]int
	held     chan struct{} // requests wait while it is open
	done     chan struct{}
	// unready are the backends whose readiness check failed (Watch).
	unready map[string]bool
	// retry is set by Watch: 503 and timeouts go to the next backend.
	retry bool
	stop  chan struct{}
	wg    sync.WaitGroup
}

// Watch checks each backend's readiness every every (readyURL gives the
// URL of a backend's check, answered 200 when ready; a check unanswered
// for timeout fails) and leaves a backend out after failures consecutive
// failed checks, until one passes. It also makes the balancer retry: a
// backend's 503, or no response within tryTimeout, sends the request to
// the next backend. Call it before the balancer serves requests; Close
// stops it.
func (b *Balancer) Watch(readyURL func(backend string) string, every, timeout time.Duration, failures int, tryTimeout time.Duration) {
	b.mu.Lock()
	b.retry = true
	b.tr.ResponseHeaderTimeout = tryTimeout
	b.mu.Unlock()
	client := &http.Client{Timeout: timeout}
	failed := map[string]int{}
	b.wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-b.stop:
				return
			case <-t.C:
			}
			b.mu.Lock()
			backends := append([]string(nil), b.backends...)
			b.mu.Unlock()
			for _, be := range backends {
				if ready(client, readyURL(be)) {
					failed[be] = 0
				} else {
					failed[be]++
				}
				b.mu.Lock()
				b.unready[be] = failed[be] >= failures
				b.mu.Unlock()
			}
		}
	})
}

// isUnready reports whether be is out of the rotation.
func (b *Balancer) isUnready(be string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.unready[be]
}

// ready reports whether url answers 200.
func ready(client *http.Client, url string) bool {
	resp, err := client.Get(url)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// MaxBalancedBody bounds a request body the balancer buffers (it replays
// the body to the next backend when one does not answer).
const MaxBalancedBody = 64 << 20

// StartBalancer listens on addr (host:port; port 0 for a free one) and
// spreads requests over backends (host:port each); SetBackends changes
// them.
func StartBalancer(addr string, backends ...string) (*Balancer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	b := &Balancer{
		ln:       ln,
		tr:       &http.Transport{ResponseHeaderTimeout: 5 * time.Minute},
		backends: backends,
		served:   map[string]int{},
		held:     make(chan struct{}),
		done:     make(chan struct{}),
		unready:  map[string]bool{},
		stop:     make(chan struct{}),
	}
	close(b.held)
	b.srv = &http.Server{Handler: b, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(b.done)
		_ = b.srv.Serve(ln)
	}()
	return b, nil
}

// Addr is the balancer's listening address (host:port).
func (b *Balancer) Addr() string { return b.ln.Addr().String() }

// URL is the balancer's base URL, http://host:port.
func (b *Balancer) URL() string { return "http://" + b.Addr() }

// SetBackends replaces the backends.
func (b *Balancer) SetBackends(backends ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.backends = backends
}

// Served returns how many requests each backend answered.
func (b *Balancer) Served() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]int, len(b.served))
	for k, v := range b.served {
		out[k] = v
	}
	return out
}

// Hold makes new requests wait (unanswered) until Release.
func (b *Balancer) Hold() {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.held:
		b.held = make(chan struct{})
	default:
	}
}

// Release lets held requests through.
func (b *Balancer) Release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.held:
	default:
		close(b.held)
	}
}

// Close releases held requests and stops the balancer; it closes every
// connection.
func (b *Balancer) Close() error {
	b.Release()
	close(b.stop)
	b.wg.Wait()
	err := b.srv.Close()
	<-b.done
	b.tr.CloseIdleConnections()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// pick returns the next backend in turn, passing over unready ones
// unless every backend is (then each is tried, as an ingress with no
// ready endpoint would rather try than refuse).
func (b *Balancer) pick() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	for range len(b.backends) {
		be := b.backends[b.next%len(b.backends)]
		b.next++
		if !b.unready[be] {
			return be
		}
	}
	be := b.backends[b.next%len(b.backends)]
	b.next++
	return be
}

// ServeHTTP forwards r to the backends in turn until one answers.
func (b *Balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBalancedBody))
	if err != nil {
		http.Error(w, "balancer: read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	b.mu.Lock()
	n, held := len(b.backends), b.held
	b.mu.Unlock()
	select {
	case <-held:
	case <-r.Context().Done():
		return
	}
	for i := range n {
		be := b.pick()
		out := r.Clone(r.Context())
		out.RequestURI = ""
		out.URL.Scheme, out.URL.Host = "http", be
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.ContentLength = int64(len(body))
		resp, err := b.tr.RoundTrip(out)
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			continue // refused (a killed replica): the next backend
		}
		b.mu.Lock()
		retry := b.retry && i < n-1
		b.mu.Unlock()
		if retry && (err != nil && r.Context().Err() == nil || err == nil && resp.StatusCode == http.StatusServiceUnavailable) {
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			continue // not stored there (503) or no answer in time: the next backend
		}
		if err != nil {
			// It may have been received: the sender retries, as with
			// a load balancer.
			http.Error(w, "balancer: "+err.Error(), http.StatusBadGateway)
			return
		}
		b.mu.Lock()
		b.served[be]++
		b.mu.Unlock()
		for k, vs := range resp.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		resp.Body.Close()
		return
	}
	http.Error(w, "balancer: no backend answered", http.StatusBadGateway)
}
