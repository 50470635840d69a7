package postgres

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
)

// Statement is a statement a Store ran, with its arguments.
type Statement struct {
	SQL  string
	Args []any
}

// recorder keeps the statements of every connection, batches included.
type recorder struct {
	mu    sync.Mutex
	stmts []Statement
}

func (r *recorder) add(sql string, args []any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stmts = append(r.stmts, Statement{SQL: sql, Args: args})
}

func (r *recorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.add(d.SQL, d.Args)
	return ctx
}

func (r *recorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *recorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (r *recorder) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.add(d.SQL, d.Args)
}

func (r *recorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// OpenRecording opens a Store that records every statement it runs;
// take returns those recorded since the last call.
func OpenRecording(ctx context.Context, url string) (st *Store, take func() []Statement, err error) {
	r := &recorder{}
	st, err = open(ctx, url, Options{}, r)
	take = func() []Statement {
		r.mu.Lock()
		defer r.mu.Unlock()
		s := r.stmts
		r.stmts = nil
		return s
	}
	return st, take, err
}

// PrefixEnd is prefixEnd, for its table test.
var PrefixEnd = prefixEnd
