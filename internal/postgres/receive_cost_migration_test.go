package postgres_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// TestMigration00023OnExistingData: migration 00023 applies to a
// database that the release before it filled, whose receipts read back
// as stored after it, after its Down and after Up again; a receipt
// stored after it reads back too (the previous release's receipt
// statement is TestReceivedEventExactlyOnce's); and the CHECK
// constraints it rewrote (NOT VALID: the rows in the tables are not
// scanned again) still refuse what they refused, after Up and after
// Down.
func TestMigration00023OnExistingData(t *testing.T) {
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	st := open(t, url)
	if err := st.MigrateTo(ctx, 22); err != nil {
		t.Fatal(err)
	}
	before := receipt("<before-00023@p>")
	before.MDN.Header = http.Header{"Content-Type": {"multipart/report; boundary=\"b\""}, "Disposition-Notification-Options": {"signed-receipt-protocol=optional, pkcs7-signature"}}
	if _, err := st.SaveInbound(ctx, before); err != nil {
		t.Fatal(err)
	}
	readBack := func(step, messageID string, want http.Header) {
		t.Helper()
		r, err := st.InboundByMessageID(ctx, "P", messageID)
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
	refuses := func(step string) {
		t.Helper()
		for _, bad := range []string{
			`INSERT INTO messages (direction, partner, as2_from, as2_to, message_id, status) VALUES ('sideways', 'P', 'P', 'S', '<bad-1@p>', 'processed')`,
			`INSERT INTO messages (direction, partner, as2_from, as2_to, message_id, status, mdn_mode) VALUES ('inbound', 'P', 'P', 'S', '<bad-2@p>', 'processed', 'later')`,
			`INSERT INTO events (type, message, partner, direction) VALUES ('received-twice', 1, 'P', 'inbound')`,
		} {
			if _, err := st.ExecSQL(ctx, bad); err == nil || !strings.Contains(err.Error(), "violates check constraint") {
				t.Errorf("%s: %s: error %v, want a check violation", step, bad, err)
			}
		}
	}
	refuses("up")
	if err := st.MigrateDownTo(ctx, 22); err != nil {
		t.Fatalf("down: %v", err)
	}
	readBack("down", before.MessageID, before.MDN.Header)
	readBack("down", after.MessageID, after.MDN.Header)
	refuses("down")
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	readBack("down and up again", before.MessageID, before.MDN.Header)
	readBack("down and up again", after.MessageID, after.MDN.Header)
	refuses("down and up again")
}
