package config

import (
	"errors"
	"testing"
)

// TestLoadAS2Restart: receiving with restart is on unless a partner's
// profile turns it off, sending with it only when set to true, and a
// value that is not a boolean fails with the field named.
func TestLoadAS2Restart(t *testing.T) {
	const head = "station: {as2_id: EDIHUB, private_key: station.key, certificate: station.crt}\npartners:\n  - as2_id: P\n    url: https://p.example/as2\n    certificate: acme.crt\n"
	for _, tt := range []struct {
		give       string
		want, send bool
	}{
		{"", true, false},
		{"    as2_restart: true\n", true, true},
		{"    as2_restart: false\n", false, false},
	} {
		f := newFixture(t)
		got, err := f.load(head + tt.give)
		if err != nil {
			t.Fatalf("Load(%q): %v", tt.give, err)
		}
		if p := got.Partners[0]; p.AS2Restart != tt.want || p.AS2RestartSend != tt.send {
			t.Errorf("Load(%q): AS2Restart = %v, AS2RestartSend = %v; want %v, %v", tt.give, p.AS2Restart, p.AS2RestartSend, tt.want, tt.send)
		}
	}
	f := newFixture(t)
	_, err := f.load(head + "    as2_restart: sometimes\n")
	var ce *Error
	if !errors.As(err, &ce) || ce.Field != "partners[0].as2_restart" {
		t.Errorf("Load(as2_restart: sometimes) = %v, want an error for partners[0].as2_restart", err)
	}
}
