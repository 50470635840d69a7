package console_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/console"
	"github.com/edihub/edihub/internal/leader"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/partners"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/probe"
	"github.com/edihub/edihub/internal/report"
	"github.com/edihub/edihub/internal/testenv"
	"github.com/edihub/edihub/internal/testenv/browser"
	"github.com/edihub/edihub/internal/testenv/devpki"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

var update = flag.Bool("update", false, "write the screenshots of docs/console")

// TestMain shares one PostgreSQL and one Chromium among the tests of the
// package, and checks that the console leaves no goroutine behind.
func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.CheckLeaks())) }

// lease is the leader lease of the tests.
const lease = "edihub-leader"

// leaderStatus is the elector status of the console's replica.
var leaderStatus = leader.Status{
	Identity: "edihub-0-7f3a", IsLeader: true, Holder: "edihub-0-7f3a", FencingToken: 7, Backend: "postgres", LeaseName: lease,
	Since: time.Date(2026, 3, 2, 6, 0, 0, 0, time.UTC),
	Workers: map[string]leader.WorkerStatus{
		"heartbeat":  {Running: true, LastSuccess: time.Date(2026, 3, 2, 9, 59, 58, 0, time.UTC)},
		"mdn-poller": {Running: true, LastSuccess: time.Date(2026, 3, 2, 9, 59, 50, 0, time.UTC)},
		"purger":     {Running: true, LastSuccess: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)},
		"report":     {Running: true, Restarts: 1},
	},
}

// cheap are argon2id parameters that keep the tests fast.
var cheap = auth.Params{Memory: 64, Time: 1, Threads: 1}

// password is every test user's password.
const password = "correct horse battery"

// env is a console on a database of its own, served over HTTP on
// loopback, as edihub serve mounts it.
type env struct {
	t     testing.TB
	ctx   context.Context
	st    *postgres.Store
	db    *pgx.Conn
	auth  *auth.Authenticator
	users *auth.Users
	c     *console.Console
	url   string // the server's, without /console
	cfg   *config.File
	svc   *partners.Service
}

// option changes the console's Options of a test; url is where the
// console's server listens (http://127.0.0.1:port).
type option func(o *console.Options, url string)

func newEnv(t testing.TB, opts ...option) *env {
	t.Helper()
	ctx := t.Context()
	dbURL := pgtest.URL(t)
	st, err := postgres.Open(ctx, dbURL, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	a, err := auth.New(auth.Options{Store: st, Auditor: st, Params: cheap, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	sdb := st.SessionDB()
	t.Cleanup(func() { _ = sdb.Close() })
	cfg, partnersDoc := writeConfig(t)
	svc := &partners.Service{Store: st, Base: func() *config.File { return cfg }, Now: time.Now}
	plan, err := svc.Plan(ctx, partnersDoc, cfg.Dir(), "partners.yaml", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Apply(ctx, "test", plan); err != nil {
		t.Fatal(err)
	}
	q, err := outbox.NewQueue(outbox.QueueOptions{Store: st, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	o := console.Options{
		Auth: a, Messages: st, SessionDB: sdb, Sessions: st, Auditor: st, Logger: log,
		Partners: func() []string { return []string{"ACME CORP", "GLOBEX"} },
		Queue:    q, Resender: st, Canceller: st, Reapplier: st, Interchanges: st,
		Hub: st, LeaseName: lease, Leader: func() leader.Status { return leaderStatus },
		PartnerStore: st, PartnerService: svc, Certificates: cfg.Certificates,
		Users: &auth.Users{Store: st, Params: cheap}, Audit: st,
		TestPartner: func(ctx context.Context, id string) (probe.Report, bool) {
			p, ok := cfg.Partner(id)
			if !ok {
				return probe.Report{}, false
			}
			return probe.Run(ctx, probe.Options{Station: *cfg.StationOf(p), Partner: p}), true
		},
		Reports: &report.Service{Store: st, Location: time.UTC, Now: time.Now,
			Builder: &report.Builder{Source: st, Station: "EDIHUB", Lease: lease, Partners: []string{"ACME CORP", "GLOBEX"}, Now: time.Now}},
	}
	mux := http.NewServeMux()
	srv := httptest.NewUnstartedServer(mux)
	srv.Start()
	t.Cleanup(srv.Close)
	for _, opt := range opts {
		opt(&o, srv.URL)
	}
	c, err := console.New(o)
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle(console.Prefix+"/", c)
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	e := &env{t: t, ctx: ctx, st: st, db: pgtest.Conn(t, dbURL), auth: a, users: &auth.Users{Store: st, Params: cheap}, c: c, url: srv.URL, cfg: cfg, svc: svc}
	return e
}

// writeConfig writes a station file with the partners ACME CORP and GLOBEX
// (keys and certificates of devpki) and loads it; partners is the file's
// partners, to store them.
func writeConfig(t testing.TB) (cfg *config.File, partners []byte) {
	t.Helper()
	dir := t.TempDir()
	write := func(name string) (keyPath, certPath string) {
		id, err := devpki.New(name, devpki.Options{})
		if err != nil {
			t.Fatal(err)
		}
		keyPath, certPath = filepath.Join(dir, name+".key"), filepath.Join(dir, name+".crt")
		if err := id.WriteFiles(keyPath, certPath); err != nil {
			t.Fatal(err)
		}
		return keyPath, certPath
	}
	sk, sc := write("station")
	_, pc := write("partner")
	ps := fmt.Sprintf(`partners:
  - {as2_id: "ACME CORP", url: "http://127.0.0.1:1/as2", certificate: %q, mdn: sync, mdn_signed: true, sign: sha-256}
  - {as2_id: "GLOBEX", url: "http://127.0.0.1:1/as2", certificate: %q, mdn: none}
`, pc, pc)
	y := fmt.Sprintf("station: {as2_id: EDIHUB, private_key: %q, certificate: %q}\n", sk, sc) + ps
	path := filepath.Join(dir, "edihub.yaml")
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg, []byte(ps)
}

// addUser adds a user with role and the test password.
func (e *env) addUser(name string, role auth.Role) postgres.User {
	e.t.Helper()
	u, err := e.users.Add(e.ctx, auth.Caller{Principal: auth.CLIPrincipal("test@host")}, name, role, password)
	if err != nil {
		e.t.Fatal(err)
	}
	return u
}

// exec runs SQL on the test database.
func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.db.Exec(e.ctx, sql, args...); err != nil {
		e.t.Fatalf("%s: %v", strings.Fields(sql)[0], err)
	}
}

// msg is a message to seed.
type msg struct {
	Direction, Partner, MessageID, Status, Filename, Error, Disposition string
	Payload                                                             string
	Created                                                             time.Time
	// Outbox adds the outbox row of an outbound message: its attempts,
	// last HTTP status and error.
	Attempts   int
	LastStatus int
	// MDN adds a stored MDN with this disposition.
	MDN         string
	MICVerified *bool
}

// seed stores m as the receiver or the dispatcher would have, and returns
// its id. A final status is set by an update, so that the trigger writes
// its event.
func (e *env) seed(m msg) int64 {
	e.t.Helper()
	if m.Created.IsZero() {
		m.Created = time.Now()
	}
	initial := m.Status
	if m.Direction == "outbound" {
		initial = "sending"
	}
	from, to := "EDIHUB", m.Partner
	if m.Direction == "inbound" {
		from, to = m.Partner, "EDIHUB"
	}
	var id int64
	err := e.db.QueryRow(e.ctx, `
INSERT INTO messages (direction, partner, as2_from, as2_to, message_id, status, content_type, filename, payload_size,
                      signed, encrypted, mic, mic_alg, mdn_mode, mdn_signed, attempts, created_at, updated_at, completed_at)
VALUES ($1, $2, $3, $4, $5, $6, 'application/edi-x12', $7, $8, true, true, 'pMf1Sb0Mr6cpjDmvRsyhlnIyhmzjmJafZL1JY2uFBgo=, sha-256', 'sha-256',
        'sync', true, 1, $9, $9, CASE WHEN $6 = 'processed' THEN $9::timestamptz END)
RETURNING id`, m.Direction, m.Partner, from, to, m.MessageID, initial, m.Filename, len(m.Payload), m.Created).Scan(&id)
	if err != nil {
		e.t.Fatalf("seed message: %v", err)
	}
	e.exec(`INSERT INTO payloads (message_id, data) VALUES ($1, $2)`, id, []byte(m.Payload))
	if m.Direction == "outbound" {
		var last *int
		if m.LastStatus != 0 {
			last = &m.LastStatus
		}
		state := "done"
		if m.Status == "failed" {
			state = "failed"
		}
		if m.Status == "retrying" || m.Status == "queued" || m.Status == "sending" {
			state = "pending"
		}
		e.exec(`
INSERT INTO outbox (kind, message_id, partner, url, headers, body, status, attempts, max_attempts, last_status, last_error,
                    last_attempt_at, finished_at, built_at, created_at)
VALUES ('message', $1, $2, 'https://as2.example/as2', '{}', 'built bytes', $3, $4, 8, $5, $6, $7::timestamptz,
        CASE WHEN $3 <> 'pending' THEN $7::timestamptz END, $8, $8)`,
			id, m.Partner, state, max(m.Attempts, 1), last, m.Error, m.Created.Add(time.Minute), m.Created)
		// One row per attempt, as the dispatcher writes them: the last
		// with the message's outcome.
		for k := 1; k <= max(m.Attempts, 1); k++ {
			outcome, status, errText := "retrying", m.LastStatus, m.Error
			if k == max(m.Attempts, 1) {
				switch m.Status {
				case "failed":
					outcome = "failed"
				case "delivered", "sent", "awaiting-mdn":
					outcome = "done"
				}
			}
			if m.Status == "queued" {
				break
			}
			e.exec(`INSERT INTO message_attempts (message_id, attempt, replica, at, http_status, outcome, error)
VALUES ($1, $2, 'edihub-0-7f3a', $3, nullif($4, 0), $5, $6)`, id, k, m.Created.Add(time.Duration(k)*time.Minute), status, outcome, errText)
		}
		if m.Status != initial {
			e.exec(`UPDATE messages SET status = $2, error = $3, disposition = $4, attempts = $5, mic_verified = $6, updated_at = $7,
       completed_at = CASE WHEN $2 IN ('delivered', 'failed', 'sent') THEN $7::timestamptz END WHERE id = $1`,
				id, m.Status, m.Error, m.Disposition, max(m.Attempts, 1), m.MICVerified, m.Created.Add(time.Minute))
		}
	}
	// The trigger dated the events now: date them as the message.
	e.exec(`UPDATE events SET created_at = $2 WHERE message = $1`, id, m.Created.Add(time.Minute))
	if m.MDN != "" {
		e.exec(`INSERT INTO mdns (message_id, content_type, headers, body, disposition, mic, signed, created_at)
VALUES ($1, 'multipart/signed; protocol="application/pkcs7-signature"', '{}', 'raw MDN bytes', $2,
        'pMf1Sb0Mr6cpjDmvRsyhlnIyhmzjmJafZL1JY2uFBgo=, sha-256', true, $3)`, id, m.MDN, m.Created.Add(time.Minute))
	}
	return id
}

// page is the console URL of path.
func (e *env) page(path string) string { return e.url + console.Prefix + path }

// tab opens a tab of the shared browser.
func tab(t *testing.T) context.Context {
	t.Helper()
	return browser.Start(t).NewTab(t)
}

// run runs chromedp actions in the tab, failing the test on an error
// with what the tab shows.
func run(t *testing.T, tab context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v; the tab shows %s", what, err, pageState(tab))
	}
}

// pageState says what the tab shows, for a failure: its URL, the HTTP
// status and title of the page, and the start of its text.
func pageState(tab context.Context) string {
	ctx, cancel := context.WithTimeout(tab, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
  const nav = performance.getEntriesByType("navigation")[0];
  const text = (document.body ? document.body.innerText : "").replace(/\s+/g, " ").trim().slice(0, 400);
  return location.href + " (HTTP " + ((nav && nav.responseStatus) || "?") + ", title " + JSON.stringify(document.title) + "): " + JSON.stringify(text);
})()`))
	if err != nil {
		return "nothing readable (" + err.Error() + ")"
	}
	return s
}

// loaded waits until the tab's document is loaded completely.
func loaded(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
	_, err := chromedp.Poll[bool](`document.readyState === "complete"`)(ctx, tg)
	return chromedp.Void{}, err
}

// expect fails t at once, with what the tab shows, unless the page the
// tab shows has an element sel: a page that went elsewhere is reported
// as such instead of waiting for sel until a timeout.
func expect(t *testing.T, tab context.Context, what, sel string) {
	t.Helper()
	if n := eval[int](t, tab, fmt.Sprintf("document.querySelectorAll(%q).length", sel)); n == 0 {
		t.Fatalf("%s: the page has no %s; the tab shows %s", what, sel, pageState(tab))
	}
}

// login signs name in through the sign-in page and waits for the page it
// lands on.
func (e *env) login(t *testing.T, tab context.Context, name string) {
	t.Helper()
	run(t, tab, "open the sign-in page", chromedp.Navigate(e.page("/login")))
	e.loginHere(t, tab, name)
}

// loginHere fills in and sends the sign-in form the tab shows.
func (e *env) loginHere(t *testing.T, tab context.Context, name string) {
	t.Helper()
	run(t, tab, "sign in as "+name,
		chromedp.WaitVisible(chromedp.CSS("#name")),
		chromedp.SetValue(chromedp.CSS("#name"), name),
		chromedp.SendKeys(chromedp.CSS("#password"), password),
		submit("#signin"),
		loaded,
	)
	expect(t, tab, "sign in as "+name, "#logout")
}

// loginFails sends the sign-in form with the test password and waits for
// the error it shows.
func (e *env) loginFails(t *testing.T, tab context.Context, name string) {
	t.Helper()
	run(t, tab, "sign in as "+name+", refused",
		chromedp.WaitVisible(chromedp.CSS("#name")),
		chromedp.SetValue(chromedp.CSS("#name"), name),
		chromedp.SendKeys(chromedp.CSS("#password"), password),
		submit("#signin"),
		loaded,
	)
	expect(t, tab, "sign in as "+name+", refused", "#login-error")
}

// submit clicks sel (a submit button or a link) and waits until the
// page it leads to is loaded: the old page is marked first, so that what
// is read next is never the page before.
func submit(sel string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		if _, err := chromedp.Evaluate[chromedp.Void](`document.documentElement.dataset.old = "1"`)(ctx, tg); err != nil {
			return chromedp.Void{}, err
		}
		if _, err := chromedp.Click(chromedp.CSS(sel))(ctx, tg); err != nil {
			return chromedp.Void{}, err
		}
		return chromedp.WaitReady(chromedp.CSS("html:not([data-old]) body"))(ctx, tg)
	}
}

// text is the text of the first element sel matches.
func text(t *testing.T, tab context.Context, sel string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 20*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t *testing.T, tab context.Context, js string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// location is the tab's URL path and query.
func location(t *testing.T, tab context.Context) string {
	t.Helper()
	u, err := chromedp.Run(tab, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// fetchStatus is the status the console answers to a request the page
// makes with fetch (same origin: the session cookie goes along).
func fetchStatus(t *testing.T, tab context.Context, method, url string) int {
	t.Helper()
	return eval[int](t, tab, fmt.Sprintf(`fetch(%q, {method: %q, redirect: "manual"}).then(r => r.status)`, url, method))
}

// checkPage runs the accessibility, keyboard and error checks of the
// browser wing on the page the tab shows: keyboard lists selectors that
// Tab must reach, in this order.
func checkPage(t *testing.T, tab context.Context, keyboard ...string) {
	t.Helper()
	problems, err := browser.CheckAccessibility(tab)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("accessibility: %v", p)
	}
	if keyboard == nil {
		keyboard = []string{}
	}
	problems, err = browser.CheckKeyboard(tab, keyboard)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("keyboard: %v", p)
	}
	noErrors(t, tab)
}

// noErrors fails t for every error the tab logged: console errors,
// exceptions, Content-Security-Policy violations, failed loads.
func noErrors(t *testing.T, tab context.Context) {
	t.Helper()
	errs, err := browser.Errors(tab)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range errs {
		t.Errorf("browser: %s", e)
	}
}
