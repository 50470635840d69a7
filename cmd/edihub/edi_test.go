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
		time.Sleep(20 * time.Millisecond)
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
		time.Sleep(50 * time.Millisecond)
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
}
