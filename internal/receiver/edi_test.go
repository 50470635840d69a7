package receiver_test

import (
	"context"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/edi"
	"github.com/edihub/edihub/internal/interchange"
	"github.com/edihub/edihub/internal/postgres"
)

const ediPO = "ISA*00*          *00*          *ZZ*ACME           *ZZ*EDIHUB         *261202*0405*U*00401*000000123*0*P*>~" +
	"GS*PO*ACME*EDIHUB*20261202*0405*55*X*004010~ST*850*0001~BEG*00*SA*PO1**20261202~SE*3*0001~GE*1*55~IEA*1*000000123~"

// blindEDI is an EDI step whose first look finds no duplicate (as when the
// other copy is not committed yet) and whose next looks find it.
type blindEDI struct {
	looks, received atomic.Int32
}

func (b *blindEDI) Inspect(_ context.Context, p *config.Partner, payload io.Reader) interchange.Inspection {
	doc, err := edi.Parse(payload, edi.Limits{})
	if err != nil {
		panic(err)
	}
	rec := postgres.EDIRecord{Partner: p.AS2ID, Direction: "inbound", Doc: doc, DuplicateWindow: time.Hour, RefuseDuplicates: true}
	if b.looks.Add(1) == 1 {
		return interchange.Inspection{Doc: doc, Save: &postgres.InboundEDI{Record: rec}}
	}
	rec.Refused = true
	return interchange.Inspection{Doc: doc, Refuse: true, Reason: "duplicate interchange 000000123; edi_duplicates is refuse", Save: &postgres.InboundEDI{Record: rec}}
}

func (b *blindEDI) Received(*config.Partner, int64, interchange.Inspection) { b.received.Add(1) }

// TestReceiveDuplicateInterchangeStoredMeanwhile: for a partner that
// refuses duplicates, an interchange whose other copy was stored between
// the look before the answer and the receipt's write (another replica)
// is answered refused, not stored as a second first or as a processed
// duplicate.
func TestReceiveDuplicateInterchangeStoredMeanwhile(t *testing.T) {
	b := &blindEDI{}
	e := newEnv(t, envOptions{edi: b})
	ctx := context.Background()
	// The other replica's copy, committed.
	other := &postgres.InboundMessage{Partner: partnerACME, AS2From: partnerACME, AS2To: station, MessageID: "<other-replica@x>",
		Status: postgres.InboundProcessed, MDNMode: "none", Payload: []byte(ediPO), PayloadSize: int64(len(ediPO)),
		EDI: &postgres.InboundEDI{Record: postgres.EDIRecord{Partner: partnerACME, Direction: "inbound", Doc: mustDoc(t, ediPO), DuplicateWindow: time.Hour}}}
	if _, err := e.store.SaveInbound(ctx, other); err != nil {
		t.Fatal(err)
	}
	m := buildOpenSSL(t, build{sign: "sha256", payload: ediPO})
	r := post(t, e.url, request(as2Header(partnerACME, station, "<this-replica@x>", "sha-256"), m), m.body, false)
	got := parseMDN(t, r)
	if !strings.Contains(got.Disposition.String(), "duplicate-document") {
		t.Errorf("MDN disposition = %q, want processed/Warning: duplicate-document", got.Disposition)
	}
	if n := b.looks.Load(); n != 2 {
		t.Errorf("looked at the envelope %d times, want 2 (again after the write found the duplicate)", n)
	}
	row, ok := e.row(t, partnerACME, "<this-replica@x>")
	if !ok || row.Status != postgres.InboundError {
		t.Errorf("stored receipt = %+v (found %v), want error", row, ok)
	}
	if c := e.count(t, `SELECT count(*) FROM message_interchanges WHERE duplicate_of IS NULL`); c != 1 {
		t.Errorf("%d interchanges recorded as first, want 1", c)
	}
	if c := e.count(t, `SELECT count(*) FROM interchange_duplicates WHERE refused`); c != 1 {
		t.Errorf("%d refused duplicates counted, want 1", c)
	}
}

func mustDoc(t *testing.T, s string) *edi.Document {
	t.Helper()
	d, err := edi.Parse(strings.NewReader(s), edi.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}
