package console_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/testenv/browser"
)

// seedShowcase stores a morning of traffic with two partners: what the
// screenshots show.
func (e *env) seedShowcase(day time.Time) (failed int64) {
	e.t.Helper()
	ok := true
	at := func(h, m int) time.Time { return day.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute) }
	e.seed(msg{Direction: "inbound", Partner: "ACME CORP", MessageID: "<20260302.0712.4481@as2.acme.example>", Status: "processed", Filename: "po-4481.edi", Payload: "ISA*00*po 4481~", Created: at(7, 12), MDN: "automatic-action/MDN-sent-automatically; processed"})
	e.seed(msg{Direction: "outbound", Partner: "ACME CORP", MessageID: "<edihub-7f3a-000101@EDIHUB>", Status: "delivered", Filename: "invoice-5501.edi", Payload: "ISA*00*invoice 5501~", Created: at(7, 40), LastStatus: 200, MDN: "automatic-action/MDN-sent-automatically; processed", MICVerified: &ok})
	e.seed(msg{Direction: "inbound", Partner: "GLOBEX", MessageID: "<GLX-88213@globex.example>", Status: "processed", Filename: "asn-88213.xml", Payload: "<asn/>", Created: at(8, 5), MDN: "automatic-action/MDN-sent-automatically; processed"})
	failed = e.seed(msg{Direction: "outbound", Partner: "GLOBEX", MessageID: "<edihub-7f3a-000102@EDIHUB>", Status: "failed", Filename: "invoice-5502.edi", Payload: "ISA*00*invoice 5502~", Created: at(8, 30), Attempts: 8, LastStatus: 503, Error: "HTTP 503 Service Unavailable: the partner's server refused the message"})
	e.seed(msg{Direction: "outbound", Partner: "ACME CORP", MessageID: "<edihub-7f3a-000103@EDIHUB>", Status: "retrying", Filename: "invoice-5503.edi", Payload: "ISA*00*invoice 5503~", Created: at(9, 15), Attempts: 2, LastStatus: 502, Error: "HTTP 502 Bad Gateway"})
	e.seed(msg{Direction: "outbound", Partner: "ACME CORP", MessageID: "<edihub-7f3a-000104@EDIHUB>", Status: "delivered", Filename: "invoice-5504.edi", Payload: "ISA*00*invoice 5504~", Created: at(9, 45), LastStatus: 200, MDN: "automatic-action/MDN-sent-automatically; processed", MICVerified: &ok})
	return failed
}

// TestEveryPage opens every main page of the console as an admin, on a
// morning of traffic, and runs the browser wing's checks on each: labels,
// names, one h1, contrast, Tab reaching the page's controls in order with
// a visible focus, no console error and no Content-Security-Policy
// violation. With -update it writes the screenshots of docs/console.
func TestEveryPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addUser("ada", auth.RoleAdmin)
	e.addUser("olga", auth.RoleOperator)
	e.addUser("vera", auth.RoleViewer)
	day := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	failed := e.seedShowcase(day)
	e.seedHub(time.Now())

	tb := tab(t)
	shoot := func(name string) {
		t.Helper()
		if !*update {
			return
		}
		if err := browser.Screenshot(tb, filepath.Join("..", "..", "docs", "console", name+".png")); err != nil {
			t.Fatal(err)
		}
	}
	run(t, tb, "open the sign-in page", chromedp.Navigate(e.page("/login")), chromedp.WaitVisible(chromedp.CSS("#name")))
	checkPage(t, tb, "#name", "#password", "#signin")
	shoot("login")
	e.loginHere(t, tb, "ada")

	nav := []string{".skip", ".brand", `a[href="/console/messages"]`, `a[href="/console/send"]`, `a[href="/console/partners"]`, `a[href="/console/hub"]`,
		`a[href="/console/users"]`, `a[href="/console/audit"]`, `a[href="/console/tokens"]`, "#logout"}
	pages := []struct {
		name, path, wait string
		keyboard         []string
	}{
		{"messages", "/messages", "#messages", []string{"#q-partner", "#q-direction", "#q-status", "#q-since", "#q-until", "#q-message-id", "#q-filename", "#q-overdue", "#search", `#messages a`}},
		{"trace", fmt.Sprintf("/messages/%d", failed), "#attempts", []string{"#payload", "#resend"}},
		{"resend", fmt.Sprintf("/messages/%d/resend", failed), "#confirm", []string{"#confirm"}},
		{"send", "/send", "#partner", []string{"#partner", "#document", "#content-type", "#send"}},
		{"partners", "/partners", "#partners", []string{`a[href="/console/partners/ACME%20CORP"]`, `a[href="/console/partners/GLOBEX"]`}},
		{"partner", "/partners/ACME%20CORP", "#profile", []string{"#test", "#profile", "#save", "#delete"}},
		{"new-partner", "/new-partner", "#profile", []string{"#profile", "#create"}},
		{"hub", "/hub", "#replicas", []string{"#autorefresh", `a[href="/console/reports/today"]`}},
		{"report", "/reports/today", "iframe.report", []string{"#csv"}},
		{"users", "/users", "#users", []string{"#new-name", "#new-role", "#new-password-field", "#add-user"}},
		{"tokens", "/tokens", "#token-name", []string{"#token-name", "#token-role", "#token-expires", "#make-token"}},
		{"audit", "/audit", "#audit", []string{"#a-actor", "#a-action", "#a-target", "#a-since", "#a-until", "#audit-search"}},
		{"not-found", "/no-such-page", ".error", nil},
	}
	for _, p := range pages {
		t.Run(p.name, func(t *testing.T) {
			run(t, tb, "open "+p.path, chromedp.Navigate(e.page(p.path)), chromedp.WaitVisible(chromedp.CSS(p.wait)))
			if p.name == "not-found" {
				// Its answer, 404, is a failed load in the browser's log.
				problems, err := browser.CheckAccessibility(tb)
				if err != nil {
					t.Fatal(err)
				}
				for _, pr := range problems {
					t.Errorf("accessibility: %v", pr)
				}
				return
			}
			checkPage(t, tb, append(append([]string{}, nav...), p.keyboard...)...)
			switch p.name {
			case "messages", "trace", "partners", "partner", "hub", "audit":
				shoot(p.name)
			}
		})
	}
}
