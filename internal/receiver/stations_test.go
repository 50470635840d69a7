package receiver_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/httpserver"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/receiver"
	"github.com/edihub/edihub/internal/testenv"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// Two stations of one hub: A decrypts and signs with B's identity of the
// other tests (idB), station B with idC.
const (
	stationA = "HUB A"
	stationB = "HUB B"
	// partnerOfA and partnerOfB sign with idA.
	partnerOfA = "BETA"
	partnerOfB = "ACME CORP"
	// partnerRolling signs with an old certificate (idOld) and moves to
	// idA's, which its profile switches to on first use.
	partnerRolling = "ROLLING"
)

// sourceFile is a config.Source whose snapshot a test replaces, as
// partners.Live does.
type sourceFile struct{ cur atomic.Pointer[config.File] }

func (s *sourceFile) Current() *config.File { return s.cur.Load() }

// stationsEnv is a receiver configured the way edihub serves it
// (Options.Config) with two stations, over a fresh database.
type stationsEnv struct {
	url   string
	store *postgres.Store
	db    *pgxpool.Pool
	src   *sourceFile
	old   *identity // the rolling partner's old certificate
}

// newStationsEnv builds the receiver; uses records certificate uses
// (nil: the real store).
func newStationsEnv(t *testing.T, uses func(*stationsEnv) receiver.CertificateUseRecorder) *stationsEnv {
	t.Helper()
	keys(t)
	url := pgtest.URL(t)
	ctx := context.Background()
	store, err := postgres.Open(ctx, url, postgres.Options{MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	old := oldIdentity(t)
	yaml := fmt.Sprintf(`stations:
  - {as2_id: %q, private_key: as2-b.key, certificate: as2-b.crt}
  - {as2_id: %q, private_key: as2-c.key, certificate: as2-c.crt}
partners:
  - {as2_id: %q, url: "http://127.0.0.1:9/as2", certificate: as2-a.crt}
  - {as2_id: %q, station: %q, url: "http://127.0.0.1:9/as2", certificate: as2-a.crt}
  - as2_id: %q
    url: "http://127.0.0.1:9/as2"
    certificates:
      - {certificate: %q}
      - {certificate: as2-a.crt, switch_on_first_use: true}
`, stationA, stationB, partnerOfA, partnerOfB, stationB, partnerRolling, old.CertPath)
	cfg, err := config.Parse([]byte(yaml), keyDir, "stations.yaml", config.Options{Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	e := &stationsEnv{store: store, db: db, src: &sourceFile{}, old: old}
	e.src.cur.Store(cfg)
	var rec receiver.CertificateUseRecorder = store
	if uses != nil {
		rec = uses(e)
	}
	h, err := receiver.New(receiver.Options{
		Store:           store,
		Config:          e.src,
		CertificateUses: rec,
		Logger:          zap.NewNop(),
		Registerer:      prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpserver.NewRouter(httpserver.RouterOptions{
		Logger: zap.NewNop(), Metrics: httpserver.NewMetrics(prometheus.NewRegistry()), MaxBodyBytes: 1 << 20, AS2: h,
	}))
	t.Cleanup(srv.Close)
	e.url = srv.URL + "/as2"
	return e
}

// oldIdentity makes a throwaway key pair with openssl, the rolling
// partner's certificate before idA's.
func oldIdentity(t *testing.T) *identity {
	t.Helper()
	dir := t.TempDir()
	id := &identity{Name: "as2-old", KeyPath: filepath.Join(dir, "old.key"), CertPath: filepath.Join(dir, "old.crt")}
	if out, err := exec.Command("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", id.KeyPath,
		"-out", id.CertPath, "-days", "365", "-subj", "/CN=as2-old").CombinedOutput(); err != nil {
		t.Fatalf("openssl req: %v: %s", err, out)
	}
	return id
}

// verifyMDNSigner checks that r is an MDN signed by signer's key: it
// verifies with signer's certificate (edihub's parser and openssl) and
// not with other's.
func verifyMDNSigner(t *testing.T, r reply, signer, other *identity) *mdn.MDN {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("status %d, body %q", r.status, r.body)
	}
	m, err := mdn.Parse(r.header, r.body, mdn.ParseOptions{PartnerCerts: []*x509.Certificate{signer.Cert}, RequireSigned: true})
	if err != nil {
		t.Fatalf("mdn.Parse(verified with %s) = %v, want an MDN signed by %s", signer.Name, err, signer.Name)
	}
	if _, err := mdn.Parse(r.header, r.body, mdn.ParseOptions{PartnerCerts: []*x509.Certificate{other.Cert}, RequireSigned: true}); err == nil {
		t.Errorf("mdn.Parse(verified with %s) = nil error, want the signature of %s to fail it", other.Name, signer.Name)
	}
	top, err := as2.ParseEntity(append([]byte("Content-Type: "+r.header.Get("Content-Type")+"\r\n\r\n"), r.body...), as2.Limits{})
	if err != nil || len(top.Parts) != 2 {
		t.Fatalf("split MDN: %v (%d parts)", err, len(top.Parts))
	}
	sigDER, err := top.Parts[1].DecodedBody()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	part1, sig := writeFile(t, dir, top.Parts[0].Raw), writeFile(t, dir, sigDER)
	verify := func(ca string) error {
		_, err := tryOpenSSL(nil, "cms", "-verify", "-inform", "DER", "-in", sig, "-content", part1, "-binary",
			"-CAfile", ca, "-purpose", "any", "-out", filepath.Join(dir, "out"))
		return err
	}
	if err := verify(signer.CertPath); err != nil {
		t.Errorf("openssl cms -verify -CAfile %s: %v", signer.Name, err)
	}
	if err := verify(other.CertPath); err == nil {
		t.Errorf("openssl cms -verify -CAfile %s succeeded, want the MDN signed by %s only", other.Name, signer.Name)
	}
	return m
}

// TestReceiveStations: a message is addressed to the partner's station,
// decrypted with that station's key and answered with an MDN signed by
// that station's key; addressing another of our stations is an unknown
// trading relationship.
func TestReceiveStations(t *testing.T) {
	e := newStationsEnv(t, nil)
	toA := buildOpenSSL(t, build{sign: "sha256", enc: "aes256", recipient: idB})
	toB := buildOpenSSL(t, build{sign: "sha256", enc: "aes256", recipient: idC})
	tests := []struct {
		name     string
		from, to string
		msg      opensslMessage
		signer   *identity // whose key signs the MDN
		other    *identity
		want     mdn.Disposition
		stored   bool
	}{
		{name: "partner of B to B", from: partnerOfB, to: stationB, msg: toB, signer: idC, other: idB, want: mdn.Processed(), stored: true},
		{name: "partner of A to A", from: partnerOfA, to: stationA, msg: toA, signer: idB, other: idC, want: mdn.Processed(), stored: true},
		{name: "partner of B to A", from: partnerOfB, to: stationA, msg: toA, signer: idB, other: idC, want: mdn.Errored(mdn.UnknownTradingRelationship)},
		{name: "partner of A to B", from: partnerOfA, to: stationB, msg: toB, signer: idC, other: idB, want: mdn.Errored(mdn.UnknownTradingRelationship)},
		// Only the partner's station's keys decrypt.
		{name: "partner of B to B encrypted to A", from: partnerOfB, to: stationB, msg: toA, signer: idC, other: idB, want: mdn.Errored("decryption-failed"), stored: true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fmt.Sprintf("<stations-%d@partner.example>", i)
			r := post(t, e.url, request(as2Header(tt.from, tt.to, id, "sha-256"), tt.msg), tt.msg.body, false)
			m := verifyMDNSigner(t, r, tt.signer, tt.other)
			if m.Disposition != tt.want {
				t.Errorf("disposition = %q, want %q", m.Disposition, tt.want)
			}
			if tt.want == mdn.Processed() {
				if want := dgst(t, tt.msg.micDigest, tt.msg.micFile); m.MIC != want {
					t.Errorf("Received-content-MIC = %q, openssl computed %q", m.MIC, want)
				}
			}
			// The MDN comes from the station addressed.
			wantFrom := `"` + tt.to + `"`
			if got := r.header.Get("AS2-From"); got != wantFrom || m.FinalRecipient != tt.to || m.OriginalRecipient != tt.to {
				t.Errorf("MDN AS2-From %q, Final-Recipient %q, Original-Recipient %q; want %s and %q", got, m.FinalRecipient, m.OriginalRecipient, wantFrom, tt.to)
			}
			wantID := "@" + strings.ReplaceAll(tt.to, " ", "_") + ">"
			if got := r.header.Get("Message-ID"); !strings.HasSuffix(got, wantID) {
				t.Errorf("MDN Message-ID = %q, want it to end in %q (the station answering)", got, wantID)
			}
			var rows int
			if err := e.db.QueryRow(context.Background(), `SELECT count(*) FROM messages WHERE message_id = $1 AND as2_to = $2 AND partner = $3`, id, tt.to, tt.from).Scan(&rows); err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{true: 1, false: 0}[tt.stored]; rows != want {
				t.Errorf("%d rows for %s from %s to %s, want %d", rows, id, tt.from, tt.to, want)
			}
		})
	}
}

// useRecorder is a CertificateUseRecorder that counts its calls. Like the
// store, only the first call for a certificate reports first; with serve
// set it then serves the use in a new snapshot, as every replica's Live
// does after the notification.
type useRecorder struct {
	mu    sync.Mutex
	calls []string // "partner fingerprint"
	serve *sourceFile
}

func (r *useRecorder) RecordCertificateUse(_ context.Context, partner, fingerprint string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	call := partner + " " + fingerprint
	for _, c := range r.calls {
		if c == call {
			r.calls = append(r.calls, call)
			return false, nil
		}
	}
	r.calls = append(r.calls, call)
	if r.serve != nil {
		cur := r.serve.Current()
		partners := append([]config.Partner(nil), cur.Partners...)
		for i := range partners {
			if partners[i].AS2ID == partner {
				partners[i].CertificateUses = map[string]time.Time{fingerprint: time.Now()}
			}
		}
		r.serve.cur.Store(cur.WithPartners(partners, cur.Revision+1))
	}
	return true, nil
}

func (r *useRecorder) recorded() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

// TestReceiveSwitchOnFirstUse: the first message a partner signs with a
// certificate its profile switches to on first use is recorded, once; a
// message signed with another certificate, or refused, records nothing.
func TestReceiveSwitchOnFirstUse(t *testing.T) {
	rec := &useRecorder{}
	e := newStationsEnv(t, func(e *stationsEnv) receiver.CertificateUseRecorder {
		rec.serve = e.src
		return rec
	})
	old := loadIdentity(t, e.old)
	newFP := config.Fingerprint(idA.Cert)
	send := func(id, from string, signer *identity, tamper bool) mdn.Disposition {
		t.Helper()
		m := buildOpenSSL(t, build{sign: "sha256", signer: signer})
		body := m.body
		if tamper {
			body = bytes.Replace(m.body, []byte("PO-1"), []byte("PO-9"), 1)
		}
		r := post(t, e.url, request(as2Header(from, stationA, id, "sha-256"), m), body, false)
		return verifyMDNSigner(t, r, idB, idC).Disposition
	}
	steps := []struct {
		name      string
		from      string
		signer    *identity
		tamper    bool
		want      mdn.Disposition
		wantCalls []string
	}{
		{name: "signed with the old certificate", from: partnerRolling, signer: old, want: mdn.Processed()},
		{name: "signed with the new certificate, refused", from: partnerRolling, signer: idA, tamper: true, want: mdn.Errored("integrity-check-failed")},
		{name: "same certificate, another partner without the schedule", from: partnerOfA, signer: idA, want: mdn.Processed()},
		{name: "first use of the new certificate", from: partnerRolling, signer: idA, want: mdn.Processed(), wantCalls: []string{partnerRolling + " " + newFP}},
		{name: "second use", from: partnerRolling, signer: idA, want: mdn.Processed(), wantCalls: []string{partnerRolling + " " + newFP}},
		{name: "old certificate again", from: partnerRolling, signer: old, want: mdn.Processed(), wantCalls: []string{partnerRolling + " " + newFP}},
		{name: "third use", from: partnerRolling, signer: idA, want: mdn.Processed(), wantCalls: []string{partnerRolling + " " + newFP}},
	}
	for i, s := range steps {
		if got := send(fmt.Sprintf("<first-use-%d@partner.example>", i), s.from, s.signer, s.tamper); got != s.want {
			t.Fatalf("%s: disposition %q, want %q", s.name, got, s.want)
		}
		if diff := cmp.Diff(s.wantCalls, rec.recorded()); diff != "" {
			t.Errorf("%s: RecordCertificateUse calls (-want +got):\n%s", s.name, diff)
		}
	}
	p, _ := e.src.Current().Partner(partnerRolling)
	if c := p.EncryptionCertificate(time.Now()); !c.Equal(idA.Cert) {
		t.Errorf("after the first use, EncryptionCertificate = %v, want the new certificate", c.Subject)
	}
}

// TestReceiveSwitchOnFirstUseStore: with the PostgreSQL store as the
// recorder, messages signed with the new certificate, some at once, leave
// one partner_certificate_uses row; the old certificate leaves none.
func TestReceiveSwitchOnFirstUseStore(t *testing.T) {
	e := newStationsEnv(t, nil)
	old := loadIdentity(t, e.old)
	post1 := func(id string, signer *identity) error {
		m := buildOpenSSL(t, build{sign: "sha256", enc: "aes256", signer: signer, recipient: idB})
		r, err := tryPost(e.url, request(as2Header(partnerRolling, stationA, id, "sha-256"), m), m.body, false)
		if err != nil {
			return err
		}
		got, err := mdn.Parse(r.header, r.body, mdn.ParseOptions{PartnerCerts: []*x509.Certificate{idB.Cert}})
		if err != nil {
			return err
		}
		if got.Disposition != mdn.Processed() {
			return fmt.Errorf("%s: disposition %q, want processed", id, got.Disposition)
		}
		return nil
	}
	rows := func() []string {
		t.Helper()
		r, err := e.db.Query(context.Background(), `SELECT as2_id || ' ' || fingerprint FROM partner_certificate_uses ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var out []string
		for r.Next() {
			var s string
			if err := r.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		return out
	}
	if err := post1("<store-old@partner.example>", old); err != nil {
		t.Fatal(err)
	}
	if got := rows(); len(got) != 0 {
		t.Fatalf("after a message signed with the old certificate: partner_certificate_uses = %q, want none", got)
	}
	before := time.Now()
	// The snapshot never shows the use here (no Live): every message
	// calls the store, which keeps the first.
	errs := make([]error, 4)
	msgs := make([]opensslMessage, len(errs))
	for i := range msgs {
		msgs[i] = buildOpenSSL(t, build{sign: "sha256", enc: "aes256", signer: idA, recipient: idB})
	}
	testenv.Together(len(errs), func(i int) {
		id := fmt.Sprintf("<store-new-%d@partner.example>", i)
		r, err := tryPost(e.url, request(as2Header(partnerRolling, stationA, id, "sha-256"), msgs[i]), msgs[i].body, false)
		if err == nil && r.status != http.StatusOK {
			err = fmt.Errorf("%s: status %d", id, r.status)
		}
		errs[i] = err
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	afterFirst := time.Now()
	if err := post1("<store-new-later@partner.example>", idA); err != nil {
		t.Fatal(err)
	}
	want := []string{partnerRolling + " " + config.Fingerprint(idA.Cert)}
	if diff := cmp.Diff(want, rows()); diff != "" {
		t.Errorf("partner_certificate_uses (-want +got):\n%s", diff)
	}
	var at time.Time
	if err := e.db.QueryRow(context.Background(), `SELECT first_used_at FROM partner_certificate_uses`).Scan(&at); err != nil {
		t.Fatal(err)
	}
	// The first use stays the first: a later message does not move it.
	if at.Before(before.Add(-time.Second)) || !at.Before(afterFirst) {
		t.Errorf("first_used_at = %v, want between %v and %v (the first messages)", at, before, afterFirst)
	}
	// What every replica reads: the use, by fingerprint.
	set, err := e.store.Partners(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := set.Uses[partnerRolling][config.Fingerprint(idA.Cert)]; !ok || len(set.Uses) != 1 {
		t.Errorf("Partners().Uses = %v, want the one use of %s", set.Uses, partnerRolling)
	}
}

// loadIdentity completes id (made by oldIdentity) with its parsed key and
// certificate, for openssltest.Build.
func loadIdentity(t *testing.T, id *identity) *identity {
	t.Helper()
	f, err := config.Parse([]byte(fmt.Sprintf("station: {as2_id: X, private_key: %q, certificate: %q}\n", id.KeyPath, id.CertPath)), "", "old", config.Options{Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	out := *id
	out.Key, out.Cert = f.Station.PrivateKey, f.Station.Certificate
	return &out
}
