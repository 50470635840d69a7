// Package receiver is edihub's AS2 endpoint, POST /as2 on every replica.
//
// A request is either an asynchronous MDN a partner returns for a message
// we sent (stored raw in the MDN inbox and answered at once; the leader's
// MDN poller processes it) or an AS2 message. A message is unwrapped
// (decrypted, decompressed, verified, its MIC computed), stored with its
// payload and the MDN that answers it in one transaction, and only then
// answered: with the MDN in the response (synchronous), or with an empty
// 200 after the MDN was queued in the outbox (asynchronous). A repeated
// Message-ID from the same partner is answered with the MDN stored the
// first time, byte for byte, and delivered nothing (RFC 4130 §5.5).
//
// Every failure of the message itself is an MDN disposition with HTTP 200;
// only requests that cannot be addressed (no AS2-From, AS2-To), requests
// from unknown parties without an MDN request (403, answered before the
// body is read, MDNs included), bodies over the limit and async MDNs over
// their own, much smaller limit (413), bodies not
// received within the read timeout (408), unreadable bodies (400), an
// unavailable database (503, so that the partner retries) and requests
// over the in-flight byte budget or the partner's concurrency cap (503
// with Retry-After, decided from the header when possible) are HTTP
// errors, and so are resumes of an AS2 restart transfer (restart.go) at
// another offset than the bytes held (416) or of a transfer not held
// (412). Internal error text is logged, never sent.
package receiver

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/interchange"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/spool"
)

// Store is the storage the receiver needs; *postgres.Store implements it.
type Store interface {
	// SaveInbound stores a message, its payload, its MDN and the outbox
	// row of an async MDN in one transaction; postgres.ErrDuplicateInbound
	// when the partner's Message-ID is already stored.
	SaveInbound(ctx context.Context, m *postgres.InboundMessage) (int64, error)
	// InboundByMessageID finds a stored message and its MDN;
	// postgres.ErrInboundNotFound when there is none.
	InboundByMessageID(ctx context.Context, partner, messageID string) (*postgres.InboundRecord, error)
	// RequeueInboundMDN queues a stored MDN to url again.
	RequeueInboundMDN(ctx context.Context, id int64, url string, r postgres.Retry) error
	// SaveInboxMDN stores an async MDN raw.
	SaveInboxMDN(ctx context.Context, m *postgres.InboxMDN) (int64, error)
	// The replay check (see checkReplay): it guards a partner against a
	// captured message replayed under a new Message-ID, so it is part of
	// the store, not an option of it.
	replayFinder
}

// Partners finds a partner profile by its AS2 ID, case-sensitively;
// *config.File implements it.
type Partners interface {
	Partner(as2ID string) (*config.Partner, bool)
}

// Station is our own AS2 identity.
type Station struct {
	// AS2ID is the name partners put in AS2-To.
	AS2ID string
	// Keys decrypt inbound messages (several during a key rollover).
	Keys []cms.Recipient
	// Key and Cert sign MDNs.
	Key  crypto.Signer
	Cert *x509.Certificate
}

// StationFromConfig is the receiver's view of the configured station:
// every key pair decrypts (a key rollover), the active one signs MDNs.
func StationFromConfig(st config.Station) Station {
	out := Station{AS2ID: st.AS2ID, Key: st.PrivateKey, Cert: st.Certificate}
	for _, k := range st.Keys {
		out.Keys = append(out.Keys, cms.Recipient{Cert: k.Certificate, Key: k.PrivateKey})
	}
	if len(out.Keys) == 0 && st.PrivateKey != nil {
		out.Keys = []cms.Recipient{{Cert: st.Certificate, Key: st.PrivateKey}}
	}
	return out
}

// Options configure New. Store, Logger, Registerer and either Config or
// Partners and Station (AS2ID, Keys, Key, Cert) are required.
type Options struct {
	Store Store
	// Config, when set, gives the partners and the station in force: each
	// request reads it once, when its header arrives, and keeps that
	// snapshot to its end. Partners and Station are then not used.
	Config   config.Source
	Partners Partners
	Station  Station
	// CertificateUses, when set, records when a partner first signs with
	// a certificate its profile switches to on first use.
	CertificateUses CertificateUseRecorder
	Logger          *zap.Logger
	// Registerer receives the receiver's metrics.
	Registerer prometheus.Registerer
	// Now is the clock (MDN Date and signing time, durations); nil means
	// time.Now.
	Now func() time.Time
	// Rand supplies MIME boundaries; nil means crypto/rand.
	Rand io.Reader
	// NewMessageID returns the Message-ID of each MDN; nil means
	// MessageIDs of the answering station's AS2 ID and Rand.
	NewMessageID func() string
	// Limits bound the MIME and CMS parse.
	Limits as2.Limits
	// PartnerIDs, when set, are the configured partners whose series are
	// exported at zero from the start (a series that first appears with
	// its value shows no increase in Prometheus).
	PartnerIDs []string
	// MaxBodyBytes is the body limit the router enforces, quoted in the
	// 413 answer; 0 leaves the number out.
	MaxBodyBytes int64
	// MaxMDNBytes bounds the body of an async MDN, far below MaxBodyBytes
	// (an MDN is a few KiB, and the leader's poller reads them): a larger
	// one is answered 413 and not stored. A multipart/report, told from
	// the header, is refused by its Content-Length before its body is read
	// and read no further than the limit; a signed MDN, told from its
	// first part, once read. 0 means mdn.DefaultMaxMDNBytes.
	MaxMDNBytes int64
	// ReportingUA is the MDN's Reporting-UA; empty means "edihub".
	ReportingUA string
	// ReadTimeout bounds reading a request body, from the end of its
	// header; a body not received in time is answered 408 and nothing is
	// stored. 0 means DefaultReadTimeout.
	ReadTimeout time.Duration
	// MaxInFlightBytes bounds the bytes all requests in flight hold at
	// once, process-wide: bodies (reserved as they arrive, so that a
	// connection announcing a large body it does not send holds nothing
	// of it) and decompression output (reserved as it grows). A request
	// that does not fit is answered 503 with Retry-After, nothing stored;
	// from its header when its Content-Length does not fit what is free.
	// 0 means no limit.
	MaxInFlightBytes int64
	// MaxConcurrentPerPartner bounds the requests in flight per partner;
	// over it, 503 with Retry-After before the body is read. 0 means no
	// limit.
	MaxConcurrentPerPartner int
	// RetryAfter is the Retry-After of a 503; 0 means DefaultRetryAfter.
	RetryAfter time.Duration
	// Spool, when set, takes the bodies of messages larger than
	// SpoolFromBytes (by their Content-Length) and every chunked body: a
	// body is written to a spool file as it arrives, counted against the
	// spool's limit on disk instead of MaxInFlightBytes (a Content-Length
	// that does not fit what is free is refused from the header, 503 with
	// Retry-After), and unwrapped as a stream (as2.UnwrapStream) into a
	// second spool file that the store reads. Both are removed when the
	// request ends, on every path. nil holds every body in memory.
	Spool *spool.Spool
	// SpoolFromBytes is the Content-Length above which a body is spooled;
	// 0 means DefaultSpoolFromBytes. An async MDN told from the header is
	// never spooled; a signed one spooled is read back for the intake.
	SpoolFromBytes int64
	// RetryWindow is how long an async MDN we owe a partner is retried,
	// past the partner's max_attempts, when its profile sets no
	// retry_window (edihub serve's EDIHUB_RETRY_WINDOW): an MDN the
	// partner never gets leaves its message unacknowledged there. 0 means
	// max_attempts alone.
	RetryWindow time.Duration
	// Restart, when set with Spool, lets partners resume an interrupted
	// transfer of a large message (draft-harding-as2-restart; see
	// restart.go): a request that asks for it with EDIINT-Features:
	// AS2-Restart and an ETag, whose Content-Length is over
	// SpoolFromBytes, from a partner whose profile allows it
	// (as2_restart), has its body kept here as it arrives, for HEAD and
	// the resumed POST to find on any replica. *postgres.Store
	// implements it.
	Restart RestartStore
	// RestartLimits bound the bytes of open transfers, per partner and
	// in all; a transfer over them is received without restart.
	RestartLimits postgres.RestartLimits
	// EDI, when set, reads the envelope of every processed payload
	// before the answer: to refuse duplicate interchanges a partner's
	// profile refuses, and to decide what the receipt stores with the
	// message in its transaction (its interchanges, the settlement of
	// acknowledgements it carries, ours); after the message is stored,
	// to report it. *interchange.Tracker implements it.
	EDI EDI
}

// EDI is the receiver's EDI step (see Options.EDI).
type EDI interface {
	// Inspect reads the payload's envelope (as a stream: a payload of any
	// size).
	Inspect(ctx context.Context, p *config.Partner, payload io.Reader) interchange.Inspection
	// Received reports what the receipt stored with the message (its
	// Inspection.Save, set as the message's EDI).
	Received(p *config.Partner, id int64, in interchange.Inspection)
}

// DefaultSpoolFromBytes is the SpoolFromBytes of Options that set none:
// smaller messages are faster in memory and take little of it.
const DefaultSpoolFromBytes = 8 << 20

// DefaultRetryAfter is the Retry-After of Options that set none.
const DefaultRetryAfter = 10 * time.Second

// DefaultReadTimeout is the ReadTimeout of Options that set none.
const DefaultReadTimeout = 5 * time.Minute

// Handler serves POST /as2. It is safe for concurrent use.
type Handler struct {
	o       Options
	log     *zap.Logger
	metrics *metrics
	budget  *budget
	// restartEvents counts AS2 restart transfers (registered with
	// Options.Restart).
	restartEvents *prometheus.CounterVec
	// station caches the receiver's view of the station of the last
	// snapshot of Config.
	station atomic.Pointer[stationView]
}

// stationView is the receiver's view of the stations of one snapshot.
type stationView struct {
	cfg      *config.File
	stations map[string]*Station
	first    *Station
}

// directory is what a request is addressed with: the partners and
// stations in force when its header arrived.
type directory struct {
	partners Partners
	stations map[string]*Station // nil: the one Options.Station
	first    *Station
}

// station returns the station whose AS2 ID is id, or false.
func (d directory) station(id string) (*Station, bool) {
	if d.stations == nil {
		return d.first, d.first.AS2ID == id
	}
	st, ok := d.stations[id]
	return st, ok
}

// partnerStation returns the station a partner trades with.
func (d directory) partnerStation(p *config.Partner) *Station {
	if st, ok := d.stations[p.Station]; ok {
		return st
	}
	return d.first
}

// directory returns the partners and the stations in force now.
func (h *Handler) directory() directory {
	if h.o.Config == nil {
		return directory{partners: h.o.Partners, first: &h.o.Station}
	}
	cfg := h.o.Config.Current()
	v := h.station.Load()
	if v == nil || v.cfg != cfg {
		v = &stationView{cfg: cfg, stations: map[string]*Station{}}
		for _, st := range cfg.Stations {
			rs := StationFromConfig(st)
			v.stations[st.AS2ID] = &rs
		}
		first := StationFromConfig(cfg.Station)
		v.first = &first
		if st, ok := v.stations[cfg.Station.AS2ID]; ok {
			v.first = st
		}
		h.station.Store(v)
	}
	return directory{partners: cfg, stations: v.stations, first: v.first}
}

// New validates o and returns the handler, its metrics registered on
// o.Registerer.
func New(o Options) (*Handler, error) {
	switch {
	case o.Store == nil:
		return nil, errors.New("receiver: no Store")
	case o.Config != nil:
		// partners and station come from each snapshot
	case o.Partners == nil:
		return nil, errors.New("receiver: no Partners")
	case o.Station.AS2ID == "":
		return nil, errors.New("receiver: no station AS2 ID")
	case len(o.Station.Keys) == 0:
		return nil, errors.New("receiver: no station decryption key")
	case o.Station.Key == nil || o.Station.Cert == nil:
		return nil, errors.New("receiver: no station signing key and certificate")
	case o.Logger == nil:
		return nil, errors.New("receiver: no Logger")
	case o.Registerer == nil:
		return nil, errors.New("receiver: no Registerer")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rand == nil {
		o.Rand = rand.Reader
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = DefaultReadTimeout
	}
	if o.ReportingUA == "" {
		o.ReportingUA = "edihub"
	}
	if o.RetryAfter <= 0 {
		o.RetryAfter = DefaultRetryAfter
	}
	if o.MaxInFlightBytes < 0 || o.MaxConcurrentPerPartner < 0 || o.MaxMDNBytes < 0 {
		return nil, errors.New("receiver: negative MaxInFlightBytes, MaxConcurrentPerPartner or MaxMDNBytes")
	}
	if o.MaxMDNBytes == 0 {
		o.MaxMDNBytes = mdn.DefaultMaxMDNBytes
	}
	if o.SpoolFromBytes <= 0 {
		o.SpoolFromBytes = DefaultSpoolFromBytes
	}
	b := newBudget(o.MaxInFlightBytes, o.MaxConcurrentPerPartner)
	m, err := newMetrics(o.Registerer, b)
	if err != nil {
		return nil, err
	}
	if o.Spool != nil {
		if err := registerSpool(o.Registerer, o.Spool.Used); err != nil {
			return nil, err
		}
	}
	restartEvents, err := newRestartMetric(prometheus.NewRegistry())
	if o.Restart != nil {
		restartEvents, err = newRestartMetric(o.Registerer)
	}
	if err != nil {
		return nil, err
	}
	for _, p := range o.PartnerIDs {
		m.received.WithLabelValues(p, resultProcessed)
		m.bytes.WithLabelValues(p)
		m.inbox.WithLabelValues(p)
	}
	return &Handler{o: o, log: o.Logger.Named("receiver"), metrics: m, budget: b, restartEvents: restartEvents}, nil
}

// noteSigner records the first time a partner signs with a certificate
// its profile switches to on first use (config.CertificateSchedule), so
// that every replica encrypts to it from then on. A failure is logged:
// the message is accepted all the same, and the next one records it.
func (h *Handler) noteSigner(ctx context.Context, log *zap.Logger, p *config.Partner, signer *x509.Certificate) {
	if h.o.CertificateUses == nil || signer == nil {
		return
	}
	for i, c := range p.Certificates {
		if i >= len(p.Schedules) || !p.Schedules[i].SwitchOnFirstUse || !c.Equal(signer) {
			continue
		}
		fp := config.Fingerprint(c)
		if _, seen := p.CertificateUses[fp]; seen {
			return
		}
		first, err := h.o.CertificateUses.RecordCertificateUse(ctx, p.AS2ID, fp)
		switch {
		case err != nil:
			log.Warn("record the first use of a partner certificate", zap.Error(err))
		case first:
			log.Info("partner signed with its new certificate for the first time: outbound messages are encrypted to it from now on",
				zap.String("serial", c.SerialNumber.Text(16)), zap.String("sha256", fp))
		}
		return
	}
}

// CertificateUseRecorder records the first use of a partner certificate;
// *postgres.Store implements it.
type CertificateUseRecorder interface {
	RecordCertificateUse(ctx context.Context, partner, fingerprint string) (bool, error)
}

// Results counted in edihub_as2_messages_received_total besides
// "processed" and the disposition modifiers.
const (
	resultProcessed   = "processed"
	resultDuplicate   = "duplicate"
	resultTooLarge    = "too-large"
	resultBadRequest  = "bad-request"
	resultUnavailable = "unavailable"
	resultTimeout     = "timeout"
	resultBusy        = "busy"
	partnerUnknown    = "unknown"
)

// ServeHTTP receives one AS2 message or async MDN. The sender is
// identified before the body is read: a request from an unknown
// AS2-From/AS2-To pair is refused without reading it, and the body must
// arrive within Options.ReadTimeout.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if r.Method == http.MethodHead {
		h.serveHead(w, r) // AS2 restart: how much of a transfer arrived
		return
	}
	rq := parseRequest(r.Header)
	partner, res := h.address(r.Header, &rq)
	if res != nil {
		// The body stays unread: close the connection rather than let
		// net/http wait for it.
		w.Header().Set("Connection", "close")
		h.metrics.received.WithLabelValues(res.partner, res.result).Inc()
		h.metrics.duration.Observe(time.Since(start).Seconds())
		res.write(w)
		return
	}
	partnerLabel := partner.AS2ID
	// An async MDN told from the header alone is bounded before its body
	// is read (a signed one is bounded in intake).
	reportMDN := mdn.IsMDN(r.Header, nil)
	if reportMDN && r.ContentLength > h.o.MaxMDNBytes {
		w.Header().Set("Connection", "close")
		h.mdnTooLarge(w, partnerLabel, r.ContentLength)
		return
	}
	if h.restartable(r, partner, reportMDN) {
		h.serveRestart(w, r, rq, partner, start)
		return
	}
	if h.o.Spool != nil && !reportMDN && (r.ContentLength < 0 || r.ContentLength > h.o.SpoolFromBytes) {
		h.serveSpooled(w, r, rq, partner, start)
		return
	}
	declared := max(r.ContentLength, 0)
	held, err := h.budget.admit(partnerLabel, declared)
	if err != nil {
		// Decided from the header: the body stays unread.
		w.Header().Set("Connection", "close")
		h.busy(w, partnerLabel, "admission")
		return
	}
	defer held.release()
	r.Body = struct {
		io.Reader
		io.Closer
	}{&bodyReader{r: r.Body, res: held, declared: declared}, r.Body}
	if reportMDN {
		r.Body = http.MaxBytesReader(w, r.Body, h.o.MaxMDNBytes)
	}
	body, err := h.readBody(w, r)
	if err != nil {
		h.bodyError(w, partnerLabel, err, reportMDN)
		return
	}
	h.metrics.bytes.WithLabelValues(partnerLabel).Add(float64(len(body)))
	if mdn.IsMDN(r.Header, body) {
		h.intake(w, r, body, partnerLabel)
		return
	}
	out := h.receive(r.Context(), r.Header, body, rq, partner, held, nil)
	h.answer(w, out, partnerLabel, "decompression", start)
}

// answer writes what receive returned, or 503 busy (stage names where
// the budget ran out).
func (h *Handler) answer(w http.ResponseWriter, out *response, partnerLabel, stage string, start time.Time) {
	if out.result == resultBusy {
		h.busy(w, partnerLabel, stage)
		return
	}
	h.metrics.received.WithLabelValues(out.partner, out.result).Inc()
	h.metrics.duration.Observe(time.Since(start).Seconds())
	out.write(w)
}

// busy answers a request that does not fit the in-flight budget or its
// partner's concurrency cap: 503 with Retry-After, nothing stored.
func (h *Handler) busy(w http.ResponseWriter, partner, stage string) {
	h.metrics.received.WithLabelValues(partner, resultBusy).Inc()
	h.metrics.busy.WithLabelValues(partner, stage).Inc()
	h.log.Warn("request refused: in-flight budget or partner concurrency cap reached", zap.String("partner", partner), zap.String("stage", stage),
		zap.Int64("in_flight_bytes", h.budget.inUse()), zap.Int64("limit", h.o.MaxInFlightBytes))
	w.Header().Set("Retry-After", strconv.Itoa(int(h.o.RetryAfter.Round(time.Second)/time.Second)))
	http.Error(w, "busy: nothing was accepted, please resend after the Retry-After delay", http.StatusServiceUnavailable)
}
