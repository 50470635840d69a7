package console_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/postgres"
)

// statusOf is a message's status in the database.
func (e *env) statusOf(id int64) string {
	e.t.Helper()
	m, err := e.st.Message(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return m.Status
}

// auditOf lists the audit entries of an action, newest first.
func (e *env) auditOf(action string) []postgres.AuditRecord {
	e.t.Helper()
	recs, err := e.st.AuditLog(e.ctx, postgres.AuditQuery{Action: action})
	if err != nil {
		e.t.Fatal(err)
	}
	return recs
}

// TestResendFailedMessage: an operator opens a failed message, resends it
// through the confirmation page and sees its status change; the resend is
// in the audit log with the operator as its actor.
func TestResendFailedMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addUser("olga", auth.RoleOperator)
	id := e.seed(msg{Direction: "outbound", Partner: "ACME CORP", MessageID: "<out-9@edihub>", Status: "failed", Filename: "invoice-9.edi",
		Payload: "ISA*...", Attempts: 8, LastStatus: 403, Error: "HTTP 403 Forbidden"})

	tb := tab(t)
	e.login(t, tb, "olga")
	run(t, tb, "open the trace", chromedp.Navigate(e.page(fmt.Sprintf("/messages/%d", id))), chromedp.WaitVisible(chromedp.CSS("#resend")))
	if got := text(t, tb, "#status"); got != "failed" {
		t.Errorf("status before = %q, want failed", got)
	}
	run(t, tb, "ask to resend", submit("#resend"), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	if q := text(t, tb, "main"); !strings.Contains(q, "Send message "+strconv.FormatInt(id, 10)+" to ACME CORP again?") {
		t.Errorf("confirmation page says %q", q)
	}
	noErrors(t, tb)
	// Nothing happened yet: asking is not doing.
	if got := e.statusOf(id); got != "failed" {
		t.Fatalf("status after the confirmation page = %q, want failed", got)
	}
	run(t, tb, "confirm", submit("#confirm"), chromedp.WaitVisible(chromedp.CSS("#status")))
	if got := text(t, tb, "#status"); got != "queued" {
		t.Errorf("status shown after the resend = %q, want queued", got)
	}
	if got := text(t, tb, ".flash"); !strings.Contains(got, "queued again") {
		t.Errorf("flash = %q", got)
	}
	if got := e.statusOf(id); got != "queued" {
		t.Errorf("status stored = %q, want queued", got)
	}
	recs := e.auditOf("message.resend")
	if len(recs) != 1 || recs[0].Actor != "user:olga" || recs[0].Target != strconv.FormatInt(id, 10) || recs[0].Detail["message_id"] != "<out-9@edihub>" {
		t.Errorf("audit of the resend = %+v, want one by user:olga on %d", recs, id)
	}
	noErrors(t, tb)
}

// TestViewerCannotActOrReadPayloads: a viewer's trace has no payload,
// raw MDN or resend, and the server refuses them when asked anyway.
func TestViewerCannotActOrReadPayloads(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addUser("vera", auth.RoleViewer)
	ok := true
	id := e.seed(msg{Direction: "outbound", Partner: "ACME CORP", MessageID: "<out-1@edihub>", Status: "failed", Filename: "secret.edi",
		Payload: "TOP SECRET PAYLOAD", Attempts: 3, LastStatus: 500, Error: "HTTP 500", MDN: "automatic-action/MDN-sent-automatically; processed", MICVerified: &ok})

	tb := tab(t)
	e.login(t, tb, "vera")
	run(t, tb, "open the trace", chromedp.Navigate(e.page(fmt.Sprintf("/messages/%d", id))), chromedp.WaitVisible(chromedp.CSS("#attempts")))
	for _, sel := range []string{"#payload", "#raw-mdn", "#resend", `a[href="/console/send"]`} {
		if n := eval[int](t, tb, fmt.Sprintf("document.querySelectorAll(%q).length", sel)); n != 0 {
			t.Errorf("a viewer's trace shows %s", sel)
		}
	}
	noErrors(t, tb)
	// From here on, the refusals are logged as failed loads.
	base := fmt.Sprintf("/console/messages/%d", id)
	tests := []struct{ method, path string }{
		{http.MethodGet, base + "/payload"},
		{http.MethodGet, base + "/mdn"},
		{http.MethodGet, base + "/resend"},
		{http.MethodPost, base + "/resend"}, // a forged form: same origin, the viewer's own session
		{http.MethodGet, "/console/send"},
		{http.MethodPost, "/console/send"},
	}
	for _, tt := range tests {
		if got := fetchStatus(t, tb, tt.method, tt.path); got != http.StatusForbidden {
			t.Errorf("%s %s as a viewer = %d, want 403", tt.method, tt.path, got)
		}
	}
	if body := eval[string](t, tb, fmt.Sprintf(`fetch(%q).then(r => r.text())`, base+"/payload")); strings.Contains(body, "TOP SECRET") {
		t.Errorf("the payload reached a viewer")
	}
	if got := e.statusOf(id); got != "failed" {
		t.Errorf("status after a viewer's forged resend = %q, want failed", got)
	}
	if recs := e.auditOf("message.resend"); len(recs) != 0 {
		t.Errorf("audit has a resend: %+v", recs)
	}
}

// TestCrossOriginPostRefused: a page of another origin (a port of the same
// host: the same site, so the Lax session cookie goes along) posts a
// resend form to the console in an operator's browser; the console
// refuses it and the message is not resent.
func TestCrossOriginPostRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addUser("olga", auth.RoleOperator)
	id := e.seed(msg{Direction: "outbound", Partner: "ACME CORP", MessageID: "<out-1@edihub>", Status: "failed", Payload: "x", Attempts: 8, LastStatus: 500})
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><html lang="en"><title>Win a prize</title><h1>Win a prize</h1>
<form method="post" action="%s"><button id="go" type="submit">Claim</button></form></html>`, e.page(fmt.Sprintf("/messages/%d/resend", id)))
	}))
	t.Cleanup(evil.Close)

	tb := tab(t)
	e.login(t, tb, "olga")
	run(t, tb, "visit the other site", chromedp.Navigate(evil.URL), submit("#go"), loaded)
	expect(t, tb, "the other site's post", ".error")
	if got := text(t, tb, ".error"); !strings.Contains(got, "came from another site") {
		t.Errorf("the console answered %q", got)
	}
	if got := e.statusOf(id); got != "failed" {
		t.Errorf("status after the cross-origin post = %q, want failed", got)
	}
	if recs := e.auditOf("message.resend"); len(recs) != 0 {
		t.Errorf("audit has a resend: %+v", recs)
	}
}

// TestSendDocument: an operator uploads a document for a partner; it is
// queued (a real outbox.Queue on the store), audited, and its trace shown.
func TestSendDocument(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addUser("olga", auth.RoleOperator)
	dir := t.TempDir()
	file := filepath.Join(dir, "order-42.edi")
	if err := os.WriteFile(file, []byte("ISA*00*order 42~"), 0o644); err != nil {
		t.Fatal(err)
	}

	tb := tab(t)
	e.login(t, tb, "olga")
	run(t, tb, "fill in the send form",
		chromedp.Navigate(e.page("/send")),
		chromedp.WaitVisible(chromedp.CSS("#partner")),
		chromedp.SetValue(chromedp.CSS("#partner"), "ACME CORP"),
		chromedp.SetValue(chromedp.CSS("#content-type"), "application/edi-x12"),
		chromedp.SetUploadFiles(chromedp.CSS("#document"), []string{file}),
		submit("#send"),
		chromedp.WaitVisible(chromedp.CSS("#status")),
	)
	if got := text(t, tb, ".flash"); !strings.Contains(got, "order-42.edi is queued for ACME CORP") {
		t.Errorf("flash = %q", got)
	}
	recs := e.auditOf("message.send")
	if len(recs) != 1 || recs[0].Actor != "user:olga" || recs[0].Detail["filename"] != "order-42.edi" {
		t.Fatalf("audit of the send = %+v", recs)
	}
	id, _ := strconv.ParseInt(recs[0].Target, 10, 64)
	m, data, err := e.st.MessagePayload(e.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != "ISA*00*order 42~" || m.ContentType != "application/edi-x12" || m.Partner != "ACME CORP" || m.Status != "queued" {
		t.Errorf("queued %+v with %q", m, data)
	}
	noErrors(t, tb)
}

// TestSendDocumentTypedByEnvelope: with no content type chosen, an X12
// document goes as application/EDI-X12, what its envelope says, not as
// the application/octet-stream the browser gives an .x12 file; a file
// that is not EDI keeps the browser's type.
func TestSendDocumentTypedByEnvelope(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addUser("olga", auth.RoleOperator)
	dir := t.TempDir()
	x12 := "ISA*00*          *00*          *ZZ*EDIHUB         *ZZ*ACME CORP      *261201*0930*U*00401*000000101*0*T*>~\n" +
		"GS*PO*EDIHUB*ACME CORP*20261201*0930*101*X*004010~\nST*850*0001~\nBEG*00*SA*PO-1**20261201~\nSE*3*0001~\nGE*1*101~\nIEA*1*000000101~\n"
	tests := []struct {
		file, body string
		want       string
	}{
		{"order-7.x12", x12, "application/EDI-X12"},
		{"notes.txt", "not EDI", "text/plain"},
	}
	tb := tab(t)
	e.login(t, tb, "olga")
	for i, tt := range tests {
		file := filepath.Join(dir, tt.file)
		if err := os.WriteFile(file, []byte(tt.body), 0o644); err != nil {
			t.Fatal(err)
		}
		run(t, tb, "send "+tt.file+" with no content type chosen",
			chromedp.Navigate(e.page("/send")),
			chromedp.WaitVisible(chromedp.CSS("#partner")),
			chromedp.SetValue(chromedp.CSS("#partner"), "ACME CORP"),
			chromedp.SetUploadFiles(chromedp.CSS("#document"), []string{file}),
			submit("#send"),
			chromedp.WaitVisible(chromedp.CSS("#status")),
		)
		recs := e.auditOf("message.send")
		if len(recs) != i+1 {
			t.Fatalf("%d sends audited, want %d", len(recs), i+1)
		}
		var id int64
		for _, r := range recs {
			if r.Detail["filename"] == tt.file {
				id, _ = strconv.ParseInt(r.Target, 10, 64)
			}
		}
		m, err := e.st.Message(e.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(m.ContentType, tt.want) {
			t.Errorf("send %s with no content type chosen: queued as %q, want %q", tt.file, m.ContentType, tt.want)
		}
	}
	noErrors(t, tb)
}

// TestCancelAndReapply: an operator cancels a message still retrying (with
// a reason, recorded), and re-applies an orphan async MDN that names
// another message from its trace; both are in the audit log, and a viewer
// is refused both.
func TestCancelAndReapply(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addUser("olga", auth.RoleOperator)
	e.addUser("vera", auth.RoleViewer)
	retrying := e.seed(msg{Direction: "outbound", Partner: "ACME CORP", MessageID: "<out-7@edihub>", Status: "retrying", Payload: "x", Attempts: 3, LastStatus: 502, Error: "HTTP 502"})
	awaiting := e.seed(msg{Direction: "outbound", Partner: "GLOBEX", MessageID: "<out-8@edihub>", Status: "failed", Payload: "x", Attempts: 1, LastStatus: 200})
	var orphan int64
	if err := e.db.QueryRow(e.ctx, `INSERT INTO mdn_inbox (as2_from, as2_to, content_type, body, original_message_id, state, reason, partner, processed_at)
VALUES ('GLOBEX', 'EDIHUB', 'multipart/signed', 'x', '<out-8@edihub>', 'orphan', 'signature does not verify', 'GLOBEX', now()) RETURNING id`).Scan(&orphan); err != nil {
		t.Fatal(err)
	}

	tb := tab(t)
	e.login(t, tb, "vera")
	for _, path := range []string{fmt.Sprintf("/console/messages/%d/cancel", retrying), fmt.Sprintf("/console/mdns/%d/reapply", orphan)} {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			if got := fetchStatus(t, tb, method, path); got != http.StatusForbidden {
				t.Errorf("%s %s as a viewer = %d, want 403", method, path, got)
			}
		}
	}

	tb = tab(t)
	e.login(t, tb, "olga")
	run(t, tb, "cancel the retrying message",
		chromedp.Navigate(e.page(fmt.Sprintf("/messages/%d", retrying))),
		submit("#cancel"),
		chromedp.WaitVisible(chromedp.CSS("#reason")),
	)
	checkPage(t, tb, "#reason", "#confirm", "#back")
	run(t, tb, "confirm the cancel", chromedp.SendKeys(chromedp.CSS("#reason"), "sent by mistake"), submit("#confirm"), chromedp.WaitVisible(chromedp.CSS("#status")))
	if got := text(t, tb, "#status"); got != "failed" {
		t.Errorf("status after the cancel = %q, want failed", got)
	}
	if m, _ := e.st.Message(e.ctx, retrying); m.Status != "failed" || m.Error != "cancelled: sent by mistake" {
		t.Errorf("message after the cancel: %s %q", m.Status, m.Error)
	}
	if recs := e.auditOf("message.cancel"); len(recs) != 1 || recs[0].Actor != "user:olga" || recs[0].Detail["reason"] != "sent by mistake" {
		t.Errorf("audit of the cancel: %+v", recs)
	}

	run(t, tb, "open the message the orphan names", chromedp.Navigate(e.page(fmt.Sprintf("/messages/%d", awaiting))), chromedp.WaitVisible(chromedp.CSS("#inbox")))
	if got := text(t, tb, "#inbox"); !strings.Contains(got, "orphan") || !strings.Contains(got, "signature does not verify") {
		t.Errorf("async MDNs of the trace: %q", got)
	}
	run(t, tb, "re-apply the orphan", submit(fmt.Sprintf("#reapply-%d", orphan)), chromedp.WaitVisible(chromedp.CSS("#confirm")), submit("#confirm"), chromedp.WaitVisible(chromedp.CSS("#inbox")))
	if got := location(t, tb); !strings.HasSuffix(got, fmt.Sprintf("/console/messages/%d", awaiting)) {
		t.Errorf("after the re-apply at %s, want the trace", got)
	}
	if got := text(t, tb, "#inbox"); !strings.Contains(got, "pending") {
		t.Errorf("the orphan after the re-apply: %q", got)
	}
	if recs := e.auditOf("mdn.reapply"); len(recs) != 1 || recs[0].Actor != "user:olga" || recs[0].Target != strconv.FormatInt(orphan, 10) {
		t.Errorf("audit of the re-apply: %+v", recs)
	}
	noErrors(t, tb)
}

// TestOperatorDownloadsPayload: an operator's browser downloads a payload
// as stored, one bytea and one stored in pieces (a large inbound message),
// with its Content-Length.
func TestOperatorDownloadsPayload(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addUser("otto", auth.RoleOperator)
	small := e.seed(msg{Direction: "inbound", Partner: "ACME CORP", MessageID: "<in-small@acme>", Status: "processed", Filename: "small.edi", Payload: "ISA*00*SMALL~"})
	large := strings.Repeat("LIN*1*VP*ITEM~\n", (3<<20)/15)
	id, err := e.st.SaveInbound(e.ctx, &postgres.InboundMessage{Partner: "ACME CORP", AS2From: "ACME CORP", AS2To: "EDIHUB", MessageID: "<in-large@acme>",
		Status: postgres.InboundProcessed, MDNMode: "none", Filename: "large.edi", PayloadSize: int64(len(large)),
		PayloadOpen: func() io.Reader { return strings.NewReader(large) }})
	if err != nil {
		t.Fatal(err)
	}
	tb := tab(t)
	e.login(t, tb, "otto")
	for _, tt := range []struct {
		id   int64
		want string
	}{{small, "ISA*00*SMALL~"}, {id, large}} {
		js := fmt.Sprintf(`fetch("/console/messages/%d/payload").then(async r => r.status + " " + r.headers.get("Content-Length") + " " + (await r.text()))`, tt.id)
		want := fmt.Sprintf("200 %d %s", len(tt.want), tt.want)
		if got := eval[string](t, tb, js); got != want {
			t.Errorf("payload of message %d = %.60q (%d bytes), want %.60q (%d bytes)", tt.id, got, len(got), want, len(want))
		}
	}
}
