package postgres

import "context"

// CountRows counts the rows of a table (tests only; the name is trusted).
func (s *Store) CountRows(ctx context.Context, table string) int64 {
	var n int64
	_ = s.pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n)
	return n
}
