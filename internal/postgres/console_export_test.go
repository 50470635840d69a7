package postgres

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Statement is one SQL statement a Store ran, with its arguments.
type Statement struct {
	SQL  string
	Args []any
}

// Recorder keeps the statements a Store runs.
type Recorder struct {
	mu    sync.Mutex
	stmts []Statement
}

// TraceQueryStart records a statement (pgx.QueryTracer).
func (r *Recorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stmts = append(r.stmts, Statement{SQL: d.SQL, Args: d.Args})
	return ctx
}

// TraceQueryEnd does nothing (pgx.QueryTracer).
func (r *Recorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Take returns the statements recorded since the last Take.
func (r *Recorder) Take() []Statement {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.stmts
	r.stmts = nil
	return out
}

// OpenRecorded opens a Store on url whose statements r records.
func OpenRecorded(ctx context.Context, url string, r *Recorder) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.Tracer = r
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &Store{pool: pool, fenceRejections: newFenceRejections()}, nil
}
