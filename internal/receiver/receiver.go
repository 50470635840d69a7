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
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
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

// MessageIDs returns a Message-ID generator: "<edihub-" + 16 random hex
// bytes + "@" + station + ">", the station name reduced to characters
// allowed in a Message-ID. It panics only if rnd fails.
func MessageIDs(station string, rnd io.Reader) func() string {
	right := messageIDHost(station)
	return func() string { return newMessageID(right, rnd) }
}

// messageIDHost is the right-hand side of the Message-IDs of station.
func messageIDHost(station string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			return r
		}
		return '_'
	}, station)
}

// newMessageID is one of MessageIDs' Message-IDs for host.
func newMessageID(host string, rnd io.Reader) string {
	var r [16]byte
	if _, err := io.ReadFull(rnd, r[:]); err != nil {
		panic(fmt.Sprintf("receiver: message ID randomness: %v", err))
	}
	b := make([]byte, 0, len("<edihub-")+32+1+len(host)+1)
	b = append(b, "<edihub-"...)
	b = hex.AppendEncode(b, r[:])
	b = append(b, '@')
	b = append(b, host...)
	return string(append(b, '>'))
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

// bodyError answers a body that could not be read (or spooled) whole.
func (h *Handler) bodyError(w http.ResponseWriter, partnerLabel string, err error, reportMDN bool) {
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, errBusy):
		h.busy(w, partnerLabel, "body")
	case errors.Is(err, spool.ErrFull):
		h.busy(w, partnerLabel, "spool")
	case errors.As(err, &mbe) && reportMDN && mbe.Limit == h.o.MaxMDNBytes:
		h.mdnTooLarge(w, partnerLabel, -1)
	case errors.As(err, &mbe):
		h.metrics.received.WithLabelValues(partnerLabel, resultTooLarge).Inc()
		h.log.Warn("request body over the limit", zap.String("partner", partnerLabel), zap.Int64("limit", mbe.Limit))
		http.Error(w, "request body too large: the limit is "+strconv.FormatInt(mbe.Limit, 10)+" bytes; send large files in smaller parts or ask the operator to raise EDIHUB_MAX_BODY_BYTES", http.StatusRequestEntityTooLarge)
	case isTimeout(err):
		h.metrics.received.WithLabelValues(partnerLabel, resultTimeout).Inc()
		h.log.Warn("request body not received in time", zap.String("partner", partnerLabel), zap.Duration("timeout", h.o.ReadTimeout))
		http.Error(w, "request body not received within "+h.o.ReadTimeout.String()+"; nothing was accepted, please resend", http.StatusRequestTimeout)
	default:
		h.metrics.received.WithLabelValues(partnerLabel, resultBadRequest).Inc()
		h.log.Warn("request body unreadable", zap.String("partner", partnerLabel), zap.Error(err))
		http.Error(w, "request body could not be read completely", http.StatusBadRequest)
	}
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

// address finds the partner of a request from its header alone, for
// messages and async MDNs alike: anyone else's body is never read. A nil
// partner comes with the answer to send.
func (h *Handler) address(hdr http.Header, rq *request) (*config.Partner, *response) {
	if rq.from == "" || rq.to == "" {
		h.log.Info("request without a valid AS2-From or AS2-To", zap.String("as2_from", hdr.Get("AS2-From")), zap.String("as2_to", hdr.Get("AS2-To")))
		return nil, textResponse(http.StatusBadRequest, partnerUnknown, resultBadRequest,
			"AS2-From and AS2-To header fields are required (1 to 128 printable ASCII characters, quoted when they hold spaces)")
	}
	dir := h.directory()
	partner, ok := dir.partners.Partner(rq.from)
	if ok {
		rq.station = dir.partnerStation(partner)
		if rq.to == rq.station.AS2ID {
			return partner, nil
		}
	}
	// Answered by the station addressed, if it is one of ours.
	if st, ok := dir.station(rq.to); ok {
		rq.station = st
	} else {
		rq.station = dir.first
	}
	log := h.log.With(zap.String("as2_from", rq.from), zap.String("as2_to", rq.to), zap.String("message_id", rq.messageID))
	log.Warn("unknown trading relationship")
	if !rq.mdnWanted || rq.messageID == "" {
		return nil, textResponse(http.StatusForbidden, partnerUnknown, mdn.UnknownTradingRelationship,
			"unknown trading relationship: no partner "+strconv.Quote(rq.from)+" configured for station "+strconv.Quote(rq.to))
	}
	// Not stored, and in the response even when an async MDN was asked
	// for: we send nothing to unknown parties' URLs. Signed with the
	// station key when a signed receipt was asked for, like every error.
	plan := planMDN(*rq)
	res, err := h.mdnResponse(*rq, mdnPlan{sign: plan.sign, alg: plan.alg}, mdn.Errored(mdn.UnknownTradingRelationship), "")
	if err != nil {
		log.Error("build MDN", zap.Error(err))
		return nil, textResponse(http.StatusInternalServerError, partnerUnknown, resultUnavailable, "internal error")
	}
	res.partner, res.result = partnerUnknown, mdn.UnknownTradingRelationship
	return nil, res
}

// isTimeout reports a body read that hit the read deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// readBody reads the body within Options.ReadTimeout and then clears the
// deadline (it would otherwise cancel the request's context while the
// message is processed). After an error the connection is closed.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(h.o.ReadTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return nil, fmt.Errorf("set read deadline: %w", err)
	}
	body, err := readBody(r)
	if err != nil {
		// The deadline stays: net/http must not wait for the rest.
		w.Header().Set("Connection", "close")
		return nil, err
	}
	_ = rc.SetReadDeadline(time.Time{})
	return body, nil
}

// readBody reads the whole body once, in pieces of growing size (capped
// at what Content-Length says is left) joined once: a client claiming a
// large body gets memory only for what it sent, and a large body peaks at
// twice its size instead of the up to three times of a doubling buffer.
func readBody(r *http.Request) ([]byte, error) {
	left := int64(-1) // unknown: chunked
	if r.ContentLength > 0 {
		left = r.ContentLength
	}
	var pieces [][]byte
	total, size := 0, 32<<10
	for {
		if left >= 0 {
			size = int(min(int64(size), left))
		}
		buf := make([]byte, size)
		n, err := fill(r.Body, buf)
		pieces = append(pieces, buf[:n])
		total += n
		if left >= 0 {
			left -= int64(n)
			if left == 0 && (err == nil || err == io.EOF) {
				break
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		size = min(size*2, 4<<20)
	}
	if len(pieces) == 1 {
		return pieces[0], nil
	}
	out := make([]byte, 0, total)
	for _, p := range pieces {
		out = append(out, p...)
	}
	if total >= collectAfterJoin {
		// The pieces were live when out was allocated, so the collector
		// may have set its next goal at twice both (4× the body) and let
		// garbage fill that. Collecting now sets it from the body alone.
		pieces = nil
		runtime.GC()
	}
	return out, nil
}

// collectAfterJoin is the body size from which readBody collects
// garbage after joining the pieces: a blocking collection costs a few
// milliseconds, a body this large twice its size in heap headroom.
const collectAfterJoin = 32 << 20

// fill reads into buf until it is full (nil error) or the body ends
// (io.EOF, the only clean end; a truncated chunked body reports
// io.ErrUnexpectedEOF, which is passed on).
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// response is what ServeHTTP writes.
type response struct {
	status  int
	header  http.Header
	body    []byte
	text    string // a plain-text error answer
	partner string // metric label
	result  string
}

func (res *response) write(w http.ResponseWriter) {
	for k, v := range res.header {
		w.Header()[k] = v
	}
	if res.text != "" {
		http.Error(w, res.text, res.status)
		return
	}
	if res.body != nil {
		w.Header().Set("Content-Length", strconv.Itoa(len(res.body)))
	}
	w.WriteHeader(res.status)
	_, _ = w.Write(res.body)
}

func textResponse(status int, partner, result, text string) *response {
	return &response{status: status, text: text, partner: partner, result: result}
}

// request holds the AS2 header fields of a message.
type request struct {
	// station is the station the request addresses, from the snapshot
	// its header was read with (set by address).
	station             *Station
	from, to, messageID string
	mdnWanted           bool
	asyncURL            string
	opts                as2.DispositionOptions
	optsErr             error
}

func parseRequest(h http.Header) request {
	rq := request{
		messageID: messageID(headerValue(h, "Message-Id")),
		mdnWanted: len(h["Disposition-Notification-To"]) > 0,
		asyncURL:  strings.TrimSpace(headerValue(h, "Receipt-Delivery-Option")),
	}
	rq.from, _ = as2.ParseAS2Name(headerValue(h, "As2-From"))
	rq.to, _ = as2.ParseAS2Name(headerValue(h, "As2-To"))
	if v := headerValue(h, "Disposition-Notification-Options"); v != "" {
		rq.opts, rq.optsErr = as2.ParseDispositionOptions(v)
	}
	return rq
}

// headerValue is h.Get for a key already in canonical form ("As2-From"
// for AS2-From): Get canonicalises its key each time, and builds a new
// string for one that is not, once per field per message.
func headerValue(h http.Header, canonicalKey string) string {
	if v := h[canonicalKey]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// messageID returns the Message-ID as received (net/http already trimmed
// it), or "" when it holds control characters no MDN could echo.
func messageID(v string) string {
	v = strings.TrimSpace(v)
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] == 0x7f {
			return ""
		}
	}
	return v
}

// mdnPlan is how the MDN is to be built: signed or not, and with which
// digest, or the failure the request itself earns.
type mdnPlan struct {
	sign    bool
	alg     crypto.Hash
	micAlgs []crypto.Hash
	failure string // "unsupported MIC-algorithms" etc., or ""
}

func planMDN(rq request) mdnPlan {
	p := mdnPlan{micAlgs: rq.opts.SupportedMICAlgs()}
	if len(p.micAlgs) > 0 {
		p.alg = p.micAlgs[0]
	}
	if !rq.opts.SignedReceipt() {
		if rq.opts.ProtocolImportance == "required" && len(rq.opts.Protocols) > 0 {
			p.failure = "unsupported format"
		}
		return p
	}
	p.sign = true
	if p.alg == 0 {
		if rq.opts.MICAlgImportance == "required" && len(rq.opts.MICAlgs) > 0 {
			// The receipt cannot be signed as asked; an unsigned
			// failure says so.
			p.sign = false
			p.failure = mdn.UnsupportedMICAlgorithms
		}
		p.alg = crypto.SHA256
	}
	return p
}

// exchange is one AS2 message being received: the request, the partner it
// comes from, the MDN it asks for, its share of the in-flight budget, the
// row being made of it, and the log carrying its names.
type exchange struct {
	log     *zap.Logger
	hdr     http.Header
	body    []byte
	rq      request
	plan    mdnPlan
	partner *config.Partner
	budget  *reservation
	msg     *postgres.InboundMessage
	// sp holds the spooled body and payload; nil when body holds it.
	sp *spooled
}

func (h *Handler) receive(ctx context.Context, hdr http.Header, body []byte, rq request, partner *config.Partner, budget *reservation, sp *spooled) *response {
	// The names go on every line logged about the message. Most messages
	// log one, the last, which is given them itself: log builds its
	// encoder only when something else is logged.
	names := [...]zap.Field{zap.String("as2_from", rq.from), zap.String("as2_to", rq.to), zap.String("message_id", rq.messageID), zap.String("partner", partner.AS2ID)}
	log := h.log.WithLazy(names[:]...)
	plan := planMDN(rq)
	if rq.messageID == "" {
		return h.noMessageID(log, rq, plan, partner)
	}

	// A resend is found by the insert, not looked up first: a new message
	// then costs one statement, and a resend (rare) an unwrap and an MDN
	// signature that are thrown away.
	msg := newInbound(rq, plan, partner)
	x := &exchange{log: log, hdr: hdr, body: body, rq: rq, plan: plan, partner: partner, budget: budget, msg: msg, sp: sp}
	t0 := time.Now()
	disp, mic, err := h.unwrap(ctx, x)
	unwrapTook := time.Since(t0)
	if err != nil {
		return &response{partner: partner.AS2ID, result: resultBusy}
	}
	asyncURL := h.asyncURL(log, rq, partner)
	if asyncURL != "" {
		msg.MDNMode, msg.MDNURL, msg.Outbox, msg.MDNRetry = "async", asyncURL, true, h.mdnRetry(partner)
	}
	var (
		edi       interchange.Inspection
		res       *response
		id        int64
		storeTook time.Duration
	)
	for attempt := 1; ; attempt++ {
		edi = h.inspectEDI(ctx, x, &disp)
		msg.Disposition = disp.String()
		if res, err = h.mdnReply(x, disp, mic); err != nil {
			log.Error("build MDN", zap.Error(err))
			return textResponse(http.StatusInternalServerError, partner.AS2ID, resultUnavailable, "internal error")
		}
		t1 := time.Now()
		id, err = h.o.Store.SaveInbound(ctx, msg)
		storeTook = time.Since(t1)
		// A copy of the same interchange, received at the same instant
		// and stored first (another replica), for a partner that refuses
		// duplicates: nothing was stored; look again, now to refuse it.
		if attempt == 1 && errors.Is(err, postgres.ErrDuplicateInterchange) {
			log.Info("duplicate interchange stored meanwhile; answering it refused", zap.Error(err))
			continue
		}
		break
	}
	if err != nil {
		return h.notStored(ctx, x, err, asyncURL)
	}
	if h.o.EDI != nil {
		h.o.EDI.Received(partner, id, edi)
	}
	res.partner, res.result = partner.AS2ID, resultFor(disp)
	if msg.Outbox {
		// The MDN leaves through the outbox; the partner gets 200 now.
		res = &response{status: http.StatusOK, partner: res.partner, result: res.result}
	}
	h.log.Info("message received", names[0], names[1], names[2], names[3], zap.String("disposition", msg.Disposition), zap.Int64("size", msg.PayloadSize),
		zap.String("mdn", msg.MDNMode), zap.Duration("unwrap", unwrapTook), zap.Duration("store", storeTook), zap.Bool("spooled", sp != nil))
	return res
}

// noMessageID answers a message without a Message-ID: an error MDN when a
// synchronous one was asked for, else 400.
func (h *Handler) noMessageID(log *zap.Logger, rq request, plan mdnPlan, partner *config.Partner) *response {
	log.Warn("message without Message-ID")
	if !rq.mdnWanted || rq.asyncURL != "" {
		return textResponse(http.StatusBadRequest, partner.AS2ID, resultBadRequest, "the Message-ID header field is required")
	}
	res, err := h.mdnResponse(rq, plan, mdn.Errored(as2.DispositionUnexpectedProcessing), "")
	if err != nil {
		log.Error("build MDN", zap.Error(err))
		return textResponse(http.StatusInternalServerError, partner.AS2ID, resultUnavailable, "internal error")
	}
	res.partner, res.result = partner.AS2ID, as2.DispositionUnexpectedProcessing
	return res
}

// newInbound is the row of a received message before its unwrap.
func newInbound(rq request, plan mdnPlan, partner *config.Partner) *postgres.InboundMessage {
	msg := &postgres.InboundMessage{
		Partner: partner.AS2ID, AS2From: rq.from, AS2To: rq.to, MessageID: rq.messageID,
		MDNMode: "none", MDNSigned: plan.sign,
	}
	if rq.mdnWanted {
		msg.MDNMode = "sync"
	}
	return msg
}

// mdnReply is the response to x with disposition disp: its MDN, also set
// on x.msg to be stored with it, when one is wanted, else a bare 200.
func (h *Handler) mdnReply(x *exchange, disp mdn.Disposition, mic string) (*response, error) {
	if !x.rq.mdnWanted {
		return &response{status: http.StatusOK}, nil
	}
	res, err := h.mdnResponse(x.rq, x.plan, disp, mic)
	if err != nil {
		return nil, err
	}
	x.msg.MDN = &postgres.StoredMDN{Header: res.header, Body: res.body, Disposition: x.msg.Disposition, MIC: mic, Signed: x.plan.sign}
	return res, nil
}

// notStored answers x when storing it failed with err: a resend, or a
// concurrent identical post that won the race, gets what was answered
// the first time; anything else 503.
func (h *Handler) notStored(ctx context.Context, x *exchange, err error, asyncURL string) *response {
	if !errors.Is(err, postgres.ErrDuplicateInbound) {
		x.log.Error("store inbound message", zap.Error(err))
		return unavailable(x.partner.AS2ID)
	}
	rec, err := h.o.Store.InboundByMessageID(ctx, x.partner.AS2ID, x.rq.messageID)
	if err != nil {
		x.log.Error("read back the stored MDN", zap.Error(err))
		return unavailable(x.partner.AS2ID)
	}
	return h.duplicate(ctx, x, rec, asyncURL)
}

// inspectEDI reads the envelope of a processed message's payload
// (Options.EDI) and sets what msg's receipt stores with it; a duplicate
// interchange the partner's profile refuses turns the message into a
// refused one, *disp and msg changed accordingly.
func (h *Handler) inspectEDI(ctx context.Context, x *exchange, disp *mdn.Disposition) interchange.Inspection {
	log, partner, msg := x.log, x.partner, x.msg
	if h.o.EDI == nil || msg.Status != postgres.InboundProcessed {
		return interchange.Inspection{}
	}
	edi := h.o.EDI.Inspect(ctx, partner, payloadReader(x))
	msg.EDI = edi.Save
	if edi.Refuse {
		// RFC 4130 §5.5's answer to a document received before; the
		// payload is not kept, so nothing is delivered twice.
		*disp = mdn.Warned(mdn.DuplicateDocument)
		msg.Status, msg.Error, msg.Payload, msg.PayloadOpen, msg.Staged = postgres.InboundError, edi.Reason, nil, nil, nil
		log.Warn("message refused: duplicate interchange", zap.String("reason", edi.Reason))
	}
	return edi
}

// mdnRetry is how an async MDN owed to partner is retried: as long as
// the partner's outbound messages (its max_attempts, its retry_window or
// the station's), for the partner that does not get it keeps waiting.
func (h *Handler) mdnRetry(partner *config.Partner) postgres.Retry {
	r := postgres.Retry{MaxAttempts: partner.MaxAttempts, Window: h.o.RetryWindow}
	if partner.RetryWindow > 0 {
		r.Window = partner.RetryWindow
	}
	return r
}

// asyncURL is the URL an asynchronous MDN goes to, or "" for an answer in
// the response. Receipt-Delivery-Option is not covered by any signature,
// so it is honoured only for an http or https URL whose host the
// partner's profile allows (config.Partner.AllowsMDNTarget: mdn_hosts,
// else the host of the partner's URL; never a non-public address unless
// allowed, checked again when the outbox dials). Signed or not, a message
// whose target is allowed gets its MDN asynchronously, as asked.
func (h *Handler) asyncURL(log *zap.Logger, rq request, partner *config.Partner) string {
	if !rq.mdnWanted || rq.asyncURL == "" {
		return ""
	}
	if err := partner.AllowsMDNTarget(rq.asyncURL); err != nil {
		h.metrics.mdnTargetRefused.WithLabelValues(partner.AS2ID).Inc()
		log.Warn("Receipt-Delivery-Option refused; MDN sent in the response", zap.String("receipt_delivery_option", redactURL(rq.asyncURL)), zap.Error(err))
		return ""
	}
	return rq.asyncURL
}

// redactURL removes the userinfo (a password) from a URL for logs and
// stored text; what cannot be parsed is replaced whole.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

func unavailable(partner string) *response {
	return textResponse(http.StatusServiceUnavailable, partner, resultUnavailable,
		"the message could not be stored; nothing was accepted, please resend later")
}

func resultFor(d mdn.Disposition) string {
	if d.Modifier == "" {
		return resultProcessed
	}
	return d.Description()
}

// unwrap runs the receive pipeline and fills msg; it returns the
// disposition and the MIC to report.
func (h *Handler) unwrap(ctx context.Context, x *exchange) (mdn.Disposition, string, error) {
	log, hdr, plan, partner, msg := x.log, x.hdr, x.plan, x.partner, x.msg
	msg.Status = postgres.InboundError
	if plan.failure != "" {
		msg.Error = "MDN request cannot be honoured: " + plan.failure
		log.Warn("MDN request cannot be honoured", zap.String("options", hdr.Get("Disposition-Notification-Options")))
		return mdn.Failed(plan.failure), "", nil
	}
	m, err := h.peel(ctx, x)
	if err == nil {
		msg.Signed, msg.Encrypted, msg.Compressed = m.Signed, m.Encrypted, m.Compressed
		switch {
		case partner.RequireSigned && !m.Signed && m.Encrypted:
			// Decrypted content no signature vouches for gets the answer
			// of every other failure under encryption: telling "your
			// padding was right" apart would be a decryption oracle.
			err = &as2.Error{Disposition: as2.DispositionDecryptionFailed,
				Err: fmt.Errorf("%w: partner profile requires signed messages; encrypted but unsigned", as2.ErrInsufficientSecurity)}
		case partner.RequireSigned && !m.Signed:
			err = fmt.Errorf("%w: partner profile requires signed messages", as2.ErrInsufficientSecurity)
		case partner.RequireEncrypted && !m.Encrypted:
			err = fmt.Errorf("%w: partner profile requires encrypted messages", as2.ErrInsufficientSecurity)
		}
	}
	if errors.Is(err, errBusy) {
		return mdn.Disposition{}, "", err
	}
	if err == nil && m.Signed {
		err = h.checkReplay(ctx, log, partner, x.rq.messageID, m)
	}
	if err != nil {
		d := as2.Disposition(err)
		msg.Error = err.Error()
		log.Warn("message refused", zap.String("disposition", d), zap.Error(err))
		return mdn.Errored(d), "", nil
	}
	if m.Signed {
		h.noteSigner(ctx, log, partner, m.Signer)
	}
	msg.Status = postgres.InboundProcessed
	msg.MIC = m.MIC.String()
	msg.MICAlg = as2.MICAlgName(m.MIC.Alg)
	msg.ContentType, msg.Filename = m.ContentType, m.Filename
	msg.PayloadSize = m.PayloadSize
	msg.Payload = m.Payload
	switch {
	case x.sp != nil:
		msg.PayloadOpen, msg.Staged = x.sp.payloadOpen(), x.sp.stage
		if m.Zlib != nil {
			msg.StagedZlib, msg.ZlibSkip = true, m.Zlib.Skip
		}
	case msg.Payload == nil:
		msg.Payload = []byte{}
	}
	return mdn.Processed(), msg.MIC, nil
}

// replayFinder claims signed content and finds earlier signed messages
// by MIC.
type replayFinder interface {
	ClaimSignedContent(ctx context.Context, partner, messageID, digest string, now, since time.Time) (string, error)
	SignedMICAlgs(ctx context.Context, partner, messageID string, since time.Time) ([]string, error)
	SignedByMIC(ctx context.Context, partner, messageID string, mics []string, since time.Time) (string, error)
}

// errReplay means the same signed content arrived before under another
// Message-ID and the partner's profile refuses replays.
var errReplay = errors.New("replay of signed content")

// checkReplay looks for the same signed content received from partner
// under another Message-ID within its replay window: a captured message
// replayed with a fresh Message-ID (which the duplicate check cannot
// catch), or a partner resending with a new ID. Such a message is logged
// and counted; with refuse_replays it is refused (authentication-failed).
// The content's SHA-256 is claimed first, in one statement (of two
// deliveries of the same content at once, one passes); then the stored
// messages are looked up (content received before the claims were kept):
// their MICs may be in any algorithm, so the content is digested in each
// algorithm found among them. A failing claim or lookup is logged, never
// fatal.
func (h *Handler) checkReplay(ctx context.Context, log *zap.Logger, partner *config.Partner, messageID string, m *as2.Message) error {
	rf := h.o.Store
	content := signedContent{bytes: m.SignedContent, digests: m.SignedDigests}
	if partner.ReplayWindow <= 0 || (m.SignedContent == nil && m.SignedDigests == nil) {
		return nil
	}
	now := h.o.Now()
	since := now.Add(-partner.ReplayWindow)
	digest, _ := content.mic(crypto.SHA256)
	first, err := rf.ClaimSignedContent(ctx, partner.AS2ID, messageID, hex.EncodeToString(digest.Digest), now, since)
	if err != nil {
		log.Warn("replay check", zap.Error(err))
	}
	if first == "" {
		if first = h.storedReplay(ctx, log, rf, partner.AS2ID, messageID, content, since); first == "" {
			return nil
		}
	}
	action := "flagged"
	if partner.RefuseReplays {
		action = "refused"
	}
	h.metrics.replays.WithLabelValues(partner.AS2ID, action).Inc()
	log.Warn("signed content received before under another Message-ID", zap.String("first_message_id", first),
		zap.Duration("window", partner.ReplayWindow), zap.String("action", action))
	if !partner.RefuseReplays {
		return nil
	}
	return &as2.Error{Disposition: as2.DispositionAuthenticationFailed, Err: fmt.Errorf("%w: first received as %s", errReplay, first)}
}

// storedReplay returns the Message-ID of a stored signed message partner
// sent since, other than messageID, with content's MIC, or "".
func (h *Handler) storedReplay(ctx context.Context, log *zap.Logger, rf replayFinder, partner, messageID string, content signedContent, since time.Time) string {
	algs, err := rf.SignedMICAlgs(ctx, partner, messageID, since)
	if err != nil {
		log.Warn("replay check", zap.Error(err))
		return ""
	}
	var mics []string
	for _, name := range algs {
		if alg, err := as2.ParseMICAlg(name); err == nil {
			if mic, ok := content.mic(alg); ok {
				mics = append(mics, mic.String())
			}
		}
	}
	if len(mics) == 0 {
		return ""
	}
	first, err := rf.SignedByMIC(ctx, partner, messageID, mics, since)
	if err != nil {
		log.Warn("replay check", zap.Error(err))
		return ""
	}
	return first
}

// unsignedMIC is the partner's MIC scope for unsigned, unencrypted
// messages: the content alone (RFC 4130 §7.3.1) unless its profile asks
// for the old form.
func unsignedMIC(p *config.Partner) as2.MICScope {
	if p.MICIncludeHeaders {
		return as2.MICWithHeaders
	}
	return as2.MICContentOnly
}

// mdnResponse builds the MDN and its HTTP header fields.
func (h *Handler) mdnResponse(rq request, plan mdnPlan, d mdn.Disposition, mic string) (*response, error) {
	now := h.o.Now()
	hdr, body, err := mdn.Build(mdn.Report{
		ReportingUA:       h.o.ReportingUA,
		OriginalRecipient: rq.to,
		FinalRecipient:    rq.to,
		OriginalMessageID: rq.messageID,
		Disposition:       d,
		MIC:               mic,
	}, mdn.BuildOptions{
		Sign: plan.sign, MICAlg: plan.alg, Key: rq.station.Key, Cert: rq.station.Cert, Rand: h.o.Rand, Time: now,
	})
	if err != nil {
		return nil, err
	}
	from, err := as2.FormatAS2Name(rq.to)
	if err != nil {
		return nil, err
	}
	to, err := as2.FormatAS2Name(rq.from)
	if err != nil {
		return nil, err
	}
	var id string
	if h.o.NewMessageID != nil {
		id = h.o.NewMessageID()
	} else {
		id = newMessageID(messageIDHost(rq.station.AS2ID), h.o.Rand)
	}
	// hdr.Set with the keys in canonical form (as Set stores them; the
	// EDIINT-Features key keeps its spelling), the values in one array.
	v := []string{"1.2", from, to, id, now.UTC().Format(time.RFC1123Z), "Message Disposition Notification", as2.EDIINTFeatures}
	hdr["As2-Version"] = v[0:1:1]
	hdr["As2-From"] = v[1:2:2]
	hdr["As2-To"] = v[2:3:3]
	hdr["Message-Id"] = v[3:4:4]
	hdr["Date"] = v[4:5:5]
	hdr["Subject"] = v[5:6:6]
	hdr["EDIINT-Features"] = v[6:7:7]
	return &response{status: http.StatusOK, header: hdr, body: body}, nil
}

// duplicate answers a resend: the MDN stored the first time, byte for
// byte; nothing is stored or delivered again. asyncURL is where the
// resend's own verified request wants its MDN, or "".
func (h *Handler) duplicate(ctx context.Context, x *exchange, rec *postgres.InboundRecord, asyncURL string) *response {
	log, rq, plan, partner := x.log, x.rq, x.plan, x.partner
	log.Info("duplicate message", zap.String("first_disposition", rec.Disposition))
	if !rq.mdnWanted {
		return &response{status: http.StatusOK, partner: partner.AS2ID, result: resultDuplicate}
	}
	if rec.MDN != nil {
		if asyncURL != "" && rec.MDNURL == "" {
			// The first answer went in the response: so does this one. A
			// resend never sends the stored MDN somewhere new.
			asyncURL = ""
		}
		if asyncURL != "" {
			if rec.MDNURL != asyncURL {
				log.Warn("resend asks for its MDN at another URL; sent to the first one", zap.String("receipt_delivery_option", redactURL(asyncURL)), zap.String("first", redactURL(rec.MDNURL)))
				asyncURL = rec.MDNURL
			}
			if err := h.o.Store.RequeueInboundMDN(ctx, rec.ID, asyncURL, h.mdnRetry(partner)); err != nil {
				log.Error("requeue MDN", zap.Error(err))
				return unavailable(partner.AS2ID)
			}
			return &response{status: http.StatusOK, partner: partner.AS2ID, result: resultDuplicate}
		}
		return &response{status: http.StatusOK, header: rec.MDN.Header.Clone(), body: rec.MDN.Body, partner: partner.AS2ID, result: resultDuplicate}
	}
	if asyncURL != "" {
		// Nothing stored to send; the first receipt asked for none.
		return &response{status: http.StatusOK, partner: partner.AS2ID, result: resultDuplicate}
	}
	// The first receipt asked for no MDN: a fresh warning, not stored.
	mic := ""
	if rec.Status == postgres.InboundProcessed {
		mic = rec.MIC
	}
	res, err := h.mdnResponse(rq, plan, mdn.Warned(mdn.DuplicateDocument), mic)
	if err != nil {
		log.Error("build MDN", zap.Error(err))
		return textResponse(http.StatusInternalServerError, partner.AS2ID, resultUnavailable, "internal error")
	}
	res.partner, res.result = partner.AS2ID, resultDuplicate
	return res
}

// mdnTooLarge answers an async MDN over Options.MaxMDNBytes: 413, nothing
// stored. size is its size when known, else -1.
func (h *Handler) mdnTooLarge(w http.ResponseWriter, partner string, size int64) {
	h.metrics.received.WithLabelValues(partner, resultTooLarge).Inc()
	h.log.Warn("async MDN over the limit", zap.String("partner", partner), zap.Int64("size", size), zap.Int64("limit", h.o.MaxMDNBytes))
	http.Error(w, "async MDN too large: the limit is "+strconv.FormatInt(h.o.MaxMDNBytes, 10)+
		" bytes (an MDN is a few KiB); nothing was stored; ask the operator to raise EDIHUB_MAX_MDN_BYTES if this MDN is genuine", http.StatusRequestEntityTooLarge)
}

// intake stores an async MDN raw and answers at once; one over
// Options.MaxMDNBytes is refused.
func (h *Handler) intake(w http.ResponseWriter, r *http.Request, body []byte, partnerLabel string) {
	if int64(len(body)) > h.o.MaxMDNBytes {
		h.mdnTooLarge(w, partnerLabel, int64(len(body)))
		return
	}
	in := &postgres.InboxMDN{Header: r.Header.Clone(), Body: body}
	for _, k := range []string{"Authorization", "Proxy-Authorization", "Cookie"} {
		in.Header.Del(k) // credentials stay out of the database
	}
	var err error
	if in.AS2From, err = as2.ParseAS2Name(r.Header.Get("AS2-From")); err != nil {
		in.AS2From = r.Header.Get("AS2-From")
	}
	if in.AS2To, err = as2.ParseAS2Name(r.Header.Get("AS2-To")); err != nil {
		in.AS2To = r.Header.Get("AS2-To")
	}
	if m, err := mdn.Parse(r.Header, body, mdn.ParseOptions{Unverified: true, Limits: h.o.Limits}); err == nil {
		in.OriginalMessageID = m.OriginalMessageID
	}
	log := h.log.With(zap.String("as2_from", in.AS2From), zap.String("original_message_id", in.OriginalMessageID))
	id, err := h.o.Store.SaveInboxMDN(r.Context(), in)
	if err != nil {
		log.Error("store async MDN", zap.Error(err))
		http.Error(w, "the MDN could not be stored; please resend later", http.StatusServiceUnavailable)
		return
	}
	h.metrics.inbox.WithLabelValues(partnerLabel).Inc()
	log.Info("async MDN received", zap.Int64("inbox_id", id))
	w.WriteHeader(http.StatusOK)
}
