package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/edi"
	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

const x12PO = "ISA*00*          *00*          *ZZ*EDIHUB         *ZZ*ACME           *261202*0405*U*00401*000000777*0*P*>~" +
	"GS*PO*EDIHUB*ACME*20261202*0405*4242*X*004010~ST*850*0001~BEG*00*SA*PO1**20261202~SE*3*0001~GE*1*4242~IEA*1*000000777~"

func parseEDI(t *testing.T, s string) *edi.Document {
	t.Helper()
	doc, err := edi.Parse(strings.NewReader(s), edi.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// enqueueEDI queues doc to partner and records it sent (the partner took
// it): only then does its acknowledgement apply.
func enqueueEDI(t *testing.T, st *postgres.Store, partner, doc string, due time.Duration) postgres.Enqueued {
	t.Helper()
	e := queueEDI(t, st, partner, doc, due, 0)
	if _, err := st.ExecSQL(context.Background(), `UPDATE messages SET status = 'sent' WHERE id = $1`, e.ID); err != nil {
		t.Fatal(err)
	}
	return e
}

// queueEDI queues doc to partner, looking for its control number among
// those sent within window.
func queueEDI(t *testing.T, st *postgres.Store, partner, doc string, due, window time.Duration) postgres.Enqueued {
	t.Helper()
	e, err := st.EnqueueOutbound(context.Background(), postgres.NewOutbound{
		Partner: partner, AS2From: "EDIHUB", AS2To: partner, MessageID: fmt.Sprintf("<%d@edihub>", time.Now().UnixNano()),
		MDNMode: "none", URL: "http://127.0.0.1:1/as2", MaxAttempts: 1, Payload: []byte(doc),
		EDI: &postgres.EDIRecord{Partner: partner, Direction: "outbound", Doc: parseEDI(t, doc), AckDue: due, DuplicateWindow: window},
	})
	if err != nil {
		t.Fatalf("EnqueueOutbound = %v", err)
	}
	return e
}

// TestAckReconciliation: an outbound 850 awaits its 997; the partner's 997
// (built by edi.Acknowledge, parsed back as the receiver does) settles it
// accepted with an "ack" event; a 997 for a group never sent matches
// nothing.
func TestAckReconciliation(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	sent := enqueueEDI(t, st, "ACME", x12PO, time.Hour)
	got, err := st.Interchanges(ctx, sent.ID)
	if err != nil || len(got) != 1 {
		t.Fatalf("Interchanges = %v, %v", got, err)
	}
	if ic := got[0]; ic.AckStatus != "pending" || ic.ControlNumber != "000000777" || !ic.OK || ic.AckDueAt == nil || !cmp.Equal(ic.GroupControlNumber, []string{"4242"}) || !cmp.Equal(ic.SetTypes, []string{"850"}) {
		t.Errorf("Interchanges = %+v, want pending 000000777 with group 4242", ic)
	}

	// The partner acknowledges: its 997 names our group 4242.
	doc := parseEDI(t, x12PO)
	ack, err := edi.Acknowledge(edi.AckRequest{Interchange: &doc.Interchanges[0], Standard: edi.X12, Kind: edi.Ack997, Control: 1, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	inbound := parseEDI(t, string(ack.Document))
	matches, unmatched, err := st.ApplyAcks(ctx, "ACME", 0, inbound.Acknowledgements())
	if err != nil || len(matches) != 1 || len(unmatched) != 0 {
		t.Fatalf("ApplyAcks = %+v, %v, %v; want one match", matches, unmatched, err)
	}
	if m := matches[0]; m.Message != sent.ID || m.Status != "accepted" {
		t.Errorf("ApplyAcks = %+v, want message %d accepted", m, sent.ID)
	}
	got, _ = st.Interchanges(ctx, sent.ID)
	if got[0].AckStatus != "accepted" || got[0].AckedAt == nil {
		t.Errorf("after the 997: %+v, want accepted", got[0])
	}
	events, err := st.Events(ctx, postgres.EventCursor{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	var acks int
	for _, e := range events {
		if e.Type == "ack" && e.Message == sent.ID && bytes.Contains(e.Detail, []byte(`"ack": "accepted"`)) {
			acks++
		}
	}
	if acks != 1 {
		t.Errorf("events = %d ack events for message %d, want 1", acks, sent.ID)
	}
	if _, unmatched, _ := st.ApplyAcks(ctx, "OTHER", 0, inbound.Acknowledgements()); !cmp.Equal(unmatched, []string{"4242"}) {
		t.Errorf("ApplyAcks(another partner) unmatched = %v, want [4242]", unmatched)
	}
	// The day's report counts the interchange sent and its acceptance.
	day, err := st.DayTraffic(ctx, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), "edihub-leader")
	if err != nil {
		t.Fatal(err)
	}
	if want := []postgres.EDIGroup{{Partner: "ACME", Sent: 1, Accepted: 1}}; !cmp.Equal(day.EDI, want) {
		t.Errorf("DayTraffic.EDI = %+v, want %+v", day.EDI, want)
	}
}

// TestAckReconciliationCONTRL: a rejecting CONTRL settles the EDIFACT
// interchange it names rejected, with its codes.
func TestAckReconciliationCONTRL(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	const orders = "UNB+UNOC:3+EDIHUB:ZZ+ACME:ZZ+261202:0405+REF77'UNH+1+ORDERS:D:96A:UN'BGM+220'UNT+3+1'UNZ+1+REF77'"
	sent := enqueueEDI(t, st, "ACME", orders, time.Hour)
	bad := parseEDI(t, strings.Replace(orders, "UNT+3+1", "UNT+4+1", 1))
	ack, _ := edi.Acknowledge(edi.AckRequest{Interchange: &bad.Interchanges[0], Standard: edi.EDIFACT, Control: 3, Now: time.Now()})
	matches, _, err := st.ApplyAcks(ctx, "ACME", 0, parseEDI(t, string(ack.Document)).Acknowledgements())
	// UCM names the message and its error; UCS/UCD the segment (UNT at
	// position 3) and the element (UNT01).
	if err != nil || len(matches) != 1 || matches[0].Message != sent.ID || matches[0].Status != "accepted-with-errors" || !cmp.Equal(matches[0].Codes, []string{"UCM/1:29", "UCD/1@3/1:29"}) {
		t.Fatalf("ApplyAcks = %+v, %v; want message %d accepted-with-errors [UCM/1:29 UCD/1@3/1:29]", matches, err, sent.ID)
	}
}

// TestAckMatchesParties: an acknowledgement settles only what went to its
// sender from its receiver. The same group (4242) and interchange
// (REF77) control numbers sent to two receiver IDs of one partner: each
// acknowledgement settles its own, not the latest; one addressed to
// another of our IDs settles nothing.
func TestAckMatchesParties(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	toACME2 := strings.Replace(x12PO, "*ACME           *", "*ACME2          *", 1)
	fromHUB2 := strings.Replace(x12PO, "*EDIHUB         *", "*EDIHUB2        *", 1)
	const orders = "UNB+UNOC:3+EDIHUB:ZZ+ACME:ZZ+261202:0405+REF77'UNH+1+ORDERS:D:96A:UN'BGM+220'UNT+3+1'UNZ+1+REF77'"
	ordersACME2 := strings.Replace(orders, "+ACME:ZZ+", "+ACME2:ZZ+", 1)
	ack := func(std edi.Standard, doc string) []*edi.AckReport {
		d := parseEDI(t, doc)
		a, err := edi.Acknowledge(edi.AckRequest{Interchange: &d.Interchanges[0], Standard: std, Kind: edi.Ack997, Control: 5, Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		return parseEDI(t, string(a.Document)).Acknowledgements()
	}
	tests := []struct {
		name          string
		sent          []string // enqueued in order; the first is the one acknowledged
		ack           []*edi.AckReport
		wantUnmatched bool
	}{
		{"997 to ACME, not the later one to ACME2", []string{x12PO, toACME2}, ack(edi.X12, x12PO), false},
		{"997 to ACME2, not the earlier one to ACME", []string{toACME2, x12PO}, ack(edi.X12, toACME2), false},
		{"997 addressed to another of our IDs", []string{x12PO}, ack(edi.X12, fromHUB2), true},
		{"CONTRL to ACME, not the later one to ACME2", []string{orders, ordersACME2}, ack(edi.EDIFACT, orders), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := st.ExecSQL(ctx, `UPDATE message_interchanges SET ack_status = 'pending', ack_codes = '{}'`); err != nil {
				t.Fatal(err)
			}
			if _, err := st.ExecSQL(ctx, `UPDATE message_groups SET ack_status = '', ack_codes = '{}'`); err != nil {
				t.Fatal(err)
			}
			var ids []int64
			for _, doc := range tt.sent {
				ids = append(ids, enqueueEDI(t, st, "ACME", doc, time.Hour).ID)
			}
			matches, unmatched, err := st.ApplyAcks(ctx, "ACME", 0, tt.ack)
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantUnmatched {
				if len(matches) != 0 || len(unmatched) != 1 {
					t.Errorf("ApplyAcks = %+v, unmatched %v; want nothing settled", matches, unmatched)
				}
				return
			}
			if len(matches) != 1 || matches[0].Message != ids[0] || matches[0].Status != "accepted" {
				t.Errorf("ApplyAcks = %+v, unmatched %v; want message %d (of %v) accepted", matches, unmatched, ids[0], ids)
			}
		})
	}
}

// TestAckReconciliationTA1: an inbound TA1 that rejects our interchange
// settles it rejected with the note code, and the 997 that comes with it
// does not turn it accepted; an accepting TA1 leaves the interchange to
// its 997.
func TestAckReconciliationTA1(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	tests := []struct {
		name        string
		theirs      string // the interchange as the partner read it
		want        string
		wantCodes   []string
		wantMatches int // a TA1 that does not reject settles nothing
	}{
		{"TA1 rejects", strings.Replace(x12PO, "IEA*1*000000777", "IEA*1*000000778", 1), "rejected", []string{"TA1:001"}, 2},
		{"TA1 accepts, the 997 settles", strings.Replace(x12PO, "*0*P*>~", "*1*P*>~", 1), "accepted", []string{}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sent := enqueueEDI(t, st, "ACME", x12PO, time.Hour)
			d := parseEDI(t, tt.theirs)
			ack, err := edi.Acknowledge(edi.AckRequest{Interchange: &d.Interchanges[0], Standard: edi.X12, Kind: edi.Ack997, Control: 5, Now: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
			reports := parseEDI(t, string(ack.Document)).Acknowledgements()
			if len(reports) != 2 || reports[0].Kind != "TA1" {
				t.Fatalf("acknowledgement %s: want a TA1 and a 997", ack.Document)
			}
			matches, unmatched, err := st.ApplyAcks(ctx, "ACME", 0, reports)
			if err != nil || len(matches) != tt.wantMatches || len(unmatched) != 0 || matches[0].Message != sent.ID {
				t.Fatalf("ApplyAcks = %+v, %v, %v; want %d matches for message %d", matches, unmatched, err, tt.wantMatches, sent.ID)
			}
			got, err := st.Interchanges(ctx, sent.ID)
			if err != nil || got[0].AckStatus != tt.want || !cmp.Equal(got[0].AckCodes, tt.wantCodes) {
				t.Errorf("after the TA1 and the 997: %+v, %v; want %s %v", got[0], err, tt.want, tt.wantCodes)
			}
		})
	}
}

// TestAckReconciliationSegmentNotes: the segment and element errors of
// a 997 (AK3/AK4) are stored with the verdict and shown with the
// interchange.
func TestAckReconciliationSegmentNotes(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	sent := enqueueEDI(t, st, "ACME", x12PO, time.Hour)
	theirs := parseEDI(t, strings.Replace(x12PO, "SE*3*0001", "SE*4*0009", 1))
	ack, err := edi.Acknowledge(edi.AckRequest{Interchange: &theirs.Interchanges[0], Standard: edi.X12, Kind: edi.Ack997, Control: 5, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.ApplyAcks(ctx, "ACME", 0, parseEDI(t, string(ack.Document)).Acknowledgements()); err != nil {
		t.Fatal(err)
	}
	got, err := st.Interchanges(ctx, sent.ID)
	want := []string{"AK3/0001/SE@3:8", "AK4/0001/SE@3/1:7", "AK4/0001/SE@3/2:7", "AK5/0001:4", "AK5/0001:3"}
	if err != nil || got[0].AckStatus != "rejected" || !cmp.Equal(got[0].AckCodes, want) {
		t.Errorf("Interchanges = %+v, %v; want rejected with %q", got, err, want)
	}
}

// TestNextControlNumberConcurrent: replicas taking a partner's numbers at
// once get each number once, without gaps.
func TestNextControlNumberConcurrent(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	const n = 24
	got := make([]int64, n)
	errs := make([]error, n)
	testenv.Together(n, func(i int) { got[i], errs[i] = st.NextControlNumber(ctx, "ACME") })
	seen := map[int64]bool{}
	for i := range n {
		if errs[i] != nil || got[i] < 1 || got[i] > n || seen[got[i]] {
			t.Fatalf("NextControlNumber #%d = %d, %v; want distinct numbers 1…%d", i, got[i], errs[i], n)
		}
		seen[got[i]] = true
	}
	if other, _ := st.NextControlNumber(ctx, "OTHER"); other != 1 {
		t.Errorf("NextControlNumber(OTHER) = %d, want 1: counters are per partner", other)
	}
}

// TestDuplicateInterchanges: the same interchange received again within
// the window is recorded with the first message and counted.
func TestDuplicateInterchanges(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	st, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	doc := parseEDI(t, x12PO)
	ids := receiveN(t, st, 2)
	rec := postgres.EDIRecord{Partner: "ACME", Direction: "inbound", Doc: doc, DuplicateWindow: time.Hour}
	if dups, err := st.RecordInterchanges(ctx, ids[0], rec); err != nil || len(dups) != 0 {
		t.Fatalf("RecordInterchanges(first) = %v, %v; want no duplicate", dups, err)
	}
	if dups, _ := st.FindDuplicateInterchanges(ctx, "ACME", doc, time.Hour); len(dups) != 1 || dups[0].First != ids[0] {
		t.Errorf("FindDuplicateInterchanges = %+v, want the first message %d", dups, ids[0])
	}
	dups, err := st.RecordInterchanges(ctx, ids[1], rec)
	if err != nil || len(dups) != 1 || dups[0].First != ids[0] {
		t.Fatalf("RecordInterchanges(second) = %+v, %v; want a duplicate of %d", dups, err, ids[0])
	}
	got, _ := st.Interchanges(ctx, ids[1])
	if got[0].DuplicateOf == nil || *got[0].DuplicateOf != ids[0] {
		t.Errorf("Interchanges(second).DuplicateOf = %v, want %d", got[0].DuplicateOf, ids[0])
	}
	if dups, _ := st.FindDuplicateInterchanges(ctx, "OTHER", doc, time.Hour); len(dups) != 0 {
		t.Errorf("FindDuplicateInterchanges(another partner) = %v, want none", dups)
	}
	// The record of the duplicate goes with the message that carried it
	// (the purger's message retention).
	conn := pgtest.Conn(t, url)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM interchange_duplicates`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("interchange_duplicates: %d rows, %v; want 1", n, err)
	}
	if _, err := conn.Exec(ctx, `DELETE FROM messages WHERE id = $1`, ids[1]); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM interchange_duplicates`).Scan(&n); err != nil || n != 0 {
		t.Errorf("interchange_duplicates after its message was deleted: %d rows, %v; want none", n, err)
	}
}

// TestDuplicateInterchangeWindowEnds: the same interchange received again
// after the window is no duplicate, neither when looked for nor when
// recorded; it is the first of its window, and a copy of it within the
// window is its duplicate.
func TestDuplicateInterchangeWindowEnds(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	st, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	conn := pgtest.Conn(t, url)
	doc := parseEDI(t, x12PO)
	ids := receiveN(t, st, 3)
	rec := postgres.EDIRecord{Partner: "ACME", Direction: "inbound", Doc: doc, DuplicateWindow: time.Hour}
	if dups, err := st.RecordInterchanges(ctx, ids[0], rec); err != nil || len(dups) != 0 {
		t.Fatalf("RecordInterchanges(first) = %v, %v; want no duplicate", dups, err)
	}
	// The first copy was received 61 minutes ago (the window is the
	// database's clock).
	if _, err := conn.Exec(ctx, `UPDATE message_interchanges SET created_at = now() - interval '61 minutes' WHERE message_id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		window time.Duration
		want   int
	}{
		{time.Hour, 0},
		{2 * time.Hour, 1},
	}
	for _, tt := range tests {
		if dups, err := st.FindDuplicateInterchanges(ctx, "ACME", doc, tt.window); err != nil || len(dups) != tt.want {
			t.Errorf("FindDuplicateInterchanges(window %v, first copy 61 minutes old) = %+v, %v; want %d", tt.window, dups, err, tt.want)
		}
	}
	if dups, err := st.RecordInterchanges(ctx, ids[1], rec); err != nil || len(dups) != 0 {
		t.Fatalf("RecordInterchanges(after the window) = %+v, %v; want no duplicate", dups, err)
	}
	if got, _ := st.Interchanges(ctx, ids[1]); len(got) != 1 || got[0].DuplicateOf != nil {
		t.Errorf("Interchanges(after the window) = %+v, want one, no duplicate", got)
	}
	dups, err := st.RecordInterchanges(ctx, ids[2], rec)
	if err != nil || len(dups) != 1 || dups[0].First != ids[1] {
		t.Errorf("RecordInterchanges(within the window of the second) = %+v, %v; want a duplicate of %d", dups, err, ids[1])
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM interchange_duplicates`).Scan(&n); err != nil || n != 1 {
		t.Errorf("interchange_duplicates: %d rows, %v; want 1 (the third copy)", n, err)
	}
}

func receiveN(t *testing.T, st *postgres.Store, n int) []int64 {
	t.Helper()
	var ids []int64
	for i := range n {
		id, err := st.SaveInbound(context.Background(), &postgres.InboundMessage{
			Partner: "ACME", AS2From: "ACME", AS2To: "EDIHUB", MessageID: fmt.Sprintf("<in-%d@acme>", i),
			Status: postgres.InboundProcessed, MDNMode: "none", Payload: []byte(x12PO),
		})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// TestFlagOverdueAcks: an interchange past its due time is flagged once,
// by the current term only, also when two terms ask.
func TestFlagOverdueAcks(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	sent := enqueueEDI(t, st, "ACME", x12PO, time.Microsecond)
	// Due 1µs after the enqueue's transaction began: past by the next one.
	due, err := st.OverdueAcks(ctx, 10)
	if err != nil || len(due) != 1 || due[0].Message != sent.ID {
		t.Fatalf("OverdueAcks = %+v, %v; want message %d", due, err, sent.ID)
	}
	old := hub.Fence{Lease: "edihub-leader", Token: 1}
	next := hub.Fence{Lease: "edihub-leader", Token: 2}
	if err := st.OpenTerm(ctx, old, "a"); err != nil {
		t.Fatal(err)
	}
	if err := st.OpenTerm(ctx, next, "b"); err != nil {
		t.Fatal(err)
	}
	ids := []int64{due[0].Interchange}
	if _, err := st.FlagOverdueAcks(ctx, old, ids); !errors.Is(err, hub.ErrStaleFence) {
		t.Errorf("FlagOverdueAcks(stale term) = %v, want ErrStaleFence", err)
	}
	flagged, err := st.FlagOverdueAcks(ctx, next, ids)
	if err != nil || len(flagged) != 1 {
		t.Fatalf("FlagOverdueAcks = %v, %v; want one", flagged, err)
	}
	if again, err := st.FlagOverdueAcks(ctx, next, ids); err != nil || len(again) != 0 {
		t.Errorf("FlagOverdueAcks(again) = %v, %v; want none: flagged once", again, err)
	}
	counts, err := st.OverdueAckCounts(ctx)
	if err != nil || !cmp.Equal(counts, map[string]int{"ACME": 1}) {
		t.Errorf("OverdueAckCounts = %v, %v; want ACME: 1", counts, err)
	}
	if due, _ := st.OverdueAcks(ctx, 10); len(due) != 0 {
		t.Errorf("OverdueAcks after flagging = %v, want none", due)
	}
}

// TestMessagesByICN: the message search finds messages by interchange
// control number, with or without X12's leading zeros.
func TestMessagesByICN(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	sent := enqueueEDI(t, st, "ACME", x12PO, 0)
	enqueueEDI(t, st, "ACME", strings.ReplaceAll(x12PO, "000000777", "000000778"), 0)
	for _, icn := range []string{"000000777", "777"} {
		got, err := st.Messages(ctx, postgres.MessageQuery{ICN: icn})
		if err != nil || len(got) != 1 || got[0].ID != sent.ID {
			t.Errorf("Messages(icn %s) = %v, %v; want message %d", icn, got, err, sent.ID)
		}
	}
	if got, _ := st.Messages(ctx, postgres.MessageQuery{ICN: "999"}); len(got) != 0 {
		t.Errorf("Messages(icn 999) = %v, want none", got)
	}
}

// TestAckCreditsMessageTakenByPartner: every document carries the same
// control number; one was refused (HTTP 403, failed), then one resent
// and delivered, then one still queued. The partner's 997 settles the
// delivered one, which it received, not the refused one nor the one it
// has not got; a 997 for a control number only a refused message carried
// matches nothing.
func TestAckCreditsMessageTakenByPartner(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	finish := func(r postgres.OutboxResult) {
		t.Helper()
		items, err := st.ClaimOutbox(ctx, "d", time.Minute, 10)
		if err != nil || len(items) != 1 {
			t.Fatalf("ClaimOutbox = %+v, %v; want one row", items, err)
		}
		b := postgres.OutboundBuild{Headers: http.Header{"Message-ID": {"<0@s>"}}, Body: []byte("built"), MIC: "m, sha-256", MICAlg: "sha-256"}
		if err := st.SaveOutboundBuild(ctx, items[0], b); err != nil {
			t.Fatal(err)
		}
		if err := st.FinishOutbox(ctx, items[0], r); err != nil {
			t.Fatal(err)
		}
	}
	refused := postgres.OutboxResult{State: postgres.OutboxFailed, HTTPStatus: 403, Error: "partner answered HTTP 403",
		Message: &postgres.MessageUpdate{Status: "failed", Final: true}}
	delivered := postgres.OutboxResult{State: postgres.OutboxDone, HTTPStatus: 200,
		Message: &postgres.MessageUpdate{Status: "delivered", Final: true}}

	first := queueEDI(t, st, "ACME", x12PO, time.Hour, 0)
	finish(refused)
	second := queueEDI(t, st, "ACME", x12PO, time.Hour, 0)
	finish(delivered)
	later := queueEDI(t, st, "ACME", x12PO, time.Hour, 0) // not sent yet
	if _, err := st.ExecSQL(ctx, `UPDATE outbox SET next_attempt_at = now() + interval '1 hour' WHERE message_id = $1`, later.ID); err != nil {
		t.Fatal(err)
	}

	doc := parseEDI(t, x12PO)
	ack, err := edi.Acknowledge(edi.AckRequest{Interchange: &doc.Interchanges[0], Standard: edi.X12, Kind: edi.Ack997, Control: 1, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	matches, unmatched, err := st.ApplyAcks(ctx, "ACME", 0, parseEDI(t, string(ack.Document)).Acknowledgements())
	if err != nil || len(matches) != 1 || len(unmatched) != 0 {
		t.Fatalf("ApplyAcks = %+v, %v, %v; want one match", matches, unmatched, err)
	}
	if matches[0].Message != second.ID {
		t.Errorf("ApplyAcks settled message %d, want %d (delivered), not %d (refused)", matches[0].Message, second.ID, first.ID)
	}
	if ics, err := st.Interchanges(ctx, first.ID); err != nil || ics[0].AckStatus != "pending" {
		t.Errorf("refused message's interchange = %+v, %v; want still pending", ics, err)
	}

	// A 997 for a group only a refused message carried.
	onlyRefused := strings.ReplaceAll(strings.ReplaceAll(x12PO, "000000777", "000000778"), "4242", "4243")
	lone := queueEDI(t, st, "ACME", onlyRefused, time.Hour, 0)
	finish(refused)
	d := parseEDI(t, onlyRefused)
	ack, err = edi.Acknowledge(edi.AckRequest{Interchange: &d.Interchanges[0], Standard: edi.X12, Kind: edi.Ack997, Control: 2, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if matches, unmatched, err := st.ApplyAcks(ctx, "ACME", 0, parseEDI(t, string(ack.Document)).Acknowledgements()); err != nil || len(matches) != 0 || !cmp.Equal(unmatched, []string{"4243"}) {
		t.Errorf("ApplyAcks(997 for refused message %d) = %+v, unmatched %v, %v; want unmatched 4243", lone.ID, matches, unmatched, err)
	}
}

// TestRepeatedOutboundControlNumber: an outbound interchange whose control
// number (same partner, sender, receiver) was sent within the duplicate
// window names the latest message that sent it and gets an
// interchange-repeated event in its trace; outside any window (0) or with
// another number, nothing.
func TestRepeatedOutboundControlNumber(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	other := strings.ReplaceAll(x12PO, "000000777", "000000779")
	tests := []struct {
		name      string
		give      string
		window    time.Duration
		wantOf    bool
		wantEvent bool
	}{
		{name: "first of its number", give: x12PO, window: time.Hour},
		{name: "repeated", give: x12PO, window: time.Hour, wantOf: true, wantEvent: true},
		{name: "repeated, no window", give: x12PO},
		{name: "another number", give: other, window: time.Hour},
	}
	var last int64
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := queueEDI(t, st, "ACME", tt.give, time.Hour, tt.window)
			ics, err := st.Interchanges(ctx, e.ID)
			if err != nil || len(ics) != 1 {
				t.Fatalf("Interchanges = %+v, %v", ics, err)
			}
			if got := ics[0].DuplicateOf; (got != nil) != tt.wantOf || (got != nil && *got != last) {
				t.Errorf("duplicate_of = %v, want repeated %v of message %d", refOf(got), tt.wantOf, last)
			}
			if got := len(e.Repeated) > 0; got != tt.wantOf {
				t.Errorf("Enqueued.Repeated = %+v, want repeated %v", e.Repeated, tt.wantOf)
			}
			tr, err := st.MessageTrace(ctx, e.ID)
			if err != nil {
				t.Fatal(err)
			}
			got := false
			for _, ev := range tr.Events {
				got = got || ev.Type == postgres.EventInterchangeRepeated
			}
			if got != tt.wantEvent {
				t.Errorf("trace events %+v, want interchange-repeated %v", tr.Events, tt.wantEvent)
			}
			if tt.give == x12PO {
				last = e.ID
			}
		})
	}
}
