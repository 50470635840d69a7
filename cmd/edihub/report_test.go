package main

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"io"
	"net"
	"net/mail"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// catcher is a plain SMTP server (no TLS, no auth), like a local mail
// catcher, keeping every message.
type catcher struct {
	mu   sync.Mutex
	msgs [][]byte
}

func (c *catcher) NewSession(*smtp.Conn) (smtp.Session, error) { return &catcherSession{c: c}, nil }

type catcherSession struct{ c *catcher }

func (s *catcherSession) Mail(string, *smtp.MailOptions) error { return nil }
func (s *catcherSession) Rcpt(string, *smtp.RcptOptions) error { return nil }
func (s *catcherSession) Reset()                               {}
func (s *catcherSession) Logout() error                        { return nil }
func (s *catcherSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.c.mu.Lock()
	s.c.msgs = append(s.c.msgs, b)
	s.c.mu.Unlock()
	return nil
}

func (c *catcher) ids(t *testing.T) []string {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for _, b := range c.msgs {
		m, err := mail.ReadMessage(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.Header.Get("Message-Id"))
	}
	return ids
}

func startCatcher(t *testing.T) (*catcher, string) {
	t.Helper()
	c := &catcher{}
	srv := smtp.NewServer(c)
	srv.Domain = "localhost"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return c, "smtp://" + ln.Addr().String() + "?tls=none"
}

func TestReportCommand(t *testing.T) {
	dbURL := pgtest.URL(t)
	cfg := writeConfig(t, "")
	mails, smtpURL := startCatcher(t)
	getenv := env("EDIHUB_DATABASE_URL", dbURL, "EDIHUB_CONFIG", cfg, "EDIHUB_REPORT_TZ", "Europe/Berlin",
		"EDIHUB_SMTP_URL", smtpURL, "EDIHUB_REPORT_FROM", "edihub@hub.example", "EDIHUB_REPORT_TO", "a@hub.example, b@hub.example")
	doc := filepath.Join(t.TempDir(), "order.x12")
	if err := os.WriteFile(doc, []byte("ST*850*0001~\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, err := runCmd(t, getenv, "send", "-partner", "ACME CORP", doc); err != nil {
		t.Fatalf("edihub send = %v: %s", err, errOut)
	}

	out, errOut, err := runCmd(t, getenv, "report", "-date", "today", "-format", "json")
	if err != nil {
		t.Fatalf("edihub report = %v: %s", err, errOut)
	}
	var r struct {
		Preliminary bool   `json:"preliminary"`
		TimeZone    string `json:"time_zone"`
		Hub         struct {
			Sent int `json:"sent"`
		} `json:"hub"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || !r.Preliminary || r.Hub.Sent != 1 || r.TimeZone != "Europe/Berlin" {
		t.Fatalf("edihub report -format json: %+v, %v\n%s", r, err, out)
	}
	dir := t.TempDir()
	for _, f := range []string{"html", "text", "csv", "png"} {
		path := filepath.Join(dir, "report."+f)
		if _, errOut, err := runCmd(t, getenv, "report", "-date", "today", "-format", f, "-o", path); err != nil {
			t.Fatalf("edihub report -format %s = %v: %s", f, err, errOut)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		switch f {
		case "html":
			if !bytes.HasPrefix(b, []byte("<!DOCTYPE html>")) || !bytes.Contains(b, []byte("data:image/png;base64,")) {
				t.Errorf("HTML report: %.200s", b)
			}
		case "png":
			if _, err := png.Decode(bytes.NewReader(b)); err != nil {
				t.Errorf("PNG report: %v", err)
			}
		default:
			if !bytes.Contains(b, []byte("ACME CORP")) {
				t.Errorf("%s report does not name the partner: %.300s", f, b)
			}
		}
	}

	// Today is preliminary: mailed under its own Message-ID, claimed never.
	if _, errOut, err := runCmd(t, getenv, "report", "-date", "today", "-send"); err != nil || !strings.Contains(errOut, "preliminary") {
		t.Fatalf("report -date today -send = %v: %s", err, errOut)
	}
	// A finished day goes through the claim: once, then refused, then
	// forced under a new Message-ID.
	if _, errOut, err := runCmd(t, getenv, "report", "-date", "2026-11-30", "-send"); err != nil {
		t.Fatalf("report -date 2026-11-30 -send = %v: %s", err, errOut)
	}
	if _, _, err := runCmd(t, getenv, "report", "-date", "2026-11-30", "-send"); err == nil || !strings.Contains(err.Error(), "already mailed") {
		t.Fatalf("a second -send = %v, want already mailed", err)
	}
	if _, errOut, err := runCmd(t, getenv, "report", "-date", "2026-11-30", "-send", "-force"); err != nil || !strings.Contains(errOut, "forced") {
		t.Fatalf("-send -force = %v: %s", err, errOut)
	}
	ids := mails.ids(t)
	if len(ids) != 3 || !strings.Contains(ids[0], ".preliminary-") || ids[1] != "<report-2026-11-30.EDIHUB@edihub>" || !strings.Contains(ids[2], ".resent-") {
		t.Fatalf("mails %v; want a preliminary one, the day's, a forced one", ids)
	}
	st, err := postgres.Open(context.Background(), dbURL, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	row, err := st.Report(context.Background(), "2026-11-30")
	if err != nil || row.MailedAt == nil || !strings.HasPrefix(row.MailClaimedBy, "edihub report") {
		t.Fatalf("row %+v, %v; want mailed by edihub report", row, err)
	}
	if _, err := st.Report(context.Background(), time.Now().Format(time.DateOnly)); err == nil {
		t.Error("the preliminary report of today was stored")
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"report", "-date", "30.11.2026"}, "-date"},
		{[]string{"report", "-format", "pdf"}, "-format"},
		{[]string{"report", "-force"}, "-force only goes with -send"},
	} {
		if _, _, err := runCmd(t, getenv, tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("edihub %v = %v, want an error mentioning %q", tt.args, err, tt.want)
		}
	}
	noSMTP := env("EDIHUB_DATABASE_URL", dbURL, "EDIHUB_CONFIG", cfg)
	if _, _, err := runCmd(t, noSMTP, "report", "-send"); err == nil || !strings.Contains(err.Error(), "EDIHUB_SMTP_URL") {
		t.Errorf("report -send without SMTP = %v, want it to name EDIHUB_SMTP_URL", err)
	}
}

// TestReportSendRunsAreSeparateSenders: a run of report -send that claimed
// a day and could not mail it (its SMTP server down) holds the claim; a
// second run on the same host is another sender and is refused while that
// claim is fresh, instead of taking it for its own retry and mailing too.
func TestReportSendRunsAreSeparateSenders(t *testing.T) {
	dbURL := pgtest.URL(t)
	cfg := writeConfig(t, "")
	mails, smtpURL := startCatcher(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	downURL := "smtp://" + ln.Addr().String() + "?tls=none"
	_ = ln.Close()
	getenv := func(smtpURL string) func(string) string {
		return env("EDIHUB_DATABASE_URL", dbURL, "EDIHUB_CONFIG", cfg, "EDIHUB_REPORT_TZ", "Europe/Berlin",
			"EDIHUB_SMTP_URL", smtpURL, "EDIHUB_REPORT_FROM", "edihub@hub.example", "EDIHUB_REPORT_TO", "a@hub.example")
	}
	if _, _, err := runCmd(t, getenv(downURL), "report", "-date", "2026-11-30", "-send"); err == nil {
		t.Fatal("report -send with the SMTP server down = nil error")
	}
	st, err := postgres.Open(context.Background(), dbURL, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	first, err := st.Report(context.Background(), "2026-11-30")
	if err != nil || first.MailClaimedBy == "" || first.MailedAt != nil {
		t.Fatalf("after the failed run: row claimed by %q, mailed %v, %v; want claimed, not mailed", first.MailClaimedBy, first.MailedAt, err)
	}
	_, _, err = runCmd(t, getenv(smtpURL), "report", "-date", "2026-11-30", "-send")
	if err == nil || !strings.Contains(err.Error(), "being sent by another sender") {
		t.Errorf("a second run while the first one's claim is fresh = %v, want refused (another sender)", err)
	}
	if ids := mails.ids(t); len(ids) != 0 {
		t.Errorf("mails %v, want none: the claim is another run's", ids)
	}
	if row, err := st.Report(context.Background(), "2026-11-30"); err != nil || row.MailClaimedBy != first.MailClaimedBy {
		t.Errorf("claim now by %q, %v; want still the first run's %q", row.MailClaimedBy, err, first.MailClaimedBy)
	}
	if !strings.Contains(first.MailClaimedBy, strconv.Itoa(os.Getpid())) {
		t.Errorf("claimed by %q, want the process id %d in it", first.MailClaimedBy, os.Getpid())
	}
}
