package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/httpserver"
	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/postgres"
)

// apiError is every error body.
type apiError struct {
	Error     string `json:"error"`
	Parameter string `json:"parameter,omitempty"`
}

func writeError(w http.ResponseWriter, status int, param, msg string) {
	httpserver.WriteJSON(w, status, apiError{Error: msg, Parameter: param})
}

// messageOp is what a request does to one message, as writeMessageError
// names it when the store refuses or fails it.
type messageOp struct {
	log    string // the error log's message
	failed string // the 500's answer, which never carries the cause
}

var (
	opRead   = messageOp{"read message", "the message could not be read; retry later"}
	opResend = messageOp{"resend", "the message could not be queued again; retry later"}
	opCancel = messageOp{"cancel", "the message could not be cancelled; retry later"}
)

// stateRefusals are the store's refusals of an operation the message's
// state does not allow: the answer says what was refused and why, the
// store's detail after the sentinel or, without one, the rule.
var stateRefusals = []struct {
	err           error
	refused, rule string
}{
	{postgres.ErrNotResendable, "resent", "only failed outbound messages and messages whose MDN is overdue are resent"},
	{postgres.ErrNotCancellable, "cancelled", "only outbound messages queued or retrying are cancelled"},
}

// writeMessageError answers err, which op on message id returned: 404
// when there is no such message or it has no MDN, 409 when the message's
// state does not allow op, 500 otherwise (logged with its cause, which
// the answer leaves out). It is the one mapping of the store's message
// errors to HTTP answers.
func (h *handler) writeMessageError(w http.ResponseWriter, id int64, op messageOp, err error) {
	switch {
	case errors.Is(err, hub.ErrMessageNotFound):
		writeError(w, http.StatusNotFound, "id", fmt.Sprintf("no message %d", id))
		return
	case errors.Is(err, hub.ErrNoMDN):
		writeError(w, http.StatusNotFound, "", fmt.Sprintf("message %d has no MDN (yet)", id))
		return
	}
	for _, s := range stateRefusals {
		if errors.Is(err, s.err) {
			_, reason, _ := strings.Cut(err.Error(), s.err.Error()+": ")
			if reason == "" {
				reason = s.rule
			}
			writeError(w, http.StatusConflict, "", fmt.Sprintf("message %d cannot be %s: %s", id, s.refused, reason))
			return
		}
	}
	h.log.Error(op.log, zap.Int64("id", id), zap.Error(err))
	writeError(w, http.StatusInternalServerError, "", op.failed)
}
