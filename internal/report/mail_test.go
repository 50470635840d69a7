package report_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"image/png"
	"io"
	"mime"
	"mime/multipart"
	"net/mail"
	"strings"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/report"
)

// part is a leaf of a parsed MIME tree.
type part struct {
	path        string // content types from the root, "multipart/mixed/multipart/related/text/html"
	contentType string
	header      map[string][]string
	body        []byte
}

// walk flattens a MIME entity into its leaves.
func walk(t *testing.T, header map[string][]string, body io.Reader, path string) []part {
	t.Helper()
	get := func(k string) string {
		if v := header[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	ct, params, err := mime.ParseMediaType(get("Content-Type"))
	if err != nil {
		t.Fatalf("%s: Content-Type %q: %v", path, get("Content-Type"), err)
	}
	path += "/" + ct
	if strings.HasPrefix(ct, "multipart/") {
		var out []part
		mr := multipart.NewReader(body, params["boundary"])
		for {
			p, err := mr.NextRawPart()
			if err == io.EOF {
				return out
			}
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			out = append(out, walk(t, p.Header, p, path)...)
		}
	}
	b, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	switch strings.ToLower(get("Content-Transfer-Encoding")) {
	case "base64":
		if b, err = base64.StdEncoding.DecodeString(strings.NewReplacer("\r", "", "\n", "").Replace(string(b))); err != nil {
			t.Fatalf("%s: base64: %v", path, err)
		}
	case "quoted-printable":
		if b, err = io.ReadAll(qpReader(b)); err != nil {
			t.Fatalf("%s: quoted-printable: %v", path, err)
		}
	}
	return []part{{path: path, contentType: ct, header: header, body: b}}
}

// checkReportMail asserts the received mail's structure and returns its
// Message-ID.
func checkReportMail(t *testing.T, data []byte, day string) string {
	t.Helper()
	m, err := mail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("received mail does not parse: %v", err)
	}
	parts := walk(t, m.Header, m.Body, "")
	var html, text, csv, img []part
	for _, p := range parts {
		switch p.contentType {
		case "text/html":
			html = append(html, p)
		case "text/plain":
			text = append(text, p)
		case "text/csv":
			csv = append(csv, p)
		case "image/png":
			img = append(img, p)
		}
	}
	if len(html) != 1 || len(text) != 1 || len(csv) != 1 || len(img) != 2 {
		var paths []string
		for _, p := range parts {
			paths = append(paths, p.path)
		}
		t.Fatalf("mail parts %v; want one HTML, one text, one CSV and two PNG", paths)
	}
	if !strings.Contains(text[0].path, "multipart/alternative") || !strings.Contains(html[0].path, "multipart/alternative") {
		t.Errorf("text %s and HTML %s are not alternatives", text[0].path, html[0].path)
	}
	if !bytes.Contains(text[0].body, []byte("edihub daily report")) {
		t.Errorf("text part does not hold the report:\n%.300s", text[0].body)
	}
	for _, p := range img {
		cid := strings.Trim(p.header["Content-Id"][0], "<>")
		if !bytes.Contains(html[0].body, []byte(`src="cid:`+cid+`"`)) {
			t.Errorf("HTML does not refer to the inline image %q", cid)
		}
		if !strings.Contains(p.path, "multipart/related") {
			t.Errorf("image %s is not in multipart/related: %s", cid, p.path)
		}
		im, err := png.Decode(bytes.NewReader(p.body))
		if err != nil {
			t.Fatalf("image %s: %v", cid, err)
		}
		if sz := im.Bounds().Size(); sz.X != report.ChartWidth || sz.Y != report.ChartHeight {
			t.Errorf("image %s is %v, want %dx%d", cid, sz, report.ChartWidth, report.ChartHeight)
		}
	}
	if d := csv[0].header["Content-Disposition"]; len(d) == 0 || !strings.HasPrefix(d[0], "attachment") || !strings.Contains(d[0], "edihub-report-"+day+".csv") {
		t.Errorf("CSV Content-Disposition = %v, want an attachment named edihub-report-%s.csv", d, day)
	}
	if !bytes.HasPrefix(csv[0].body, []byte("day,partner,received,")) {
		t.Errorf("CSV starts %.40q", csv[0].body)
	}
	return m.Header.Get("Message-Id")
}

func TestMailOverSMTP(t *testing.T) {
	r := sampleReport(t)
	for _, scheme := range []string{"smtp", "smtps"} {
		t.Run(scheme, func(t *testing.T) {
			srv := newSMTPServer(t, scheme == "smtps")
			cfg, err := report.ParseSMTPURL(srv.url(scheme))
			if err != nil {
				t.Fatal(err)
			}
			cfg.Password = srv.password
			m, err := report.NewMailer(report.MailerOptions{SMTP: cfg, From: "edihub <edihub@hub.example>",
				To: []string{"ops@hub.example", "Manager <boss@hub.example>"}, TLSConfig: srv.clientTLS(), Timeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			id := report.MessageID("EDIHUB", r.Day)
			msg, err := m.Compose(r, id, time.Date(2026, 12, 1, 0, 15, 0, 0, time.UTC))
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Send(context.Background(), msg); err != nil {
				t.Fatalf("Send: %v", err)
			}
			got := srv.messages()
			if len(got) != 1 {
				t.Fatalf("server received %d mails, want 1", len(got))
			}
			if len(got[0].to) != 2 || got[0].from != "edihub@hub.example" {
				t.Errorf("envelope from %q to %v", got[0].from, got[0].to)
			}
			if mid := checkReportMail(t, got[0].data, r.Day); mid != "<report-2026-11-30.EDIHUB@edihub>" {
				t.Errorf("Message-ID = %q, want <report-2026-11-30.EDIHUB@edihub>", mid)
			}
		})
	}
}

func TestMailWrongPassword(t *testing.T) {
	r := sampleReport(t)
	srv := newSMTPServer(t, false)
	cfg, _ := report.ParseSMTPURL(srv.url("smtp"))
	cfg.Password = "wrong-password"
	m, err := report.NewMailer(report.MailerOptions{SMTP: cfg, From: "edihub@hub.example", To: []string{"ops@hub.example"}, TLSConfig: srv.clientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := m.Compose(r, report.MessageID("EDIHUB", r.Day), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	err = m.Send(context.Background(), msg)
	if err == nil || report.Cause(err) != report.CauseAuth {
		t.Fatalf("Send with a wrong password = %v (cause %q), want cause auth", err, report.Cause(err))
	}
	if strings.Contains(err.Error(), "wrong-password") {
		t.Errorf("the error shows the password: %v", err)
	}
}

func TestParseSMTPURL(t *testing.T) {
	tests := []struct {
		give    string
		want    report.SMTP
		wantErr bool
	}{
		{give: "smtp://mail.example:2525", want: report.SMTP{Host: "mail.example", Port: 2525}},
		{give: "smtp://reports@mail.example", want: report.SMTP{Host: "mail.example", Port: 587, User: "reports"}},
		{give: "smtps://a%40b@mail.example", want: report.SMTP{Host: "mail.example", Port: 465, ImplicitTLS: true, User: "a@b"}},
		{give: "smtp://localhost:1025?tls=none", want: report.SMTP{Host: "localhost", Port: 1025, NoTLS: true}},
		{give: "smtp://u:pw@mail.example", wantErr: true},
		{give: "http://mail.example", wantErr: true},
		{give: "smtps://mail.example?tls=none", wantErr: true},
		{give: "smtp://mail.example?tls=maybe", wantErr: true},
		{give: "smtp://:25", wantErr: true},
	}
	for _, tt := range tests {
		got, err := report.ParseSMTPURL(tt.give)
		if (err != nil) != tt.wantErr || (err == nil && got != tt.want) {
			t.Errorf("ParseSMTPURL(%q) = %+v, %v; want %+v, error %v", tt.give, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestMessageID(t *testing.T) {
	tests := []struct{ station, want string }{
		{"EDIHUB", "report-2026-11-30.EDIHUB@edihub"},
		{"ACME CORP", "report-2026-11-30.ACME%20CORP@edihub"},
		{`a.b"<c>@d%`, "report-2026-11-30.a%2Eb%22%3Cc%3E%40d%25@edihub"},
	}
	for _, tt := range tests {
		if got := report.MessageID(tt.station, "2026-11-30"); got != tt.want {
			t.Errorf("MessageID(%q) = %q, want %q", tt.station, got, tt.want)
		}
		if _, err := mail.ParseAddress("<" + report.MessageID(tt.station, "2026-11-30") + ">"); err != nil {
			t.Errorf("MessageID(%q) is not an addr-spec: %v", tt.station, err)
		}
	}
}
