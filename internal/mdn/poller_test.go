package mdn_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/leader"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv"
	"github.com/edihub/edihub/internal/testenv/openssltest"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.CheckLeaks())) }

const (
	stationID = "EDIHUB TEST"
	lease     = "edihub-leader"
	// signedPartner asks for signed receipts of signed messages; plainPartner
	// sends unsigned and asks for unsigned receipts; securePartner signs
	// and encrypts (the default profile) and asks for signed receipts.
	signedPartner = "ACME CORP"
	plainPartner  = "PLAIN"
	securePartner = "SECURE CORP"
)

// partnerStation is a fake AS2 partner on a real listener that accepts
// every message (an async MDN comes later) and records them.
type partnerStation struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []sentRequest
}

type sentRequest struct {
	header http.Header
	body   []byte
}

func newPartnerStation(t testing.TB) *partnerStation {
	p := &partnerStation{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		p.mu.Lock()
		p.reqs = append(p.reqs, sentRequest{r.Header.Clone(), b})
		p.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(p.Close)
	return p
}

// requestsFor returns the requests that carried Message-ID id.
func (p *partnerStation) requestsFor(id string) []sentRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []sentRequest
	for _, r := range p.reqs {
		if r.header.Get("Message-ID") == id {
			out = append(out, r)
		}
	}
	return out
}

// env is a database, a configuration with the two partners, a partner
// station and a running dispatcher.
type env struct {
	t       testing.TB
	url     string
	st      *postgres.Store
	cfg     *config.File
	ids     *openssltest.Identities
	station *partnerStation
}

type envOptions struct {
	// asyncMDNWait is the dispatcher's; default one hour.
	asyncMDNWait time.Duration
	// extra YAML lines for both partners.
	extra []string
	// partners are more partners, after the three.
	partners []extraPartner
}

// extraPartner is a partner of envOptions: its AS2 ID, URL (default the
// partner station) and YAML lines.
type extraPartner struct {
	id, url string
	lines   []string
}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	ids := openssltest.Keys(t)
	e := &env{t: t, url: pgtest.URL(t), ids: ids, station: newPartnerStation(t)}
	st, err := postgres.Open(context.Background(), e.url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	e.st = st
	var b strings.Builder
	fmt.Fprintf(&b, "station: {as2_id: %q, private_key: %q, certificate: %q, async_mdn_url: \"https://edihub.example/as2\"}\npartners:\n",
		stationID, ids.B.KeyPath, ids.B.CertPath)
	for _, p := range append([]extraPartner{
		{id: signedPartner, lines: []string{"sign: sha-256", "mdn: async", "mdn_signed: true"}},
		{id: plainPartner, lines: []string{"sign: none", "mdn: async", "mdn_signed: false"}},
		{id: securePartner, lines: []string{"sign: sha-256", "encrypt: aes256-cbc", "mdn: async", "mdn_signed: true"}},
	}, o.partners...) {
		if p.url == "" {
			p.url = e.station.URL
		}
		fmt.Fprintf(&b, "  - as2_id: %q\n    url: %q\n    certificate: %q\n", p.id, p.url, ids.A.CertPath)
		for _, l := range append(p.lines, o.extra...) {
			fmt.Fprintf(&b, "    %s\n", l)
		}
	}
	path := filepath.Join(t.TempDir(), "edihub.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, config.Options{})
	if err != nil {
		t.Fatalf("config.Load: %v\n%s", err, b.String())
	}
	e.cfg = cfg
	if o.asyncMDNWait == 0 {
		o.asyncMDNWait = time.Hour
	}
	client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	t.Cleanup(client.CloseIdleConnections)
	d, err := outbox.NewDispatcher(outbox.Options{
		Store: e.st, Listener: e.st, Config: cfg, Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)),
		Metrics: outbox.NewMetrics(prometheus.NewRegistry(), e.st.OutboxStats), Identity: "test-dispatcher",
		Client: client, PollInterval: 50 * time.Millisecond, AsyncMDNWait: o.asyncMDNWait,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, ShutdownTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	background(t, "dispatcher", d.Run)
	return e
}

// background runs fn until the test ends and checks it returns nil.
func background(t testing.TB, name string, fn func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: Run = %v, want nil", name, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s: Run did not return after cancel", name)
		}
	})
}

// send queues a document for partner and waits until it awaits its MDN.
func (e *env) send(partner string) hub.MessageInfo {
	e.t.Helper()
	q, err := outbox.NewQueue(outbox.QueueOptions{Store: e.st, Config: e.cfg})
	if err != nil {
		e.t.Fatal(err)
	}
	m, err := q.Enqueue(context.Background(), outbox.Document{Partner: partner, ContentType: "application/EDI-X12", Filename: "order.x12", Payload: []byte("ISA*00*order*" + partner + "~")})
	if err != nil {
		e.t.Fatalf("Enqueue: %v", err)
	}
	return e.waitStatus(m.ID, outbox.StatusAwaitingMDN)
}

// waitFor polls cond until it holds or 30 s pass (a hang, not a timing
// assertion).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (e *env) message(id int64) hub.MessageInfo {
	e.t.Helper()
	m, err := e.st.Message(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *env) waitStatus(id int64, want string) hub.MessageInfo {
	e.t.Helper()
	var m hub.MessageInfo
	waitFor(e.t, fmt.Sprintf("message %d to be %s", id, want), func() bool {
		m = e.message(id)
		return m.Status == want
	})
	return m
}

// mdnOpts describe an MDN a partner returns.
type mdnOpts struct {
	from   string // AS2-From; default the message's partner
	id     string // Original-Message-ID
	mic    string
	disp   mdn.Disposition
	signer *openssltest.Identity // nil: unsigned
	text   string                // the human-readable part; "" for Build's
}

// storeMDN builds an MDN with mdn.Build and stores it in the inbox as the
// receiver does.
func (e *env) storeMDN(o mdnOpts) int64 {
	e.t.Helper()
	if o.disp == (mdn.Disposition{}) {
		o.disp = mdn.Processed()
	}
	bo := mdn.BuildOptions{}
	if o.signer != nil {
		bo = mdn.BuildOptions{Sign: true, Key: o.signer.Key, Cert: o.signer.Cert}
	}
	h, body, err := mdn.Build(mdn.Report{
		ReportingUA: "partner station", OriginalRecipient: o.from, FinalRecipient: o.from,
		OriginalMessageID: o.id, Disposition: o.disp, MIC: o.mic, Text: o.text,
	}, bo)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.storeRaw(o.from, o.id, h, body)
}

func (e *env) storeRaw(from, origID string, h http.Header, body []byte) int64 {
	e.t.Helper()
	h = h.Clone()
	h.Set("AS2-From", from)
	h.Set("AS2-To", stationID)
	id, err := e.st.SaveInboxMDN(context.Background(), &postgres.InboxMDN{AS2From: from, AS2To: stationID, Header: h, Body: body, OriginalMessageID: origID})
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

// inbox returns the inbox rows by id.
func (e *env) inbox() map[int64]postgres.InboxMDNInfo {
	e.t.Helper()
	rows, err := e.st.InboxMDNs(context.Background(), postgres.InboxQuery{Limit: 100000})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[int64]postgres.InboxMDNInfo{}
	for _, r := range rows {
		out[r.ID] = r
	}
	return out
}

func (e *env) pending() int {
	n := 0
	for _, r := range e.inbox() {
		if r.State == postgres.InboxPending {
			n++
		}
	}
	return n
}

// openTerm opens term token and returns its fence.
func (e *env) openTerm(token int64) hub.Fence {
	e.t.Helper()
	f := hub.Fence{Lease: lease, Token: token}
	if err := e.st.OpenTerm(context.Background(), f, fmt.Sprintf("holder-%d", token)); err != nil {
		e.t.Fatal(err)
	}
	return f
}

type pollerOptions struct {
	store    mdn.PollerStore
	listener mdn.InboxListener
	interval time.Duration
	batch    int
	reg      *prometheus.Registry
	maxMDN   int64
	log      *zap.Logger
}

func (e *env) poller(o pollerOptions) *mdn.Poller {
	e.t.Helper()
	po := mdn.PollerOptions{
		Store: e.st, Listener: e.st, Config: e.cfg, Logger: zaptest.NewLogger(e.t, zaptest.Level(zap.WarnLevel)),
		Registerer: prometheus.NewRegistry(), PollInterval: 50 * time.Millisecond, BatchSize: 4,
	}
	if o.store != nil {
		po.Store = o.store
	}
	if o.listener != nil {
		po.Listener = o.listener
	}
	if o.interval != 0 {
		po.PollInterval = o.interval
	}
	if o.batch != 0 {
		po.BatchSize = o.batch
	}
	if o.reg != nil {
		po.Registerer = o.reg
	}
	if o.maxMDN != 0 {
		po.MaxMDNBytes = o.maxMDN
	}
	if o.log != nil {
		po.Logger = o.log
	}
	p, err := mdn.NewPoller(po)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// runPoller runs p under fence f until the test ends; Run must return nil.
func (e *env) runPoller(p *mdn.Poller, f hub.Fence) {
	e.t.Helper()
	background(e.t, "poller", func(ctx context.Context) error { return p.Run(leader.WithFence(ctx, f)) })
}

// micOf returns the MIC of message m in alg as the partner computes it:
// the bytes sent, decrypted with the partner's key, unwrapped asking for
// alg (signed-receipt-micalg). It first checks that the partner's SHA-256
// MIC is the one stored (which the outbox tests check against openssl's
// digest).
func (e *env) micOf(m hub.MessageInfo, alg crypto.Hash) string {
	e.t.Helper()
	h, body, err := e.st.SentBytes(context.Background(), m.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	partnerMIC := func(alg crypto.Hash) as2.MIC {
		u, err := as2.Unwrap(h, bytes.Clone(body), as2.UnwrapOptions{
			Keys:         []cms.Recipient{{Cert: e.ids.A.Cert, Key: e.ids.A.Key.(crypto.Decrypter)}},
			PartnerCerts: []*x509.Certificate{e.ids.B.Cert},
			MICAlgs:      []crypto.Hash{alg},
		})
		if err != nil {
			e.t.Fatalf("the partner cannot unwrap message %d: %v", m.ID, err)
		}
		return u.MIC
	}
	if got := partnerMIC(crypto.SHA256).String(); got != m.MIC {
		e.t.Fatalf("partner's SHA-256 MIC of message %d = %q, stored MIC %q", m.ID, got, m.MIC)
	}
	return partnerMIC(alg).String()
}

// TestPollerDispositions sends a message per case, stores the MDN the case
// describes, runs one poller and checks where each MDN and message ended.
func TestPollerDispositions(t *testing.T) {
	e := newEnv(t, envOptions{})
	type want struct {
		state       string // inbox state
		status      string // message status afterwards
		reason      string // substring of the inbox reason
		errText     string // substring of the message error
		micVerified *bool
	}
	yes, no := true, false
	tests := []struct {
		name    string
		partner string
		mdn     func(m hub.MessageInfo) mdnOpts
		want    want
	}{
		{
			name: "positive signed", partner: signedPartner,
			mdn:  func(m hub.MessageInfo) mdnOpts { return mdnOpts{id: m.MessageID, mic: m.MIC, signer: e.ids.A} },
			want: want{state: postgres.InboxProcessed, status: "delivered", micVerified: &yes},
		},
		{
			name: "positive, MIC in another algorithm recomputed", partner: signedPartner,
			mdn: func(m hub.MessageInfo) mdnOpts {
				return mdnOpts{id: m.MessageID, mic: e.micOf(m, crypto.SHA512), signer: e.ids.A}
			},
			want: want{state: postgres.InboxProcessed, status: "delivered", micVerified: &yes},
		},
		{
			name: "signed and encrypted, MIC in SHA-384", partner: securePartner,
			mdn: func(m hub.MessageInfo) mdnOpts {
				return mdnOpts{id: m.MessageID, mic: e.micOf(m, crypto.SHA384), signer: e.ids.A}
			},
			want: want{state: postgres.InboxProcessed, status: "delivered", micVerified: &yes},
		},
		{
			name: "signed and encrypted, MIC in SHA-1", partner: securePartner,
			mdn: func(m hub.MessageInfo) mdnOpts {
				return mdnOpts{id: m.MessageID, mic: e.micOf(m, crypto.SHA1), signer: e.ids.A}
			},
			want: want{state: postgres.InboxProcessed, status: "delivered", micVerified: &yes},
		},
		{
			name: "signed and encrypted, wrong MIC in SHA-384", partner: securePartner,
			mdn: func(m hub.MessageInfo) mdnOpts {
				return mdnOpts{id: m.MessageID, mic: as2.ComputeMIC(crypto.SHA384, []byte("something else")).String(), signer: e.ids.A}
			},
			want: want{state: postgres.InboxProcessed, status: "failed", errText: "MIC mismatch"},
		},
		{
			name: "Original-Message-ID without brackets", partner: signedPartner,
			mdn: func(m hub.MessageInfo) mdnOpts {
				return mdnOpts{id: strings.Trim(m.MessageID, "<>"), mic: m.MIC, signer: e.ids.A}
			},
			want: want{state: postgres.InboxProcessed, status: "delivered", micVerified: &yes},
		},
		{
			name: "negative", partner: signedPartner,
			mdn: func(m hub.MessageInfo) mdnOpts {
				return mdnOpts{id: m.MessageID, disp: mdn.Errored(as2.DispositionDecryptionFailed), signer: e.ids.A}
			},
			want: want{state: postgres.InboxProcessed, status: "failed", reason: "negative MDN", errText: "negative MDN: automatic-action/MDN-sent-automatically; processed/Error: decryption-failed"},
		},
		{
			name: "MIC mismatch", partner: signedPartner,
			mdn: func(m hub.MessageInfo) mdnOpts {
				return mdnOpts{id: m.MessageID, mic: "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=, sha-256", signer: e.ids.A}
			},
			want: want{state: postgres.InboxProcessed, status: "failed", errText: "MIC mismatch"},
		},
		{
			name: "signed MDN without MIC", partner: signedPartner,
			mdn:  func(m hub.MessageInfo) mdnOpts { return mdnOpts{id: m.MessageID, signer: e.ids.A} },
			want: want{state: postgres.InboxProcessed, status: "failed", errText: "signed receipt without Received-content-MIC"},
		},
		{
			name: "unsigned MDN without MIC for an unsigned receipt", partner: plainPartner,
			mdn:  func(m hub.MessageInfo) mdnOpts { return mdnOpts{id: m.MessageID} },
			want: want{state: postgres.InboxProcessed, status: "delivered", reason: "MIC unverified", micVerified: &no},
		},
		{
			name: "unsigned MDN with MIC for an unsigned receipt", partner: plainPartner,
			mdn:  func(m hub.MessageInfo) mdnOpts { return mdnOpts{id: m.MessageID, mic: m.MIC} },
			want: want{state: postgres.InboxProcessed, status: "delivered", micVerified: &yes},
		},
		{
			name: "bad signature", partner: signedPartner,
			mdn:  func(m hub.MessageInfo) mdnOpts { return mdnOpts{id: m.MessageID, mic: m.MIC, signer: e.ids.C} },
			want: want{state: postgres.InboxOrphan, status: "awaiting-mdn", reason: "bad signature"},
		},
		{
			name: "unsigned MDN for a signed-receipt request", partner: signedPartner,
			mdn:  func(m hub.MessageInfo) mdnOpts { return mdnOpts{id: m.MessageID, mic: m.MIC} },
			want: want{state: postgres.InboxOrphan, status: "awaiting-mdn", reason: "asked for a signed receipt"},
		},
		{
			name: "unknown Original-Message-ID", partner: signedPartner,
			mdn: func(m hub.MessageInfo) mdnOpts {
				return mdnOpts{id: "<nobody-sent-this@example>", mic: m.MIC, signer: e.ids.A}
			},
			want: want{state: postgres.InboxOrphan, status: "awaiting-mdn", reason: "no outbound message with Message-ID \"<nobody-sent-this@example>\""},
		},
		{
			name: "wrong partner", partner: signedPartner,
			mdn: func(m hub.MessageInfo) mdnOpts {
				return mdnOpts{from: plainPartner, id: m.MessageID, mic: m.MIC, signer: e.ids.A}
			},
			want: want{state: postgres.InboxOrphan, status: "awaiting-mdn", reason: "to partner \"PLAIN\""},
		},
		{
			name: "unknown partner", partner: signedPartner,
			mdn: func(m hub.MessageInfo) mdnOpts {
				return mdnOpts{from: "STRANGER", id: m.MessageID, mic: m.MIC, signer: e.ids.A}
			},
			want: want{state: postgres.InboxOrphan, status: "awaiting-mdn", reason: "unknown partner"},
		},
	}
	type sentCase struct {
		msg   hub.MessageInfo
		inbox int64
	}
	sent := make([]sentCase, len(tests))
	for i, tt := range tests {
		m := e.send(tt.partner)
		o := tt.mdn(m)
		if o.from == "" {
			o.from = tt.partner
		}
		sent[i] = sentCase{msg: m, inbox: e.storeMDN(o)}
	}
	garbage := e.storeRaw(signedPartner, "", http.Header{"Content-Type": {"multipart/report; report-type=disposition-notification; boundary=x"}}, []byte("\x00\xffnot a report"))

	reg := prometheus.NewRegistry()
	e.runPoller(e.poller(pollerOptions{reg: reg}), e.openTerm(1))
	waitFor(t, "every MDN decided", func() bool { return e.pending() == 0 })

	// A second, valid MDN for a message that is final by now.
	late := e.storeMDN(mdnOpts{from: signedPartner, id: sent[0].msg.MessageID, mic: sent[0].msg.MIC, signer: e.ids.A})
	waitFor(t, "the late MDN decided", func() bool { return e.pending() == 0 })

	inbox := e.inbox()
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			row := inbox[sent[i].inbox]
			m := e.message(sent[i].msg.ID)
			if row.State != tt.want.state || !strings.Contains(row.Reason, tt.want.reason) || row.Fence == nil || *row.Fence != 1 {
				t.Errorf("inbox MDN = {state %q, reason %q, fence %v}, want state %q, reason containing %q, fence 1", row.State, row.Reason, row.Fence, tt.want.state, tt.want.reason)
			}
			if m.Status != tt.want.status || !strings.Contains(m.Error, tt.want.errText) {
				t.Errorf("message = {status %q, error %q}, want status %q, error containing %q", m.Status, m.Error, tt.want.status, tt.want.errText)
			}
			if (m.MICVerified == nil) != (tt.want.micVerified == nil) || m.MICVerified != nil && *m.MICVerified != *tt.want.micVerified {
				t.Errorf("message mic_verified = %v, want %v", ptrString(m.MICVerified), ptrString(tt.want.micVerified))
			}
			stored, err := e.st.MessageMDN(context.Background(), m.ID)
			switch tt.want.state {
			case postgres.InboxProcessed:
				if err != nil || row.MessageRef == nil || *row.MessageRef != m.ID || stored.Disposition == "" || m.CompletedAt == nil {
					t.Errorf("processed MDN: stored %v (disposition %q), message_ref %v, completed %v; want the MDN stored for message %d", err, stored.Disposition, row.MessageRef, m.CompletedAt, m.ID)
				}
				if m.Disposition != stored.Disposition {
					t.Errorf("message disposition %q, MDN's %q", m.Disposition, stored.Disposition)
				}
			default:
				if !errors.Is(err, hub.ErrNoMDN) || row.MessageRef != nil {
					t.Errorf("orphan: MessageMDN error %v, message_ref %v; want no MDN stored and no message", err, row.MessageRef)
				}
			}
		})
	}
	if row := inbox[garbage]; row.State != postgres.InboxOrphan || !strings.Contains(row.Reason, "unparseable") {
		t.Errorf("garbage MDN = {state %q, reason %q}, want orphan, unparseable", row.State, row.Reason)
	}
	if row := inbox[late]; row.State != postgres.InboxOrphan || !strings.Contains(row.Reason, "already final") {
		t.Errorf("MDN for a final message = {state %q, reason %q}, want orphan, already final", row.State, row.Reason)
	}
	if m := e.message(sent[0].msg.ID); m.Status != "delivered" {
		t.Errorf("message with a late second MDN: status %q, want delivered still", m.Status)
	}

	// Metrics: every decision counted once, orphans counted.
	var orphans, total float64
	for _, r := range inbox {
		if r.State == postgres.InboxOrphan {
			orphans++
		}
	}
	for _, p := range []string{signedPartner, plainPartner, securePartner, "unknown"} {
		for _, r := range []string{mdn.ResultDelivered, mdn.ResultFailed, mdn.ResultOrphan} {
			total += gaugeValue(t, reg, "edihub_mdn_processed_total", map[string]string{"partner": p, "result": r})
		}
	}
	if total != float64(len(inbox)) {
		t.Errorf("edihub_mdn_processed_total sums to %v, want %d (one per inbox MDN)", total, len(inbox))
	}
	waitFor(t, "the orphan gauge", func() bool { return gaugeValue(t, reg, "edihub_mdn_orphans", nil) == orphans })
	if got := gaugeValue(t, reg, "edihub_mdn_processed_total", map[string]string{"partner": "unknown", "result": "orphan"}); got != 1 {
		t.Errorf("orphans from unknown partners = %v, want 1 (labelled unknown)", got)
	}
}

func ptrString(b *bool) string {
	if b == nil {
		return "null"
	}
	return fmt.Sprint(*b)
}

// gaugeValue reads one sample of name with the given labels from reg
// (counter, gauge or histogram count); 0 when absent.
func gaugeValue(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue metrics
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

// gatedStore blocks the n-th ApplyMDNs call (1-based) until released.
type gatedStore struct {
	*postgres.Store
	n       int32
	calls   atomic.Int32
	arrived chan struct{}
	release chan struct{}
}

func (g *gatedStore) ApplyMDNs(ctx context.Context, f hub.Fence, outs []postgres.MDNOutcome) ([]postgres.AppliedMDN, error) {
	if g.calls.Add(1) == g.n {
		close(g.arrived)
		select {
		case <-g.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.Store.ApplyMDNs(ctx, f, outs)
}

// TestTwoPollersFences runs the poller of term 1 until it is between two
// batches, opens term 2 and runs its poller: term 1's next batch is refused
// and its Run ends with ErrStaleFence; every MDN is applied exactly once,
// and every message ends delivered.
func TestTwoPollersFences(t *testing.T) {
	e := newEnv(t, envOptions{})
	const n = 24
	var msgs []hub.MessageInfo
	for range n {
		msgs = append(msgs, e.send(signedPartner))
	}
	for _, m := range msgs {
		e.storeMDN(mdnOpts{from: signedPartner, id: m.MessageID, mic: m.MIC, signer: e.ids.A})
	}
	f1 := e.openTerm(1)
	gate := &gatedStore{Store: e.st, n: 2, arrived: make(chan struct{}), release: make(chan struct{})}
	regA := prometheus.NewRegistry()
	pA := e.poller(pollerOptions{store: gate, batch: 4, reg: regA})
	ctxA, cancelA := context.WithCancel(context.Background())
	doneA := make(chan error, 1)
	go func() { doneA <- pA.Run(leader.WithFence(ctxA, f1)) }()
	t.Cleanup(func() {
		cancelA()
		select {
		case <-doneA:
		default:
		}
	})
	select {
	case <-gate.arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("poller of term 1 never reached its second batch")
	}
	// Term 1 applied one batch; term 2 opens and its poller runs while
	// term 1's poller still holds its second batch.
	f2 := e.openTerm(2)
	regB := prometheus.NewRegistry()
	e.runPoller(e.poller(pollerOptions{batch: 4, reg: regB}), f2)
	waitFor(t, "term 2 to apply some MDNs", func() bool {
		for _, r := range e.inbox() {
			if r.Fence != nil && *r.Fence == 2 {
				return true
			}
		}
		return false
	})
	close(gate.release)
	select {
	case err := <-doneA:
		if !errors.Is(err, hub.ErrStaleFence) {
			t.Errorf("poller of term 1: Run = %v, want ErrStaleFence", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("poller of term 1 did not stop after its fence went stale")
	}
	waitFor(t, "every MDN decided", func() bool { return e.pending() == 0 })

	// A stale fence applies nothing, even a valid outcome.
	extra := e.send(signedPartner)
	id := e.storeMDN(mdnOpts{from: signedPartner, id: extra.MessageID, mic: extra.MIC, signer: e.ids.A})
	_, err := e.st.ApplyMDNs(context.Background(), f1, []postgres.MDNOutcome{{InboxID: id, Partner: signedPartner, Message: &postgres.MDNApply{MessageID: extra.ID, Status: "failed", Error: "stale"}}})
	if !errors.Is(err, hub.ErrStaleFence) {
		t.Errorf("ApplyMDNs with a stale fence = %v, want ErrStaleFence", err)
	}
	waitFor(t, "term 2 to apply the extra MDN", func() bool { return e.pending() == 0 })
	if m := e.message(extra.ID); m.Status != "delivered" {
		t.Errorf("message after a stale write and a current one: %q, want delivered", m.Status)
	}

	byFence := map[int64]int{}
	for _, r := range e.inbox() {
		if r.State != postgres.InboxProcessed || r.Fence == nil || r.ProcessedAt == nil {
			t.Errorf("inbox MDN %d = {state %q, fence %v, reason %q}, want processed with a fence", r.ID, r.State, r.Fence, r.Reason)
			continue
		}
		byFence[*r.Fence]++
	}
	if byFence[1] != 4 || byFence[1]+byFence[2] != n+1 {
		t.Errorf("MDNs applied by term = %v, want 4 by term 1 (its first batch) and the rest (%d) by term 2", byFence, n+1-4)
	}
	for _, m := range append(msgs, extra) {
		if got := e.message(m.ID); got.Status != "delivered" || got.CompletedAt == nil {
			t.Errorf("message %d: status %q, want delivered", m.ID, got.Status)
		}
	}
	a := gaugeValue(t, regA, "edihub_mdn_processed_total", map[string]string{"partner": signedPartner, "result": "delivered"})
	b := gaugeValue(t, regB, "edihub_mdn_processed_total", map[string]string{"partner": signedPartner, "result": "delivered"})
	if a != 4 || a+b != n+1 {
		t.Errorf("delivered counted by term 1 %v and term 2 %v, want 4 and %d", a, b, n+1-4)
	}
	if got := gaugeValue(t, regB, "edihub_mdn_latency_seconds", nil); got != b {
		t.Errorf("latency observations of term 2 = %v, want %v (one per applied MDN)", got, b)
	}
}
