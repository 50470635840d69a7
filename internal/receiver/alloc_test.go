package receiver_test

import (
	"bytes"
	"context"
	"crypto"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/edi"
	"github.com/edihub/edihub/internal/httpserver"
	"github.com/edihub/edihub/internal/interchange"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/receiver"
	"github.com/edihub/edihub/internal/testenv/openssltest"
)

// discardStore stores nothing: every message is new. It measures the
// receive path without a database.
type discardStore struct{ *memStore }

func (discardStore) SaveInbound(context.Context, *postgres.InboundMessage) (int64, error) {
	return 1, nil
}

// noDuplicates is the EDI tracker's store and acker: no duplicate, no
// acknowledgement.
type noDuplicates struct{}

func (noDuplicates) FindDuplicateInterchanges(context.Context, string, *edi.Document, time.Duration) ([]postgres.Duplicate, error) {
	return nil, nil
}

func (noDuplicates) AckOutbound(string, string, outbox.AckBuilder) (postgres.AckBuilder, error) {
	return nil, nil
}

func (noDuplicates) Notify() {}

// smallPath is the served small-message receive path of the bench
// (test/loadgen's messages: 4 KiB signed with SHA-256 and encrypted with
// AES-256-CBC by openssl, a signed sync MDN asked for) behind the real
// router, metrics, JSON access log and EDI step, on a store that keeps
// nothing.
type smallPath struct {
	handler http.Handler
	header  http.Header
	body    []byte
}

func newSmallPath(t testing.TB) *smallPath {
	t.Helper()
	keys(t)
	payload := make([]byte, 4096)
	filler := "ISA*00*LOADGEN 000001~"
	for i := range payload {
		payload[i] = filler[i%len(filler)]
	}
	m := openssltest.Build(t, openssltest.Spec{Sign: "sha256", Enc: "aes256", Signer: idA, Recipient: idB, Payload: string(payload)})
	yaml := fmt.Sprintf(`station: {as2_id: %q, private_key: as2-b.key, certificate: as2-b.crt}
partners:
  - {as2_id: %q, url: "http://127.0.0.1:9/as2", certificate: as2-a.crt, sign: sha-256, encrypt: aes256-cbc, mdn: sync, mdn_signed: true, replay_window: 0s}
`, station, partnerACME)
	cfg, err := config.Parse([]byte(yaml), keyDir, "alloc.yaml", config.Options{Now: func() time.Time { return testTime }})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	// The product's logger (cmd/edihub): JSON, with the caller.
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime, ec.TimeKey = zapcore.RFC3339NanoTimeEncoder, "time"
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(ec), zapcore.AddSync(io.Discard), zapcore.InfoLevel), zap.AddCaller())
	tracker, err := interchange.NewTracker(interchange.Options{Store: noDuplicates{}, Acker: noDuplicates{}, Logger: log, Registerer: reg, PartnerIDs: []string{partnerACME}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := receiver.New(receiver.Options{
		Store:    discardStore{&memStore{}},
		Partners: cfg,
		Station: receiver.Station{AS2ID: station, Keys: []cms.Recipient{{Cert: idB.Cert, Key: idB.Key.(crypto.Decrypter)}},
			Key: idB.Key, Cert: idB.Cert},
		EDI:        tracker,
		PartnerIDs: []string{partnerACME},
		Logger:     log, Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	router := httpserver.NewRouter(httpserver.RouterOptions{Logger: log, Metrics: httpserver.NewMetrics(reg), AS2: h, MaxBodyBytes: 100 << 20})
	hdr := http.Header{}
	for k, v := range m.Header {
		hdr[k] = v
	}
	hdr.Set("AS2-Version", "1.2")
	hdr.Set("AS2-From", `"`+partnerACME+`"`)
	hdr.Set("AS2-To", `"`+station+`"`)
	hdr.Set("MIME-Version", "1.0")
	hdr.Set("Disposition-Notification-To", "loadgen@example.com")
	hdr.Set("Disposition-Notification-Options", mdn.RequestOptions(crypto.SHA256))
	return &smallPath{handler: router, header: hdr, body: m.Body}
}

// post sends the message as the n-th request and checks that the answer
// is a processed MDN.
func (p *smallPath) post(t testing.TB, n int) {
	req := httptest.NewRequest(http.MethodPost, "/as2", bytes.NewReader(p.body))
	req.Header = p.header.Clone()
	req.Header.Set("Message-ID", "<"+strconv.Itoa(n)+"@alloc>")
	w := httptest.NewRecorder()
	p.handler.ServeHTTP(w, req)
	if w.Code != http.StatusOK || !bytes.Contains(w.Body.Bytes(), []byte("Disposition: automatic-action/MDN-sent-automatically; processed\r\n")) {
		t.Fatalf("status %d: %.300s", w.Code, w.Body.Bytes())
	}
}

// TestSmallReceiveAllocations bounds the objects one small message
// allocates on its way through the router and the receiver, the request
// and recorder of the test and the RSA operations included, pgx and the
// HTTP server's connection handling not (a regression guard, not a
// timing): 421 before the receive path was trimmed (media types, MIME
// headers, the MDN and its signature, the log line's names).
func TestSmallReceiveAllocations(t *testing.T) {
	p := newSmallPath(t)
	n := 0
	got := testing.AllocsPerRun(20, func() {
		n++
		p.post(t, n)
	})
	if got > 280 {
		t.Errorf("%.0f allocations per message, want at most 280", got)
	}
}

// BenchmarkSmallReceive is one small signed and encrypted message through
// the router and the receiver, its signed MDN included (two RSA private-
// key operations): go test -bench SmallReceive -benchmem -cpuprofile.
func BenchmarkSmallReceive(b *testing.B) {
	p := newSmallPath(b)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n++
		p.post(b, n)
	}
}
