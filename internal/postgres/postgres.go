// Package postgres is edihub's storage: the pgx connection pool, every SQL
// statement the product runs, and the embedded schema migrations.
//
// Driver errors are translated here into the errors the domain packages
// declare; nothing outside this package imports pgx.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configure Open.
type Options struct {
	// MaxConns bounds the pool; 0 keeps pgx's default (max(4, NumCPU)).
	MaxConns int32
	// ConnectTimeout bounds each new connection; 0 means 5 s.
	ConnectTimeout time.Duration
	// FencedIdleTimeout bounds how long a fenced transaction may sit idle
	// (a paused or cut-off leader between statements): the server ends the
	// session past it, and with it the share lock on the fence row that a
	// successor's term opening waits for. 0 means 5 s; edihub serve passes
	// the worker stop timeout.
	FencedIdleTimeout time.Duration
	// TermLockTimeout bounds OpenTerm's wait for the fence row's lock; past
	// it OpenTerm fails and the elector tries again. 0 means
	// FencedIdleTimeout + 2 s, so that a term opening normally outwaits an
	// idle transaction that the server is about to end.
	TermLockTimeout time.Duration
	// DeadPeerTimeout is how fast a connection notices a peer that went
	// away without closing it (network cut, host down): on the client
	// side TCP keepalives and a watch that closes a connection whose
	// server acknowledged nothing for this long while owing an
	// acknowledgement (a server that only stopped reading, its window
	// closed, is alive however long it stalls); the server is asked the
	// same for its end (tcp_keepalives_*, tcp_user_timeout), unless the
	// URL sets them. 0 means 10 s.
	DeadPeerTimeout time.Duration
}

// Store is the PostgreSQL-backed store. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	// fenceRejections counts leader-gated writes refused for a stale
	// fencing token (edihub_fencing_rejections_total), exported by Collector.
	fenceRejections prometheus.Counter
	// fencedIdleTimeout and termLockTimeout: see Options.
	fencedIdleTimeout time.Duration
	termLockTimeout   time.Duration
	// stages counts the connections StagedPayloads hold (inbound_staged.go).
	stages atomic.Int32
	// receipts is the group commit of receipts (receipts.go).
	receipts *receiptBatcher
}

// ErrSchemaOutdated reports a database whose schema is older than this
// binary's migrations.
var ErrSchemaOutdated = errors.New("database schema is older than this edihub binary")

// ErrSchemaNewer reports a database migrated by a newer edihub binary.
var ErrSchemaNewer = errors.New("database schema is newer than this edihub binary")

// Open connects to the database at url. It does not require the database to
// be reachable yet: the pool connects lazily, and Ping tells.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	return open(ctx, url, opts, nil)
}

// open is Open with a tracer on every connection (tests record the
// statements the store runs), or none.
func open(ctx context.Context, url string, opts Options, tracer pgx.QueryTracer) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", redact(err))
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = 5 * time.Second
	}
	cfg.ConnConfig.ConnectTimeout = opts.ConnectTimeout
	cfg.ConnConfig.RuntimeParams["application_name"] = "edihub"
	cfg.ConnConfig.Tracer = tracer
	if opts.FencedIdleTimeout <= 0 {
		opts.FencedIdleTimeout = 5 * time.Second
	}
	if opts.TermLockTimeout <= 0 {
		opts.TermLockTimeout = opts.FencedIdleTimeout + 2*time.Second
	}
	if opts.DeadPeerTimeout <= 0 {
		opts.DeadPeerTimeout = 10 * time.Second
	}
	detectDeadPeers(cfg.ConnConfig, opts.DeadPeerTimeout)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", redact(err))
	}
	return &Store{
		pool:              pool,
		fenceRejections:   newFenceRejections(),
		fencedIdleTimeout: opts.FencedIdleTimeout,
		termLockTimeout:   opts.TermLockTimeout,
		receipts:          newReceiptBatcher(),
	}, nil
}

// detectDeadPeers makes connections notice within about d a peer that is
// gone without closing the connection. Client side: TCP keepalives probe
// an idle connection after d/3, every d/6, three times, and a watch
// (deadPeerDialer) closes a connection whose server acknowledged nothing
// for d while owing it (not TCP_USER_TIMEOUT, which also ends a
// connection to a live server that stopped reading for d: see
// deadpeer.go). Server side, unless the URL says otherwise: the same
// keepalives and tcp_user_timeout, so the server ends the session of a
// replica cut off with a transaction open.
func detectDeadPeers(cc *pgx.ConnConfig, d time.Duration) {
	idle, interval := max(d/3, time.Second), max(d/6, time.Second)
	cc.DialFunc = deadPeerDialer(cc.ConnectTimeout, d)
	for k, v := range map[string]string{
		"tcp_keepalives_idle":     strconv.Itoa(int(idle / time.Second)),
		"tcp_keepalives_interval": strconv.Itoa(int(interval / time.Second)),
		"tcp_keepalives_count":    "3",
		"tcp_user_timeout":        strconv.FormatInt(d.Milliseconds(), 10),
	} {
		if _, set := cc.RuntimeParams[k]; !set {
			cc.RuntimeParams[k] = v
		}
	}
}

// Close closes every connection, waiting for those in use to be released.
func (s *Store) Close() { s.pool.Close() }

// Ping checks that the database answers a query.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	if err := s.pool.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		return fmt.Errorf("ping database: %w", err)
	}
	return nil
}

// redact keeps the connection string, and so any password in it, out of
// errors: pgx quotes it in parse errors with best-effort redaction only.
func redact(err error) error {
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		return errors.New("invalid connection string (want postgres://user:password@host:port/database?sslmode=...)")
	}
	return err
}
