package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"
)

// The demo partner's modes: what becomes of each document the hub sends
// it, so that the failure, overdue and resend paths can be tried against
// it. The mode is set with -demo-mode and changed while the stack runs
// with PUT /demo-mode on the demo partner's address.
const (
	// modeNormal passes documents to the demo station: each is delivered
	// on a signed async MDN.
	modeNormal = "normal"
	// modeNegative alters one byte of each document on its way: the demo
	// station cannot decrypt or verify it and answers with a signed
	// negative MDN (processed/error); the message fails.
	modeNegative = "negative"
	// modeSilent answers 200 and drops the document: no MDN ever comes,
	// the message waits as awaiting-mdn until it is overdue.
	modeSilent = "silent"
	// modeRefuse answers 403: a 4xx is permanent, the message fails at
	// once without an MDN.
	modeRefuse = "refuse"
)

var demoModes = []string{modeNormal, modeNegative, modeSilent, modeRefuse}

// maxDemoBody bounds what the front reads of one request.
const maxDemoBody = 100 << 20

// demoFront listens on the demo partner's public address, in front of the
// demo station, and applies the mode to every POST /as2.
type demoFront struct {
	srv    *http.Server
	proxy  *httputil.ReverseProxy
	served chan struct{} // closed when Serve returned

	mu   sync.Mutex
	mode string
}

// startDemoFront serves on addr and passes requests to the demo station
// on backend (host:port) as mode says.
func startDemoFront(addr, backend, mode string) (*demoFront, error) {
	if err := checkDemoMode(mode); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("demo partner: %w", err)
	}
	f := &demoFront{
		proxy:  httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: backend}),
		mode:   mode,
		served: make(chan struct{}),
	}
	f.srv = &http.Server{Handler: f, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(f.served)
		_ = f.srv.Serve(ln)
	}()
	return f, nil
}

// Close stops the front and waits for it; requests in flight are cut.
func (f *demoFront) Close() error {
	err := f.srv.Close()
	<-f.served
	return err
}

func checkDemoMode(mode string) error {
	for _, m := range demoModes {
		if mode == m {
			return nil
		}
	}
	return fmt.Errorf("demo partner mode %q: want one of %s", mode, strings.Join(demoModes, ", "))
}

func (f *demoFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/demo-mode" {
		f.serveMode(w, r)
		return
	}
	f.mu.Lock()
	mode := f.mode
	f.mu.Unlock()
	if r.Method != http.MethodPost || mode == modeNormal {
		f.proxy.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxDemoBody))
	if err != nil {
		http.Error(w, "demo partner: "+err.Error(), http.StatusBadRequest)
		return
	}
	id := r.Header.Get("Message-Id")
	switch mode {
	case modeSilent:
		say("demo partner (mode silent): accepted %s and dropped it: no MDN will come", id)
		w.WriteHeader(http.StatusOK)
	case modeRefuse:
		say("demo partner (mode refuse): refused %s with 403", id)
		http.Error(w, "demo partner refuses documents (mode refuse)", http.StatusForbidden)
	case modeNegative:
		if len(body) > 0 {
			// Near the end of the body: in the encrypted content, so the
			// station's decryption (or the signature below it) fails.
			body[len(body)-1-len(body)/8] ^= 0x01
		}
		say("demo partner (mode negative): altered a byte of %s: the demo station answers with a negative MDN", id)
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		r.Header.Del("Transfer-Encoding")
		f.proxy.ServeHTTP(w, r)
	}
}

// serveMode answers GET /demo-mode with the mode and sets it on PUT (the
// body is the new mode).
func (f *demoFront) serveMode(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
	case http.MethodPut, http.MethodPost:
		b, err := io.ReadAll(io.LimitReader(r.Body, 64))
		mode := strings.TrimSpace(string(b))
		if err == nil {
			err = checkDemoMode(mode)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		old := f.mode
		f.mode = mode
		f.mu.Unlock()
		if old != mode {
			say("demo partner: mode %s (was %s)", mode, old)
		}
	default:
		w.Header().Set("Allow", "GET, PUT")
		http.Error(w, errors.New("GET or PUT").Error(), http.StatusMethodNotAllowed)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fmt.Fprintln(w, f.mode)
}
