package receiver_test

import (
	"bytes"
	"context"
	"crypto"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/receiver"
)

// memStore is an in-memory Store for the fuzz target.
type memStore struct {
	mu     sync.Mutex
	msgs   map[string]*postgres.InboundMessage
	claims map[string]string // partner and content digest → Message-ID
}

func (s *memStore) SaveInbound(_ context.Context, m *postgres.InboundMessage) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := m.Partner + "\x00" + m.MessageID
	if _, ok := s.msgs[k]; ok {
		return 0, postgres.ErrDuplicateInbound
	}
	s.msgs[k] = m
	return int64(len(s.msgs)), nil
}

func (s *memStore) InboundByMessageID(_ context.Context, partner, id string) (*postgres.InboundRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.msgs[partner+"\x00"+id]
	if !ok {
		return nil, postgres.ErrInboundNotFound
	}
	return &postgres.InboundRecord{Status: m.Status, Disposition: m.Disposition, MIC: m.MIC, MDN: m.MDN}, nil
}

func (s *memStore) RequeueInboundMDN(context.Context, int64, string, postgres.Retry) error {
	return nil
}

func (s *memStore) SaveInboxMDN(context.Context, *postgres.InboxMDN) (int64, error) { return 1, nil }

// ClaimSignedContent keeps the first Message-ID of each content (no
// window: the fuzz target runs for seconds).
func (s *memStore) ClaimSignedContent(_ context.Context, partner, messageID, digest string, _, _ time.Time) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := partner + "\x00" + digest
	if first, ok := s.claims[k]; ok && first != messageID {
		return first, nil
	}
	if s.claims == nil {
		s.claims = map[string]string{}
	}
	s.claims[k] = messageID
	return "", nil
}

// SignedMICAlgs and SignedByMIC find nothing: every content is claimed.
func (s *memStore) SignedMICAlgs(context.Context, string, string, time.Time) ([]string, error) {
	return nil, nil
}

func (s *memStore) SignedByMIC(context.Context, string, string, []string, time.Time) (string, error) {
	return "", nil
}

// FuzzHandler posts random bodies with random AS2 and MIME fields: the
// handler never panics, answers one of its documented statuses, and every
// 200 with a body carries an MDN for the request's Message-ID.
func FuzzHandler(f *testing.F) {
	keys(f)
	m := buildOpenSSL(f, build{sign: "sha256", enc: "aes128"})
	s := buildOpenSSL(f, build{sign: "sha256", cte: "base64"})
	f.Add(m.header.Get("Content-Type"), "", `"ACME CORP"`, `"EDIHUB HUB"`, "<a@b>", "signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=optional, sha-256", m.body)
	f.Add(s.header.Get("Content-Type"), "base64", "ACME CORP", "EDIHUB HUB", "x", "", s.body)
	f.Add("multipart/report; boundary=b", "", "ACME CORP", "EDIHUB HUB", "", "", []byte("--b\r\n\r\n--b--"))
	f.Add("application/pkcs7-mime; smime-type=compressed-data", "", `"Q \"Quoted\" \\ Co"`, `"EDIHUB HUB"`, "<c>", "signed-receipt-micalg=required, md5", []byte{0x30, 0x80, 0, 0})
	yaml := `station: {as2_id: "EDIHUB HUB", private_key: as2-b.key, certificate: as2-b.crt}
partners:
  - {as2_id: "ACME CORP", url: "http://127.0.0.1:9/as2", certificate: as2-a.crt, require_signed: false}
  - {as2_id: 'Q "Quoted" \ Co', url: "http://127.0.0.1:9/as2", certificate: as2-a.crt, require_signed: false}
`
	cfg, err := config.Parse([]byte(yaml), keyDir, "fuzz.yaml", config.Options{Now: func() time.Time { return testTime }})
	if err != nil {
		f.Fatal(err)
	}
	h, err := receiver.New(receiver.Options{
		Store:    &memStore{msgs: map[string]*postgres.InboundMessage{}},
		Partners: cfg,
		Station: receiver.Station{AS2ID: station, Keys: []cms.Recipient{{Cert: idB.Cert, Key: idB.Key.(crypto.Decrypter)}},
			Key: idB.Key, Cert: idB.Cert},
		Logger: zap.NewNop(), Registerer: prometheus.NewRegistry(),
		Limits: as2.Limits{MaxDecompressedSize: 1 << 20},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, ct, cte, from, to, msgID, opts string, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/as2", bytes.NewReader(body))
		for k, v := range map[string]string{"Content-Type": ct, "Content-Transfer-Encoding": cte, "AS2-From": from, "AS2-To": to,
			"Message-ID": msgID, "Disposition-Notification-Options": opts, "Disposition-Notification-To": "x"} {
			if v != "" {
				req.Header.Set(k, v)
			}
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		switch w.Code {
		case 200, 400, 403:
		default:
			t.Fatalf("status %d: %s", w.Code, w.Body.Bytes())
		}
		if w.Code == 200 && w.Body.Len() > 0 {
			got, err := mdn.Parse(w.Result().Header, w.Body.Bytes(), mdn.ParseOptions{Unverified: true})
			if err != nil {
				t.Fatalf("reply is not an MDN: %v", err)
			}
			want := strings.TrimSpace(req.Header.Get("Message-ID"))
			if strings.IndexFunc(want, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
				want = ""
			}
			if got.OriginalMessageID != want {
				t.Fatalf("Original-Message-ID %q, want %q", got.OriginalMessageID, req.Header.Get("Message-ID"))
			}
		}
	})
}
