package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edihub/edihub/internal/edi"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// acmePO is an interchange ACME sends us.
const acmePO = "ISA*00*          *00*          *ZZ*ACME           *ZZ*EDIHUB         *261202*0405*U*00401*000000123*0*P*>~" +
	"GS*PO*ACME*EDIHUB*20261202*0405*55*X*004010~ST*850*0001~BEG*00*SA*PO1**20261202~SE*3*0001~GE*1*55~IEA*1*000000123~"

// inboundEDI is a receipt from ACME that carries its 850 and its 997 for
// our x12PO, and the InboundEDI the tracker makes of it: the envelope,
// the 997 to settle x12PO, and our 997 for the 850 written by build
// (which may inject a failure).
func inboundEDI(t *testing.T, build func(control int64) (postgres.NewOutbound, error)) (payload []byte, e *postgres.InboundEDI) {
	t.Helper()
	sent := parseEDI(t, x12PO)
	theirs, err := edi.Acknowledge(edi.AckRequest{Interchange: &sent.Interchanges[0], Standard: edi.X12, Kind: edi.Ack997, Control: 9, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	payload = append([]byte(acmePO), theirs.Document...)
	doc := parseEDI(t, string(payload))
	return payload, &postgres.InboundEDI{
		Record:  postgres.EDIRecord{Partner: "ACME", Direction: "inbound", Doc: doc, DuplicateWindow: time.Hour},
		Reports: doc.Acknowledgements(),
		Acks:    []postgres.AckBuilder{build},
	}
}

// ourAck builds our 997 for acmePO with control as the outbound message
// the outbox would queue.
func ourAck(t *testing.T, control int64) (postgres.NewOutbound, error) {
	doc := parseEDI(t, acmePO)
	ack, err := edi.Acknowledge(edi.AckRequest{Interchange: &doc.Interchanges[0], Standard: edi.X12, Kind: edi.Ack997, Control: control, Now: time.Now()})
	if err != nil {
		return postgres.NewOutbound{}, err
	}
	return postgres.NewOutbound{
		Partner: "ACME", AS2From: "EDIHUB", AS2To: "ACME", MessageID: fmt.Sprintf("<ack-%d@edihub>", control), Subject: "EDI acknowledgement",
		ContentType: "application/EDI-X12", MDNMode: "none", URL: "http://127.0.0.1:1/as2", MaxAttempts: 1, Payload: ack.Document,
		EDI: &postgres.EDIRecord{Partner: "ACME", Direction: "outbound", Doc: parseEDI(t, string(ack.Document))},
	}, nil
}

// inboundPaths are SaveInbound's three ways to store a receipt.
var inboundPaths = []struct {
	name string
	// message makes the receipt of payload with Message-ID id.
	message func(id string, payload []byte) *postgres.InboundMessage
}{
	{"one statement", func(id string, payload []byte) *postgres.InboundMessage {
		m := acmeReceipt(id)
		m.Payload, m.PayloadSize = payload, int64(len(payload))
		return m
	}},
	{"streamed", func(id string, payload []byte) *postgres.InboundMessage {
		// Past the size that streams the payload through a large object;
		// what follows the interchanges is not read by anyone here.
		big := append(bytes.Clone(payload), bytes.Repeat([]byte{'\n'}, 8<<20)...)
		m := acmeReceipt(id)
		m.Payload, m.PayloadSize = big, int64(len(big))
		return m
	}},
	{"chunked", func(id string, payload []byte) *postgres.InboundMessage {
		m := acmeReceipt(id)
		m.PayloadSize, m.PayloadOpen = int64(len(payload)), func() io.Reader { return bytes.NewReader(payload) }
		return m
	}},
}

func acmeReceipt(id string) *postgres.InboundMessage {
	return &postgres.InboundMessage{Partner: "ACME", AS2From: "ACME", AS2To: "EDIHUB", MessageID: id, Status: postgres.InboundProcessed,
		Disposition: "automatic-action/MDN-sent-automatically; processed", MDNMode: "sync",
		MDN: &postgres.StoredMDN{Header: map[string][]string{"Content-Type": {"multipart/report"}}, Body: []byte("mdn"), Disposition: "processed"}}
}

// TestInboundEDIAtomic: on each of SaveInbound's paths, the receipt of an
// EDI payload, its interchanges, the settlement of what we sent by the
// acknowledgement it carries and our acknowledgement with its control
// number are one transaction. A failure injected after the message row
// was written (our acknowledgement fails to build), a cancelled context
// and a connection killed between the receipt's writes (as a crash would)
// leave none of them; a receipt that commits has all of them, with the
// same transaction id (xmin).
// noOpenTransactions waits until no other session of the test's
// database is in a transaction (at most 10 s).
func noOpenTransactions(t *testing.T, admin *pgx.Conn) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var open int
		if err := admin.QueryRow(context.Background(), `
SELECT count(*) FROM pg_stat_activity
 WHERE datname = current_database() AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%'`).Scan(&open); err != nil {
			t.Fatal(err)
		}
		if open == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions still in a transaction after 10 s", open)
		}
	}
}

func TestInboundEDIAtomic(t *testing.T) {
	for _, path := range inboundPaths {
		t.Run(path.name, func(t *testing.T) {
			ctx := context.Background()
			url := pgtest.URL(t)
			st, take, err := postgres.OpenRecording(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(st.Close)
			admin := pgtest.Conn(t, url)
			sent := enqueueEDI(t, st, "ACME", x12PO, time.Hour)

			failures := []struct {
				name  string
				build func(ctx context.Context, cancel func(), control int64) (postgres.NewOutbound, error)
			}{
				{"failure after the message insert", func(context.Context, func(), int64) (postgres.NewOutbound, error) {
					return postgres.NewOutbound{}, errors.New("injected failure")
				}},
				{"cancelled", func(_ context.Context, cancel func(), control int64) (postgres.NewOutbound, error) {
					cancel()
					return ourAck(t, control)
				}},
				{"connection killed", func(ctx context.Context, _ func(), control int64) (postgres.NewOutbound, error) {
					// The receipt's transaction waits for the next statement:
					// end its session as a crash of the replica would.
					var killed int
					if err := admin.QueryRow(ctx, `
WITH s AS MATERIALIZED (
  SELECT pid FROM pg_stat_activity
   WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'idle in transaction')
SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM s`).Scan(&killed); err != nil || killed != 1 {
						t.Errorf("sessions in a transaction killed = %d, %v; want the receipt's one", killed, err)
					}
					return ourAck(t, control)
				}},
			}
			for i, f := range failures {
				// A cancelled case's connection is closed by pgx as its
				// context ends, and its server session may outlive
				// SaveInbound's return by a moment: let it go first.
				noOpenTransactions(t, admin)
				sctx, cancel := context.WithCancel(ctx)
				built := false
				payload, e := inboundEDI(t, func(control int64) (postgres.NewOutbound, error) {
					built = true
					return f.build(sctx, cancel, control)
				})
				m := path.message(fmt.Sprintf("<fail-%d@acme>", i), payload)
				m.EDI = e
				_, err := st.SaveInbound(sctx, m)
				cancel()
				if err == nil || !built {
					t.Fatalf("%s: SaveInbound = %v (acknowledgement built: %v), want an error from inside the receipt's transaction", f.name, err, built)
				}
				for _, q := range []string{
					`SELECT count(*) FROM messages WHERE direction = 'inbound'`,
					`SELECT count(*) FROM mdns`,
					`SELECT count(*) FROM payloads p JOIN messages m ON m.id = p.message_id WHERE m.direction = 'inbound'`,
					`SELECT count(*) FROM message_interchanges WHERE direction = 'inbound'`,
					`SELECT count(*) FROM messages WHERE direction = 'outbound' AND id <> ` + fmt.Sprint(sent.ID),
					`SELECT count(*) FROM edi_control_numbers`,
					`SELECT count(*) FROM message_interchanges WHERE ack_status <> 'pending'`,
					`SELECT count(*) FROM events WHERE type = 'ack'`,
				} {
					if n, err := st.CountSQL(ctx, q); err != nil || n != 0 {
						t.Errorf("%s: %s = %d, %v; want 0: the receipt rolled back whole", f.name, q, n, err)
					}
				}
			}

			payload, e := inboundEDI(t, func(control int64) (postgres.NewOutbound, error) { return ourAck(t, control) })
			m := path.message("<ok@acme>", payload)
			m.EDI = e
			take()
			id, err := st.SaveInbound(ctx, m)
			if err != nil {
				t.Fatalf("SaveInbound = %v", err)
			}
			if len(e.Queued) != 1 || len(e.Matches) != 1 || e.Matches[0].Message != sent.ID || e.Matches[0].Status != "accepted" || len(e.Unmatched) != 0 {
				t.Fatalf("SaveInbound wrote %+v; want our acknowledgement queued and message %d accepted", e, sent.ID)
			}
			if n := len(take()); n < 3 {
				t.Errorf("SaveInbound ran %d statements; an EDI receipt is a transaction", n)
			}
			// One transaction wrote them all: the same xmin on every row.
			rows := map[string]string{
				"the receipt":             fmt.Sprintf(`SELECT xmin::text::bigint FROM messages WHERE id = %d`, id),
				"its MDN":                 fmt.Sprintf(`SELECT xmin::text::bigint FROM mdns WHERE message_id = %d`, id),
				"its interchanges":        fmt.Sprintf(`SELECT max(xmin::text::bigint) FROM message_interchanges WHERE message_id = %d`, id),
				"the settled interchange": fmt.Sprintf(`SELECT xmin::text::bigint FROM message_interchanges WHERE message_id = %d AND ack_status = 'accepted' AND ack_message = %d`, sent.ID, id),
				"the ack event":           fmt.Sprintf(`SELECT xmin::text::bigint FROM events WHERE type = 'ack' AND message = %d`, sent.ID),
				"our acknowledgement":     fmt.Sprintf(`SELECT xmin::text::bigint FROM messages WHERE id = %d AND subject = 'EDI acknowledgement'`, e.Queued[0].ID),
				"its outbox row":          fmt.Sprintf(`SELECT xmin::text::bigint FROM outbox WHERE message_id = %d AND kind = 'message'`, e.Queued[0].ID),
				"its interchange":         fmt.Sprintf(`SELECT xmin::text::bigint FROM message_interchanges WHERE message_id = %d AND control_number = '000000001'`, e.Queued[0].ID),
				"the control number":      `SELECT xmin::text::bigint FROM edi_control_numbers WHERE partner = 'ACME' AND last = 1`,
			}
			want, err := st.CountSQL(ctx, rows["the receipt"])
			if err != nil {
				t.Fatal(err)
			}
			for name, q := range rows {
				if got, err := st.CountSQL(ctx, q); err != nil || got != want {
					t.Errorf("%s: xmin %d, %v; want %d, the receipt's transaction", name, got, err, want)
				}
			}
			if n, err := st.CountSQL(ctx, fmt.Sprintf(`SELECT count(*) FROM message_interchanges WHERE message_id = %d`, id)); err != nil || n != 2 {
				t.Errorf("interchanges of the receipt = %d, %v; want 2 (the 850 and the 997)", n, err)
			}
		})
	}
}

// TestInboundNotEDIOneStatement: a receipt that carries no EDI is still
// one statement, one round trip.
func TestInboundNotEDIOneStatement(t *testing.T) {
	ctx := context.Background()
	st, take, err := postgres.OpenRecording(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	m := inboundPaths[0].message("<xml@acme>", []byte("<?xml version=\"1.0\"?><order/>"))
	take()
	if _, err := st.SaveInbound(ctx, m); err != nil {
		t.Fatal(err)
	}
	stmts := take()
	if len(stmts) != 1 || !strings.Contains(stmts[0].SQL, "INSERT INTO messages") {
		var sqls []string
		for _, s := range stmts {
			sqls = append(sqls, strings.Fields(s.SQL)[0])
		}
		t.Errorf("SaveInbound(not EDI) ran %d statements %v, want the one", len(stmts), sqls)
	}
}

// TestDuplicateInterchangeRace: two copies of one interchange received at
// once (two replicas, two Message-IDs) are not both recorded as first.
// The first receipt is held open after it wrote its interchange (its
// acknowledgement waits to be built); the second must wait for it and
// then be recorded as its duplicate. Without the lock the second would
// find nothing uncommitted and both would be first.
func TestDuplicateInterchangeRace(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	st, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	admin := pgtest.Conn(t, url)
	held, release := make(chan struct{}), make(chan struct{})
	payload, first := inboundEDI(t, func(control int64) (postgres.NewOutbound, error) {
		close(held)
		<-release
		return ourAck(t, control)
	})
	_, second := inboundEDI(t, func(control int64) (postgres.NewOutbound, error) { return ourAck(t, control) })
	second.Acks = nil

	type result struct {
		id  int64
		err error
	}
	firstDone, secondDone := make(chan result, 1), make(chan result, 1)
	go func() {
		m := acmeReceipt("<copy-1@acme>")
		m.Payload, m.PayloadSize, m.EDI = payload, int64(len(payload)), first
		id, err := st.SaveInbound(ctx, m)
		firstDone <- result{id, err}
	}()
	<-held
	go func() {
		m := acmeReceipt("<copy-2@acme>")
		m.Payload, m.PayloadSize, m.EDI = payload, int64(len(payload)), second
		id, err := st.SaveInbound(ctx, m)
		secondDone <- result{id, err}
	}()
	// Let the first commit once the second is either done or waiting for
	// a lock the first holds.
	var r2 result
	secondFinished := false
	for !secondFinished {
		select {
		case r2 = <-secondDone:
			secondFinished = true
			continue
		default:
		}
		var waiting int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		time.Sleep(time.Millisecond) // stays: bounded poll of pg_locks, PostgreSQL signals no lock wait
	}
	close(release)
	r1 := <-firstDone
	if !secondFinished {
		r2 = <-secondDone
	}
	if r1.err != nil || r2.err != nil {
		t.Fatalf("SaveInbound = %v, %v", r1.err, r2.err)
	}
	var firsts int64
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM message_interchanges WHERE direction = 'inbound' AND control_number = '000000123' AND duplicate_of IS NULL`).Scan(&firsts); err != nil || firsts != 1 {
		t.Errorf("copies recorded as first = %d, %v; want 1", firsts, err)
	}
	// The payload carries two interchanges (the 850 and the 997): both
	// are duplicates of the first copy's.
	if len(second.Duplicates) != 2 || second.Duplicates[0].First != r1.id || second.Duplicates[1].First != r1.id || len(first.Duplicates) != 0 {
		t.Errorf("duplicates found: first copy %+v, second %+v; want the second's two interchanges duplicates of message %d", first.Duplicates, second.Duplicates, r1.id)
	}
}

// TestDuplicateInterchangeRefusedWhenStored: for a partner that refuses
// duplicates, a receipt whose duplicate is found only when it is written
// fails with ErrDuplicateInterchange and writes nothing; once refused
// (Refused) it is stored and counted refused.
func TestDuplicateInterchangeRefusedWhenStored(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	payload, first := inboundEDI(t, func(control int64) (postgres.NewOutbound, error) { return ourAck(t, control) })
	m := acmeReceipt("<first@acme>")
	m.Payload, m.PayloadSize, m.EDI = payload, int64(len(payload)), first
	if _, err := st.SaveInbound(ctx, m); err != nil {
		t.Fatal(err)
	}
	_, again := inboundEDI(t, func(control int64) (postgres.NewOutbound, error) { return ourAck(t, control) })
	again.Record.RefuseDuplicates = true
	m = acmeReceipt("<again@acme>")
	m.Payload, m.PayloadSize, m.EDI = payload, int64(len(payload)), again
	if _, err := st.SaveInbound(ctx, m); !errors.Is(err, postgres.ErrDuplicateInterchange) {
		t.Fatalf("SaveInbound(duplicate not refused yet) = %v, want ErrDuplicateInterchange", err)
	}
	if n, err := st.CountSQL(ctx, `SELECT count(*) FROM messages WHERE message_id = '<again@acme>'`); err != nil || n != 0 {
		t.Errorf("messages of the failed receipt = %d, %v; want 0", n, err)
	}
	again.Record.Refused, again.Acks, again.Reports = true, nil, nil
	m.Status, m.Payload, m.PayloadSize = postgres.InboundError, nil, 0
	if _, err := st.SaveInbound(ctx, m); err != nil {
		t.Fatalf("SaveInbound(refused) = %v", err)
	}
	if n, err := st.CountSQL(ctx, `SELECT count(*) FROM interchange_duplicates WHERE refused`); err != nil || n != 2 {
		t.Errorf("refused duplicates counted = %d, %v; want 2 (the 850 and the 997)", n, err)
	}
}
