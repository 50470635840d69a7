package console_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/edihub/edihub/internal/auth"
)

// TestSearchAndTrace: a viewer signs in, searches the failed messages of
// one partner, opens one and reads its trace: every attempt with its HTTP
// status and error, and its events.
func TestSearchAndTrace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addUser("vera", auth.RoleViewer)
	day := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	e.seed(msg{Direction: "inbound", Partner: "ACME CORP", MessageID: "<in-1@acme>", Status: "processed", Filename: "po-1.edi", Payload: "ISA*...", Created: day})
	failed := e.seed(msg{Direction: "outbound", Partner: "ACME CORP", MessageID: "<out-1@edihub>", Status: "failed", Filename: "invoice-7.edi",
		Payload: "ISA*...", Created: day.Add(time.Hour), Attempts: 8, LastStatus: 503, Error: "HTTP 503 Service Unavailable"})
	e.seed(msg{Direction: "outbound", Partner: "GLOBEX", MessageID: "<out-2@edihub>", Status: "failed", Filename: "asn-3.edi",
		Payload: "ISA*...", Created: day.Add(2 * time.Hour), Attempts: 2, LastStatus: 500, Error: "HTTP 500"})
	ok := true
	e.seed(msg{Direction: "outbound", Partner: "ACME CORP", MessageID: "<out-3@edihub>", Status: "delivered", Filename: "invoice-8.edi",
		Payload: "ISA*...", Created: day.Add(3 * time.Hour), LastStatus: 200, MDN: "automatic-action/MDN-sent-automatically; processed", MICVerified: &ok})

	tb := tab(t)
	// A page asked for before sign-in is shown after it.
	run(t, tb, "open the messages", chromedp.Navigate(e.page("/messages?status=failed")), chromedp.WaitVisible(chromedp.CSS("#name")))
	e.loginHere(t, tb, "vera")
	if got := location(t, tb); !strings.HasSuffix(got, "/console/messages?status=failed") {
		t.Errorf("after sign-in at %s, want the page asked for", got)
	}

	run(t, tb, "search",
		chromedp.SetValue(chromedp.CSS("#q-partner"), "ACME CORP"),
		chromedp.SetValue(chromedp.CSS("#q-status"), "failed"),
		chromedp.SetValue(chromedp.CSS("#q-since"), "2026-03-02"),
		chromedp.SetValue(chromedp.CSS("#q-until"), "2026-03-02"),
		submit("#search"),
		chromedp.WaitVisible(chromedp.CSS("#messages")),
	)
	rows := text(t, tb, "#messages tbody")
	if !strings.Contains(rows, "<out-1@edihub>") || strings.Contains(rows, "<out-2@edihub>") || strings.Contains(rows, "<out-3@edihub>") || strings.Contains(rows, "<in-1@acme>") {
		t.Errorf("search for ACME CORP's failed messages shows:\n%s\nwant <out-1@edihub> alone", rows)
	}
	noErrors(t, tb)

	run(t, tb, "open the trace", submit("#messages tbody a"), chromedp.WaitVisible(chromedp.CSS("#attempts")))
	if got, want := text(t, tb, "h1"), "Message "; !strings.HasPrefix(got, want) || !strings.Contains(got, "failed") {
		t.Errorf("trace h1 = %q, want Message %d failed", got, failed)
	}
	attempts := text(t, tb, "#attempts tbody")
	for _, want := range []string{"8 of 8", "503", "HTTP 503 Service Unavailable", "failed"} {
		if !strings.Contains(attempts, want) {
			t.Errorf("attempts %q lack %q", attempts, want)
		}
	}
	if ev := text(t, tb, "#events"); !strings.Contains(ev, "failed") {
		t.Errorf("events %q lack the failure", ev)
	}
	noErrors(t, tb)
}
