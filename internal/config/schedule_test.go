package config

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// twoStationsYAML lists the stations "EDIHUB" (station.key) and
// "EDIHUB B" (b.key, see stationsFixture), each with an async MDN URL.
const twoStationsYAML = `stations:
  - {as2_id: "EDIHUB", private_key: station.key, certificate: station.crt, async_mdn_url: https://a.example/as2}
  - {as2_id: "EDIHUB B", private_key: b.key, certificate: b.crt, async_mdn_url: https://b.example/as2}
`

// stationsFixture is newFixture with a second station key pair (b.key,
// b.crt, subject "EDIHUB B") and a third (c.key, c.crt, "EDIHUB C").
func stationsFixture(t testing.TB) *fixture {
	t.Helper()
	f := newFixture(t)
	f.write("b.key", pkcs8PEM(t, partnerKey))
	f.write("b.crt", certPEM(t, partnerKey, "EDIHUB B", validFrom, validUntil))
	f.write("c.key", pkcs1PEM(stationKey))
	f.write("c.crt", certPEM(t, stationKey, "EDIHUB C", validFrom, validUntil))
	return f
}

func TestLoadStations(t *testing.T) {
	t.Run("one station", func(t *testing.T) {
		f := stationsFixture(t)
		got, err := f.load(validYAML)
		if err != nil {
			t.Fatalf("Load(station:) = %v, want no error", err)
		}
		if len(got.Stations) != 1 || got.Stations[0].AS2ID != "EDIHUB" || got.Station.AS2ID != "EDIHUB" {
			t.Fatalf("Load(station:) Station = %q, Stations = %d; want EDIHUB, one station EDIHUB", got.Station.AS2ID, len(got.Stations))
		}
		p, _ := got.Partner("ACME CORP")
		if p.Station != "EDIHUB" {
			t.Errorf("Partner(ACME CORP).Station = %q, want the one station %q", p.Station, "EDIHUB")
		}
		if st := got.StationOf(p); st.AS2ID != "EDIHUB" || st.Certificate.Subject.CommonName != "EDIHUB" {
			t.Errorf("StationOf(ACME CORP) = %q (%v), want EDIHUB", st.AS2ID, st.Certificate.Subject)
		}
	})

	t.Run("several stations", func(t *testing.T) {
		f := stationsFixture(t)
		got, err := f.load(twoStationsYAML + `partners:
  - {as2_id: "ACME CORP", url: https://as2.acme.example/as2, certificate: acme.crt, mdn: async}
  - {as2_id: BETA, station: "EDIHUB B", url: https://as2.beta.example/as2, certificate: beta.crt, mdn: async}
`)
		if err != nil {
			t.Fatalf("Load(stations:) = %v, want no error", err)
		}
		var ids []string
		for _, st := range got.Stations {
			ids = append(ids, st.AS2ID+"="+st.Certificate.Subject.CommonName)
		}
		if diff := cmp.Diff([]string{"EDIHUB=EDIHUB", "EDIHUB B=EDIHUB B"}, ids); diff != "" {
			t.Errorf("Load(stations:) Stations (AS2 ID=certificate) mismatch (-want +got):\n%s", diff)
		}
		if got.Station.AS2ID != "EDIHUB" {
			t.Errorf("Load(stations:) Station = %q, want the first, %q", got.Station.AS2ID, "EDIHUB")
		}
		tests := []struct {
			partner, wantStation, wantCN, wantAsync string
		}{
			{partner: "ACME CORP", wantStation: "EDIHUB", wantCN: "EDIHUB", wantAsync: "https://a.example/as2"},
			{partner: "BETA", wantStation: "EDIHUB B", wantCN: "EDIHUB B", wantAsync: "https://b.example/as2"},
		}
		for _, tt := range tests {
			p, ok := got.Partner(tt.partner)
			if !ok {
				t.Fatalf("Partner(%q) = _, false", tt.partner)
			}
			if p.Station != tt.wantStation {
				t.Errorf("Partner(%q).Station = %q, want %q", tt.partner, p.Station, tt.wantStation)
			}
			st := got.StationOf(p)
			if st.AS2ID != tt.wantStation || st.Certificate.Subject.CommonName != tt.wantCN || st.PrivateKey == nil {
				t.Errorf("StationOf(%q) = %q signing with %q, want %q signing with %q", tt.partner, st.AS2ID, st.Certificate.Subject.CommonName, tt.wantStation, tt.wantCN)
			}
			// Each station's async_mdn_url is the default of its partners.
			if p.AsyncMDNURL != tt.wantAsync {
				t.Errorf("Partner(%q).AsyncMDNURL = %q, want its station's %q", tt.partner, p.AsyncMDNURL, tt.wantAsync)
			}
		}
		for _, tt := range []struct {
			give string
			want bool
		}{{"EDIHUB", true}, {"EDIHUB B", true}, {"edihub b", false}, {"ACME CORP", false}, {"", false}} {
			st, ok := got.StationByID(tt.give)
			if ok != tt.want || ok && st.AS2ID != tt.give {
				t.Errorf("StationByID(%q) = %v, %v; want ok=%v", tt.give, st, ok, tt.want)
			}
		}
		// The certificate list says whose each certificate is.
		var certs []string
		for _, c := range got.Certificates(testNow) {
			certs = append(certs, c.Owner+" "+c.Partner+" @"+c.Station)
		}
		want := []string{"station  @EDIHUB", "station  @EDIHUB B", "partner ACME CORP @EDIHUB", "partner BETA @EDIHUB B"}
		if diff := cmp.Diff(want, certs); diff != "" {
			t.Errorf("Certificates() owner/partner/station mismatch (-want +got):\n%s", diff)
		}
	})
}

func TestLoadStationsErrors(t *testing.T) {
	files := func(t testing.TB) map[string][]byte {
		testKeys(t)
		return map[string][]byte{
			"b.key": pkcs8PEM(t, partnerKey),
			"b.crt": certPEM(t, partnerKey, "EDIHUB B", validFrom, validUntil),
		}
	}(t)
	const acmeFlow = "  - {as2_id: \"ACME CORP\", url: https://as2.acme.example/as2, certificate: acme.crt"
	tests := []errorCase{
		{
			name: "station and stations", give: stationYAML + twoStationsYAML + acmeYAML, files: files,
			wantField: "stations", wantMsg: "station and stations are both set (fix: list every station under stations (the first is the partners' default) and remove station)",
		},
		{
			name: "duplicate station AS2 ID", files: files,
			give: `stations:
  - {as2_id: "EDIHUB", private_key: station.key, certificate: station.crt}
  - {as2_id: "EDIHUB", private_key: b.key, certificate: b.crt}
` + acmeYAML,
			wantField: "stations[1].as2_id", wantMsg: `AS2 ID "EDIHUB" is also the AS2 ID of stations[0] (fix: give each station its own AS2 ID)`,
		},
		{
			name: "unknown partner station lists the stations", give: twoStationsYAML + "partners:\n" + acmeFlow + ", station: EDIHUB C}\n", files: files,
			wantField: "partners[0].station", wantLine: 5,
			wantMsg: `no station "EDIHUB C" (fix: name one of the stations of the configuration file: "EDIHUB", "EDIHUB B" (or leave station out for the first))`,
		},
		{
			name: "partner station compared case-sensitively", give: twoStationsYAML + "partners:\n" + acmeFlow + ", station: edihub b}\n", files: files,
			wantField: "partners[0].station", wantMsg: `no station "edihub b"`,
		},
		{
			name: "partner AS2 ID is the second station's", files: files,
			give:      twoStationsYAML + "partners:\n  - {as2_id: \"EDIHUB B\", url: https://b.example/as2, certificate: acme.crt}\n",
			wantField: "partners[0].as2_id", wantMsg: `AS2 ID "EDIHUB B" is the station's own AS2 ID`,
		},
		{
			name: "partner of the second station with the first's AS2 ID", files: files,
			give:      twoStationsYAML + "partners:\n  - {as2_id: \"EDIHUB\", station: \"EDIHUB B\", url: https://b.example/as2, certificate: acme.crt}\n",
			wantField: "partners[0].as2_id", wantMsg: `AS2 ID "EDIHUB" is the station's own AS2 ID`,
		},
		{
			name: "second station without as2_id", files: files,
			give:      "stations:\n  - {as2_id: \"EDIHUB\", private_key: station.key, certificate: station.crt}\n  - {private_key: b.key, certificate: b.crt}\n" + acmeYAML,
			wantField: "stations[1].as2_id", wantMsg: "",
		},
		{
			name: "unknown key in a stations entry", files: files,
			give:      "stations:\n  - {as2_id: \"EDIHUB\", private_key: station.key, certificate: station.crt, asyn_mdn_url: x}\n" + acmeYAML,
			wantField: "stations[0].asyn_mdn_url", wantLine: 2, wantMsg: "async_mdn_url",
		},
	}
	runErrorCases(t, tests)
}

func TestLoadScheduleErrors(t *testing.T) {
	files := func(t testing.TB) map[string][]byte {
		testKeys(t)
		return map[string][]byte{
			"b.key":     pkcs8PEM(t, partnerKey),
			"b.crt":     certPEM(t, partnerKey, "EDIHUB B", validFrom, validUntil),
			"acme2.crt": certPEM(t, stationKey, "ACME 2027", validFrom, validUntil),
		}
	}(t)
	keysStation := func(second string) string {
		return "station:\n  as2_id: EDIHUB\n  keys:\n    - {private_key: station.key, certificate: station.crt, active: true}\n    - {private_key: b.key, certificate: b.crt" + second + "}\n"
	}
	certList := func(entries ...string) string {
		s := stationYAML + "partners:\n  - as2_id: \"ACME CORP\"\n    url: https://as2.acme.example/as2\n    certificates:\n"
		for _, e := range entries {
			s += "      - " + e + "\n"
		}
		return s
	}
	tests := []errorCase{
		{
			name: "bad not_before_use on a station key", files: files, give: keysStation(", not_before_use: next week") + acmeYAML,
			wantField: "station.keys[1].not_before_use", wantMsg: `"next week" is not a time (fix: write an RFC 3339 time like 2027-01-15T06:00:00Z, or a date like 2027-01-15 (midnight UTC))`,
		},
		{
			name: "time without a zone", files: files, give: keysStation(", not_before_use: 2027-01-15T06:00:00") + acmeYAML,
			wantField: "station.keys[1].not_before_use", wantMsg: `"2027-01-15T06:00:00" is not a time`,
		},
		{
			name: "active and not_before_use on one key", files: files, give: keysStation(", active: true, not_before_use: 2027-01-15") + acmeYAML,
			wantField: "station.keys[1].not_before_use", wantMsg: "a key pair with not_before_use is also marked active: true (fix: remove active: true from it",
		},
		{
			name: "active and not_before_use in the second station", files: files,
			give: "stations:\n  - {as2_id: EDIHUB, private_key: station.key, certificate: station.crt}\n  - as2_id: EDIHUB B\n    keys:\n" +
				"      - {private_key: b.key, certificate: b.crt, active: true}\n      - {private_key: station.key, certificate: station.crt, active: true, not_before_use: 2027-01-15}\n" + acmeYAML,
			wantField: "stations[1].keys[1].not_before_use", wantMsg: "also marked active: true",
		},
		{
			name: "only a scheduled key", files: files,
			give:      "station:\n  as2_id: EDIHUB\n  keys:\n    - {private_key: station.key, certificate: station.crt, not_before_use: 2026-01-01}\n" + acmeYAML,
			wantField: "station.keys", wantMsg: "0 key pairs are marked active: true",
		},
		{
			name: "unknown key in a station key pair", files: files, give: keysStation(", not_before: 2027-01-15") + acmeYAML,
			wantField: "station.keys[1].not_before", wantMsg: "not_before_use",
		},
		{
			name: "bad not_before_use on a partner certificate", files: files,
			give:      certList("{certificate: acme.crt}", "{certificate: acme2.crt, not_before_use: 2027-13-01}"),
			wantField: "partners[0].certificates[1].not_before_use", wantLine: 7, wantMsg: `"2027-13-01" is not a time`,
		},
		{
			name: "certificate and certificates", files: files,
			give:      acmeWith("certificates: [{certificate: acme2.crt, not_before_use: 2027-01-15}]"),
			wantField: "partners[0].certificates", wantMsg: "certificate and certificates are both set (fix: list every certificate under certificates (each with its schedule) and remove certificate)",
		},
		{
			name: "missing file in certificates", files: files,
			give:      certList("{certificate: acme.crt}", "{certificate: nope.crt}"),
			wantField: "partners[0].certificates[1].certificate", wantMsg: "nope.crt",
		},
		{
			name: "unknown key in a certificates entry", files: files,
			give:      certList("{certificate: acme.crt, switch_on_first: true}"),
			wantField: "partners[0].certificates[0].switch_on_first", wantMsg: "switch_on_first_use",
		},
	}
	runErrorCases(t, tests)
}

func TestLoadCertificatesList(t *testing.T) {
	f := stationsFixture(t)
	next := certPEM(t, stationKey, "ACME 2027", validFrom, validUntil)
	third := certPEM(t, stationKey, "ACME 2028", validFrom, validUntil)
	f.write("bundle.crt", append(certPEM(t, partnerKey, "ACME 2026 A", validFrom, validUntil), certPEM(t, partnerKey, "ACME 2026 B", validFrom, validUntil)...))
	give := stationYAML + `partners:
  - as2_id: "ACME CORP"
    url: https://as2.acme.example/as2
    certificates:
      - certificate: bundle.crt
      - certificate: |
` + indent(string(next), "          ") + `        not_before_use: 2026-07-01
      - certificate: ` + "\"" + strings.ReplaceAll(string(third), "\n", `\n`) + "\"" + `
        not_before_use: 2026-08-01T08:30:00+02:00
        switch_on_first_use: true
`
	got, err := f.load(give)
	if err != nil {
		t.Fatalf("Load(certificates list) = %v, want no error\n%s", err, give)
	}
	p, _ := got.Partner("ACME CORP")
	type entry struct {
		CN           string
		NotBeforeUse time.Time
		Switch       bool
	}
	var gotEntries []entry
	for i, c := range p.Certificates {
		e := entry{CN: c.Subject.CommonName}
		if i < len(p.Schedules) {
			e.NotBeforeUse, e.Switch = p.Schedules[i].NotBeforeUse, p.Schedules[i].SwitchOnFirstUse
		}
		gotEntries = append(gotEntries, e)
	}
	want := []entry{
		{CN: "ACME 2026 A"}, // a file of two certificates: both get its schedule
		{CN: "ACME 2026 B"},
		{CN: "ACME 2027", NotBeforeUse: time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)}, // a date: midnight UTC
		{CN: "ACME 2028", NotBeforeUse: time.Date(2026, 8, 1, 6, 30, 0, 0, time.UTC), Switch: true},
	}
	if diff := cmp.Diff(want, gotEntries, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
		t.Errorf("Load(certificates list) certificates and schedules mismatch (-want +got):\n%s", diff)
	}
	if len(p.Schedules) != len(p.Certificates) {
		t.Errorf("Load(certificates list): %d schedules for %d certificates, want one each", len(p.Schedules), len(p.Certificates))
	}
	for _, tt := range []struct {
		at   time.Time
		want string
	}{
		{at: testNow, want: "ACME 2026 A"},
		{at: time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC), want: "ACME 2027"},
		{at: time.Date(2026, 8, 1, 6, 30, 0, 0, time.UTC), want: "ACME 2028"},
	} {
		if c := p.EncryptionCertificate(tt.at); c.Subject.CommonName != tt.want {
			t.Errorf("EncryptionCertificate(%v) = %q, want %q", tt.at, c.Subject.CommonName, tt.want)
		}
	}
}

func indent(s, prefix string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if l != "" {
			b.WriteString(prefix + l)
		}
	}
	return b.String()
}

func TestEncryptionCertificateSchedule(t *testing.T) {
	day := func(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }
	cert := func(name string, from, until time.Time) *x509.Certificate {
		// Raw tells the certificates apart for Fingerprint and Equal.
		return &x509.Certificate{Raw: []byte(name), NotBefore: from, NotAfter: until, Subject: pkix.Name{CommonName: name}}
	}
	old := cert("old", day(2025, 1, 1), day(2027, 1, 1))
	next := cert("next", day(2026, 1, 1), day(2028, 1, 1))
	later := cert("later", day(2026, 1, 1), day(2028, 1, 1))
	expired := cert("expired", day(2020, 1, 1), day(2021, 1, 1))
	expiredLater := cert("expired-later", day(2020, 1, 1), day(2022, 1, 1))
	now := testNow
	soon := now.Add(time.Hour)
	none := CertificateSchedule{}
	from := func(t time.Time) CertificateSchedule { return CertificateSchedule{NotBeforeUse: t} }
	onUse := func(t time.Time) CertificateSchedule {
		return CertificateSchedule{NotBeforeUse: t, SwitchOnFirstUse: true}
	}
	usedAt := func(c *x509.Certificate, t time.Time) map[string]time.Time {
		return map[string]time.Time{Fingerprint(c): t}
	}
	tests := []struct {
		name  string
		certs []*x509.Certificate
		sched []CertificateSchedule
		uses  map[string]time.Time
		at    time.Time
		want  string
	}{
		// Without schedules: today's rule, the first valid.
		{name: "unscheduled: the first valid", certs: []*x509.Certificate{expired, old, next}, at: now, want: "old"},
		{name: "unscheduled with zero schedules: the first valid", certs: []*x509.Certificate{next, old}, sched: []CertificateSchedule{none, none}, at: now, want: "next"},
		// not_before_use.
		{name: "not_before_use in the future: not used", certs: []*x509.Certificate{old, next}, sched: []CertificateSchedule{none, from(soon)}, at: now, want: "old"},
		{name: "not_before_use in the future, listed first: not used", certs: []*x509.Certificate{next, old}, sched: []CertificateSchedule{from(soon), none}, at: now, want: "old"},
		{name: "at not_before_use", certs: []*x509.Certificate{old, next}, sched: []CertificateSchedule{none, from(soon)}, at: soon, want: "next"},
		{name: "a nanosecond before not_before_use", certs: []*x509.Certificate{old, next}, sched: []CertificateSchedule{none, from(soon)}, at: soon.Add(-1), want: "old"},
		{name: "after not_before_use", certs: []*x509.Certificate{old, next}, sched: []CertificateSchedule{none, from(soon)}, at: soon.Add(24 * time.Hour), want: "next"},
		{name: "after not_before_use, listed first", certs: []*x509.Certificate{next, old}, sched: []CertificateSchedule{from(soon), none}, at: soon, want: "next"},
		{name: "two passed: the later not_before_use", certs: []*x509.Certificate{later, next, old}, sched: []CertificateSchedule{from(now), from(now.Add(-time.Hour)), none}, at: now, want: "later"},
		{name: "two scheduled, one passed", certs: []*x509.Certificate{old, next, later}, sched: []CertificateSchedule{none, from(now.Add(-time.Hour)), from(soon)}, at: now, want: "next"},
		{name: "passed but expired: skipped", certs: []*x509.Certificate{old, expired}, sched: []CertificateSchedule{none, from(now.Add(-time.Hour))}, at: now, want: "old"},
		// switch_on_first_use.
		{name: "switch_on_first_use, not used yet", certs: []*x509.Certificate{old, next}, sched: []CertificateSchedule{none, onUse(soon)}, at: now, want: "old"},
		{name: "switch_on_first_use, used: before not_before_use", certs: []*x509.Certificate{old, next}, sched: []CertificateSchedule{none, onUse(soon)}, uses: usedAt(next, now.Add(-time.Minute)), at: now, want: "next"},
		{name: "switch_on_first_use, used at now", certs: []*x509.Certificate{old, next}, sched: []CertificateSchedule{none, onUse(soon)}, uses: usedAt(next, now), at: now, want: "next"},
		{name: "switch_on_first_use, use recorded after now", certs: []*x509.Certificate{old, next}, sched: []CertificateSchedule{none, onUse(soon)}, uses: usedAt(next, now.Add(time.Minute)), at: now, want: "old"},
		{name: "switch_on_first_use, used after not_before_use", certs: []*x509.Certificate{old, next}, sched: []CertificateSchedule{none, onUse(soon)}, uses: usedAt(next, soon.Add(time.Minute)), at: soon.Add(time.Hour), want: "next"},
		{name: "use of another certificate", certs: []*x509.Certificate{old, next}, sched: []CertificateSchedule{none, onUse(soon)}, uses: usedAt(old, now.Add(-time.Minute)), at: now, want: "old"},
		{name: "use of a certificate not switched on first use", certs: []*x509.Certificate{old, next}, sched: []CertificateSchedule{none, from(soon)}, uses: usedAt(next, now.Add(-time.Minute)), at: now, want: "old"},
		{name: "switch_on_first_use alone, used", certs: []*x509.Certificate{old, next}, sched: []CertificateSchedule{none, onUse(time.Time{})}, uses: usedAt(next, now.Add(-time.Minute)), at: now, want: "next"},
		{name: "switch_on_first_use alone, not used", certs: []*x509.Certificate{old, next}, sched: []CertificateSchedule{none, onUse(time.Time{})}, at: now, want: "old"},
		{name: "switch_on_first_use alone, not used, listed first", certs: []*x509.Certificate{next, old}, sched: []CertificateSchedule{onUse(time.Time{}), none}, at: now, want: "old"},
		// Nothing valid: the usable one that expires last.
		{name: "expired fallback", certs: []*x509.Certificate{expired, expiredLater}, at: now, want: "expired-later"},
		{name: "expired fallback skips one not usable yet", certs: []*x509.Certificate{expired, expiredLater}, sched: []CertificateSchedule{none, from(soon)}, at: now, want: "expired"},
		{name: "expired now, the scheduled one later", certs: []*x509.Certificate{expired, next}, sched: []CertificateSchedule{none, from(soon)}, at: soon, want: "next"},
		{name: "all scheduled for later: the first", certs: []*x509.Certificate{next, later}, sched: []CertificateSchedule{from(soon), from(soon)}, at: now, want: "next"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &Partner{Certificates: tt.certs, Schedules: tt.sched, CertificateUses: tt.uses}
			got := ""
			if c := p.EncryptionCertificate(tt.at); c != nil {
				got = c.Subject.CommonName
			}
			if got != tt.want {
				t.Errorf("EncryptionCertificate(%v) = %q, want %q", tt.at, got, tt.want)
			}
		})
	}
}

func TestStationAt(t *testing.T) {
	key := func(name string, active bool, notBeforeUse time.Time) StationKey {
		return StationKey{Certificate: &x509.Certificate{Subject: pkix.Name{CommonName: name}}, Active: active, NotBeforeUse: notBeforeUse}
	}
	t1 := testNow.Add(time.Hour)
	t2 := testNow.Add(48 * time.Hour)
	rollover := Station{AS2ID: "EDIHUB", Keys: []StationKey{key("k1", true, time.Time{}), key("k2", false, t1), key("k3", false, t2)}}
	scheduledFirst := Station{AS2ID: "EDIHUB", Keys: []StationKey{key("k2", false, t1), key("k1", true, time.Time{})}}
	tests := []struct {
		name     string
		st       Station
		at       time.Time
		want     string // the signer
		wantNext time.Time
	}{
		{name: "one key", st: Station{Keys: []StationKey{key("k1", true, time.Time{})}}, at: testNow, want: "k1"},
		{name: "before any not_before_use: the active", st: rollover, at: testNow, want: "k1", wantNext: t1},
		{name: "a nanosecond before", st: rollover, at: t1.Add(-1), want: "k1", wantNext: t1},
		{name: "at the first not_before_use", st: rollover, at: t1, want: "k2", wantNext: t2},
		{name: "between", st: rollover, at: t1.Add(time.Hour), want: "k2", wantNext: t2},
		{name: "at the second: the latest passed", st: rollover, at: t2, want: "k3"},
		{name: "long after", st: rollover, at: t2.Add(365 * 24 * time.Hour), want: "k3"},
		{name: "scheduled listed first, before", st: scheduledFirst, at: testNow, want: "k1", wantNext: t1},
		{name: "scheduled listed first, after", st: scheduledFirst, at: t1, want: "k2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.st.At(tt.at)
			if got.Certificate == nil || got.Certificate.Subject.CommonName != tt.want {
				t.Fatalf("At(%v).Certificate = %v, want %s", tt.at, got.Certificate, tt.want)
			}
			// Every pair still decrypts, the signer first and alone active.
			var names []string
			active := 0
			for _, k := range got.Keys {
				names = append(names, k.Certificate.Subject.CommonName)
				if k.Active {
					active++
				}
			}
			if len(got.Keys) != len(tt.st.Keys) || names[0] != tt.want || !got.Keys[0].Active || active != 1 {
				t.Errorf("At(%v).Keys = %v (%d active), want all %d, %s first and the only active", tt.at, names, active, len(tt.st.Keys), tt.want)
			}
			if got.AS2ID != tt.st.AS2ID {
				t.Errorf("At(%v).AS2ID = %q, want %q", tt.at, got.AS2ID, tt.st.AS2ID)
			}
			if next := tt.st.NextChange(tt.at); !next.Equal(tt.wantNext) {
				t.Errorf("NextChange(%v) = %v, want %v", tt.at, next, tt.wantNext)
			}
		})
	}
	// At leaves the station it was called on as it was: a snapshot taken
	// later starts from the configuration again.
	_ = rollover.At(t2)
	if !rollover.Keys[0].Active || rollover.Keys[2].Active {
		t.Errorf("At changed the keys of the station it was called on")
	}
}

func TestFileAt(t *testing.T) {
	f := stationsFixture(t)
	t1 := testNow.Add(2 * time.Hour)
	t2 := testNow.Add(time.Hour)
	got, err := f.load("stations:\n" +
		"  - as2_id: EDIHUB\n    keys:\n      - {private_key: station.key, certificate: station.crt, active: true}\n" +
		"      - {private_key: c.key, certificate: c.crt, not_before_use: " + t1.Format(time.RFC3339) + "}\n" +
		"  - as2_id: EDIHUB B\n    keys:\n      - {private_key: b.key, certificate: b.crt, active: true}\n" +
		"      - {private_key: station.key, certificate: station.crt, not_before_use: " + t2.Format(time.RFC3339) + "}\n" +
		acmeYAML)
	if err != nil {
		t.Fatalf("Load(scheduled station keys) = %v, want no error", err)
	}
	signers := func(f *File) string {
		var s []string
		for _, st := range f.Stations {
			s = append(s, st.AS2ID+"="+st.Certificate.Subject.CommonName)
		}
		return strings.Join(s, ", ") + "; Station=" + f.Station.AS2ID + "=" + f.Station.Certificate.Subject.CommonName
	}
	tests := []struct {
		at       time.Time
		want     string
		wantNext time.Time
	}{
		{at: testNow, want: "EDIHUB=EDIHUB, EDIHUB B=EDIHUB B; Station=EDIHUB=EDIHUB", wantNext: t2},
		{at: t2, want: "EDIHUB=EDIHUB, EDIHUB B=EDIHUB; Station=EDIHUB=EDIHUB", wantNext: t1},
		{at: t1, want: "EDIHUB=EDIHUB C, EDIHUB B=EDIHUB; Station=EDIHUB=EDIHUB C"},
	}
	if s := signers(got); s != tests[0].want {
		t.Errorf("Load at %v: signers %s, want %s", testNow, s, tests[0].want)
	}
	for _, tt := range tests {
		at := got.At(tt.at)
		if s := signers(at); s != tt.want {
			t.Errorf("At(%v): signers %s, want %s", tt.at, s, tt.want)
		}
		if next := got.NextChange(tt.at); !next.Equal(tt.wantNext) {
			t.Errorf("NextChange(%v) = %v, want %v", tt.at, next, tt.wantNext)
		}
		p, _ := at.Partner("ACME CORP")
		if st := at.StationOf(p); st.Certificate != at.Stations[0].Certificate {
			t.Errorf("At(%v).StationOf(ACME CORP) signs with %v, want the station's signer at that time", tt.at, st.Certificate.Subject)
		}
	}
	if s := signers(got); s != tests[0].want {
		t.Errorf("after At: the loaded file's signers %s, want them unchanged (%s)", s, tests[0].want)
	}
}
