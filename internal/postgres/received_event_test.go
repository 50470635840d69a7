package postgres_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// preMigration18SaveSQL is the receipt's statement of the releases before
// migration 00018, which left the received event to the insert trigger:
// what a replica of such a release still running during a rolling update
// sends. $1..$18 as postgres.messageArgs; $19 payload?, $20 payload; $21
// MDN?, $22..$27 the MDN; $28 outbox?, $29..$30 its retry.
const preMigration18SaveSQL = `
WITH m AS (
INSERT INTO messages (direction, partner, as2_from, as2_to, message_id, status, content_type, filename,
                      payload_size, signed, encrypted, compressed, mic, mic_alg, mdn_mode, mdn_signed, mdn_url,
                      disposition, error, attempts, completed_at)
VALUES ('inbound', $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, 1, now())
ON CONFLICT (partner, direction, message_id) DO NOTHING
RETURNING id),
p AS (INSERT INTO payloads (message_id, data) SELECT id, $20::bytea FROM m WHERE $19::boolean),
d AS (INSERT INTO mdns (message_id, content_type, headers, body, disposition, mic, signed)
      SELECT id, $22::text, $23::jsonb, $24::bytea, $25::text, $26::text, $27::boolean FROM m WHERE $21::boolean),
o AS (INSERT INTO outbox (kind, message_id, partner, url, headers, body, status, next_attempt_at, max_attempts, retry_until)
      SELECT 'mdn', id, $1, $16, $23::jsonb, $24::bytea, 'pending', now(), $29::integer,
             CASE WHEN $30::bigint > 0 THEN now() + $30::bigint * interval '1 microsecond' END FROM m WHERE $28::boolean)
SELECT id FROM m`

// preMigration18Save stores m as a replica of a release before migration
// 00018 does, and returns the message row's id (0 for a duplicate).
func preMigration18Save(t *testing.T, st *postgres.Store, m *postgres.InboundMessage) int64 {
	t.Helper()
	hdr, err := json.Marshal(m.MDN.Header)
	if err != nil {
		t.Fatal(err)
	}
	id, err := st.CountSQL(context.Background(), preMigration18SaveSQL,
		m.Partner, m.AS2From, m.AS2To, m.MessageID, m.Status, m.ContentType, m.Filename,
		m.PayloadSize, m.Signed, m.Encrypted, m.Compressed, m.MIC, m.MICAlg, m.MDNMode, m.MDNSigned, m.MDNURL,
		m.Disposition, m.Error,
		m.Payload != nil, m.Payload,
		true, m.MDN.Header.Get("Content-Type"), string(hdr), m.MDN.Body, m.MDN.Disposition, m.MDN.MIC, m.MDN.Signed,
		m.Outbox, 8, int64(0))
	if errors.Is(err, pgx.ErrNoRows) {
		return 0
	}
	if err != nil {
		t.Fatalf("the receipt of a release before 00018: %v", err)
	}
	return id
}

// receipt is a processed receipt from P whose event detail has every
// field: a disposition, an error longer than the 300 characters kept (in
// characters of more than one byte) and a file name.
func receipt(id string) *postgres.InboundMessage {
	return &postgres.InboundMessage{Partner: "P", AS2From: "P", AS2To: "S", MessageID: id, Status: postgres.InboundProcessed,
		Disposition: "automatic-action/MDN-sent-automatically; processed/warning: duplicate-document",
		Error:       strings.Repeat("é", 299) + "ü and more", Filename: "ORDERS_1.edi",
		ContentType: "application/edi-x12", Payload: []byte("ISA*00~"), PayloadSize: 7, MDNMode: "sync",
		MDN: &postgres.StoredMDN{Header: map[string][]string{"Content-Type": {"multipart/report"}}, Body: []byte("mdn"), Disposition: "processed"}}
}

// wantDetail is the detail of the received event of m, as the trigger of
// migration 00005 writes it.
func wantDetail(m *postgres.InboundMessage) map[string]any {
	d := map[string]any{"message_id": m.MessageID, "status": m.Status}
	if m.Disposition != "" {
		d["disposition"] = m.Disposition
	}
	if e := []rune(m.Error); len(e) > 0 {
		d["error"] = string(e[:min(len(e), 300)])
	}
	if m.Filename != "" {
		d["filename"] = m.Filename
	}
	return d
}

// TestReceivedEventExactlyOnce: every way an inbound message row is
// written yields one received event if it is stored processed and none
// otherwise, in the transaction that writes the row, with the detail the
// trigger of migration 00005 wrote: each of SaveInbound's paths (one
// statement of each shape, a batch of the group commit, with and without
// an EDI transaction, the streamed and the chunked payload), a duplicate,
// a failed receipt replaced by its resend, the statement of a release
// before migration 00018 (a replica not yet updated, whose event the
// insert trigger writes), SQL written by hand (one row and two), and an
// outbound message queued (no event when inserted). The feed returns them in the
// order of their transactions.
func TestReceivedEventExactlyOnce(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	sent := enqueueEDI(t, st, "ACME", x12PO, time.Hour)
	want := map[int64]map[string]any{} // message id → its event's detail
	var order []int64                  // the messages with an event, in the order stored
	stored := func(what string, m *postgres.InboundMessage, id int64, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if m.Status == postgres.InboundProcessed {
			want[id] = wantDetail(m)
			order = append(order, id)
		}
	}
	save := func(what string, m *postgres.InboundMessage) int64 {
		t.Helper()
		id, err := st.SaveInbound(ctx, m)
		stored(what, m, id, err)
		return id
	}

	// One statement, each shape: payload, MDN, async MDN's outbox row.
	save("payload, MDN", receipt("<1@p>"))
	m := receipt("<2@p>")
	m.MDNMode, m.MDN = "none", nil
	save("payload, no MDN", m)
	m = receipt("<3@p>")
	m.MDNMode, m.MDNURL, m.Outbox = "async", "http://p.example/mdn", true
	save("payload, async MDN", m)
	m = receipt("<4@p>")
	m.Status, m.Payload, m.Filename = postgres.InboundError, nil, ""
	save("failure with its MDN", m)
	m = receipt("<5@p>")
	m.Status, m.Payload, m.MDNMode, m.MDN = postgres.InboundError, nil, "none", nil
	save("failure without MDN", m)
	m = receipt("<6@p>")
	m.Disposition, m.Error, m.Filename = "", "", ""
	save("no disposition, error or file name", m)

	// Several receipts flushed together by the group commit, in one
	// transaction: one event each, in the line's order.
	batch := []*postgres.InboundMessage{receipt("<batch-1@p>"), receipt("<batch-2@p>"), receipt("<batch-3@p>")}
	batch[1].Status, batch[1].Payload = postgres.InboundError, nil
	for i, o := range lineUp(ctx, t, st, batch...) {
		stored("batch", batch[i], o.id, o.err)
	}

	// Each of SaveInbound's paths, with an EDI payload (a transaction)
	// and without.
	for _, path := range inboundPaths {
		payload, e := inboundEDI(t, func(control int64) (postgres.NewOutbound, error) { return ourAck(t, control) })
		m := path.message("<edi-"+path.name+"@acme>", payload)
		m.EDI = e
		save(path.name+", EDI", m)
		save(path.name, path.message("<"+path.name+"@acme>", []byte("not EDI")))
	}

	// A duplicate writes nothing; a failed receipt is replaced by its
	// resend, which has the event.
	if _, err := st.SaveInbound(ctx, receipt("<1@p>")); !errors.Is(err, postgres.ErrDuplicateInbound) {
		t.Fatalf("duplicate: SaveInbound = %v, want ErrDuplicateInbound", err)
	}
	m = receipt("<4@p>")
	save("resend of a failure", m)

	// A replica of a release before migration 00018: the trigger writes
	// the event, the same.
	m = receipt("<old@p>")
	stored("statement of a release before 00018", m, preMigration18Save(t, st, m), nil)
	m = receipt("<old-failed@p>")
	m.Status = postgres.InboundError
	stored("statement of a release before 00018, failure", m, preMigration18Save(t, st, m), nil)

	// SQL written by hand.
	for _, ids := range [][]string{{"<hand@p>"}, {"<hand-1@p>", "<hand-2@p>"}} {
		var got []int64
		rows := strings.Repeat(`, ('inbound', 'P', 'P', 'S', ?, 'processed', now())`, len(ids))[2:]
		for i := range ids {
			rows = strings.Replace(rows, "?", fmt.Sprintf("$%d", i+1), 1)
		}
		args := make([]any, len(ids))
		for i, id := range ids {
			args[i] = id
		}
		if _, err := st.ExecSQL(ctx, `INSERT INTO messages (direction, partner, as2_from, as2_to, message_id, status, completed_at) VALUES `+rows, args...); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			n, err := st.CountSQL(ctx, `SELECT id FROM messages WHERE message_id = $1`, id)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, n)
			want[n] = map[string]any{"message_id": id, "status": "processed"}
		}
		order = append(order, got...)
	}

	// An outbound message: no event when queued (the trigger on updates
	// writes its sent, delivered or failed).
	if _, err := st.EnqueueOutbound(ctx, outbound("P", "<out@s>", "", nil)); err != nil {
		t.Fatal(err)
	}

	evs := allEvents(t, st)
	got := map[int64]map[string]any{}
	var gotOrder []int64
	for _, e := range evs {
		if e.Type != postgres.EventReceived {
			continue
		}
		if _, twice := got[e.Message]; twice {
			t.Errorf("message %d has two received events", e.Message)
		}
		var d map[string]any
		if err := json.Unmarshal(e.Detail, &d); err != nil {
			t.Fatal(err)
		}
		if e.Partner != "P" && e.Partner != "ACME" || e.Direction != "inbound" {
			t.Errorf("event %d of message %d: partner %q, direction %q", e.ID, e.Message, e.Partner, e.Direction)
		}
		got[e.Message] = d
		gotOrder = append(gotOrder, e.Message)
	}
	for id, w := range want {
		if g, ok := got[id]; !ok {
			t.Errorf("message %d (%v) has no received event", id, w["message_id"])
		} else if !maps.EqualFunc(g, w, func(a, b any) bool { return a == b }) {
			t.Errorf("message %d: detail\n%v\nwant\n%v", id, g, w)
		}
	}
	for id, g := range got {
		if _, ok := want[id]; !ok {
			t.Errorf("message %d (%v) has a received event, want none", id, g["message_id"])
		}
	}
	if !slices.Equal(gotOrder, order) {
		t.Errorf("feed order of the received events %v, want the order stored %v", gotOrder, order)
	}
	// Each event was written by the transaction that wrote its message.
	if n, err := st.CountSQL(ctx, `
SELECT count(*) FROM events e JOIN messages m ON m.id = e.message
 WHERE e.type = 'received' AND e.txid::text::bigint % 4294967296 <> m.xmin::text::bigint`); err != nil || n != 0 {
		t.Errorf("received events written outside their message's transaction: %d, %v", n, err)
	}
	if n, err := st.CountSQL(ctx, `SELECT count(*) FROM events WHERE type = 'ack' AND message = $1`, sent.ID); err != nil || n != int64(len(inboundPaths)) {
		t.Errorf("ack events of the EDI receipts = %d, %v; want %d", n, err, len(inboundPaths))
	}
}

// TestInboundDeleteTakesBodies: deleting message rows deletes their
// payloads (chunks included) and MDNs, whichever statement deletes them
// (migration 00018 replaced the foreign keys' ON DELETE CASCADE with a
// trigger): the replacement of a failed receipt, a DELETE of several
// rows. The rows of other messages stay.
func TestInboundDeleteTakesBodies(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	failed := receipt("<failed@p>")
	failed.Status = postgres.InboundError
	if _, err := st.SaveInbound(ctx, failed); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SaveInbound(ctx, receipt("<failed@p>")); err != nil { // the resend replaces it
		t.Fatal(err)
	}
	var keep, gone []int64
	for i := range 4 {
		m := receipt(fmt.Sprintf("<%d@p>", i))
		if i%2 == 1 {
			payload := bytes.Repeat([]byte("x"), 3<<20)
			m.Payload, m.PayloadSize, m.PayloadOpen = nil, int64(len(payload)), func() io.Reader { return bytes.NewReader(payload) }
		}
		id, err := st.SaveInbound(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			gone = append(gone, id)
		} else {
			keep = append(keep, id)
		}
	}
	if n, err := st.ExecSQL(ctx, `DELETE FROM messages WHERE id = ANY($1)`, gone); err != nil || n != 2 {
		t.Fatalf("DELETE = %d, %v", n, err)
	}
	for _, q := range []string{
		`SELECT count(*) FROM payloads p WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = p.message_id)`,
		`SELECT count(*) FROM mdns d WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = d.message_id)`,
		`SELECT count(*) FROM payload_chunks c WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = c.message_id)`,
	} {
		if n, err := st.CountSQL(ctx, q); err != nil || n != 0 {
			t.Errorf("%s = %d, %v; want 0", q, n, err)
		}
	}
	for _, q := range []string{
		`SELECT count(*) FROM payloads WHERE message_id = ANY($1)`,
		`SELECT count(*) FROM mdns WHERE message_id = ANY($1)`,
	} {
		if n, err := st.CountSQL(ctx, q, keep); err != nil || n != 2 {
			t.Errorf("%s = %d, %v; want the 2 kept", q, n, err)
		}
	}
	if n, err := st.CountSQL(ctx, `SELECT count(*) FROM payload_chunks WHERE message_id = ANY($1)`, keep); err != nil || n != 3 {
		t.Errorf("chunks of the kept payload = %d, %v; want 3", n, err)
	}
}

// TestMigration00018OnExistingData: migration 00018 applies to a database
// that a release before it filled (receipts with their payloads, MDNs
// and events, a failed one, an async MDN queued, an outbound message),
// and afterwards the rows written before behave as the new ones: a
// resend of a Message-ID stored before is a duplicate (the unique index
// was rebuilt with its columns in another order), the searches by
// Message-ID and file name find it, its payload (compressed by pglz)
// reads back beside a new one (lz4 where the server has it), deleting it
// deletes its payload and MDN, its event stays in the feed before the
// new ones. Its Down migration applies too, and the Up again.
func TestMigration00018OnExistingData(t *testing.T) {
	ctx := context.Background()
	st := open(t, pgtest.EmptyURL(t))
	if err := st.MigrateTo(ctx, 17); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("ISA*00*BEFORE~"), 1000) // compressed when stored
	before := receipt("<before@p>")
	before.Payload, before.PayloadSize = big, int64(len(big))
	beforeID := preMigration18Save(t, st, before)
	failed := receipt("<failed@p>")
	failed.Status, failed.Payload = postgres.InboundError, nil
	preMigration18Save(t, st, failed)
	async := receipt("<async@p>")
	async.MDNMode, async.MDNURL, async.Outbox = "async", "http://p.example/mdn", true
	preMigration18Save(t, st, async)
	if _, err := st.EnqueueOutbound(ctx, outbound("P", "<out@s>", "", nil)); err != nil {
		t.Fatal(err)
	}
	counts := func() map[string]int64 {
		c := map[string]int64{}
		for _, table := range []string{"messages", "payloads", "mdns", "outbox", "events"} {
			n, err := st.CountSQL(ctx, `SELECT count(*) FROM `+table)
			if err != nil {
				t.Fatal(err)
			}
			c[table] = n
		}
		return c
	}
	was := counts()
	if was["events"] != 2 {
		t.Fatalf("events before the migration = %d, want the 2 of the processed receipts", was["events"])
	}

	for _, step := range []struct {
		name string
		run  func() error
	}{
		{"up", func() error { _, err := st.Migrate(ctx); return err }},
		{"down", func() error { return st.MigrateDownTo(ctx, 17) }},
		{"up again", func() error { _, err := st.Migrate(ctx); return err }},
	} {
		if err := step.run(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if got := counts(); !maps.Equal(got, was) {
			t.Fatalf("%s: rows %v, want %v", step.name, got, was)
		}
	}
	if current, want, err := st.SchemaVersion(ctx); err != nil || current != want {
		t.Fatalf("SchemaVersion = %d, %d, %v", current, want, err)
	}

	if _, err := st.SaveInbound(ctx, receipt("<before@p>")); !errors.Is(err, postgres.ErrDuplicateInbound) {
		t.Errorf("resend of a Message-ID stored before: SaveInbound = %v, want ErrDuplicateInbound", err)
	}
	if id := preMigration18Save(t, st, receipt("<before@p>")); id != 0 {
		t.Errorf("resend to a replica not yet updated stored message %d, want a duplicate", id)
	}
	after := receipt("<after@p>")
	after.Payload = bytes.Repeat([]byte("ISA*00*AFTER~"), 1000)
	afterID, err := st.SaveInbound(ctx, after)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []postgres.MessageQuery{{MessageID: "before@p"}, {Filename: "ORDERS_"}, {Filename: "ORDERS_1.edi", Partner: "P"}} {
		ms, err := st.Messages(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, m := range ms {
			ids = append(ids, m.ID)
		}
		if !slices.Contains(ids, beforeID) {
			t.Errorf("Messages(%+v) = %v, want message %d among them", q, ids, beforeID)
		}
	}
	for id, want := range map[int64][]byte{beforeID: before.Payload, afterID: after.Payload} {
		if _, got, err := st.MessagePayload(ctx, id); err != nil || !bytes.Equal(got, want) {
			t.Errorf("payload of message %d: %d bytes, %v; want %d", id, len(got), err, len(want))
		}
	}
	var methods []string
	for _, id := range []int64{beforeID, afterID} {
		n, err := st.CountSQL(ctx, `SELECT CASE pg_column_compression(data) WHEN 'pglz' THEN 1 WHEN 'lz4' THEN 2 ELSE 0 END FROM payloads WHERE message_id = $1`, id)
		if err != nil {
			t.Fatal(err)
		}
		methods = append(methods, []string{"none", "pglz", "lz4"}[n])
	}
	lz4, err := st.CountSQL(ctx, `SELECT count(*) FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)`)
	if err != nil {
		t.Fatal(err)
	}
	if wantAfter := map[int64]string{0: "pglz", 1: "lz4"}[lz4]; methods[0] != "pglz" || methods[1] != wantAfter {
		t.Errorf("payload compression before and after the migration %v, want [pglz %s]", methods, wantAfter)
	}

	if n, err := st.ExecSQL(ctx, `DELETE FROM messages WHERE id = $1`, beforeID); err != nil || n != 1 {
		t.Fatalf("DELETE = %d, %v", n, err)
	}
	for _, table := range []string{"payloads", "mdns"} {
		if n, err := st.CountSQL(ctx, `SELECT count(*) FROM `+table+` WHERE message_id = $1`, beforeID); err != nil || n != 0 {
			t.Errorf("%s of the deleted message: %d, %v; want none", table, n, err)
		}
	}
	var received []string
	for _, e := range allEvents(t, st) {
		if e.Type == postgres.EventReceived {
			var d struct {
				MessageID string `json:"message_id"`
			}
			if err := json.Unmarshal(e.Detail, &d); err != nil {
				t.Fatal(err)
			}
			received = append(received, d.MessageID)
		}
	}
	if want := []string{"<before@p>", "<async@p>", "<after@p>"}; !slices.Equal(received, want) {
		t.Errorf("received events %v, want %v", received, want)
	}
}
