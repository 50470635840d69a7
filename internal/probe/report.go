package probe

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Step names, in the order Run takes the steps. A report lists the steps
// that ran, up to and including the first that failed; a step that does not
// apply (tls for an http URL) is left out.
const (
	// StepMessage builds the test message (sign, compress, encrypt).
	StepMessage = "message"
	// StepDNS resolves the partner's host (the proxy's, through a proxy).
	StepDNS = "dns"
	// StepConnect opens the TCP connection (and a proxy's tunnel).
	StepConnect = "connect"
	// StepTLS is the TLS handshake and the server certificate check.
	StepTLS = "tls"
	// StepHTTP posts the message and reads the HTTP status.
	StepHTTP = "http"
	// StepMDN reads and parses the synchronous MDN in the response body
	// and checks that it answers the test message.
	StepMDN = "mdn"
	// StepSignature verifies the MDN's signature with the partner's
	// certificates.
	StepSignature = "mdn_signature"
	// StepDisposition checks the MDN's disposition.
	StepDisposition = "disposition"
	// StepMIC compares the MDN's Received-content-MIC with the MIC
	// computed when the message was built.
	StepMIC = "mic"
)

// Report is the outcome of one connectivity test. It holds no key,
// password, basic-auth credential, extra header value or payload byte; URLs
// are redacted. It marshals to JSON for the API (snake_case fields, step
// durations as duration_seconds) and back.
type Report struct {
	// Partner is the partner's AS2 ID.
	Partner string `json:"partner"`
	// URL is the partner's URL without its password.
	URL string `json:"url"`
	// MessageID is the test message's Message-ID, for the partner's logs;
	// empty when the message was not built.
	MessageID string `json:"message_id,omitempty"`
	// Started is when the test started.
	Started time.Time `json:"started"`
	// OK reports that every step succeeded: the partner received the test
	// message and confirmed it with a verified signed MDN with the right
	// MIC.
	OK bool `json:"ok"`
	// Notes are remarks about the profile that do not fail the test (an
	// unsigned profile, a plain http URL, an MDN mode other than sync, a
	// certificate about to expire).
	Notes []string `json:"notes,omitempty"`
	// Steps are the steps that ran, in order; the last one failed unless
	// OK.
	Steps []Step `json:"steps"`
}

// Step is one step of a connectivity test.
type Step struct {
	// Name is one of the Step* constants.
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Duration is how long the step took; zero for checks without I/O.
	Duration time.Duration `json:"-"`
	// Detail says what happened ("as2.acme.example resolved to
	// 192.0.2.10", "HTTP 401 Unauthorized").
	Detail string `json:"detail"`
	// Fix, on a failed step, is what a user can do about it, naming the
	// setting of the partner profile or what to ask the partner for.
	Fix string `json:"fix,omitempty"`
}

// stepJSON is Step on the wire: its duration in seconds, as edihub's other
// JSON durations.
type stepJSON struct {
	Name     string  `json:"name"`
	OK       bool    `json:"ok"`
	Duration float64 `json:"duration_seconds"`
	Detail   string  `json:"detail"`
	Fix      string  `json:"fix,omitempty"`
}

// MarshalJSON writes the step with its duration as duration_seconds.
func (s Step) MarshalJSON() ([]byte, error) {
	return json.Marshal(stepJSON{Name: s.Name, OK: s.OK, Duration: s.Duration.Seconds(), Detail: s.Detail, Fix: s.Fix})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *Step) UnmarshalJSON(b []byte) error {
	var j stepJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*s = Step{Name: j.Name, OK: j.OK, Duration: time.Duration(j.Duration * float64(time.Second)), Detail: j.Detail, Fix: j.Fix}
	return nil
}

// Failed returns the failed step, or nil when every step succeeded.
func (r *Report) Failed() *Step {
	for i := range r.Steps {
		if !r.Steps[i].OK {
			return &r.Steps[i]
		}
	}
	return nil
}

// Step returns the step called name, or nil when it did not run.
func (r *Report) Step(name string) *Step {
	for i := range r.Steps {
		if r.Steps[i].Name == name {
			return &r.Steps[i]
		}
	}
	return nil
}

// Text renders the report for a terminal; see WriteText.
func (r *Report) Text() string {
	var b strings.Builder
	_ = r.WriteText(&b)
	return b.String()
}

// WriteText writes the report for a terminal: a title, the notes, one line
// per step ("ok" or "FAIL", name, duration, detail) with the fix of a failed
// step indented below it, and a verdict:
//
//	Connectivity test of partner "ACME CORP" at https://as2.acme.example/as2
//	Message-ID <4f0c…@EDIHUB>
//	ok    message         2ms  signed sha-256, encrypted aes256-cbc …
//	ok    dns             1ms  as2.acme.example resolved to 192.0.2.10
//	FAIL  connect        11ms  connection to 192.0.2.10:443 refused
//	      fix: nothing listens on port 443 of as2.acme.example: …
//	FAIL: connect
//
// It returns the first write error.
func (r *Report) WriteText(w io.Writer) error {
	ew := &errWriter{w: w}
	ew.printf("Connectivity test of partner %q at %s\n", r.Partner, r.URL)
	if r.MessageID != "" {
		ew.printf("Message-ID %s\n", r.MessageID)
	}
	for _, n := range r.Notes {
		ew.printf("note: %s\n", n)
	}
	width := 0
	for _, s := range r.Steps {
		width = max(width, len(s.Name))
	}
	for _, s := range r.Steps {
		mark := "ok"
		if !s.OK {
			mark = "FAIL"
		}
		ew.printf("%-5s %-*s %7s  %s\n", mark, width, s.Name, roundDuration(s.Duration), s.Detail)
		if s.Fix != "" {
			ew.printf("      fix: %s\n", s.Fix)
		}
	}
	switch f := r.Failed(); {
	case r.OK:
		ew.printf("OK: the partner received the test message and confirmed it with a verified signed MDN\n")
	case f != nil:
		ew.printf("FAIL: %s\n", f.Name)
	default:
		ew.printf("FAIL\n")
	}
	return ew.err
}

// roundDuration prints d to a precision that reads well in a column.
func roundDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}

// errWriter keeps the first write error and skips later writes.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}
