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
	"time"

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
}

// Store is the PostgreSQL-backed store. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	// fenceRejections counts leader-gated writes refused for a stale
	// fencing token (edihub_fencing_rejections_total), exported by Collector.
	fenceRejections prometheus.Counter
}

// ErrSchemaOutdated reports a database whose schema is older than this
// binary's migrations.
var ErrSchemaOutdated = errors.New("database schema is older than this edihub binary")

// ErrSchemaNewer reports a database migrated by a newer edihub binary.
var ErrSchemaNewer = errors.New("database schema is newer than this edihub binary")

// Open connects to the database at url. It does not require the database to
// be reachable yet: the pool connects lazily, and Ping tells.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
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
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", redact(err))
	}
	return &Store{pool: pool, fenceRejections: newFenceRejections()}, nil
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
