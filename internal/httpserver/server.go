// Package httpserver holds edihub's HTTP plumbing: the chi routers for the
// AS2/API listener and the ops listener, their middleware (request IDs,
// access logs, metrics, panic recovery, body limits), and a Server that
// serves a listener until its context ends and then drains.
package httpserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"
)

// Defaults for Server.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	DefaultDrainTimeout      = 20 * time.Second
)

// Server serves one listener. Build it with Listen, then call Run.
type Server struct {
	name  string
	ln    net.Listener
	srv   *http.Server
	drain time.Duration
	log   *zap.Logger
}

// Options configure Listen.
type Options struct {
	// Name labels the listener in logs ("as2", "ops").
	Name string
	// Addr is the TCP address; port 0 picks a free port.
	Addr    string
	Handler http.Handler
	Logger  *zap.Logger
	// ReadHeaderTimeout bounds how long a client may take to send headers
	// (slowloris); 0 means DefaultReadHeaderTimeout.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included; 0 means
	// none (AS2 bodies can be large: the body limit and the partner's own
	// timeout bound them instead).
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a response; 0 means none.
	WriteTimeout time.Duration
	// DrainTimeout bounds graceful shutdown; 0 means DefaultDrainTimeout.
	DrainTimeout time.Duration
}

// Listen binds the address, so that a port conflict fails at start rather
// than after other components came up.
func Listen(opts Options) (*Server, error) {
	if opts.Handler == nil || opts.Logger == nil {
		return nil, errors.New("httpserver: Handler and Logger are required")
	}
	if opts.ReadHeaderTimeout <= 0 {
		opts.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = DefaultDrainTimeout
	}
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s for %s: %w", opts.Addr, opts.Name, err)
	}
	log := opts.Logger.Named("http").With(zap.String("listener", opts.Name))
	return &Server{
		name:  opts.Name,
		ln:    ln,
		drain: opts.DrainTimeout,
		log:   log,
		srv: &http.Server{
			Handler:           opts.Handler,
			ReadHeaderTimeout: opts.ReadHeaderTimeout,
			ReadTimeout:       opts.ReadTimeout,
			WriteTimeout:      opts.WriteTimeout,
			IdleTimeout:       DefaultIdleTimeout,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          zap.NewStdLog(log),
		},
	}, nil
}

// Close closes the listener of a server that will not Run (a later
// listener of the process could not be bound).
func (s *Server) Close() error { return s.ln.Close() }

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Run serves until ctx ends, then stops accepting connections and waits up
// to the drain timeout for in-flight requests (http.Server.Shutdown). It
// returns nil after a clean drain, an error when serving failed or the drain
// timed out (remaining connections are then closed). net/http waits up to
// 5 s for a connection that has sent no request yet (its client may be
// writing one), so a drain timeout shorter than that can end in an error
// when a client left an unused connection open.
func (s *Server) Run(ctx context.Context) error {
	s.log.Info("listening", zap.String("addr", s.ln.Addr().String()))
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", s.name, err)
	case <-ctx.Done():
	}
	dctx, cancel := context.WithTimeout(context.Background(), s.drain)
	defer cancel()
	s.log.Info("draining", zap.Duration("timeout", s.drain))
	err := s.srv.Shutdown(dctx)
	<-errc // Serve returns ErrServerClosed once Shutdown began.
	if err != nil {
		_ = s.srv.Close()
		return fmt.Errorf("drain %s: %w", s.name, err)
	}
	s.log.Info("stopped")
	return nil
}
