package console_test

import (
	"fmt"
	"slices"
	"strconv"
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
	found := text(t, tb, "#messages tbody")
	if !strings.Contains(found, "<out-1@edihub>") || strings.Contains(found, "<out-2@edihub>") || strings.Contains(found, "<out-3@edihub>") || strings.Contains(found, "<in-1@acme>") {
		t.Errorf("search for ACME CORP's failed messages shows:\n%s\nwant <out-1@edihub> alone", found)
	}
	noErrors(t, tb)

	run(t, tb, "open the trace", submit("#messages tbody a"), chromedp.WaitVisible(chromedp.CSS("#attempts")))
	if got, want := text(t, tb, "h1"), "Message "; !strings.HasPrefix(got, want) || !strings.Contains(got, "failed") {
		t.Errorf("trace h1 = %q, want Message %d failed", got, failed)
	}
	// Every attempt, with its HTTP status and error; the last failed it.
	rows := eval[[]string](t, tb, `Array.from(document.querySelectorAll("#attempts tbody tr")).map(tr => tr.innerText)`)
	if len(rows) != 8 {
		t.Fatalf("attempts shown: %q, want 8", rows)
	}
	for i, r := range rows {
		want := []string{strconv.Itoa(i + 1), "edihub-0-7f3a", "503", "HTTP 503 Service Unavailable", "retrying"}
		if i == 7 {
			want[4] = "failed"
		}
		for _, w := range want {
			if !strings.Contains(r, w) {
				t.Errorf("attempt %d %q lacks %q", i+1, r, w)
			}
		}
	}
	if ev := text(t, tb, "#events"); !strings.Contains(ev, "failed") {
		t.Errorf("events %q lack the failure", ev)
	}
	noErrors(t, tb)
}

// TestSearchByMessageIDAndFilename: the search finds a message by its
// AS2 Message-ID (with or without its brackets) and by the start of its
// file name, and the overdue box keeps the messages whose MDN is late.
func TestSearchByMessageIDAndFilename(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addUser("vera", auth.RoleViewer)
	e.seed(msg{Direction: "inbound", Partner: "ACME CORP", MessageID: "<po-1@acme.example>", Status: "processed", Filename: "ORDERS_20260302_1.edi", Payload: "x"})
	e.seed(msg{Direction: "inbound", Partner: "ACME CORP", MessageID: "<po-2@acme.example>", Status: "processed", Filename: "ORDERS_20260303_1.edi", Payload: "x"})
	late := e.seed(msg{Direction: "outbound", Partner: "GLOBEX", MessageID: "<inv-3@edihub>", Status: "delivered", Filename: "INVOIC_1.edi", Payload: "x", LastStatus: 200})
	e.exec(`UPDATE messages SET status = 'awaiting-mdn', mdn_overdue = true WHERE id = $1`, late)

	tb := tab(t)
	e.login(t, tb, "vera")
	search := func(what string, q string) []string {
		t.Helper()
		run(t, tb, "search "+what, chromedp.Navigate(e.page("/messages?"+q)), chromedp.WaitVisible(chromedp.CSS("h1")))
		return eval[[]string](t, tb, `Array.from(document.querySelectorAll("#messages tbody tr td.mono")).map(td => td.innerText)`)
	}
	for _, tt := range []struct {
		what, q string
		want    []string
	}{
		{"Message-ID", "message_id=po-2%40acme.example", []string{"<po-2@acme.example>"}},
		{"Message-ID with brackets", "message_id=%3Cpo-1%40acme.example%3E", []string{"<po-1@acme.example>"}},
		{"file name prefix", "filename=ORDERS_20260302", []string{"<po-1@acme.example>"}},
		{"file name prefix of both", "filename=ORDERS_", []string{"<po-2@acme.example>", "<po-1@acme.example>"}},
		{"overdue", "overdue=1", []string{"<inv-3@edihub>"}},
	} {
		if got := search(tt.what, tt.q); strings.Join(got, " ") != strings.Join(tt.want, " ") {
			t.Errorf("search by %s: %q, want %q", tt.what, got, tt.want)
		}
	}
	// The form keeps what was searched.
	if got := eval[string](t, tb, `document.getElementById("q-overdue").checked ? "checked" : ""`); got != "checked" {
		t.Error("the overdue box is not ticked on the overdue search")
	}
	noErrors(t, tb)
}

// TestAttemptOutcomes: the trace shows an attempt the partner's MDN
// refused, and one whose retry was cancelled, as what they are, styled as
// failures; a delivered one as done.
func TestAttemptOutcomes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addUser("vera", auth.RoleViewer)
	day := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	refused := e.seed(msg{Direction: "outbound", Partner: "ACME CORP", MessageID: "<out-1@edihub>", Status: "failed", Payload: "ISA*...",
		Created: day, LastStatus: 200, Error: "negative MDN: processed/error: decryption-failed",
		MDN: "automatic-action/MDN-sent-automatically; processed/error: decryption-failed"})
	e.exec(`UPDATE message_attempts SET outcome = 'negative' WHERE message_id = $1`, refused)
	cancelled := e.seed(msg{Direction: "outbound", Partner: "ACME CORP", MessageID: "<out-2@edihub>", Status: "failed", Payload: "ISA*...",
		Created: day, LastStatus: 502, Error: "HTTP 502; cancelled: sent by mistake"})
	e.exec(`UPDATE message_attempts SET outcome = 'cancelled' WHERE message_id = $1`, cancelled)
	delivered := e.seed(msg{Direction: "outbound", Partner: "ACME CORP", MessageID: "<out-3@edihub>", Status: "delivered", Payload: "ISA*...",
		Created: day, LastStatus: 200, MDN: "automatic-action/MDN-sent-automatically; processed"})

	tb := tab(t)
	e.login(t, tb, "vera")
	tests := []struct {
		give      int64
		wantText  string
		wantClass string
	}{
		{give: refused, wantText: "negative MDN", wantClass: "badge bad"},
		{give: cancelled, wantText: "cancelled", wantClass: "badge bad"},
		{give: delivered, wantText: "done", wantClass: "badge ok"},
	}
	for _, tt := range tests {
		run(t, tb, fmt.Sprintf("open message %d", tt.give), chromedp.Navigate(e.page(fmt.Sprintf("/messages/%d", tt.give))),
			chromedp.WaitVisible(chromedp.CSS("#attempts")))
		got := eval[[]string](t, tb, `(b => [b.textContent, b.className])(document.querySelector("#attempts tbody tr .badge"))`)
		if want := []string{tt.wantText, tt.wantClass}; !slices.Equal(got, want) {
			t.Errorf("attempt of message %d shows %q, want %q", tt.give, got, want)
		}
	}
	noErrors(t, tb)
}
