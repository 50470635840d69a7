package postgres

import "context"

// TableExists reports whether a table exists in the public schema.
func (s *Store) TableExists(ctx context.Context, name string) bool {
	var ok bool
	_ = s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = 'public' AND tablename = $1)`, name).Scan(&ok)
	return ok
}

// MigrationRows counts applied migrations recorded by goose.
func (s *Store) MigrationRows(ctx context.Context) int {
	var n int
	_ = s.pool.QueryRow(ctx, `SELECT count(*) FROM goose_db_version WHERE version_id > 0 AND is_applied`).Scan(&n)
	return n
}

// ForceSchemaVersion records a migration this binary does not know.
func (s *Store) ForceSchemaVersion(ctx context.Context, v int64) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true)`, v)
	return err
}

// ExpireClaims ends every outbox claim now, as if its lease had run out:
// claimed rows become due again. Tests use it instead of sleeping past a
// short lease, which a loaded machine can overrun before the test looks.
func (s *Store) ExpireClaims(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `
UPDATE outbox SET claimed_until = now() - interval '1 second', next_attempt_at = now() - interval '1 second'
 WHERE status = 'pending' AND claimed_until IS NOT NULL`)
	return err
}

// PurgeSQL is the statement PurgeBatch runs for kind: $1 the cutoff,
// $2 the batch's limit.
func PurgeSQL(kind string) string { return purgeSQL[kind] }
