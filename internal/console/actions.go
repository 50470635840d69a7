package console

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/spool"
)

// Enqueuer queues outbound documents; *outbox.Queue implements it.
type Enqueuer interface {
	Enqueue(ctx context.Context, d outbox.Document) (outbox.Queued, error)
}

// Resender queues a failed or overdue outbound message again, same
// Message-ID and bytes; *postgres.Store implements it. Errors wrap
// hub.ErrMessageNotFound or postgres.ErrNotResendable.
type Resender interface {
	ResendMessage(ctx context.Context, id int64) (hub.MessageInfo, error)
}

// auditTimeout bounds the write of an audit entry.
const auditTimeout = 10 * time.Second

// audit records an action made in the console: its action (the API's
// names: message.send, message.resend, ...), target and detail, with the
// signed-in user as the actor and the client's address. The action is
// made: a failure to record it is logged, not shown.
func (c *Console) audit(r *http.Request, action, target string, detail map[string]any) {
	if c.o.Auditor == nil {
		return
	}
	caller := auth.CallerOf(r)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), auditTimeout)
	defer cancel()
	if err := auth.Audit(ctx, c.o.Auditor, caller, action, target, detail); err != nil {
		c.log.Error("audit entry not written", zap.String("action", action), zap.String("target", target), zap.String("actor", caller.Actor()), zap.Error(err))
	}
}

// confirmData is a confirmation page's: what is about to happen, and the
// form that makes it happen.
type confirmData struct {
	Question string
	Detail   []string
	Action   string // the form's URL
	Button   string
	Back     string
	Danger   bool
	// Reason asks for a reason to record; BackField is sent with the
	// form, where to go afterwards.
	Reason    bool
	BackField string
	// Fields are sent with the form, hidden.
	Fields []formField
}

// formField is a hidden field of a form.
type formField struct{ Name, Value string }

// messageConfirm answers GET on the confirmation page of an action on
// message {id}: ask says what is about to happen, from the message and
// the path of its trace.
func (c *Console) messageConfirm(title string, ask func(id int64, m hub.MessageInfo, trace string) confirmData) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := c.messageID(w, r)
		if !ok {
			return
		}
		m, err := c.o.Messages.Message(r.Context(), id)
		if err != nil {
			c.readFailed(w, r, id, err)
			return
		}
		d := ask(id, m, fmt.Sprintf("%s/messages/%d", Prefix, id))
		c.render(w, r, http.StatusOK, "confirm", c.view(r, fmt.Sprintf("%s message %d", title, id), "messages", d))
	}
}

// messageAction is an action on message {id}, made from its
// confirmation form.
type messageAction struct {
	// audit is its name in the audit log (message.resend); verb what it
	// does to a message (resent), said when refused; doing names it
	// when it fails (Resending).
	audit, verb, doing string
	// refused is the store's error for a message the action does not
	// apply to; why is said when that error gives no reason.
	refused error
	why     string
	// logged is the log line of the action made; flash is said to the
	// user, with the message's number and new status.
	logged, flash string
	// do makes the action; detail is added to the audit entry.
	do func(r *http.Request, id int64) (m hub.MessageInfo, detail map[string]any, err error)
}

// messageAction answers POST of an action on message {id}: it makes the
// action, logs, audits and shows the message's trace again.
func (c *Console) messageAction(a messageAction) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := c.messageID(w, r)
		if !ok {
			return
		}
		m, detail, err := a.do(r, id)
		switch {
		case errors.Is(err, errBadForm):
			c.fail(w, r, http.StatusBadRequest, strings.TrimPrefix(err.Error(), errBadForm.Error()+": "))
			return
		case errors.Is(err, hub.ErrMessageNotFound):
			c.readFailed(w, r, id, err)
			return
		case errors.Is(err, a.refused):
			c.fail(w, r, http.StatusConflict, fmt.Sprintf("Message %d cannot be %s: %s.", id, a.verb, because(err, a.refused, a.why)))
			return
		case err != nil:
			c.internal(w, r, fmt.Sprintf("%s message %d", a.doing, id), err)
			return
		}
		c.log.Info(a.logged, zap.Int64("id", id), zap.String("partner", m.Partner), zap.String("message_id", m.MessageID),
			zap.String("by", auth.AuditFromRequest(r).Actor))
		if detail == nil {
			detail = map[string]any{}
		}
		detail["partner"], detail["message_id"] = m.Partner, m.MessageID
		c.audit(r, a.audit, strconv.FormatInt(id, 10), detail)
		c.flash(r, fmt.Sprintf(a.flash, id, m.Status))
		http.Redirect(w, r, fmt.Sprintf("%s/messages/%d", Prefix, id), http.StatusSeeOther)
	}
}

// errBadForm is a form an action refuses; its text after the prefix is
// said to the user.
var errBadForm = errors.New("bad form")

// because is the reason err gives after sentinel's text ("not resendable:
// <reason>"), or fallback when it gives none.
func because(err, sentinel error, fallback string) string {
	if _, reason, _ := strings.Cut(err.Error(), sentinel.Error()+": "); reason != "" {
		return reason
	}
	return fallback
}

// resendConfirm asks before a resend: the same Message-ID and bytes go to
// the partner again.
func (c *Console) resendConfirm() http.HandlerFunc {
	return c.messageConfirm("Resend", func(id int64, m hub.MessageInfo, trace string) confirmData {
		what := "Message-ID " + m.MessageID
		if m.Filename != "" {
			what += ", file " + m.Filename
		}
		now := "Its status now: " + m.Status
		if m.MDNOverdue {
			now += " (its MDN is overdue)"
		}
		return confirmData{
			Question: fmt.Sprintf("Send message %d to %s again?", id, m.Partner),
			Detail:   []string{what, now, "The same Message-ID and the same bytes are sent, and retried as a new message would be."},
			Action:   trace + "/resend", Button: "Resend", Back: trace,
		}
	})
}

// resend queues a failed or overdue message again.
func (c *Console) resend() http.HandlerFunc {
	return c.messageAction(messageAction{
		audit: "message.resend", verb: "resent", doing: "Resending", refused: postgres.ErrNotResendable,
		why:    "only failed outbound messages and messages whose MDN is overdue are resent",
		logged: "queued again", flash: "Message %d is queued again: its status is now %s.",
		do: func(r *http.Request, id int64) (hub.MessageInfo, map[string]any, error) {
			m, err := c.o.Resender.ResendMessage(r.Context(), id)
			return m, nil, err
		},
	})
}

// ContentTypes are the content types the send form offers; "" takes the
// one the document's envelope names (application/EDI-X12,
// application/EDIFACT), else the one the browser gave the file.
var ContentTypes = []string{"application/edi-x12", "application/edifact", "application/edi-consent", "application/xml", "text/plain", "application/octet-stream"}

// sendData is the send page's.
type sendData struct {
	Partners     []string
	ContentTypes []string
	Partner      string
	ContentType  string
	// Key makes the form's submission idempotent: sent twice (a double
	// click, a reload), it queues one message.
	Key      string
	MaxBytes int64
	Error    string
}

func newKey() string {
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	return "console-" + base64.RawURLEncoding.EncodeToString(b)
}

// sendForm shows the upload form.
func (c *Console) sendForm(w http.ResponseWriter, r *http.Request) {
	d := sendData{Partners: c.partners(), ContentTypes: ContentTypes, Partner: r.URL.Query().Get("partner"), Key: newKey(), MaxBytes: c.o.MaxUploadBytes}
	c.render(w, r, http.StatusOK, "send", c.view(r, "Send a document", "send", d))
}

// send queues an uploaded document for a partner, as POST /api/v1/messages
// does: read as it arrives, a large one into the spool (upload.go). The
// body is bounded by MaxUploadBytes.
func (c *Console) send(w http.ResponseWriter, r *http.Request) {
	d := sendData{Partners: c.partners(), ContentTypes: ContentTypes, Key: newKey(), MaxBytes: c.o.MaxUploadBytes}
	again := func(status int, msg string) {
		d.Error = msg
		c.render(w, r, status, "send", c.view(r, "Send a document", "send", d))
	}
	r.Body = http.MaxBytesReader(w, r.Body, c.o.MaxUploadBytes+formEnvelope)
	up, err := c.readUpload(r)
	defer up.close()
	d.Partner, d.ContentType = up.fields["partner"], up.fields["content_type"]
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe), errors.Is(err, errTooLarge):
		w.Header().Set("Connection", "close")
		again(http.StatusRequestEntityTooLarge, fmt.Sprintf("The document is larger than %s, the most the console takes.", size(c.o.MaxUploadBytes)))
		return
	case errors.Is(err, spool.ErrFull):
		w.Header().Set("Connection", "close")
		w.Header().Set("Retry-After", "60")
		again(http.StatusServiceUnavailable, "There is no room for the document on this replica now (its spool is full). Nothing was queued; try again in a few minutes.")
		return
	case errors.Is(err, errSpool):
		w.Header().Set("Connection", "close")
		c.internal(w, r, "Spooling the document", err)
		return
	case errors.Is(err, errNoDocument):
		again(http.StatusBadRequest, "Choose the file to send.")
		return
	case err != nil:
		w.Header().Set("Connection", "close")
		again(http.StatusBadRequest, "The upload could not be read: "+err.Error())
		return
	}
	c.enqueue(w, r, up, d, again)
}

// enqueue queues the document read by send, or shows the form again.
func (c *Console) enqueue(w http.ResponseWriter, r *http.Request, up *upload, d sendData, again func(int, string)) {
	if d.Partner == "" {
		again(http.StatusBadRequest, "Choose the partner to send to.")
		return
	}
	ct := d.ContentType
	if ct == "" {
		// A browser types a file by its name's extension: an .x12 or
		// .edi file comes as application/octet-stream. The envelope
		// knows better.
		var body io.Reader = bytes.NewReader(up.doc.Payload)
		if up.doc.Open != nil {
			body = up.doc.Open()
		}
		ct = outbox.EnvelopeContentType(body)
	}
	if ct == "" {
		ct = up.fileType
	}
	key := up.fields["key"]
	if len(key) > 255 || strings.IndexFunc(key, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0 {
		key = ""
	}
	doc := up.doc
	doc.Partner, doc.ContentType, doc.Filename, doc.IdempotencyKey = d.Partner, ct, up.filename, key
	res, err := c.o.Queue.Enqueue(r.Context(), doc)
	switch {
	case errors.Is(err, outbox.ErrUnknownPartner):
		again(http.StatusNotFound, fmt.Sprintf("No partner %q is served.", d.Partner))
		return
	case errors.Is(err, outbox.ErrInvalidDocument), errors.Is(err, postgres.ErrIdempotencyKeyReused):
		again(http.StatusBadRequest, err.Error())
		return
	case err != nil:
		c.internal(w, r, "Queueing the document", err)
		return
	}
	if !res.Replayed {
		c.log.Info("queued", zap.String("partner", d.Partner), zap.Int64("id", res.ID), zap.String("message_id", res.MessageID), zap.Int64("size", up.size()))
		c.audit(r, "message.send", strconv.FormatInt(res.ID, 10), map[string]any{
			"partner": d.Partner, "message_id": res.MessageID, "filename": up.filename, "size": up.size()})
	}
	c.flash(r, fmt.Sprintf("%s is queued for %s as message %d.", up.filename, d.Partner, res.ID))
	http.Redirect(w, r, fmt.Sprintf("%s/messages/%d", Prefix, res.ID), http.StatusSeeOther)
}

// partners lists the partners served; none without Options.Partners.
func (c *Console) partners() []string {
	if c.o.Partners == nil {
		return nil
	}
	return c.o.Partners()
}

// Canceller fails a message still queued or retrying before it is sent
// again; *postgres.Store implements it. Errors wrap
// hub.ErrMessageNotFound or postgres.ErrNotCancellable.
type Canceller interface {
	CancelMessage(ctx context.Context, id int64, reason string) (hub.MessageInfo, error)
}

// Reapplier puts an orphan async MDN back for the leader's MDN poller to
// judge again; *postgres.Store implements it. Errors wrap
// postgres.ErrInboxMDNNotFound or postgres.ErrNotOrphan.
type Reapplier interface {
	ReapplyInboxMDN(ctx context.Context, id int64) (postgres.InboxMDNInfo, error)
}

// maxCancelReason bounds the reason of a cancel, as the API does.
const maxCancelReason = 500

// cancelConfirm asks before a cancel, with a reason to record.
func (c *Console) cancelConfirm() http.HandlerFunc {
	return c.messageConfirm("Cancel", func(id int64, m hub.MessageInfo, trace string) confirmData {
		return confirmData{
			Question: fmt.Sprintf("Cancel message %d to %s?", id, m.Partner),
			Detail: []string{"Message-ID " + m.MessageID + ", status " + m.Status,
				"It fails now, and is not sent again; a resend can queue it later."},
			Action: trace + "/cancel", Button: "Cancel the message", Back: trace, Danger: true, Reason: true,
		}
	})
}

// cancel fails a message still queued or retrying.
func (c *Console) cancel() http.HandlerFunc {
	return c.messageAction(messageAction{
		audit: "message.cancel", verb: "cancelled", doing: "Cancelling", refused: postgres.ErrNotCancellable,
		why:    "only outbound messages queued or retrying are cancelled",
		logged: "cancelled", flash: "Message %d is cancelled: its status is now %s.",
		do: func(r *http.Request, id int64) (hub.MessageInfo, map[string]any, error) {
			reason := strings.TrimSpace(r.PostFormValue("reason"))
			if len(reason) > maxCancelReason {
				return hub.MessageInfo{}, nil, fmt.Errorf("%w: The reason is longer than %d characters.", errBadForm, maxCancelReason)
			}
			m, err := c.o.Canceller.CancelMessage(r.Context(), id, reason)
			return m, map[string]any{"reason": reason}, err
		},
	})
}

// inboxID parses the {id} of an async MDN; false when it answered 404.
func (c *Console) inboxID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	n, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || n < 1 {
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no async MDN %q.", r.PathValue("id")))
		return 0, false
	}
	return n, true
}

// back is the console page a form came from (?back= or the form's back
// field), else the messages.
func back(r *http.Request) string {
	b := r.URL.Query().Get("back")
	if b == "" {
		b = r.PostFormValue("back")
	}
	return safeNext(b)
}

// reapplyConfirm asks before an orphan async MDN is judged again.
func (c *Console) reapplyConfirm(w http.ResponseWriter, r *http.Request) {
	id, ok := c.inboxID(w, r)
	if !ok {
		return
	}
	d := confirmData{
		Question: fmt.Sprintf("Judge the orphan async MDN %d again?", id),
		Detail: []string{"The leader's MDN poller verifies it again and applies it to the message it names, if it now can (after a partner's certificate was fixed, say).",
			"An MDN that decided a message already is never applied twice."},
		Action: fmt.Sprintf("%s/mdns/%d/reapply", Prefix, id), Button: "Re-apply", Back: back(r), BackField: back(r),
	}
	c.render(w, r, http.StatusOK, "confirm", c.view(r, fmt.Sprintf("Re-apply async MDN %d", id), "messages", d))
}

// reapply puts an orphan async MDN back for the poller.
func (c *Console) reapply(w http.ResponseWriter, r *http.Request) {
	id, ok := c.inboxID(w, r)
	if !ok {
		return
	}
	m, err := c.o.Reapplier.ReapplyInboxMDN(r.Context(), id)
	switch {
	case errors.Is(err, postgres.ErrInboxMDNNotFound):
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no async MDN %d.", id))
		return
	case errors.Is(err, postgres.ErrNotOrphan):
		c.fail(w, r, http.StatusConflict, fmt.Sprintf("The async MDN %d is not an orphan (%s): only orphans are applied again.", id, because(err, postgres.ErrNotOrphan, "")))
		return
	case err != nil:
		c.internal(w, r, fmt.Sprintf("Re-applying the async MDN %d", id), err)
		return
	}
	c.log.Info("async MDN queued for the poller again", zap.Int64("inbox_id", id), zap.String("by", auth.AuditFromRequest(r).Actor))
	c.audit(r, "mdn.reapply", strconv.FormatInt(id, 10), map[string]any{"original_message_id": m.OriginalMessageID, "as2_from": m.AS2From})
	c.flash(r, fmt.Sprintf("The async MDN %d is pending again: the leader's MDN poller judges it within seconds.", id))
	http.Redirect(w, r, back(r), http.StatusSeeOther)
}
