package console_test

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/console"
)

// seedMillion stores the traffic of a busy hub: 1,000,000 messages of 50
// partners over about a year (most delivered or processed, one in a
// hundred failed, a few retrying or awaiting an MDN), their events, outbox
// rows and MDNs, 200,000 audit entries, 100,000 async MDNs and an hour of
// heartbeats; then ANALYZE.
func (e *env) seedMillion() {
	e.t.Helper()
	for _, q := range []string{
		`INSERT INTO messages (direction, partner, as2_from, as2_to, message_id, status, filename, payload_size, created_at, updated_at, completed_at, mdn_overdue)
SELECT CASE WHEN i % 2 = 0 THEN 'inbound' ELSE 'outbound' END, CASE WHEN i % 50 = 0 THEN 'ACME CORP' WHEN i % 50 = 1 THEN 'GLOBEX' ELSE 'P' || (i % 50) END,
       'A', 'B', '<m' || i || '@x>',
       CASE WHEN i % 2 = 0 THEN (CASE WHEN i % 500 = 0 THEN 'error' ELSE 'processed' END)
            WHEN i % 997 = 1 THEN 'retrying' WHEN i % 991 = 1 THEN 'awaiting-mdn' WHEN i % 101 = 1 THEN 'failed' ELSE 'delivered' END,
       'f' || i || '.edi', 1000, now() - (1000000 - i) * interval '31 seconds', now(), now() - (1000000 - i) * interval '31 seconds',
       i % 1993 = 1
  FROM generate_series(1, 1000000) i`,
		`INSERT INTO events (type, message, partner, direction, created_at)
SELECT CASE WHEN direction = 'inbound' THEN 'received' ELSE 'delivered' END, id, partner, direction, created_at FROM messages`,
		`INSERT INTO outbox (kind, message_id, partner, url, status, attempts, last_status, finished_at, next_attempt_at)
SELECT 'message', id, partner, 'http://x', CASE WHEN status IN ('retrying', 'awaiting-mdn') THEN 'pending' ELSE 'done' END, 1, 200,
       CASE WHEN status IN ('retrying', 'awaiting-mdn') THEN NULL ELSE created_at END, created_at
  FROM messages WHERE direction = 'outbound'`,
		`INSERT INTO mdns (message_id, content_type, body, disposition, created_at)
SELECT id, 'multipart/report', 'x', 'automatic-action/MDN-sent-automatically; processed', created_at FROM messages WHERE status IN ('delivered', 'processed')`,
		`INSERT INTO audit_log (at, actor, action, target)
SELECT now() - i * interval '1 minute', 'user:u' || (i % 20), (ARRAY['login', 'message.resend', 'partner.update', 'message.send'])[i % 4 + 1], 'T' || (i % 300)
  FROM generate_series(1, 200000) i`,
		`INSERT INTO mdn_inbox (content_type, body, state, received_at, processed_at)
SELECT 'multipart/report', 'x', CASE WHEN i % 200 = 0 THEN 'orphan' WHEN i % 1000 = 1 THEN 'pending' ELSE 'processed' END, now(),
       CASE WHEN i % 1000 = 1 THEN NULL ELSE now() END
  FROM generate_series(1, 100000) i`,
		`INSERT INTO leader_heartbeats (lease, token, holder, beat_at)
SELECT 'edihub-leader', 7, 'edihub-0-7f3a', now() - i * interval '1 second' FROM generate_series(1, 3600) i`,
		`ANALYZE`,
	} {
		e.exec(q)
	}
}

// BenchmarkPages serves the console's pages, as a signed-in admin, from a
// database of 1,000,000 messages, and reports each page's 95th percentile
// time (from the request to the last byte of the answer, through HTTP on
// loopback: the handler, its queries and the template). The seeding takes
// a few minutes; run it on its own:
//
//	go test -run '^$' -bench BenchmarkPages -benchtime 50x ./internal/console/
func BenchmarkPages(b *testing.B) {
	e := newEnv(b)
	e.addUser("ada", auth.RoleAdmin)
	began := time.Now()
	e.seedMillion()
	b.Logf("seeded 1,000,000 messages in %v", time.Since(began).Round(time.Second))

	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.PostForm(e.page("/login"), url.Values{"name": {"ada"}, "password": {password}})
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	var session *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == console.CookieName {
			session = c
		}
	}
	if resp.StatusCode != http.StatusSeeOther || session == nil {
		b.Fatalf("sign-in: %s, cookie %v", resp.Status, session)
	}
	day := time.Now().Add(-72 * time.Hour).Format("2006-01-02")
	// A hundred days a year back: about a quarter of the messages, under
	// three quarters of newer ones.
	oldFrom, oldTo := time.Now().Add(-400*24*time.Hour).Format("2006-01-02"), time.Now().Add(-300*24*time.Hour).Format("2006-01-02")
	pages := []struct{ name, path string }{
		{"messages", "/messages"},
		{"messages-page-100", "/messages?cursor=995000"},
		{"messages-partner-failed", "/messages?partner=ACME+CORP&status=failed"},
		{"messages-outbound-failed", "/messages?direction=outbound&status=failed"},
		{"messages-day", "/messages?since=" + day + "&until=" + day},
		{"messages-100-days-a-year-back", "/messages?since=" + oldFrom + "&until=" + oldTo},
		{"trace", "/messages/999001"},
		{"partners", "/partners"},
		{"partner", "/partners/ACME%20CORP"},
		{"hub", "/hub"},
		{"audit", "/audit"},
		{"audit-user", "/audit?actor=user%3Au3"},
	}
	get := func(path string) time.Duration {
		req, _ := http.NewRequest(http.MethodGet, e.page(path), nil)
		req.AddCookie(session)
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("GET %s = %s", path, resp.Status)
		}
		return took
	}
	var first []string
	for _, p := range pages { // warm the caches; the hub builds today's figures
		first = append(first, fmt.Sprintf("%s %.1f ms", p.name, ms(get(p.path))))
	}
	b.Logf("first requests: %s", strings.Join(first, ", "))
	times := make([][]time.Duration, len(pages))
	b.ResetTimer()
	for b.Loop() {
		for i, p := range pages {
			times[i] = append(times[i], get(p.path))
		}
	}
	b.StopTimer()
	var lines []string
	for i, p := range pages {
		ts := times[i]
		slices.Sort(ts)
		p95 := ts[min(len(ts)-1, (len(ts)*95+99)/100-1)]
		b.ReportMetric(float64(p95.Microseconds())/1000, "p95-ms/"+p.name)
		lines = append(lines, fmt.Sprintf("%-26s p50 %6.1f ms   p95 %6.1f ms", p.name, ms(ts[len(ts)/2]), ms(p95)))
	}
	b.Logf("pages with 1,000,000 messages, %d requests each:\n%s", len(times[0]), strings.Join(lines, "\n"))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
