package oidc

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"go.uber.org/zap"
)

// ErrUnavailable: the provider's discovery has not succeeded yet, so no
// sign-in with it can start. Password sign-in is unaffected.
var ErrUnavailable = errors.New("oidc: the identity provider is unavailable")

// Discovery retries of Lazy.Run: the first after MinRetry, each further
// one after twice the wait before, at most MaxRetry.
const (
	MinRetry = time.Second
	MaxRetry = time.Minute
)

// Lazy is a Provider whose discovery happens in the background (Run), so
// that a provider that is down when the hub starts keeps neither the hub
// nor password sign-in from working: until discovery succeeds, Start and
// Finish return ErrUnavailable and Available is false. It is safe for
// concurrent use.
type Lazy struct {
	opts     Options
	log      *zap.Logger
	minRetry time.Duration
	maxRetry time.Duration

	mu    sync.Mutex
	p     *Provider
	ready chan struct{} // closed when p is set
}

// NewLazy checks opts as New does, without contacting the provider: every
// mistake in opts is a *ConfigError naming the setting and the fix. log
// (nil: none) receives each failed discovery.
func NewLazy(opts Options, log *zap.Logger) (*Lazy, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Lazy{opts: opts, log: log, minRetry: MinRetry, maxRetry: MaxRetry, ready: make(chan struct{})}, nil
}

// SetRetry changes the waits between discovery attempts (MinRetry and
// MaxRetry by default); call it before Run.
func (l *Lazy) SetRetry(first, most time.Duration) { l.minRetry, l.maxRetry = first, max(first, most) }

// Run discovers the provider, retrying a failed discovery with a growing
// wait (see MinRetry) and logging why it failed, until it succeeds or ctx
// ends; it returns nil then. Discovery failures never end it: a provider
// that calls itself by another name or is down stays a logged warning, and
// the console offers passwords meanwhile.
func (l *Lazy) Run(ctx context.Context) error {
	wait := l.minRetry
	for {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		p, err := discover(actx, l.opts)
		cancel()
		if err == nil {
			l.mu.Lock()
			l.p = p
			close(l.ready)
			l.mu.Unlock()
			l.log.Info("identity provider discovered: sign-in with it is available", zap.String("issuer", l.opts.Issuer))
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		l.log.Warn("identity provider unavailable: password sign-in only until it answers",
			zap.String("issuer", l.opts.Issuer), zap.Duration("retry_in", wait), zap.Error(err))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		wait = min(2*wait, l.maxRetry)
	}
}

// Ready is closed once discovery succeeded.
func (l *Lazy) Ready() <-chan struct{} { return l.ready }

// Available reports whether discovery succeeded, so that sign-ins can
// start.
func (l *Lazy) Available() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.p != nil
}

func (l *Lazy) provider() (*Provider, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.p == nil {
		return nil, fmt.Errorf("%w: it has not answered at %s yet", ErrUnavailable, l.opts.Issuer)
	}
	return l.p, nil
}

// Start is Provider.Start, or ErrUnavailable before discovery succeeded.
func (l *Lazy) Start() (Flow, string, error) {
	p, err := l.provider()
	if err != nil {
		return Flow{}, "", err
	}
	f, u := p.Start()
	return f, u, nil
}

// Finish is Provider.Finish, or ErrUnavailable before discovery
// succeeded.
func (l *Lazy) Finish(ctx context.Context, flow Flow, callback url.Values) (Identity, error) {
	p, err := l.provider()
	if err != nil {
		return Identity{}, err
	}
	return p.Finish(ctx, flow, callback)
}
