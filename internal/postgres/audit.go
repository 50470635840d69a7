package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// AuditEntry is one action or change to record in the audit log: who
// (Actor, such as "user:alice"), what (Action, such as "partner.update",
// on Target, such as the partner's AS2 ID, with Detail) and from where
// (Remote: the client's IP, "" from the command line). The time is the
// database's. ActorIssuer and ActorSubject name the person behind an actor
// signed in with an OpenID Connect provider: they are stored in the
// detail as "actor_issuer" and "actor_subject", since the user's name
// alone may be any name the provider gave.
type AuditEntry struct {
	Actor  string
	Action string
	Target string
	Detail map[string]any
	Remote string

	ActorIssuer, ActorSubject string
}

// AuditRecord is one stored audit log entry.
type AuditRecord struct {
	ID     int64
	At     time.Time
	Actor  string
	Action string
	Target string
	Detail map[string]any
	Remote string
}

// AuditQuery selects audit log entries, newest first. Empty fields match
// everything; Actor, Action and Target match exactly. Since is inclusive,
// Until exclusive. Before (an ID) pages: only older entries. Limit bounds
// the rows (at most 1000; 0 means 100).
type AuditQuery struct {
	Actor, Action, Target string
	Since, Until          time.Time
	Before                int64
	Limit                 int
}

// execer is a pool or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Record writes one audit log entry. Actor and Action are required.
func (s *Store) Record(ctx context.Context, e AuditEntry) error {
	if err := insertAudit(ctx, s.pool, e); err != nil {
		return fmt.Errorf("record audit %s: %w", e.Action, err)
	}
	return nil
}

// insertAudit writes e with q, a pool or the transaction of the change it
// records.
func insertAudit(ctx context.Context, q execer, e AuditEntry) error {
	if e.Actor == "" || e.Action == "" {
		return fmt.Errorf("audit entry without actor or action: %+v", e)
	}
	detail := e.Detail
	if detail == nil {
		detail = map[string]any{}
	}
	if e.ActorIssuer != "" {
		detail = maps.Clone(detail)
		detail["actor_issuer"], detail["actor_subject"] = e.ActorIssuer, e.ActorSubject
	}
	b, err := json.Marshal(detail)
	if err != nil {
		return fmt.Errorf("encode audit detail: %w", err)
	}
	_, err = q.Exec(ctx, `INSERT INTO audit_log (actor, action, target, detail, remote) VALUES ($1, $2, $3, $4, $5)`,
		e.Actor, e.Action, e.Target, b, e.Remote)
	return err
}

// AuditLog lists the entries q selects, newest first.
func (s *Store) AuditLog(ctx context.Context, q AuditQuery) ([]AuditRecord, error) {
	if q.Limit <= 0 {
		q.Limit = 100
	}
	q.Limit = min(q.Limit, 1000)
	var where []string
	var args []any
	arg := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if q.Actor != "" {
		arg("actor = $%d", q.Actor)
	}
	if q.Action != "" {
		arg("action = $%d", q.Action)
	}
	if q.Target != "" {
		arg("target = $%d", q.Target)
	}
	if !q.Since.IsZero() {
		arg("at >= $%d", q.Since)
	}
	if !q.Until.IsZero() {
		arg("at < $%d", q.Until)
	}
	if q.Before > 0 {
		arg("id < $%d", q.Before)
	}
	sql := `SELECT id, at, actor, action, target, detail, remote FROM audit_log`
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, q.Limit)
	sql += fmt.Sprintf(" ORDER BY id DESC LIMIT $%d", len(args))
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditRecord, error) {
		var a AuditRecord
		err := r.Scan(&a.ID, &a.At, &a.Actor, &a.Action, &a.Target, &a.Detail, &a.Remote)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	return out, nil
}
