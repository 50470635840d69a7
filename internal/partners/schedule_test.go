package partners_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/partners"
	"github.com/edihub/edihub/internal/testenv/devpki"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// The next station key pair and ACME's next certificate, made once per
// test binary.
var (
	nextOnce                  sync.Once
	stationNextID, acmeNextID *devpki.Identity
	nextErr                   error
)

func nextIdentities(t testing.TB) {
	t.Helper()
	identities(t)
	nextOnce.Do(func() {
		if stationNextID, nextErr = devpki.New("EDIHUB NEXT", devpki.Options{}); nextErr != nil {
			return
		}
		acmeNextID, nextErr = devpki.New("ACME CORP NEXT", devpki.Options{})
	})
	if nextErr != nil {
		t.Fatalf("devpki: %v", nextErr)
	}
}

// TestLiveStationKeyStartsToSign: a station key pair whose not_before_use
// is a moment away becomes the signer of Current at that time, within a
// second, with no change in the database (Live arms a timer for it).
func TestLiveStationKeyStartsToSign(t *testing.T) {
	nextIdentities(t)
	st := pgtest.Store(t)
	dir := filepath.Dir(stationDir(t))
	if err := stationNextID.WriteFiles(filepath.Join(dir, "station-next.key"), filepath.Join(dir, "station-next.crt")); err != nil {
		t.Fatal(err)
	}
	const lead = 2 * time.Second
	at := time.Now().Add(lead)
	path := filepath.Join(dir, "edihub.yaml")
	writeFile(t, path, []byte(`station:
  as2_id: "EDIHUB"
  keys:
    - {private_key: station.key, certificate: station.crt, active: true}
    - {private_key: station-next.key, certificate: station-next.crt, not_before_use: "`+at.Format(time.RFC3339Nano)+`"}
partners:
`+acmeYAML))
	env := newLive(t, st, path, "replica-1", never, never)
	run(t, env.live)
	before := env.live.Current()
	if time.Now().After(at) {
		t.Fatalf("NewLive took more than %v: the test cannot see the key before its not_before_use", lead)
	}
	if !before.Station.Certificate.Equal(stationID.Cert) || len(before.Station.Keys) != 2 {
		t.Fatalf("Current() before not_before_use: station signs with %v (%d keys), want the active key pair, both pairs kept", before.Station.Certificate.Subject, len(before.Station.Keys))
	}
	historyBefore := len(history(t, st, ""))

	var switched time.Time
	for deadline := at.Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		cur := env.live.Current()
		if cur.Station.Certificate.Equal(stationNextID.Cert) {
			switched = time.Now()
			break
		}
	}
	if switched.IsZero() {
		t.Fatalf("Current().Station still signs with %v 5 s after not_before_use, want %v", env.live.Current().Station.Certificate.Subject, stationNextID.Cert.Subject)
	}
	delay := switched.Sub(at)
	t.Logf("the scheduled key pair signs %v after its not_before_use", delay.Round(time.Millisecond))
	if delay < 0 || delay >= time.Second {
		t.Errorf("the scheduled key pair signs %v after its not_before_use, want within [0, 1s)", delay)
	}
	cur := env.live.Current()
	if cur.Revision != before.Revision || len(history(t, st, "")) != historyBefore {
		t.Errorf("after the switch: revision %d, %d history entries; want %d and %d (no database change)", cur.Revision, len(history(t, st, "")), before.Revision, historyBefore)
	}
	// Both key pairs still decrypt, the new one first; the stations list
	// and the partner's station are the same snapshot's.
	if len(cur.Station.Keys) != 2 || !cur.Station.Keys[0].Certificate.Equal(stationNextID.Cert) || !cur.Station.Keys[1].Certificate.Equal(stationID.Cert) {
		t.Errorf("Current().Station.Keys after the switch = %d pairs, want the new first and the old", len(cur.Station.Keys))
	}
	acme, ok := cur.Partner("ACME CORP")
	if !ok {
		t.Fatal("ACME CORP not served after the switch")
	}
	if st := cur.StationOf(acme); !st.Certificate.Equal(stationNextID.Cert) || st.PrivateKey == nil || !st.PrivateKey.PublicKey.Equal(&stationNextID.Key.PublicKey) {
		t.Errorf("StationOf(ACME CORP) after the switch signs with %v, want the new key pair", st.Certificate.Subject)
	}
	// A snapshot taken before, as a message in flight holds it, is as it
	// was.
	if !before.Station.Certificate.Equal(stationID.Cert) {
		t.Errorf("the snapshot taken before not_before_use changed its signer")
	}
}

// TestLiveCertificateUseServed: when one replica records that a partner
// signed with a certificate switched on first use, every replica encrypts
// to it within 2 s, before its not_before_use, notified without a
// resync.
func TestLiveCertificateUseServed(t *testing.T) {
	nextIdentities(t)
	ctx := context.Background()
	url := pgtest.URL(t)
	// Two replicas, each with its own store.
	st1, st2 := openStore(t, url), openStore(t, url)
	dir := filepath.Dir(stationDir(t))
	writeFile(t, filepath.Join(dir, "acme-next.crt"), acmeNextID.CertPEM())
	path := writeConfig(t, dir, `  - as2_id: "ACME CORP"
    url: https://as2.acme.example/as2
    certificates:
      - {certificate: acme.crt}
      - {certificate: acme-next.crt, not_before_use: 2099-01-01, switch_on_first_use: true}
    sign: sha-256
    encrypt: aes256-cbc
`)
	replicas := []liveEnv{newLive(t, st1, path, "replica-1", never, never), newLive(t, st2, path, "replica-2", never, never)}
	seen := func() map[string]time.Time {
		rr, err := st1.ServedRevisions(ctx, partners.StoppedAfter)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]time.Time{}
		for _, r := range rr {
			out[r.Identity] = r.SeenAt
		}
		return out
	}
	seenBefore := seen()
	for _, r := range replicas {
		run(t, r.live)
	}
	// Each replica reads the partners again once its LISTEN is in place
	// (and records that it was seen): from then on only the notification
	// can bring the use, the resync being an hour away.
	waitFor(t, "both replicas listening", 10*time.Second, func() bool {
		now := seen()
		return now["replica-1"].After(seenBefore["replica-1"]) && now["replica-2"].After(seenBefore["replica-2"])
	})
	encryptsTo := func(r liveEnv) *devpki.Identity {
		p, ok := r.live.Current().Partner("ACME CORP")
		if !ok {
			return nil
		}
		switch c := p.EncryptionCertificate(time.Now()); {
		case c.Equal(acmeID.Cert):
			return acmeID
		case c.Equal(acmeNextID.Cert):
			return acmeNextID
		}
		return nil
	}
	for i, r := range replicas {
		if got := encryptsTo(r); got != acmeID {
			t.Fatalf("replica-%d before the first use encrypts to %v, want the current certificate", i+1, got)
		}
	}
	start := time.Now()
	first, err := st2.RecordCertificateUse(ctx, "ACME CORP", config.Fingerprint(acmeNextID.Cert))
	if err != nil || !first {
		t.Fatalf("RecordCertificateUse = %v, %v; want true, nil", first, err)
	}
	for i, r := range replicas {
		waitFor(t, "the next certificate encrypted to", 10*time.Second, func() bool { return encryptsTo(r) == acmeNextID })
		took := time.Since(start)
		t.Logf("replica-%d encrypts to the next certificate %v after the use was recorded", i+1, took.Round(time.Millisecond))
		if took >= served {
			t.Errorf("replica-%d encrypts to the next certificate %v after the use was recorded, want within %v", i+1, took, served)
		}
	}
}
