package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestLoadTransportAndTargetSettings: the per-partner settings of the AS2
// hardening load with their defaults, and each invalid value fails with
// the field named.
func TestLoadTransportAndTargetSettings(t *testing.T) {
	const head = "station: {as2_id: EDIHUB, private_key: station.key, certificate: station.crt}\npartners:\n  - as2_id: P\n    url: https://user:pw@p.example:8443/as2\n    certificate: acme.crt\n"
	t.Run("defaults", func(t *testing.T) {
		f := newFixture(t)
		got, err := f.load(head)
		if err != nil {
			t.Fatal(err)
		}
		p := got.Partners[0]
		if len(p.MDNHosts) != 1 || p.MDNHosts[0] != "p.example" || p.AllowPrivateMDNTargets || p.TLS == nil || p.TLS.MinVersion == 0 ||
			p.ReplayWindow != DefaultReplayWindow || p.RefuseReplays || p.BasicAuth != nil || p.RedactedURL() != "https://user:xxxxx@p.example:8443/as2" {
			t.Errorf("defaults: hosts %v, private %v, TLS %v, replay %s/%v, auth %v, redacted %q", p.MDNHosts, p.AllowPrivateMDNTargets, p.TLS != nil, p.ReplayWindow, p.RefuseReplays, p.BasicAuth, p.RedactedURL())
		}
		if len(got.Station.Keys) != 1 || !got.Station.Keys[0].Active {
			t.Errorf("station keys = %d, want the one active pair", len(got.Station.Keys))
		}
	})
	t.Run("set", func(t *testing.T) {
		f := newFixture(t)
		f.write("pw", []byte("secret\n"))
		got, err := f.load(head + "    mdn_hosts: [MDN.P.example, 10.0.0.7]\n    allow_private_mdn_targets: true\n    auth: {user: edi, password_file: pw}\n    headers: {x-api-key: k}\n    proxy: http://proxy.example:3128\n    replay_window: 1h\n    refuse_replays: true\n")
		if err != nil {
			t.Fatal(err)
		}
		p := got.Partners[0]
		if strings.Join(p.MDNHosts, ",") != "mdn.p.example,10.0.0.7" || p.BasicAuth.Password != "secret" || p.Headers.Get("X-Api-Key") != "k" ||
			p.Proxy.Host != "proxy.example:3128" || p.ReplayWindow != time.Hour || !p.RefuseReplays {
			t.Errorf("set: %+v", p)
		}
		if err := p.AllowsMDNTarget("http://10.0.0.7/mdn"); err != nil {
			t.Errorf("AllowsMDNTarget(listed private, allowed) = %v", err)
		}
		if err := p.AllowsMDNTarget("https://other.example/mdn"); !errors.Is(err, ErrMDNTarget) {
			t.Errorf("AllowsMDNTarget(unlisted) = %v, want ErrMDNTarget", err)
		}
	})
	tests := []struct{ name, give, field string }{
		{"mdn host with a path", "    mdn_hosts: [p.example/x]\n", "partners[0].mdn_hosts[0]"},
		{"auth without user", "    auth: {password_file: pw}\n", "partners[0].auth.user"},
		{"auth password file missing", "    auth: {user: u, password_file: nope}\n", "partners[0].auth.password_file"},
		{"header for AS2", "    headers: {AS2-To: x}\n", "partners[0].headers.AS2-To"},
		{"client certificate without key", "    tls: {cert_file: acme.crt}\n", "partners[0].tls"},
		{"CA file without PEM", "    tls: {ca_file: pw}\n", "partners[0].tls.ca_file"},
		{"negative replay window", "    replay_window: -1h\n", "partners[0].replay_window"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.write("pw", []byte("secret\n"))
			_, err := f.load(head + tt.give)
			var ce *Error
			if !errors.As(err, &ce) || ce.Field != tt.field || ce.Fix == "" {
				t.Errorf("Load(%q) = %v, want an error for %s with a fix", tt.give, err, tt.field)
			}
		})
	}
	t.Run("two active station keys", func(t *testing.T) {
		f := newFixture(t)
		_, err := f.load("station: {as2_id: EDIHUB, keys: [{private_key: station.key, certificate: station.crt, active: true}, {private_key: station.key, certificate: station.crt, active: true}]}\npartners: []\n")
		var ce *Error
		if !errors.As(err, &ce) || ce.Field != "station.keys" {
			t.Errorf("Load = %v, want an error for station.keys", err)
		}
	})
}
