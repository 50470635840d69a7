package chaos

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/mail"
	"os/exec"
	"path/filepath"
	"strings"
)

// checkReport: each stored report day was mailed exactly once, and the
// mailed figures (the CSV attachment, else the text part) equal a recount
// by edihub report from the database.
func (s *stack) checkReport(ctx context.Context, v *Verdict) error {
	rows, err := s.hubDB.Query(ctx, `SELECT day::text FROM reports ORDER BY day`)
	if err != nil {
		return fmt.Errorf("reports: %w", err)
	}
	var days []string
	var day string
	for rows.Next() {
		if err := rows.Scan(&day); err != nil {
			return err
		}
		days = append(days, day)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	v.ReportDays = len(days)
	byDay := map[string][][]byte{}
	for _, m := range s.mail.Mails() {
		v.ReportMails++
		msg, err := mail.ReadMessage(bytes.NewReader(m.Data))
		if err != nil {
			v.detail("unreadable report mail: %v", err)
			continue
		}
		id := msg.Header.Get("Message-Id")
		d, _, _ := strings.Cut(strings.TrimPrefix(strings.Trim(id, "<>"), "report-"), ".")
		byDay[d] = append(byDay[d], m.Data)
	}
	for _, d := range days {
		mails := byDay[d]
		if len(mails) != 1 {
			v.ReportDaysWrong++
			v.detail("report of %s mailed %d times", d, len(mails))
		}
		if len(mails) == 0 {
			continue
		}
		what, err := s.recount(ctx, d, mails[0])
		if err != nil {
			v.RecountMismatch++
			v.detail("report of %s: %v", d, err)
		}
		v.Recounted = what
	}
	return nil
}

// recount compares the mail's figures with edihub report -date day and
// says what it compared.
func (s *stack) recount(ctx context.Context, day string, raw []byte) (string, error) {
	format, mailed, err := figuresOf(raw)
	if err != nil {
		return "", err
	}
	what := fmt.Sprintf("%s, %d bytes", format, len(mailed))
	cmd := exec.CommandContext(ctx, s.o.Binary, "report", "-date", day, "-format", format)
	cmd.Env = []string{
		"EDIHUB_DATABASE_URL=" + s.db.URL(),
		"EDIHUB_CONFIG=" + filepath.Join(s.dir, "stations", "hub.yaml"),
		"EDIHUB_REPORT_TZ=UTC",
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	fresh, err := cmd.Output()
	if err != nil {
		return what, fmt.Errorf("edihub report: %s: %w", stderr.String(), err)
	}
	norm := func(b []byte) string { return strings.TrimSpace(strings.ReplaceAll(string(b), "\r\n", "\n")) }
	if norm(fresh) != norm(mailed) {
		return what, fmt.Errorf("mailed %s differs from the recount:\n%s\n---\n%s", format, norm(mailed), norm(fresh))
	}
	return what, nil
}

// figuresOf returns the mail's CSV attachment ("csv"), else its plain text
// part ("text"), decoded.
func figuresOf(raw []byte) (string, []byte, error) {
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return "", nil, err
	}
	parts := map[string][]byte{}
	if err := walk(msg.Header.Get("Content-Type"), msg.Header.Get("Content-Transfer-Encoding"), msg.Body, parts); err != nil {
		return "", nil, err
	}
	if b, ok := parts["text/csv"]; ok {
		return "csv", b, nil
	}
	if b, ok := parts["text/plain"]; ok {
		return "text", b, nil
	}
	return "", nil, fmt.Errorf("no text/csv or text/plain part in the report mail")
}

// walk collects the first decoded body of each media type below a MIME
// entity.
func walk(ctype, cte string, body io.Reader, parts map[string][]byte) error {
	mt, params, err := mime.ParseMediaType(ctype)
	if err != nil {
		return err
	}
	if strings.HasPrefix(mt, "multipart/") {
		mr := multipart.NewReader(body, params["boundary"])
		for {
			p, err := mr.NextRawPart()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if err := walk(p.Header.Get("Content-Type"), p.Header.Get("Content-Transfer-Encoding"), p, parts); err != nil {
				return err
			}
		}
	}
	switch strings.ToLower(cte) {
	case "base64":
		body = base64.NewDecoder(base64.StdEncoding, body)
	case "quoted-printable":
		body = quotedprintable.NewReader(body)
	}
	b, err := io.ReadAll(body)
	if err != nil {
		return err
	}
	if _, ok := parts[mt]; !ok {
		parts[mt] = b
	}
	return nil
}
