package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
)

// Errors of the AS2 restart store.
var (
	// ErrRestartNotFound means no transfer of that partner has that ETag.
	ErrRestartNotFound = errors.New("restart transfer not found")
	// ErrRestartConflict means the transfer moved on (or was restarted
	// or deleted) since the caller read it: another request appended to
	// it. The caller's bytes were not stored.
	ErrRestartConflict = errors.New("restart transfer changed meanwhile")
	// ErrRestartFull means a new transfer would take the partner's or
	// everyone's partial bytes past their limit.
	ErrRestartFull = errors.New("restart storage full")
)

// RestartTransfer is one transfer a partner may resume (see migration
// 00017).
type RestartTransfer struct {
	ID      int64
	Partner string
	ETag    string
	// Header is the first request's header fields, as JSON.
	Header   []byte
	Total    int64
	Received int64
}

// RestartLimits bound the bytes of open transfers, counted by their
// declared totals: a transfer is refused when it does not fit, not cut
// off half way. Zero means no limit.
type RestartLimits struct {
	PartnerBytes int64
	TotalBytes   int64
}

// BeginRestart opens a transfer of total bytes for partner under etag,
// replacing one of the same partner and ETag (a sender starting over
// from the first byte). It returns ErrRestartFull when the open
// transfers' totals, this one's included and the replaced one's not,
// would exceed lim. Openings are serialised (a transaction-scoped
// advisory lock) so that replicas opening transfers at once cannot
// overshoot the limits together.
func (s *Store) BeginRestart(ctx context.Context, partner, etag string, header []byte, total int64, lim RestartLimits) (RestartTransfer, error) {
	tr := RestartTransfer{Partner: partner, ETag: etag, Header: header, Total: total}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('edihub.restart_transfers'))`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM restart_transfers WHERE partner = $1 AND etag = $2`, partner, etag); err != nil {
			return err
		}
		var mine, all int64
		if err := tx.QueryRow(ctx, `
SELECT coalesce(sum(total) FILTER (WHERE partner = $1), 0)::bigint, coalesce(sum(total), 0)::bigint FROM restart_transfers`,
			partner).Scan(&mine, &all); err != nil {
			return err
		}
		if (lim.PartnerBytes > 0 && mine+total > lim.PartnerBytes) || (lim.TotalBytes > 0 && all+total > lim.TotalBytes) {
			return fmt.Errorf("%w: %d bytes open for this partner, %d in all, %d more asked", ErrRestartFull, mine, all, total)
		}
		return tx.QueryRow(ctx, `
INSERT INTO restart_transfers (partner, etag, header, total) VALUES ($1, $2, $3, $4) RETURNING id`,
			partner, etag, header, total).Scan(&tr.ID)
	})
	if err != nil {
		return RestartTransfer{}, fmt.Errorf("begin restart transfer: %w", err)
	}
	return tr, nil
}

// RestartTransferOf returns partner's transfer etag, or
// ErrRestartNotFound. Another partner's transfer of the same ETag is not
// found.
func (s *Store) RestartTransferOf(ctx context.Context, partner, etag string) (RestartTransfer, error) {
	tr := RestartTransfer{Partner: partner, ETag: etag}
	err := s.pool.QueryRow(ctx, `
SELECT id, header, total, received FROM restart_transfers WHERE partner = $1 AND etag = $2`, partner, etag).
		Scan(&tr.ID, &tr.Header, &tr.Total, &tr.Received)
	if errors.Is(err, pgx.ErrNoRows) {
		return RestartTransfer{}, ErrRestartNotFound
	}
	if err != nil {
		return RestartTransfer{}, fmt.Errorf("find restart transfer: %w", err)
	}
	return tr, nil
}

// AppendRestart stores chunks, the bytes that follow offset at of
// transfer id, in one transaction, and returns the bytes the transfer
// now holds. It returns ErrRestartConflict, storing nothing, when the
// transfer does not hold exactly at bytes (another request appended, the
// sender started over, or the purger deleted it) or when the chunks would
// go past the transfer's total.
func (s *Store) AppendRestart(ctx context.Context, id, at int64, chunks [][]byte) (int64, error) {
	var n int64
	for _, c := range chunks {
		n += int64(len(c))
	}
	var received int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `
UPDATE restart_transfers SET received = received + $3, updated_at = now()
 WHERE id = $1 AND received = $2 AND received + $3 <= total
RETURNING received`, id, at, n).Scan(&received)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrRestartConflict
		}
		if err != nil {
			return err
		}
		rows := make([][]any, 0, len(chunks))
		off := at
		for _, c := range chunks {
			rows = append(rows, []any{id, off, c})
			off += int64(len(c))
		}
		_, err = tx.CopyFrom(ctx, pgx.Identifier{"restart_chunks"}, []string{"transfer_id", "off", "data"}, pgx.CopyFromRows(rows))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("append to restart transfer: %w", err)
	}
	return received, nil
}

// WriteRestartBody writes the stored bytes of transfer id to w in order,
// one chunk row in memory at a time, and returns how many it wrote.
func (s *Store) WriteRestartBody(ctx context.Context, id int64, w io.Writer) (int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT off, data FROM restart_chunks WHERE transfer_id = $1 ORDER BY off`, id)
	if err != nil {
		return 0, fmt.Errorf("read restart transfer: %w", err)
	}
	defer rows.Close()
	var n int64
	for rows.Next() {
		var off int64
		var data []byte
		if err := rows.Scan(&off, &data); err != nil {
			return n, fmt.Errorf("read restart transfer: %w", err)
		}
		if off != n {
			return n, fmt.Errorf("read restart transfer: chunk at %d after %d bytes", off, n)
		}
		m, err := w.Write(data)
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	if err := rows.Err(); err != nil {
		return n, fmt.Errorf("read restart transfer: %w", err)
	}
	return n, nil
}

// DeleteRestart deletes transfer id and its bytes; a transfer already
// gone is not an error.
func (s *Store) DeleteRestart(ctx context.Context, id int64) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM restart_transfers WHERE id = $1`, id); err != nil {
		return fmt.Errorf("delete restart transfer: %w", err)
	}
	return nil
}
