package console_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/edi"
	"github.com/edihub/edihub/internal/postgres"
)

// TestInterchangeSearchAndTrace: messages are found by the control number
// of an interchange they carry (as typed, leading zeros or not), and a
// trace shows its interchanges: the envelope, the transaction sets, a
// duplicate with the message it repeats, and the acknowledgement of one
// sent.
func TestInterchangeSearchAndTrace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addUser("vera", auth.RoleViewer)
	raw, err := os.ReadFile(filepath.Join("..", "edi", "testdata", "x12-850-x12org-004010X357-ex1.edi"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := edi.Parse(strings.NewReader(string(raw)), edi.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	first := e.seed(msg{Direction: "inbound", Partner: "ACME CORP", MessageID: "<po-1@acme>", Status: "processed", Payload: string(raw), Created: now.Add(-time.Hour)})
	again := e.seed(msg{Direction: "inbound", Partner: "ACME CORP", MessageID: "<po-1-again@acme>", Status: "processed", Payload: string(raw), Created: now})
	sent := e.seed(msg{Direction: "outbound", Partner: "GLOBEX", MessageID: "<po-2@edihub>", Status: "delivered", Payload: string(raw), LastStatus: 200, Created: now})
	e.seed(msg{Direction: "inbound", Partner: "ACME CORP", MessageID: "<not-edi@acme>", Status: "processed", Payload: "<xml/>", Created: now})
	in := postgres.EDIRecord{Partner: "ACME CORP", Direction: "inbound", Doc: doc, DuplicateWindow: 24 * time.Hour}
	for _, id := range []int64{first, again} {
		if _, err := e.st.RecordInterchanges(e.ctx, id, in); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.st.RecordInterchanges(e.ctx, sent, postgres.EDIRecord{Partner: "GLOBEX", Direction: "outbound", Doc: doc, AckDue: time.Hour}); err != nil {
		t.Fatal(err)
	}
	e.exec(`UPDATE message_interchanges SET ack_status = 'accepted', acked_at = now() WHERE message_id = $1`, sent)

	tb := tab(t)
	e.login(t, tb, "vera")
	run(t, tb, "search by control number", chromedp.Navigate(e.page("/messages")), chromedp.WaitVisible(chromedp.CSS("#q-icn")),
		chromedp.SetValue(chromedp.CSS("#q-icn"), "101"), submit("#search"), chromedp.WaitVisible(chromedp.CSS("#messages")))
	rows := text(t, tb, "#messages tbody")
	for _, want := range []string{"<po-1@acme>", "<po-1-again@acme>", "<po-2@edihub>"} {
		if !strings.Contains(rows, want) {
			t.Errorf("search by control number 101 lacks %s:\n%s", want, rows)
		}
	}
	if strings.Contains(rows, "<not-edi@acme>") {
		t.Errorf("search by control number 101 finds a message that is not EDI:\n%s", rows)
	}
	checkPage(t, tb, "#q-icn", "#search")

	run(t, tb, "open the duplicate", chromedp.Navigate(e.page("/messages/"+strconv.FormatInt(again, 10))), chromedp.WaitVisible(chromedp.CSS("#interchanges")))
	got := text(t, tb, "#interchanges")
	for _, want := range []string{"X12", "000000101", "ZZ:ABCAEROSPACE", "ZZ:XYZAIRCRAFT", "850", "duplicate", "message " + strconv.FormatInt(first, 10)} {
		if !strings.Contains(got, want) {
			t.Errorf("interchanges of the duplicate lack %q:\n%s", want, got)
		}
	}
	run(t, tb, "open the one sent", chromedp.Navigate(e.page("/messages/"+strconv.FormatInt(sent, 10))), chromedp.WaitVisible(chromedp.CSS("#interchanges")))
	if got := text(t, tb, "#interchanges"); !strings.Contains(got, "accepted") {
		t.Errorf("interchanges of the message sent: %q, want accepted", got)
	}
	checkPage(t, tb)
}
