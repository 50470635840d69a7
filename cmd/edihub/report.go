package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	// The report's time zones must resolve in images without a zone
	// database (distroless, scratch).
	_ "time/tzdata"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/leader"
	"github.com/edihub/edihub/internal/report"
)

// reportOptions are the end-of-day report's settings, shared by edihub
// serve (the leader's report worker) and edihub report.
type reportOptions struct {
	smtpURL      string
	passwordFile string
	from         string
	to           string
	at           string
	tz           string
	catchUpDays  int
}

func (o *reportOptions) flags(fs *flagSet) {
	fs.String(&o.smtpURL, "smtp-url", "", "SMTP server of the report mail (smtp:// with STARTTLS, or smtps://); empty: reports are stored, not mailed")
	fs.String(&o.passwordFile, "smtp-password-file", "", "file holding the SMTP password (trailing newline ignored); needed when the SMTP URL names a user")
	fs.String(&o.from, "report-from", "", "sender of the report mail, e.g. \"edihub <edihub@example.com>\"")
	fs.String(&o.to, "report-to", "", "recipients of the report mail, comma-separated")
	fs.String(&o.at, "report-at", "00:15", "local time (HH:MM in the report time zone) the previous day's report is mailed")
	fs.String(&o.tz, "report-tz", "UTC", "IANA time zone of the report's days, e.g. Europe/Berlin")
	fs.Int(&o.catchUpDays, "report-catchup-days", 7, "how many past days a leader reports when they were missed (no leader, SMTP down)")
}

// reportSettings are the validated settings.
type reportSettings struct {
	loc     *time.Location
	at      report.TimeOfDay
	catchUp int
	// mailer is nil when no SMTP URL is set.
	mailer *report.Mailer
}

func (o reportOptions) settings(readFile func(string) ([]byte, error)) (reportSettings, error) {
	var s reportSettings
	var err error
	if s.loc, err = time.LoadLocation(o.tz); err != nil || o.tz == "" || strings.EqualFold(o.tz, "local") {
		return s, fmt.Errorf("EDIHUB_REPORT_TZ (-report-tz) %q is not an IANA time zone; set it to a name such as Europe/Berlin or UTC", o.tz)
	}
	if s.at, err = report.ParseTimeOfDay(o.at); err != nil {
		return s, fmt.Errorf("EDIHUB_REPORT_AT (-report-at) %q is not a time of day; set it as HH:MM, e.g. 00:15", o.at)
	}
	if o.catchUpDays < 1 || o.catchUpDays > 366 {
		return s, fmt.Errorf("EDIHUB_REPORT_CATCHUP_DAYS (-report-catchup-days) must be between 1 and 366, got %d", o.catchUpDays)
	}
	s.catchUp = o.catchUpDays
	if o.smtpURL == "" {
		if o.to != "" || o.from != "" || o.passwordFile != "" {
			return s, errors.New("EDIHUB_REPORT_TO, EDIHUB_REPORT_FROM or EDIHUB_SMTP_PASSWORD_FILE is set but EDIHUB_SMTP_URL (-smtp-url) is not: set the SMTP server, e.g. smtp://reports@mail.example.com:587")
		}
		return s, nil
	}
	smtp, err := report.ParseSMTPURL(o.smtpURL)
	if err != nil {
		return s, fmt.Errorf("EDIHUB_SMTP_URL (-smtp-url) is invalid: %v", err)
	}
	if smtp.User != "" {
		if o.passwordFile == "" {
			return s, errors.New("EDIHUB_SMTP_URL names a user but EDIHUB_SMTP_PASSWORD_FILE (-smtp-password-file) is not set: point it at a file holding the password")
		}
		b, err := readFile(o.passwordFile)
		if err != nil {
			return s, fmt.Errorf("EDIHUB_SMTP_PASSWORD_FILE (-smtp-password-file): %w", err)
		}
		if smtp.Password = strings.TrimRight(string(b), "\r\n"); smtp.Password == "" {
			return s, fmt.Errorf("EDIHUB_SMTP_PASSWORD_FILE (-smtp-password-file) %s is empty", o.passwordFile)
		}
	}
	if o.from == "" {
		return s, errors.New("EDIHUB_REPORT_FROM (-report-from) is not set: the report mail needs a sender, e.g. edihub@example.com")
	}
	to, err := report.ParseAddresses(o.to)
	if err != nil || len(to) == 0 {
		return s, fmt.Errorf("EDIHUB_REPORT_TO (-report-to) %q is not a comma-separated list of mail addresses", o.to)
	}
	if s.mailer, err = report.NewMailer(report.MailerOptions{SMTP: smtp, From: o.from, To: to}); err != nil {
		return s, fmt.Errorf("EDIHUB_REPORT_FROM (-report-from) %q: %w", o.from, err)
	}
	return s, nil
}

// stationsOf lists the stations of cfg and tells each partner's.
func stationsOf(cfg *config.File) ([]string, func(string) string) {
	names := make([]string, 0, len(cfg.Stations))
	for _, st := range cfg.Stations {
		names = append(names, st.AS2ID)
	}
	return names, func(partner string) string {
		if p, ok := cfg.Partner(partner); ok {
			return cfg.StationOf(p).AS2ID
		}
		return ""
	}
}

// partnerNames lists the configured partners' AS2 IDs.
func partnerNames(cfg *config.File) []string {
	names := make([]string, 0, len(cfg.Partners))
	for _, p := range cfg.Partners {
		names = append(names, p.AS2ID)
	}
	return names
}

// reportBuilder builds the reports of the replica's station, for the
// partners configured at each build.
func (r *replica) reportBuilder() *report.Builder {
	return &report.Builder{Source: r.store, Station: r.cfg.Current().Station.AS2ID, Lease: r.o.leader.leaseName,
		PartnerNames: func() []string { return partnerNames(r.cfg.Current()) },
		Stations:     func() ([]string, func(string) string) { return stationsOf(r.cfg.Current()) }, Now: time.Now}
}

// newReportWorker builds the leader's report worker. Without an SMTP URL
// it stores the reports and mails none.
func newReportWorker(r *replica) (leader.Worker, error) {
	s := r.report
	o := report.WorkerOptions{
		Store:       r.store,
		Builder:     r.reportBuilder(),
		Holder:      r.identity,
		Location:    s.loc,
		At:          s.at,
		CatchUpDays: s.catchUp,
		Logger:      r.log,
		Registerer:  r.reg,
	}
	if s.mailer != nil {
		o.Sender = s.mailer
	}
	return report.NewWorker(o)
}

// reportFlags defines edihub report: render any day's report from the
// database, and mail it with -send.
func reportFlags(fs *flagSet) func(context.Context, *environment) error {
	var db stationDB
	var date, format, out, lease string
	var send, force bool
	var ro reportOptions
	db.flags(fs)
	fs.String(&lease, "lease-name", "edihub-leader", "name of the leader lease whose terms the report counts and whose fence a -send claims under")
	ro.flags(fs)
	fs.ActionString(&date, "date", "yesterday", "the day: YYYY-MM-DD, today or yesterday (in the report time zone)")
	fs.ActionString(&format, "format", "text", "output: html, text, csv, json or png (the hourly chart)")
	fs.ActionString(&out, "o", "", "write the report to this file instead of standard output")
	fs.ActionBool(&send, "send", false, "mail the report (a finished day through the same exactly-once claim as the leader; refused when already mailed)")
	fs.ActionBool(&force, "force", false, "with -send: mail even when the day was mailed or is claimed, under a new Message-ID, without touching the claim")
	return func(ctx context.Context, env *environment) error {
		if err := db.check(); err != nil {
			return err
		}
		if force && !send {
			return errors.New("report: -force only goes with -send")
		}
		s, err := ro.settings(os.ReadFile)
		if err != nil {
			return err
		}
		if send && s.mailer == nil {
			return errors.New("report -send: no SMTP server: set EDIHUB_SMTP_URL (-smtp-url), EDIHUB_REPORT_FROM and EDIHUB_REPORT_TO")
		}
		day, err := parseReportDate(date, time.Now(), s.loc)
		if err != nil {
			return err
		}
		cfg, store, err := db.open(ctx)
		if err != nil {
			return err
		}
		defer store.Close()
		b := &report.Builder{Source: store, Station: cfg.Station.AS2ID, Lease: lease, Partners: partnerNames(cfg), Now: time.Now,
			Stations: func() ([]string, func(string) string) { return stationsOf(cfg) }}
		r, err := report.Load(ctx, store, b, day)
		if err != nil {
			return err
		}
		if !send || out != "" || format != "text" {
			if err := writeReport(env.stdout, out, format, r); err != nil {
				return err
			}
		}
		if !send {
			return nil
		}
		by, err := reportSender()
		if err != nil {
			return err
		}
		res, err := report.SendManual(ctx, report.ManualOptions{Store: store, Builder: b, Sender: s.mailer, Lease: lease,
			By: by, Force: force, Now: time.Now}, day)
		if err != nil {
			return err
		}
		fmt.Fprintf(env.stderr, "report %s mailed: Message-ID <%s>%s\n", day, res.MessageID, res.Note)
		return nil
	}
}

// reportSender names this run of edihub report -send in the day's mail
// claim: the host, the process id and a random part. Two runs, on one host
// or one after another in one process, are two senders: one's fresh claim
// keeps the other from sending (a claim by the same name would be taken
// as its own retry, and both would mail).
func reportSender() (string, error) {
	h, err := os.Hostname()
	if err != nil {
		h = "unknown-host"
	}
	id, err := newIdentity(h + "-" + strconv.Itoa(os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("report -send: %w", err)
	}
	return "edihub report (" + id + ")", nil
}

// parseReportDate reads -date in loc.
func parseReportDate(s string, now time.Time, loc *time.Location) (report.Day, error) {
	switch s {
	case "today":
		return report.DayOf(now, loc), nil
	case "yesterday":
		return report.DayOf(now, loc).AddDays(-1), nil
	}
	d, err := report.ParseDay(s, loc)
	if err != nil {
		return d, fmt.Errorf("report: -date %q: want YYYY-MM-DD, today or yesterday", s)
	}
	return d, nil
}

// writeReport renders r in format to the file out, or to w.
func writeReport(w io.Writer, out, format string, r *report.Report) error {
	b, err := report.Format(r, format)
	if err != nil {
		return fmt.Errorf("report: -format: %w", err)
	}
	if out == "" {
		_, err = w.Write(b)
		return err
	}
	if err := os.WriteFile(out, b, 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}
