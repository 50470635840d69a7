package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/postgres"
)

// PageSize is the number of messages on one page of the search.
const PageSize = 50

// Statuses are the message statuses the search offers, inbound and
// outbound.
var Statuses = []string{"queued", "sending", "retrying", "awaiting-mdn", "delivered", "sent", "failed", "processed", "error"}

// messageFilter is the search form as typed.
type messageFilter struct {
	Partner, Direction, Status, Since, Until, MessageID, Filename, ICN string
	Overdue                                                            bool
}

// values is the filter as query parameters, empty ones left out.
func (f messageFilter) values() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"partner": f.Partner, "direction": f.Direction, "status": f.Status, "since": f.Since, "until": f.Until,
		"message_id": f.MessageID, "filename": f.Filename, "icn": f.ICN} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Overdue {
		q.Set("overdue", "1")
	}
	return q
}

// Bounds of the search's text fields.
const (
	maxMessageID = 998 // RFC 5322's line length
	maxFilename  = 255
	// maxICN bounds an interchange control number: X12's ISA13 has 9
	// digits, EDIFACT's UNB 0020 at most 14 characters.
	maxICN = 35
)

// messagesData is the messages page's.
type messagesData struct {
	Q        messageFilter
	Partners []string
	Statuses []string
	Messages []hub.MessageInfo
	// Next is the URL of the page of older messages; "" on the last.
	Next string
	// First is the URL of the first page, when this is not it.
	First  string
	Errors []string
}

// messages serves the search: a GET form, so that a search is a link
// and works without JavaScript. Pages go by id, newest first (keyset
// paging: ?cursor= is the last id of the page before).
func (c *Console) messages(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := messageFilter{
		Partner: strings.TrimSpace(q.Get("partner")), Direction: q.Get("direction"), Status: q.Get("status"),
		Since: q.Get("since"), Until: q.Get("until"),
		MessageID: strings.TrimSpace(q.Get("message_id")), Filename: strings.TrimSpace(q.Get("filename")), Overdue: q.Get("overdue") != "",
		ICN: strings.TrimSpace(q.Get("icn")),
	}
	d := messagesData{Q: f, Statuses: Statuses}
	if c.o.Partners != nil {
		d.Partners = c.o.Partners()
	}
	mq := postgres.MessageQuery{Partner: f.Partner, Status: f.Status, MessageID: f.MessageID, Filename: f.Filename, ICN: f.ICN, Overdue: f.Overdue, Limit: PageSize + 1}
	if len(f.MessageID) > maxMessageID {
		d.Errors = append(d.Errors, fmt.Sprintf("Message-ID: at most %d characters.", maxMessageID))
	}
	if len(f.Filename) > maxFilename {
		d.Errors = append(d.Errors, fmt.Sprintf("File name: at most %d characters.", maxFilename))
	}
	if len(f.ICN) > maxICN {
		d.Errors = append(d.Errors, fmt.Sprintf("Interchange control number: at most %d characters.", maxICN))
	}
	if f.Direction != "" && f.Direction != "inbound" && f.Direction != "outbound" {
		d.Errors = append(d.Errors, "Direction: choose inbound or outbound.")
	} else {
		mq.Direction = f.Direction
	}
	if f.Status != "" && !slices.Contains(Statuses, f.Status) {
		d.Errors = append(d.Errors, fmt.Sprintf("Status: %q is not a status.", f.Status))
		mq.Status = ""
	}
	day := func(field, v string) time.Time {
		if v == "" {
			return time.Time{}
		}
		t, err := time.ParseInLocation("2006-01-02", v, c.o.Location)
		if err != nil {
			d.Errors = append(d.Errors, fmt.Sprintf("%s: %q is not a date like 2026-01-31.", field, v))
			return time.Time{}
		}
		return t
	}
	mq.Since = day("From", f.Since)
	if until := day("To", f.Until); !until.IsZero() {
		mq.Until = until.AddDate(0, 0, 1) // the whole day
	}
	if mq.Before = cursor(q, &d.Errors); mq.Before > 0 {
		d.First = Prefix + "/messages?" + f.values().Encode()
	}
	if len(d.Errors) == 0 {
		ms, err := c.o.Messages.Messages(r.Context(), mq)
		if err != nil {
			c.internal(w, r, "Searching messages", err)
			return
		}
		if len(ms) > PageSize {
			ms = ms[:PageSize]
			d.Next = nextPage("/messages", f.values(), ms[len(ms)-1].ID)
		}
		d.Messages = ms
	}
	status := http.StatusOK
	if len(d.Errors) > 0 {
		status = http.StatusBadRequest
	}
	c.render(w, r, status, "messages", c.view(r, "Messages", "messages", d))
}

// messageID parses {id}; false when it is not a message id (404 shown).
func (c *Console) messageID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	n, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || n < 1 {
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no message %q: message numbers are positive whole numbers.", r.PathValue("id")))
		return 0, false
	}
	return n, true
}

// readFailed answers a failed read of message id: 404 for a missing
// message or MDN.
func (c *Console) readFailed(w http.ResponseWriter, r *http.Request, id int64, err error) {
	switch {
	case errors.Is(err, hub.ErrMessageNotFound):
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no message %d (it may have been purged after the retention).", id))
	case errors.Is(err, hub.ErrNoMDN):
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("Message %d has no MDN (yet).", id))
	default:
		c.internal(w, r, fmt.Sprintf("Reading message %d", id), err)
	}
}

// eventView is an event of the trace.
type eventView struct {
	Type   string
	At     time.Time
	Detail []string // "key: value", sorted
}

// traceData is the trace page's.
type traceData struct {
	M        hub.MessageInfo
	Attempts []postgres.Attempt
	// Pending is the outbox row waiting to send the message (or the
	// async MDN owed for it), nil when none.
	Pending *postgres.OutboxEntry
	MDN     *postgres.MDNInfo
	// MICCheck says how the MDN's MIC compares with the message's.
	MICCheck string
	// MICOK is true when the MIC check passed, false when it failed or
	// was not made.
	MICOK bool
	// Inbox are the async MDNs received for the message, the orphans
	// that name it too.
	Inbox  []postgres.InboxMDNInfo
	Events []eventView
	// Resendable: the message may be sent again (failed, or its MDN is
	// overdue); Cancellable: it waits to be sent (queued, retrying).
	Resendable, Cancellable bool
	// HasPayload: the payload is still stored.
	HasPayload bool
	// CanResend, CanCancel and CanReapply: the console offers the action.
	CanResend, CanCancel, CanReapply bool
	// Interchanges are the EDI interchanges the message carries, with
	// their acknowledgement state (docs/edi.md); none for a document that
	// is not EDI.
	Interchanges []postgres.InterchangeInfo
}

// trace shows one message: as received or sent, every attempt with its
// HTTP status and error, what waits to be sent, its MDN and MIC check, the
// async MDNs received for it, its events.
func (c *Console) trace(w http.ResponseWriter, r *http.Request) {
	id, ok := c.messageID(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	t, err := c.o.Messages.MessageTrace(ctx, id)
	if err != nil {
		c.readFailed(w, r, id, err)
		return
	}
	m := t.Message
	d := traceData{M: m, Attempts: t.Attempts, MDN: t.MDN, Inbox: t.InboxMDNs,
		Resendable:  m.Direction == "outbound" && (m.Status == "failed" || m.MDNOverdue),
		Cancellable: m.Direction == "outbound" && (m.Status == "queued" || m.Status == "retrying" || m.Status == "sending"),
		HasPayload:  m.Size > 0 || m.Filename != "",
		CanResend:   c.o.Resender != nil, CanCancel: c.o.Canceller != nil, CanReapply: c.o.Reapplier != nil,
	}
	outbox, err := c.o.Messages.MessageOutbox(ctx, id)
	if err != nil {
		c.internal(w, r, fmt.Sprintf("Reading message %d", id), err)
		return
	}
	for i := range outbox {
		if outbox[i].Status == "pending" {
			d.Pending = &outbox[i]
		}
	}
	d.MICCheck, d.MICOK = micCheck(m, d.MDN)
	if c.o.Interchanges != nil {
		if d.Interchanges, err = c.o.Interchanges.Interchanges(ctx, id); err != nil {
			c.internal(w, r, fmt.Sprintf("Reading message %d", id), err)
			return
		}
	}
	for _, e := range t.Events {
		d.Events = append(d.Events, eventView{Type: e.Type, At: e.CreatedAt, Detail: detailLines(e.Detail)})
	}
	c.render(w, r, http.StatusOK, "trace", c.view(r, fmt.Sprintf("Message %d", id), "messages", d))
}

// micCheck says what the MDN's MIC proves about the message.
func micCheck(m hub.MessageInfo, mdn *postgres.MDNInfo) (string, bool) {
	if mdn == nil {
		return "no MDN", false
	}
	if m.Direction == "inbound" {
		if mdn.MIC == "" {
			return "our MDN carries no MIC (the partner did not sign or asked for none)", false
		}
		return "our MDN returned the MIC of the content as received: " + mdn.MIC, true
	}
	switch {
	case m.MICVerified == nil:
		return "not checked", false
	case *m.MICVerified:
		return "matched: the partner's MIC is the one computed when the message was sent", true
	}
	return "no MIC to check: the partner's MDN is unsigned and carries none (allowed for unsigned receipts)", false
}

// detailLines shows an event's JSON detail as sorted "key: value" lines.
func detailLines(raw json.RawMessage) []string {
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s: %v", k, v))
	}
	sort.Strings(out)
	return out
}

// payload sends the message's document as stored (operators and admins),
// streamed from the database piece by piece: a payload of any size.
func (c *Console) payload(w http.ResponseWriter, r *http.Request) {
	id, ok := c.messageID(w, r)
	if !ok {
		return
	}
	started := false
	_, err := c.o.Messages.WritePayload(r.Context(), id, func(m hub.MessageInfo) io.Writer {
		started = true
		name := m.Filename
		if name == "" {
			name = fmt.Sprintf("message-%d", id)
		}
		downloadHeader(w, mime.FormatMediaType("attachment", map[string]string{"filename": name}), m.Size)
		return w
	})
	switch {
	case err != nil && !started:
		c.readFailed(w, r, id, err)
	case err != nil:
		// The header went out: cut the response short, which the
		// browser sees against the Content-Length.
		panic(http.ErrAbortHandler)
	}
}

// rawMDN sends the MDN as stored (operators and admins).
func (c *Console) rawMDN(w http.ResponseWriter, r *http.Request) {
	id, ok := c.messageID(w, r)
	if !ok {
		return
	}
	m, err := c.o.Messages.MessageMDN(r.Context(), id)
	if err != nil {
		c.readFailed(w, r, id, err)
		return
	}
	download(w, mime.FormatMediaType("attachment", map[string]string{"filename": fmt.Sprintf("mdn-%d.eml", id)}), m.Body)
}

// download sends b as a file to save, never to show: whatever the bytes
// are (HTML, SVG), the browser does not render them on the console's
// origin.
func download(w http.ResponseWriter, disposition string, b []byte) {
	downloadHeader(w, disposition, int64(len(b)))
	_, _ = w.Write(b)
}

// downloadHeader writes the header of a download of size bytes.
func downloadHeader(w http.ResponseWriter, disposition string, size int64) {
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", disposition)
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	// A sandbox for the case a browser renders it after all.
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	w.WriteHeader(http.StatusOK)
}

// cursor reads a page's cursor (an id to page below): 0 for the first
// page; one that is no id adds an error for the page to show.
func cursor(q url.Values, errs *[]string) int64 {
	v := q.Get("cursor")
	if v == "" {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		*errs = append(*errs, "The page asked for does not exist: start again from the first page.")
		return 0
	}
	return n
}

// nextPage links the page after the one whose last row has id last.
func nextPage(path string, q url.Values, last int64) string {
	q.Set("cursor", strconv.FormatInt(last, 10))
	return Prefix + path + "?" + q.Encode()
}
