package console_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/edihub/edihub/internal/auth"
)

// TestPartnersListAndEdit: an admin sees the partners with their health,
// opens one, changes its profile (stored as a new version, in its
// history and the audit log), is shown where a wrong profile is wrong, and
// cannot overwrite a change someone made meanwhile.
func TestPartnersListAndEdit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addUser("ada", auth.RoleAdmin)
	now := time.Now()
	e.seed(msg{Direction: "outbound", Partner: "ACME CORP", MessageID: "<out-1@edihub>", Status: "delivered", Payload: "x", LastStatus: 200, Created: now.Add(-time.Hour)})
	e.seed(msg{Direction: "outbound", Partner: "ACME CORP", MessageID: "<out-2@edihub>", Status: "retrying", Payload: "x", Attempts: 2, LastStatus: 503, Created: now})
	e.exec(`UPDATE messages SET status = 'awaiting-mdn', mdn_overdue = true WHERE message_id = '<out-1@edihub>'`)

	tb := tab(t)
	e.login(t, tb, "ada")
	run(t, tb, "open the partners", chromedp.Navigate(e.page("/partners")), chromedp.WaitVisible(chromedp.CSS("#partners")))
	rows := text(t, tb, "#partners tbody")
	if !strings.Contains(rows, "ACME CORP") || !strings.Contains(rows, "GLOBEX") || !strings.Contains(rows, "http://127.0.0.1:1/as2") {
		t.Errorf("partner list:\n%s", rows)
	}
	checkPage(t, tb, `a[href="/console/partners/ACME%20CORP"]`, `a[href="/console/partners/GLOBEX"]`)

	run(t, tb, "open ACME CORP", submit(`a[href="/console/partners/ACME%20CORP"]`), chromedp.WaitVisible(chromedp.CSS("#profile")))
	if got := text(t, tb, "#health"); !strings.Contains(got, "Retrying\n1") || !strings.Contains(got, "MDNs overdue\n1") {
		t.Errorf("health: %q", got)
	}
	checkPage(t, tb, "#test", "#profile", "#save")
	yaml := eval[string](t, tb, `document.getElementById("profile").value`)
	if !strings.Contains(yaml, "url: http://127.0.0.1:1/as2") {
		t.Fatalf("profile:\n%s", yaml)
	}

	// A profile that does not validate: nothing stored, the field named.
	bad := strings.Replace(yaml, "mdn: sync", "mdn: sometimes", 1)
	run(t, tb, "save a wrong profile", chromedp.SetValue(chromedp.CSS("#profile"), bad), submit("#save"), chromedp.WaitVisible(chromedp.CSS("#profile-error")))
	if got := text(t, tb, "#profile-error"); !strings.Contains(got, "mdn") || !strings.Contains(got, "line") {
		t.Errorf("error shown for mdn: sometimes: %q", got)
	}
	if got := eval[string](t, tb, `document.getElementById("profile").value`); got != bad {
		t.Errorf("the text area lost the admin's text")
	}

	// A good change.
	good := strings.Replace(yaml, "http://127.0.0.1:1/as2", "http://127.0.0.1:2/as2", 1)
	run(t, tb, "save a change", chromedp.SetValue(chromedp.CSS("#profile"), good), submit("#save"), chromedp.WaitVisible(chromedp.CSS("#history")))
	if got := text(t, tb, ".flash"); !strings.Contains(got, "stored as version 2") {
		t.Errorf("flash: %q", got)
	}
	if got := text(t, tb, "#history"); !strings.Contains(got, "update") || !strings.Contains(got, "user:ada") || !strings.Contains(got, "127.0.0.1:2") {
		t.Errorf("history:\n%s", got)
	}
	recs := e.auditOf("partner.update")
	if len(recs) != 1 || recs[0].Actor != "user:ada" || recs[0].Target != "ACME CORP" {
		t.Errorf("audit: %+v", recs)
	}

	// Someone else changes it while the page is open: the page's change is
	// refused.
	sp, err := e.st.Partner(e.ctx, "ACME CORP")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Put(e.ctx, "someone else", []byte(strings.Replace(sp.Spec, "127.0.0.1:2", "127.0.0.1:3", 1)), sp.Version); err != nil {
		t.Fatal(err)
	}
	mine := strings.Replace(good, "http://127.0.0.1:2/as2", "http://127.0.0.1:4/as2", 1)
	run(t, tb, "save on a stale version", chromedp.SetValue(chromedp.CSS("#profile"), mine), submit("#save"), chromedp.WaitVisible(chromedp.CSS("#profile-error")))
	if got := text(t, tb, "#profile-error"); !strings.Contains(got, "Someone changed this partner") {
		t.Errorf("stale save: %q", got)
	}
	if sp, _ := e.st.Partner(e.ctx, "ACME CORP"); !strings.Contains(sp.Spec, "127.0.0.1:3") {
		t.Errorf("the other change was overwritten:\n%s", sp.Spec)
	}
}

// TestPartnerRoles: a viewer reads a partner but gets no editor, and the
// server refuses its edit and test; an operator tests the connection.
func TestPartnerRoles(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addUser("vera", auth.RoleViewer)
	e.addUser("olga", auth.RoleOperator)

	tb := tab(t)
	e.login(t, tb, "vera")
	run(t, tb, "open GLOBEX", chromedp.Navigate(e.page("/partners/GLOBEX")), chromedp.WaitVisible(chromedp.CSS("#profile")))
	if n := eval[int](t, tb, `document.querySelectorAll("textarea, #save, #test").length`); n != 0 {
		t.Errorf("a viewer's partner page has %d editing or test controls", n)
	}
	noErrors(t, tb)
	for _, path := range []string{"/console/partners/GLOBEX", "/console/partners/GLOBEX/test"} {
		if got := fetchStatus(t, tb, http.MethodPost, path); got != http.StatusForbidden {
			t.Errorf("POST %s as a viewer = %d, want 403", path, got)
		}
	}
	if sp, _ := e.st.Partner(e.ctx, "GLOBEX"); sp.Version != 1 {
		t.Errorf("GLOBEX is at version %d after a viewer's post", sp.Version)
	}

	tb = tab(t)
	e.login(t, tb, "olga")
	run(t, tb, "test GLOBEX", chromedp.Navigate(e.page("/partners/GLOBEX")), submit("#test"), chromedp.WaitVisible(chromedp.CSS("#test-report")))
	// Nothing listens on 127.0.0.1:1: the test fails, and says where.
	if got := text(t, tb, "#test-report"); !strings.Contains(got, "failed") {
		t.Errorf("test report: %q", got)
	}
	if recs := e.auditOf("partner.test"); len(recs) != 1 || recs[0].Actor != "user:olga" || recs[0].Detail["ok"] != false {
		t.Errorf("audit: %+v", recs)
	}
	if got := fetchStatus(t, tb, http.MethodPost, "/console/partners/GLOBEX"); got != http.StatusForbidden {
		t.Errorf("POST /console/partners/GLOBEX as an operator = %d, want 403", got)
	}
}

// TestPartnerCreateDeleteRestore: an admin creates a partner from the
// console (a wrong profile shows where it is wrong; an AS2 ID stored
// already is refused), deletes it after a confirmation (listed as
// deleted, its page keeps its history), restores it, and restores an
// older version of a live partner; a delete on a version changed
// meanwhile is refused; each change is in the audit log. Operators get
// none of it.
func TestPartnerCreateDeleteRestore(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addUser("ada", auth.RoleAdmin)
	acme, err := e.st.Partner(e.ctx, "ACME CORP")
	if err != nil {
		t.Fatal(err)
	}
	initech := regexp.MustCompile(`(?m)^as2_id: .*$`).ReplaceAllString(acme.Spec, "as2_id: INITECH")
	if initech == acme.Spec {
		t.Fatalf("no as2_id line in ACME CORP's profile:\n%s", acme.Spec)
	}
	tb := tab(t)
	e.login(t, tb, "ada")
	run(t, tb, "open the new partner form", chromedp.Navigate(e.page("/partners")), chromedp.WaitVisible(chromedp.CSS("#partners")),
		submit("#new-partner"), chromedp.WaitVisible(chromedp.CSS("#profile")))
	checkPage(t, tb, "#profile", "#create")
	run(t, tb, "create from the skeleton", submit("#create"), chromedp.WaitVisible(chromedp.CSS("#profile-error")))
	if got := text(t, tb, "#profile-error"); !strings.Contains(got, "certificate") {
		t.Errorf("the skeleton's empty certificate: %q", got)
	}
	run(t, tb, "create INITECH", chromedp.SetValue(chromedp.CSS("#profile"), initech), submit("#create"), chromedp.WaitVisible(chromedp.CSS("#history")))
	if got := text(t, tb, ".flash"); !strings.Contains(got, "INITECH is stored as version 1") {
		t.Errorf("flash: %q", got)
	}
	run(t, tb, "create INITECH again", chromedp.Navigate(e.page("/new-partner")), chromedp.WaitVisible(chromedp.CSS("#profile")),
		chromedp.SetValue(chromedp.CSS("#profile"), initech), submit("#create"), chromedp.WaitVisible(chromedp.CSS("#profile-error")))
	if got := text(t, tb, "#profile-error"); !strings.Contains(got, "stored already") {
		t.Errorf("a second INITECH: %q", got)
	}
	// The refusals above are failed loads in this tab's log: the checks
	// below run in a tab of their own.
	tb = tab(t)
	e.login(t, tb, "ada")

	run(t, tb, "delete INITECH", chromedp.Navigate(e.page("/partners/INITECH")), chromedp.WaitVisible(chromedp.CSS("#delete")),
		submit("#delete"), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	checkPage(t, tb, "#confirm", "#back")
	run(t, tb, "confirm", submit("#confirm"), chromedp.WaitVisible(chromedp.CSS("#deleted")))
	if got := text(t, tb, "#deleted"); !strings.Contains(got, "INITECH") || !strings.Contains(got, "user:ada") {
		t.Errorf("deleted partners: %q", got)
	}
	if _, err := e.st.Partner(e.ctx, "INITECH"); err == nil {
		t.Error("INITECH is still stored")
	}
	run(t, tb, "open the deleted INITECH", submit(`#deleted a`), chromedp.WaitVisible(chromedp.CSS("#deleted-note")))
	checkPage(t, tb, "#restore-1")
	run(t, tb, "restore version 1", submit("#restore-1"), chromedp.WaitVisible(chromedp.CSS("#confirm")), submit("#confirm"), chromedp.WaitVisible(chromedp.CSS("#profile")))
	if sp, err := e.st.Partner(e.ctx, "INITECH"); err != nil || sp.Version != 3 {
		t.Errorf("INITECH after the restore: version %d, %v; want 3", sp.Version, err)
	}

	// ACME CORP moves on; its first version comes back.
	if _, err := e.svc.Put(e.ctx, "someone else", []byte(strings.Replace(acme.Spec, "127.0.0.1:1", "127.0.0.1:9", 1)), acme.Version); err != nil {
		t.Fatal(err)
	}
	run(t, tb, "restore ACME CORP's version 1", chromedp.Navigate(e.page("/partners/ACME%20CORP")), chromedp.WaitVisible(chromedp.CSS("#restore-1")),
		submit("#restore-1"), chromedp.WaitVisible(chromedp.CSS("#confirm")), submit("#confirm"), chromedp.WaitVisible(chromedp.CSS("#profile")))
	if sp, _ := e.st.Partner(e.ctx, "ACME CORP"); sp.Version != 3 || !strings.Contains(sp.Spec, "127.0.0.1:1/") {
		t.Errorf("ACME CORP after the restore: version %d\n%s", sp.Version, sp.Spec)
	}

	noErrors(t, tb)

	// A delete confirmed on a version someone changed meanwhile.
	run(t, tb, "ask to delete ACME CORP", submit("#delete"), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	sp, _ := e.st.Partner(e.ctx, "ACME CORP")
	if _, err := e.svc.Put(e.ctx, "someone else", []byte(strings.Replace(sp.Spec, "127.0.0.1:1", "127.0.0.1:8", 1)), sp.Version); err != nil {
		t.Fatal(err)
	}
	run(t, tb, "confirm the stale delete", submit("#confirm"), chromedp.WaitVisible(chromedp.CSS(".error")))
	if got := text(t, tb, ".error"); !strings.Contains(got, "Someone changed ACME CORP") {
		t.Errorf("stale delete: %q", got)
	}
	if _, err := e.st.Partner(e.ctx, "ACME CORP"); err != nil {
		t.Errorf("ACME CORP after a stale delete: %v", err)
	}
	for action, n := range map[string]int{"partner.create": 1, "partner.delete": 1, "partner.restore": 2} {
		if recs := e.auditOf(action); len(recs) != n || recs[0].Actor != "user:ada" {
			t.Errorf("audit of %s: %+v, want %d by user:ada", action, recs, n)
		}
	}

	e.addUser("olga", auth.RoleOperator)
	tb = tab(t)
	e.login(t, tb, "olga")
	for _, tt := range []struct{ method, path string }{
		{http.MethodGet, "/console/new-partner"}, {http.MethodPost, "/console/partners"},
		{http.MethodGet, "/console/partners/GLOBEX/delete"}, {http.MethodPost, "/console/partners/GLOBEX/delete"},
		{http.MethodGet, "/console/partners/GLOBEX/restore?version=1"}, {http.MethodPost, "/console/partners/GLOBEX/restore"},
	} {
		if got := fetchStatus(t, tb, tt.method, tt.path); got != http.StatusForbidden {
			t.Errorf("%s %s as an operator = %d, want 403", tt.method, tt.path, got)
		}
	}
	run(t, tb, "open the partners", chromedp.Navigate(e.page("/partners/GLOBEX")), chromedp.WaitVisible(chromedp.CSS("#history")))
	if n := eval[int](t, tb, `document.querySelectorAll("#new-partner, #delete, [id^=restore-]").length`); n != 0 {
		t.Errorf("an operator's partner page has %d create, delete or restore controls", n)
	}
}
