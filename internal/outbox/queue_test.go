package outbox_test

import (
	"context"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// TestEnqueueWarnsRepeatedControlNumber: a document whose interchange
// control number was sent to the partner before, within its
// edi_duplicate_window, is queued with a warning naming both messages;
// the first one is queued without.
func TestEnqueueWarnsRepeatedControlNumber(t *testing.T) {
	const po = "ISA*00*          *00*          *ZZ*EDIHUB         *ZZ*ACME           *261202*0405*U*00401*000000101*0*P*>~" +
		"GS*PO*EDIHUB*ACME*20261202*0405*101*X*004010~ST*850*0001~BEG*00*SA*PO1**20261202~SE*3*0001~GE*1*101~IEA*1*000000101~"
	st := pgtest.Store(t)
	cfg := loadConfig(t, partnerYAML{id: partnerID, url: "http://127.0.0.1:1/as2"})
	core, logs := observer.New(zap.WarnLevel)
	q, err := outbox.NewQueue(outbox.QueueOptions{Store: st, Config: cfg, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for i := range 2 {
		m, err := q.Enqueue(context.Background(), outbox.Document{Partner: partnerID, ContentType: "application/EDI-X12", Payload: []byte(po)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
		if got := logs.FilterMessage("interchange control number repeated within the duplicate window").TakeAll(); len(got) != i {
			t.Fatalf("warnings after enqueue %d = %d, want %d", i+1, len(got), i)
		} else if i == 1 {
			f := got[0].ContextMap()
			if f["message"] != ids[1] || f["sent_before_in"] != ids[0] || f["control_number"] != "000000101" {
				t.Errorf("warning fields = %v, want message %d repeating 000000101 of message %d", f, ids[1], ids[0])
			}
		}
	}
}
