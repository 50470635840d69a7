package postgres_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// requeueBefore00023SQL is RequeueInboundMDN's statement as the release
// before migration 00023 sends it: a replica not yet updated copies a
// stored MDN's header fields (json since 00023) into outbox.headers
// (jsonb).
const requeueBefore00023SQL = `
INSERT INTO outbox (kind, message_id, partner, url, headers, body, status, next_attempt_at, max_attempts, retry_until)
SELECT 'mdn', m.id, m.partner, $2, d.headers, d.body, 'pending', now(), $3,
       CASE WHEN $4::bigint > 0 THEN now() + $4::bigint * interval '1 microsecond' END
  FROM messages m JOIN mdns d ON d.message_id = m.id
 WHERE m.id = $1`

// TestMigration00023OnExistingData: migration 00023 applies to a
// database that the release before it filled, whose MDN header fields
// read back as stored after it, after its Down and after Up again; a
// receipt stored after it reads back too; the previous release's
// statements still work on the migrated schema (its receipt's, in
// TestReceivedEventExactlyOnce; its requeue of a stored MDN here, whose
// outbox row the MDN poller's jsonb test still reads); and the CHECK
// constraints rewritten by it still refuse what they refused.
func TestMigration00023OnExistingData(t *testing.T) {
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	st := open(t, url)
	if err := st.MigrateTo(ctx, 22); err != nil {
		t.Fatal(err)
	}
	before := receipt("<before-00023@p>")
	before.MDN.Header = http.Header{"Content-Type": {"multipart/report; boundary=\"b\""}, "Disposition-Notification-Options": {"signed-receipt-protocol=optional, pkcs7-signature"}}
	beforeID, err := st.SaveInbound(ctx, before)
	if err != nil {
		t.Fatal(err)
	}
	// readBack reads through a store of its own: a connection that
	// prepared the read before the column's type changed fails it once
	// (pgx then drops the statement; docs/configuration.md), which a
	// replica started on the schema as it is never meets.
	readBack := func(step, messageID string, want http.Header) {
		t.Helper()
		r, err := open(t, url).InboundByMessageID(ctx, "P", messageID)
		if err != nil {
			t.Fatalf("%s: InboundByMessageID(%s) = %v", step, messageID, err)
		}
		if r.MDN == nil {
			t.Fatalf("%s: %s has no MDN", step, messageID)
		}
		if diff := cmp.Diff(want, r.MDN.Header); diff != "" {
			t.Errorf("%s: MDN header of %s (-want +got):\n%s", step, messageID, diff)
		}
	}
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	readBack("up", before.MessageID, before.MDN.Header)
	after := receipt("<after-00023@p>")
	if _, err := st.SaveInbound(ctx, after); err != nil {
		t.Fatal(err)
	}
	readBack("up", after.MessageID, after.MDN.Header)
	if n, err := st.ExecSQL(ctx, requeueBefore00023SQL, beforeID, "https://p.example/mdn", 8, int64(0)); err != nil || n != 1 {
		t.Fatalf("the previous release's requeue = %d rows, %v; want 1", n, err)
	}
	if n, err := st.CountSQL(ctx, `SELECT count(*) FROM outbox WHERE message_id = $1 AND headers ? 'Disposition-Notification-Options'`, beforeID); err != nil || n != 1 {
		t.Errorf("requeued rows whose jsonb headers hold the field = %d, %v; want 1", n, err)
	}
	for _, bad := range []string{
		`INSERT INTO messages (direction, partner, as2_from, as2_to, message_id, status) VALUES ('sideways', 'P', 'P', 'S', '<bad-1@p>', 'processed')`,
		`INSERT INTO messages (direction, partner, as2_from, as2_to, message_id, status, mdn_mode) VALUES ('inbound', 'P', 'P', 'S', '<bad-2@p>', 'processed', 'later')`,
		`INSERT INTO events (type, message, partner, direction) VALUES ('received-twice', 1, 'P', 'inbound')`,
	} {
		if _, err := st.ExecSQL(ctx, bad); err == nil {
			t.Errorf("%s: nil error, want a check violation", bad)
		}
	}
	if err := st.MigrateDownTo(ctx, 22); err != nil {
		t.Fatalf("down: %v", err)
	}
	readBack("down", before.MessageID, before.MDN.Header)
	readBack("down", after.MessageID, after.MDN.Header)
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	readBack("down and up again", before.MessageID, before.MDN.Header)
	readBack("down and up again", after.MessageID, after.MDN.Header)
}
