package report

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"net/url"
	"strconv"
	"strings"
	"time"

	gomail "github.com/wneessen/go-mail"
)

// SMTP is where and how report mails are sent.
type SMTP struct {
	// Host and Port of the server.
	Host string
	Port int
	// ImplicitTLS: smtps (TLS from the first byte); otherwise STARTTLS,
	// required unless NoTLS.
	ImplicitTLS bool
	// NoTLS sends in the clear (smtp://host:port?tls=none): only for a
	// local mail catcher.
	NoTLS bool
	// User authenticates when not empty, with Password.
	User, Password string
}

// ParseSMTPURL parses smtp://[user@]host[:port] (STARTTLS required;
// port 587 by default), smtps://[user@]host[:port] (implicit TLS; 465) or
// smtp://host:port?tls=none (no TLS, for a local catcher). A password in
// the URL is refused: it belongs in a file.
func ParseSMTPURL(s string) (SMTP, error) {
	u, err := url.Parse(s)
	if err != nil {
		return SMTP{}, errors.New("not a URL; want smtp://user@host:port or smtps://user@host:port")
	}
	var o SMTP
	switch u.Scheme {
	case "smtp":
		o.Port = 587
	case "smtps":
		o.ImplicitTLS, o.Port = true, 465
	default:
		return SMTP{}, fmt.Errorf("scheme %q; want smtp (STARTTLS) or smtps (implicit TLS)", u.Scheme)
	}
	if o.Host = u.Hostname(); o.Host == "" {
		return SMTP{}, errors.New("no host; want smtp://user@host:port")
	}
	if p := u.Port(); p != "" {
		if o.Port, err = strconv.Atoi(p); err != nil || o.Port <= 0 || o.Port > 65535 {
			return SMTP{}, fmt.Errorf("port %q is not a port number", p)
		}
	}
	if u.User != nil {
		if _, set := u.User.Password(); set {
			return SMTP{}, errors.New("the URL holds a password; put it in the password file instead")
		}
		o.User = u.User.Username()
	}
	q := u.Query()
	switch q.Get("tls") {
	case "":
	case "none":
		if o.ImplicitTLS {
			return SMTP{}, errors.New("smtps with tls=none; use smtp://host:port?tls=none for a server without TLS")
		}
		o.NoTLS = true
	default:
		return SMTP{}, fmt.Errorf("tls=%q; the only option is tls=none (no TLS, for a local mail catcher)", q.Get("tls"))
	}
	if u.Path != "" && u.Path != "/" {
		return SMTP{}, fmt.Errorf("path %q; want smtp://user@host:port", u.Path)
	}
	return o, nil
}

// ParseAddresses parses a comma-separated list of mail addresses.
func ParseAddresses(s string) ([]string, error) {
	list, err := mail.ParseAddressList(s)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(list))
	for i, a := range list {
		out[i] = a.String()
	}
	return out, nil
}

// MessageID is the Message-ID of day's report mail from station, without
// the angle brackets: the same for every sending of the day, so a repeat
// after a crash is recognisably the same mail. Characters of the station's
// AS2 name that a Message-ID cannot hold are percent-encoded.
func MessageID(station, day string) string {
	return "report-" + day + "." + escapeAtom(station) + "@edihub"
}

// escapeAtom keeps the RFC 5322 atext characters except '%' and
// percent-encodes the rest (dots too: a dot-atom may not hold two in a
// row).
func escapeAtom(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', strings.IndexByte("!#$&'*+-/=?^_`{|}~", c) >= 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	if b.Len() == 0 {
		return "station"
	}
	return b.String()
}

// Mailer sends report mails over SMTP.
type Mailer struct {
	smtp SMTP
	from string
	to   []string
	// tls is nil outside tests (the system roots verify the server).
	tls     *tls.Config
	timeout time.Duration
}

// MailerOptions configure NewMailer.
type MailerOptions struct {
	SMTP SMTP
	From string
	To   []string
	// TLSConfig replaces the default (system roots, server name = Host);
	// tests trust their own server with it.
	TLSConfig *tls.Config
	// Timeout bounds one SMTP exchange; default 1 min.
	Timeout time.Duration
}

// NewMailer validates o and returns a Mailer.
func NewMailer(o MailerOptions) (*Mailer, error) {
	if o.SMTP.Host == "" || o.SMTP.Port == 0 {
		return nil, errors.New("mailer: no SMTP server")
	}
	if _, err := mail.ParseAddress(o.From); err != nil {
		return nil, fmt.Errorf("mailer: sender %q: %w", o.From, err)
	}
	if len(o.To) == 0 {
		return nil, errors.New("mailer: no recipients")
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Minute
	}
	return &Mailer{smtp: o.SMTP, from: o.From, to: o.To, tls: o.TLSConfig, timeout: o.Timeout}, nil
}

// Mail is a composed report mail.
type Mail struct {
	// MessageID without angle brackets.
	MessageID string
	msg       *gomail.Msg
}

// Compose builds r's mail: a text part and its HTML alternative referring
// to the inline charts by Content-ID, and the partner table as a CSV
// attachment. date is the mail's Date.
func (m *Mailer) Compose(r *Report, messageID string, date time.Time) (*Mail, error) {
	msg := gomail.NewMsg(gomail.WithNoDefaultUserAgent())
	if err := msg.From(m.from); err != nil {
		return nil, fmt.Errorf("compose: sender: %w", err)
	}
	if err := msg.To(m.to...); err != nil {
		return nil, fmt.Errorf("compose: recipients: %w", err)
	}
	msg.Subject(r.Title())
	msg.SetMessageIDWithValue(messageID)
	msg.SetDateWithValue(date)
	msg.SetGenHeader("Auto-Submitted", "auto-generated")
	msg.SetGenHeader(gomail.HeaderXMailer, "edihub")
	msg.SetBodyString(gomail.TypeTextPlain, string(Text(r)))
	img := Images{}
	var vol, parts []byte
	var err error
	if !r.Empty() {
		if vol, err = VolumeChart(r); err != nil {
			return nil, err
		}
		if parts, err = PartnerChart(r); err != nil {
			return nil, err
		}
		img.Volume = "cid:" + VolumeCID
		if parts != nil {
			img.Partners = "cid:" + PartnersCID
		}
	}
	doc, err := HTML(r, img)
	if err != nil {
		return nil, err
	}
	msg.AddAlternativeString(gomail.TypeTextHTML, string(doc))
	for _, e := range []struct {
		cid string
		b   []byte
	}{{VolumeCID, vol}, {PartnersCID, parts}} {
		if e.b == nil {
			continue
		}
		if err := msg.EmbedReader(e.cid, bytes.NewReader(e.b), gomail.WithFileContentID(e.cid), gomail.WithFileContentType("image/png")); err != nil {
			return nil, fmt.Errorf("compose: chart: %w", err)
		}
	}
	c, err := CSV(r)
	if err != nil {
		return nil, err
	}
	if err := msg.AttachReader("edihub-report-"+r.Day+".csv", bytes.NewReader(c), gomail.WithFileContentType("text/csv")); err != nil {
		return nil, fmt.Errorf("compose: CSV: %w", err)
	}
	return &Mail{MessageID: messageID, msg: msg}, nil
}

// Send sends mail. It returns nil once the server accepted the mail's
// data: a failure after that (the RSET or QUIT that ends the session, a
// dropped connection) does not make the mail unsent, and a retry would
// deliver it twice. The error names its cause (see Cause) and never holds
// the password or the mail's content. A Mail is sent at most once: compose
// another for another attempt.
func (m *Mailer) Send(ctx context.Context, mail *Mail) error {
	if mail.msg.IsDelivered() {
		return &SendError{Cause: CauseConfig, Err: errors.New("this mail was sent already (compose it again)")}
	}
	opts := []gomail.Option{gomail.WithPort(m.smtp.Port), gomail.WithTimeout(m.timeout), gomail.WithHELO("edihub")}
	switch {
	case m.smtp.ImplicitTLS:
		opts = append(opts, gomail.WithSSL())
	case m.smtp.NoTLS:
		opts = append(opts, gomail.WithTLSPolicy(gomail.NoTLS))
	default:
		opts = append(opts, gomail.WithTLSPolicy(gomail.TLSMandatory))
	}
	tc := m.tls
	if tc == nil {
		tc = &tls.Config{ServerName: m.smtp.Host, MinVersion: tls.VersionTLS12}
	}
	opts = append(opts, gomail.WithTLSConfig(tc))
	if m.smtp.User != "" {
		opts = append(opts, gomail.WithSMTPAuth(gomail.SMTPAuthAutoDiscover),
			gomail.WithUsername(m.smtp.User), gomail.WithPassword(m.smtp.Password))
	}
	c, err := gomail.NewClient(m.smtp.Host, opts...)
	if err != nil {
		return &SendError{Cause: CauseConfig, Err: err}
	}
	if err := c.DialAndSendWithContext(ctx, mail.msg); err != nil && !mail.msg.IsDelivered() {
		return &SendError{Cause: cause(err), Err: err}
	}
	return nil
}

// Failure causes, the values of edihub_report_failures_total{cause}.
const (
	CauseConnect = "connect" // the server could not be reached
	CauseTLS     = "tls"     // TLS (or STARTTLS) failed
	CauseAuth    = "auth"    // the server refused the credentials
	CauseRefused = "refused" // the server refused the sender, a recipient or the data
	CauseConfig  = "config"  // the mail could not be set up
	CauseRender  = "render"  // the report could not be built or rendered
	CauseStore   = "store"   // the database refused or failed
)

// SendError is a failed Send.
type SendError struct {
	Cause string
	Err   error
}

func (e *SendError) Error() string { return "send report mail (" + e.Cause + "): " + e.Err.Error() }
func (e *SendError) Unwrap() error { return e.Err }

// Cause returns the failure cause of err: a SendError's, else CauseStore.
func Cause(err error) string {
	var se *SendError
	if errors.As(err, &se) {
		return se.Cause
	}
	return CauseStore
}

func cause(err error) string {
	var ne net.Error
	var te *tls.CertificateVerificationError
	var re tls.RecordHeaderError
	s := strings.ToLower(err.Error())
	switch {
	case errors.As(err, &te), errors.As(err, &re), strings.Contains(s, "tls"), strings.Contains(s, "x509"):
		return CauseTLS
	case strings.Contains(s, "auth"), strings.Contains(s, "535"):
		return CauseAuth
	case errors.As(err, &ne), strings.Contains(s, "dial"), strings.Contains(s, "connection refused"):
		return CauseConnect
	}
	return CauseRefused
}
