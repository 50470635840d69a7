package receiver_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/httpserver"
	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/receiver"
	"github.com/edihub/edihub/internal/spool"
	"github.com/edihub/edihub/internal/testenv"
	"github.com/edihub/edihub/internal/testenv/openssltest"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// Names used throughout: the station, and partners whose names need
// quoting on the wire.
const (
	station       = "EDIHUB HUB"
	partnerACME   = "ACME CORP"
	partnerQuoted = `Q "Quoted" \ Co`
	partnerStrict = "STRICT"
	// partnerDefault has the default security settings of a partner that
	// encrypts: signed and encrypted messages required.
	partnerDefault = "DEFAULT"
	// partnerLegacyMIC computes the MIC of unsigned messages over the
	// entity, headers included (mic_include_headers).
	partnerLegacyMIC = "LEGACY MIC"
	// partnerNoReplay refuses signed content seen before under another
	// Message-ID (refuse_replays).
	partnerNoReplay = "NO REPLAY"
	// partnerNoRestart does not resume interrupted transfers
	// (as2_restart: false).
	partnerNoRestart = "NO RESTART"
)

// identity is a throwaway key pair made by openssl, shared with the as2
// tests' interop fixtures.
type identity = openssltest.Identity

var (
	keyDir string
	// idA signs as the partner, idB is the station, idC a stranger.
	idA, idB, idC *identity
)

func keys(t testing.TB) {
	t.Helper()
	ids := openssltest.Keys(t)
	keyDir, idA, idB, idC = ids.Dir, ids.A, ids.B, ids.C
}

// runOpenSSL runs openssl and returns stdout, failing the test on error.
func runOpenSSL(t testing.TB, stdin []byte, args ...string) []byte {
	t.Helper()
	return openssltest.Run(t, stdin, args...)
}

func tryOpenSSL(stdin []byte, args ...string) ([]byte, error) {
	return openssltest.TryRun(stdin, args...)
}

var fileSeq atomic.Int64

func writeFile(t testing.TB, dir string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, fmt.Sprintf("f%d", fileSeq.Add(1)))
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// env is a receiver behind the real router on a real listener, over a
// fresh database.
type env struct {
	url     string
	dbURL   string
	store   *postgres.Store
	db      *pgxpool.Pool
	reg     *prometheus.Registry
	cfg     *config.File
	handler *receiver.Handler
	spool   *spool.Spool // nil unless envOptions.spool
}

type envOptions struct {
	maxBody int64
	// readTimeout is the receiver's body read timeout; 0 the default.
	readTimeout time.Duration
	// wrap replaces the store the receiver sees.
	wrap func(receiver.Store) receiver.Store
	// maxInFlight, perPartner and maxDecompressed set the receiver's
	// in-flight budget, partner concurrency cap and decompression limit.
	// stationKeys replaces the station's key fields in the configuration
	// (a keys: list), and the receiver's station is then built from it.
	stationKeys     string
	maxInFlight     int64
	perPartner      int
	maxDecompressed int64
	// maxMDN is the receiver's async MDN limit; 0 the default.
	maxMDN int64
	// spool gives the receiver a spool of spoolBytes (1 GiB when 0) that
	// takes every body (SpoolFromBytes 1): the streaming path.
	spool      bool
	spoolBytes int64
	// retryWindow is the receiver's RetryWindow for async MDNs.
	retryWindow time.Duration
	// restart keeps AS2 restart transfers in the store, within
	// restartLimits.
	restart       bool
	restartLimits postgres.RestartLimits
	// dbURL, when set, is the database of another env: a second replica.
	dbURL string
	// edi is the receiver's EDI step; nil for none.
	edi receiver.EDI
}

var testTime = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newEnv(t testing.TB, eo envOptions) *env {
	t.Helper()
	keys(t)
	url := eo.dbURL
	if url == "" {
		url = pgtest.URL(t)
	}
	ctx := context.Background()
	store, err := postgres.Open(ctx, url, postgres.Options{MaxConns: 24})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	keyFields := "private_key: as2-b.key, certificate: as2-b.crt"
	if eo.stationKeys != "" {
		keyFields = eo.stationKeys
	}
	yaml := fmt.Sprintf(`station: {as2_id: %q, `+keyFields+`}
partners:
  - {as2_id: %q, url: "http://127.0.0.1:9/as2", certificate: as2-a.crt, require_signed: false, allow_private_mdn_targets: true}
  - {as2_id: %q, url: "http://127.0.0.1:9/as2", certificate: as2-a.crt, require_signed: false, allow_private_mdn_targets: true}
  - {as2_id: %q, url: "http://127.0.0.1:9/as2", certificate: as2-a.crt, require_signed: true, require_encrypted: true}
  - {as2_id: %q, url: "http://127.0.0.1:9/as2", certificate: as2-a.crt, encrypt: aes256-cbc}
  - {as2_id: %q, url: "http://127.0.0.1:9/as2", certificate: as2-a.crt, require_signed: false, mic_include_headers: true}
  - {as2_id: %q, url: "http://127.0.0.1:9/as2", certificate: as2-a.crt, refuse_replays: true}
  - {as2_id: %q, url: "http://127.0.0.1:9/as2", certificate: as2-a.crt, require_signed: false, as2_restart: false}
`, station, partnerACME, partnerQuoted, partnerStrict, partnerDefault, partnerLegacyMIC, partnerNoReplay, partnerNoRestart)
	cfg, err := config.Parse([]byte(yaml), keyDir, "test.yaml", config.Options{Now: func() time.Time { return testTime }})
	if err != nil {
		t.Fatal(err)
	}
	var rs receiver.Store = store
	if eo.wrap != nil {
		rs = eo.wrap(store)
	}
	var seq atomic.Int64
	reg := prometheus.NewRegistry()
	st := receiver.Station{
		AS2ID: station,
		Keys:  []cms.Recipient{{Cert: idB.Cert, Key: idB.Key.(crypto.Decrypter)}},
		Key:   idB.Key, Cert: idB.Cert,
	}
	if eo.stationKeys != "" {
		st = receiver.StationFromConfig(cfg.Station)
	}
	sp := testSpool(t, eo)
	var restart receiver.RestartStore
	if eo.restart {
		restart = store
	}
	h, err := receiver.New(receiver.Options{
		Store:        rs,
		Partners:     cfg,
		Station:      st,
		Logger:       zap.NewNop(),
		Registerer:   reg,
		Now:          func() time.Time { return testTime },
		NewMessageID: func() string { return fmt.Sprintf("<mdn-%d@edihub.test>", seq.Add(1)) },
		ReadTimeout:  eo.readTimeout,
		Limits:       as2.Limits{MaxDecompressedSize: eo.maxDecompressed},

		MaxInFlightBytes:        eo.maxInFlight,
		MaxConcurrentPerPartner: eo.perPartner,
		MaxMDNBytes:             eo.maxMDN,
		Spool:                   sp,
		SpoolFromBytes:          1,
		RetryWindow:             eo.retryWindow,
		Restart:                 restart,
		RestartLimits:           eo.restartLimits,
		EDI:                     eo.edi,
	})
	if err != nil {
		t.Fatal(err)
	}
	if eo.maxBody == 0 {
		eo.maxBody = 64 << 20
	}
	srv := httptest.NewServer(httpserver.NewRouter(httpserver.RouterOptions{
		Logger: zap.NewNop(), Metrics: httpserver.NewMetrics(prometheus.NewRegistry()), MaxBodyBytes: eo.maxBody, AS2: h,
	}))
	t.Cleanup(srv.Close)
	return &env{url: srv.URL + "/as2", dbURL: url, store: store, db: db, reg: reg, cfg: cfg, handler: h, spool: sp}
}

// testSpool is the spool eo asks for, in the test's temporary directory,
// or nil.
func testSpool(t testing.TB, eo envOptions) *spool.Spool {
	if !eo.spool {
		return nil
	}
	if eo.spoolBytes == 0 {
		eo.spoolBytes = 1 << 30
	}
	s, err := spool.New(t.TempDir(), eo.spoolBytes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// as2Header returns the AS2 fields of a request from → to asking for a
// sync MDN, signed when micalg is not empty.
func as2Header(from, to, messageID, micalg string) http.Header {
	f, _ := as2.FormatAS2Name(from)
	tt, _ := as2.FormatAS2Name(to)
	h := http.Header{}
	h.Set("AS2-Version", "1.2")
	h.Set("AS2-From", f)
	h.Set("AS2-To", tt)
	h.Set("Message-ID", messageID)
	h.Set("Disposition-Notification-To", "mdn@partner.example")
	if micalg != "" {
		h.Set("Disposition-Notification-Options", "signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=optional, "+micalg)
	}
	return h
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

// post sends one request; chunked hides the length from the client.
func post(t testing.TB, url string, h http.Header, body []byte, chunked bool) reply {
	t.Helper()
	r, err := tryPost(url, h, body, chunked)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tryPost is post for goroutines other than the test's, which must not
// call t.Fatal.
func tryPost(url string, h http.Header, body []byte, chunked bool) (reply, error) {
	var rd io.Reader = bytes.NewReader(body)
	if chunked {
		rd = io.MultiReader(rd)
	}
	req, err := http.NewRequest(http.MethodPost, url, rd)
	if err != nil {
		return reply{}, err
	}
	req.Header = h.Clone()
	if chunked {
		req.ContentLength = -1
	}
	return tryDo(req)
}

// do sends req and reads its answer whole.
func do(t testing.TB, req *http.Request) reply {
	t.Helper()
	r, err := tryDo(req)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tryDo is do for goroutines other than the test's.
func tryDo(req *http.Request) (reply, error) {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{}, fmt.Errorf("%s: %w", req.Method, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, fmt.Errorf("%s: read reply: %w", req.Method, err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// parseMDN parses and verifies (when signed) an MDN reply.
func parseMDN(t testing.TB, r reply) *mdn.MDN {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("status %d, body %q", r.status, r.body)
	}
	m, err := mdn.Parse(r.header, r.body, mdn.ParseOptions{PartnerCerts: []*x509.Certificate{idB.Cert}})
	if err != nil {
		t.Fatalf("mdn.Parse() error = %v\n%s", err, r.body)
	}
	return m
}

// opensslVerifyMDN checks a signed MDN with openssl cms -verify, the parts
// split per RFC 2046 (AS2.md: cms -verify on the whole MIME fails on some
// correct messages).
func opensslVerifyMDN(t testing.TB, r reply) {
	t.Helper()
	ct := r.header.Get("Content-Type")
	if !strings.HasPrefix(ct, "multipart/signed") {
		t.Fatalf("MDN Content-Type = %q, want multipart/signed", ct)
	}
	top, err := as2.ParseEntity(append([]byte("Content-Type: "+ct+"\r\n\r\n"), r.body...), as2.Limits{})
	if err != nil || len(top.Parts) != 2 {
		t.Fatalf("split MDN: %v (%d parts)", err, len(top.Parts))
	}
	sig, err := top.Parts[1].DecodedBody()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	part1 := writeFile(t, dir, top.Parts[0].Raw)
	sigFile := writeFile(t, dir, sig)
	runOpenSSL(t, nil, "cms", "-verify", "-inform", "DER", "-in", sigFile, "-content", part1, "-binary",
		"-CAfile", idB.CertPath, "-purpose", "any", "-out", filepath.Join(dir, "out"))
}

// row is what the messages table holds about one inbound message.
type row struct {
	Status, Disposition, MIC, MICAlg string
	Signed, Encrypted                bool
	Compressed                       bool
	MDNMode                          string
	Payloads                         int
}

func (e *env) row(t testing.TB, partner, messageID string) (row, bool) {
	t.Helper()
	var r row
	err := e.db.QueryRow(context.Background(), `
SELECT m.status, m.disposition, m.mic, m.mic_alg, m.signed, m.encrypted, m.compressed, m.mdn_mode,
       (SELECT count(*) FROM payloads p WHERE p.message_id = m.id)
  FROM messages m WHERE m.partner = $1 AND m.direction = 'inbound' AND m.message_id = $2`, partner, messageID).
		Scan(&r.Status, &r.Disposition, &r.MIC, &r.MICAlg, &r.Signed, &r.Encrypted, &r.Compressed, &r.MDNMode, &r.Payloads)
	if err != nil {
		return r, false
	}
	return r, true
}

func (e *env) payload(t testing.TB, partner, messageID string) []byte {
	t.Helper()
	var id int64
	err := e.db.QueryRow(context.Background(), `
SELECT p.message_id FROM payloads p JOIN messages m ON m.id = p.message_id
 WHERE m.partner = $1 AND m.direction = 'inbound' AND m.message_id = $2`, partner, messageID).Scan(&id)
	if err != nil {
		t.Fatalf("payload of %s: %v", messageID, err)
	}
	// Read as every reader does: one stored as its zlib stream inflated.
	var b bytes.Buffer
	if _, err := e.store.WritePayload(context.Background(), id, func(hub.MessageInfo) io.Writer { return &b }); err != nil {
		t.Fatalf("payload of %s: %v", messageID, err)
	}
	return b.Bytes()
}

func (e *env) count(t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := e.db.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func (e *env) received(partner, result string) float64 {
	return metricValue(e.reg, "edihub_as2_messages_received_total", map[string]string{"partner": partner, "result": result})
}

func metricValue(reg *prometheus.Registry, name string, labels map[string]string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return -1
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue next
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
		}
	}
	return 0
}
