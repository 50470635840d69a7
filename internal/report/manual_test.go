package report_test

import (
	"context"
	"strings"
	"testing"

	"github.com/edihub/edihub/internal/report"
)

// TestSendManualUniqueMessageIDs: preliminary and forced mails sent within
// one second (the same clock reading) each get their own Message-ID, and
// none is the day's own.
func TestSendManualUniqueMessageIDs(t *testing.T) {
	srv := newSMTPServer(t, false)
	e := newEnv(t, firstTermNov20(mustLoad(t, "Europe/Berlin")), srv)
	o := report.ManualOptions{Store: e.st, Sender: e.mailer(), Lease: testLease, By: "operator", Now: e.clock.Now,
		Builder: &report.Builder{Source: e.st, Station: "EDIHUB", Lease: testLease, Partners: []string{"ACME CORP"}, Now: e.clock.Now}}
	tests := []struct {
		name    string
		day     report.Day
		force   bool
		variant string
	}{
		{"preliminary", report.DayOf(e.clock.Now(), e.loc), false, ".preliminary-"},
		{"forced", report.DayOf(e.clock.Now(), e.loc).AddDays(-1), true, ".resent-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(srv.messages())
			o.Force = tt.force
			var sent []string
			for range 2 {
				res, err := report.SendManual(context.Background(), o, tt.day)
				if err != nil {
					t.Fatalf("SendManual(%s) = %v", tt.day, err)
				}
				sent = append(sent, "<"+res.MessageID+">")
			}
			got := messageIDs(t, srv)[before:]
			if len(got) != 2 || got[0] != sent[0] || got[1] != sent[1] {
				t.Fatalf("mails %v, want %v", got, sent)
			}
			if got[0] == got[1] {
				t.Errorf("two %s mails within one second share Message-ID %s", tt.name, got[0])
			}
			for _, id := range got {
				if !strings.Contains(id, tt.variant) || id == "<"+report.MessageID("EDIHUB", tt.day.String())+">" {
					t.Errorf("Message-ID %s, want a %s variant, not the day's own", id, tt.variant)
				}
			}
		})
	}
}
