package main

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// po850 is X12's published 004010X357 example 01 (a basic purchase order)
// in an ISA/GS envelope.
const po850 = "ISA*00*          *00*          *ZZ*ABCAEROSPACE   *ZZ*XYZAIRCRAFT    *000506*1200*U*00401*000000101*0*P*>~" +
	"GS*PO*ABCAEROSPACE*XYZAIRCRAFT*20000506*1200*101*X*004010X357~ST*850*0001~BEG*00*RL*508517*1001*20000506**NA*IEL~" +
	"N1*BY*ABC Aerospace Corporation*9*123456789-0101~N3*1000 BOARDWALK DRIVE~N4*SOMEWHERE*CA*98898~" +
	"PO1*1*48*EA*3*PE*MG*R5656-2~IT8*******B0~CTT*1~AMT*TT*144~SE*10*0001~GE*1*101~IEA*1*000000101~"

type hubDetail struct {
	hubMessage
	Ack          string `json:"ack"`
	Interchanges []struct {
		ControlNumber string   `json:"control_number"`
		Ack           string   `json:"ack"`
		SetTypes      []string `json:"set_types"`
		Acknowledges  []string `json:"acknowledges"`
		AckMessage    *int64   `json:"ack_message"`
	} `json:"interchanges"`
}

// TestHubToHubEDI: station ALPHA sends an 850 to BRAVO, whose profile for
// ALPHA generates acknowledgements; BRAVO's 997 goes back through its
// outbox, ALPHA reads it and shows its outbound 850 accepted. A second
// copy of the same interchange is flagged at BRAVO as a duplicate.
func TestHubToHubEDI(t *testing.T) { hubToHubEDI(t, false) }

// TestHubToHubEDISpooled is TestHubToHubEDI with BRAVO spooling every
// body (EDIHUB_SPOOL_FROM_BYTES=1): the 850 is unwrapped as a stream, its
// envelope read from the payload's spool file, the payload stored in
// pieces, and the second copy still flagged.
func TestHubToHubEDISpooled(t *testing.T) { hubToHubEDI(t, true) }

func hubToHubEDI(t *testing.T, spooled bool) {
	a, b := newHubStation(t, "HUB ALPHA"), newHubStation(t, "HUB-BRAVO")
	if spooled {
		b.extraEnv = append(b.extraEnv, "EDIHUB_SPOOL_FROM_BYTES", "1")
	}
	a.start(t, b, "sign: sha-256", "encrypt: aes256-cbc", "mdn: sync", "mdn_signed: true", "edi_ack_due: 1h")
	b.start(t, a, "sign: sha-256", "encrypt: aes256-cbc", "mdn: sync", "mdn_signed: true", "edi_acks: true", "edi_x12_ack: 997")

	start := time.Now()
	sent := a.send(t, b, []byte(po850), "application/EDI-X12", "po-850.x12", "delivered", "failed")
	delivered := time.Since(start)
	if sent.Status != "delivered" {
		t.Fatalf("850: status %q, error %q", sent.Status, sent.Error)
	}
	var d hubDetail
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		a.api(t, "GET", sent.Location, "", nil, &d)
		if d.Ack != "pending" {
			break
		}
		time.Sleep(20 * time.Millisecond) // stays: bounded poll of the real binary's API, which signals nothing
	}
	acked := time.Since(start)
	if d.Ack != "accepted" || len(d.Interchanges) != 1 || d.Interchanges[0].ControlNumber != "000000101" || d.Interchanges[0].AckMessage == nil {
		t.Fatalf("ALPHA's 850 = %+v, want ack accepted for interchange 000000101", d)
	}
	t.Logf("850 → 997 round trip: 850 delivered (sync MDN) after %v, 997 received and the 850 accepted after %v", delivered.Round(time.Millisecond), acked.Round(time.Millisecond))

	// BRAVO's 997 is an outbound message like any other, carrying a 997.
	var l struct{ Messages []hubMessage }
	b.api(t, "GET", "/api/v1/messages?direction=outbound", "", nil, &l)
	if len(l.Messages) != 1 {
		t.Fatalf("BRAVO outbound = %+v, want its 997", l.Messages)
	}
	// ALPHA settles the 850 before it answers the 997's MDN, so BRAVO
	// may record the 997 delivered a moment after the 850 shows accepted.
	var ack hubDetail
	for range 200 {
		b.api(t, "GET", l.Messages[0].Location, "", nil, &ack)
		if ack.Status == "delivered" {
			break
		}
		time.Sleep(50 * time.Millisecond) // stays: bounded poll of the real binary's API, which signals nothing
	}
	if ack.Status != "delivered" || len(ack.Interchanges) != 1 || strings.Join(ack.Interchanges[0].Acknowledges, ",") != "997" {
		t.Errorf("BRAVO's acknowledgement = %+v, want a delivered 997", ack)
	}

	// The interchange is searchable by its control number, on both sides.
	for _, s := range []*hubStation{a, b} {
		var found struct{ Messages []hubMessage }
		s.api(t, "GET", "/api/v1/messages?icn="+url.QueryEscape("101"), "", nil, &found)
		if len(found.Messages) != 1 {
			t.Errorf("%s: icn=101 found %+v, want the 850", s.name, found.Messages)
		}
	}

	// The same interchange again: flagged (the default), counted, still
	// delivered.
	again := a.send(t, b, []byte(po850), "application/EDI-X12", "po-850-again.x12", "delivered", "failed")
	if again.Status != "delivered" {
		t.Fatalf("second 850: %q", again.Status)
	}
	if m := b.metrics(t); !strings.Contains(m, `edihub_edi_duplicate_interchanges_total{action="flagged",partner="HUB ALPHA"} 1`) {
		t.Errorf("BRAVO /metrics lacks the flagged duplicate")
	}
	// Spooled, both 850s were stored in pieces; in memory, neither.
	conn, err := pgx.Connect(context.Background(), b.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var chunked int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM payloads WHERE chunked`).Scan(&chunked); err != nil {
		t.Fatal(err)
	}
	if want := map[bool]int{true: 2, false: 0}[spooled]; chunked != want {
		t.Errorf("BRAVO payloads stored in pieces = %d, want %d", chunked, want)
	}

	// EDIFACT: an ORDERS interchange comes back acknowledged by a CONTRL.
	orders := a.send(t, b, []byte(ordersD96A), "application/EDIFACT", "orders.edi", "delivered", "failed")
	var od hubDetail
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if a.api(t, "GET", orders.Location, "", nil, &od); od.Ack != "pending" {
			break
		}
	}
	if od.Ack != "accepted" || len(od.Interchanges) != 1 || od.Interchanges[0].ControlNumber != "ORD0001" {
		t.Errorf("ALPHA's ORDERS = %+v, want ack accepted (BRAVO's CONTRL) for interchange ORD0001", od)
	}
}

// ordersD96A is an EDIFACT ORDERS interchange with a UNA and the release
// character in a value.
const ordersD96A = "UNA:+.? 'UNB+UNOC:3+ALPHA:ZZ+BRAVO:ZZ+261202:0405+ORD0001'UNH+1+ORDERS:D:96A:UN'" +
	"BGM+220+PO?+4711+9'DTM+137:20261202:102'NAD+BY+5412345000013::9'LIN+1++4000862141404:SRS'QTY+21:48'UNS+S'" +
	"UNT+8+1'UNZ+1+ORD0001'"

// TestAckOverdueOnceAcrossFailover: two replicas of ALPHA (one database,
// the Postgres leader backend) send an 850 to BRAVO, which sends no 997.
// The leader's acknowledgement watcher flags it overdue; the leader stops,
// the other replica takes over and runs its watcher: the interchange is
// flagged once, one ack-overdue event, and the new leader's gauge shows it.
func TestAckOverdueOnceAcrossFailover(t *testing.T) {
	a1, b := newHubStation(t, "HUB ALPHA"), newHubStation(t, "HUB-BRAVO")
	fast := []string{"EDIHUB_ACK_WATCH_INTERVAL", "100ms", "EDIHUB_RETRY_PERIOD", "500ms", "EDIHUB_RENEW_DEADLINE", "2s", "EDIHUB_LEASE_DURATION", "10s"}
	a1.extraEnv = fast
	a1.start(t, b, "mdn: sync", "edi_ack_due: 1s")
	a2 := *a1
	a2.as2Addr, a2.opsAddr, a2.logs = hubFreeAddr(t), hubFreeAddr(t), &hubLog{} // same directory, keys and config
	a2.start(t, b, "mdn: sync", "edi_ack_due: 1s")
	b.start(t, a1, "require_signed: false")

	sent := a1.send(t, b, []byte(po850), "application/EDI-X12", "po.x12", "delivered", "failed")
	if sent.Status != "delivered" {
		t.Fatalf("850: %q %q", sent.Status, sent.Error)
	}
	waitAck := func(s *hubStation, want string) {
		t.Helper()
		var d hubDetail
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if s.api(t, "GET", sent.Location, "", nil, &d); d.Ack == want {
				return
			}
		}
		t.Fatalf("%s: ack %q, want %q", s.name, d.Ack, want)
	}
	waitAck(a1, "overdue")
	leader, follower := a1, &a2
	if strings.Contains(a2.metrics(t), "edihub_leader_is_leader 1") {
		leader, follower = &a2, a1
	}
	leader.stop()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		// The new leader's watcher has run a step: its gauge counts the
		// interchange flagged by its predecessor.
		if strings.Contains(follower.metrics(t), `edihub_ack_overdue{partner="HUB-BRAVO"} 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not take over and watch:\n%s", follower.name, follower.metrics(t))
		}
	}
	var feed struct {
		Events []struct {
			Type    string `json:"type"`
			Message int64  `json:"message"`
		} `json:"events"`
	}
	follower.api(t, "GET", "/api/v1/events?limit=1000", "", nil, &feed)
	n := 0
	for _, e := range feed.Events {
		if e.Type == "ack-overdue" {
			n++
			if e.Message != sent.ID {
				t.Errorf("ack-overdue event for message %d, want %d", e.Message, sent.ID)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d ack-overdue events, want exactly 1 across the failover (%+v)", n, feed.Events)
	}
}

// TestHubToHubEDIRefuseDuplicate: BRAVO refuses repeated interchanges
// from ALPHA (edi_duplicates: refuse). The same 850 sent again under a new
// Message-ID is answered processed/Warning: duplicate-document, stored at
// BRAVO as an error with the reason, its payload not kept.
func TestHubToHubEDIRefuseDuplicate(t *testing.T) {
	a, b := newHubStation(t, "HUB ALPHA"), newHubStation(t, "HUB-BRAVO")
	a.start(t, b, "mdn: sync", "mdn_signed: true")
	b.start(t, a, "require_signed: false", "mdn: sync", "edi_duplicates: refuse")

	first := a.send(t, b, []byte(po850), "application/EDI-X12", "po.x12", "delivered", "failed")
	again := a.send(t, b, []byte(po850), "application/EDI-X12", "po.x12", "delivered", "failed")
	if first.Status != "delivered" || strings.Contains(first.Disposition, "duplicate") {
		t.Errorf("first 850: %q %q, want delivered, processed", first.Status, first.Disposition)
	}
	if !strings.Contains(again.Disposition, "processed/Warning: duplicate-document") {
		t.Errorf("second 850: status %q, disposition %q; want processed/Warning: duplicate-document", again.Status, again.Disposition)
	}
	got := b.received(t, again.MessageID)
	if got.Status != "error" || !strings.Contains(got.Error, "duplicate interchange 000000101") || !strings.Contains(got.Error, "edi_duplicates is refuse") {
		t.Errorf("BRAVO's second receipt = %+v, want error naming the duplicate interchange and the setting", got)
	}
	var payload []byte
	if c := b.api(t, "GET", got.Location+"/payload", "", nil, &payload); c == 200 {
		t.Errorf("BRAVO kept the refused payload (%d bytes)", len(payload))
	}
	if m := b.metrics(t); !strings.Contains(m, `edihub_edi_duplicate_interchanges_total{action="refused",partner="HUB ALPHA"} 1`) {
		t.Errorf("BRAVO /metrics lacks the refused duplicate")
	}
}
