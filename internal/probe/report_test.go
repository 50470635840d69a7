package probe_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/probe"
)

// failedReport is a report as Run makes it for a partner that refuses the
// connection.
var failedReport = probe.Report{
	Partner:   "ACME CORP",
	URL:       "https://as2.acme.example/as2",
	MessageID: "<4f0c@EDIHUB>",
	Started:   time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
	Notes:     []string{"the profile asks for asynchronous MDNs; this test asks for a synchronous signed MDN"},
	Steps: []probe.Step{
		{Name: probe.StepMessage, OK: true, Duration: 2 * time.Millisecond, Detail: "signed sha-256"},
		{Name: probe.StepDNS, OK: true, Duration: 1500 * time.Microsecond, Detail: "as2.acme.example resolved to 192.0.2.10"},
		{Name: probe.StepConnect, Duration: 11 * time.Millisecond, Detail: "connection to 192.0.2.10:443 refused", Fix: "check the port in url"},
	},
}

// TestWriteText: one line per step with ok or FAIL, its duration and
// detail, the fix of the failed step indented below, and a verdict.
func TestWriteText(t *testing.T) {
	want := `Connectivity test of partner "ACME CORP" at https://as2.acme.example/as2
Message-ID <4f0c@EDIHUB>
note: the profile asks for asynchronous MDNs; this test asks for a synchronous signed MDN
ok    message     2ms  signed sha-256
ok    dns         2ms  as2.acme.example resolved to 192.0.2.10
FAIL  connect    11ms  connection to 192.0.2.10:443 refused
      fix: check the port in url
FAIL: connect
`
	if got := failedReport.Text(); got != want {
		t.Errorf("Text() =\n%s\nwant\n%s\ndiff (-want +got):\n%s", got, want, cmp.Diff(want, got))
	}
	ok := probe.Report{Partner: "ACME CORP", URL: "http://x/as2", OK: true, Steps: []probe.Step{{Name: probe.StepMIC, OK: true, Detail: "matches"}}}
	if got := ok.Text(); !strings.HasSuffix(got, "ok    mic       -  matches\nOK: the partner received the test message and confirmed it with a verified signed MDN\n") {
		t.Errorf("Text() of a passed test =\n%s", got)
	}
}

// TestReportJSON: the API's form, snake_case with durations in seconds,
// reads back into the same report.
func TestReportJSON(t *testing.T) {
	b, err := json.Marshal(failedReport)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"partner":"ACME CORP","url":"https://as2.acme.example/as2","message_id":"\u003c4f0c@EDIHUB\u003e","started":"2026-03-01T12:00:00Z","ok":false,` +
		`"notes":["the profile asks for asynchronous MDNs; this test asks for a synchronous signed MDN"],"steps":[` +
		`{"name":"message","ok":true,"duration_seconds":0.002,"detail":"signed sha-256"},` +
		`{"name":"dns","ok":true,"duration_seconds":0.0015,"detail":"as2.acme.example resolved to 192.0.2.10"},` +
		`{"name":"connect","ok":false,"duration_seconds":0.011,"detail":"connection to 192.0.2.10:443 refused","fix":"check the port in url"}]}`
	if string(b) != want {
		t.Errorf("json.Marshal =\n%s\nwant\n%s", b, want)
	}
	var back probe.Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(failedReport, back); d != "" {
		t.Errorf("report after a JSON round trip (-want +got):\n%s", d)
	}
}

// TestRunWithoutProfile: a missing profile is a failed first step, not a
// panic.
func TestRunWithoutProfile(t *testing.T) {
	r := probe.Run(context.Background(), probe.Options{})
	if f := r.Failed(); r.OK || f == nil || f.Name != probe.StepMessage || f.Fix == "" {
		t.Fatalf("Run without a partner = %+v, want a failed message step with a fix", r)
	}
}
