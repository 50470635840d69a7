package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/postgres"
)

// TestWriteMessageError: each store error of a message operation has its
// answer; a refusal carries the store's reason or, without one, the rule;
// an unexpected error is a 500 that does not carry its cause.
func TestWriteMessageError(t *testing.T) {
	tests := []struct {
		name       string
		op         messageOp
		give       error
		wantStatus int
		want       apiError
	}{
		{"missing message", opRead, fmt.Errorf("message 7: %w", hub.ErrMessageNotFound),
			http.StatusNotFound, apiError{Error: "no message 7", Parameter: "id"}},
		{"no MDN", opRead, hub.ErrNoMDN,
			http.StatusNotFound, apiError{Error: "message 7 has no MDN (yet)"}},
		{"resend refused with a reason", opResend, fmt.Errorf("%w: it is an inbound message", postgres.ErrNotResendable),
			http.StatusConflict, apiError{Error: "message 7 cannot be resent: it is an inbound message"}},
		{"resend refused without one", opResend, postgres.ErrNotResendable,
			http.StatusConflict, apiError{Error: "message 7 cannot be resent: only failed outbound messages and messages whose MDN is overdue are resent"}},
		{"cancel refused", opCancel, fmt.Errorf("%w: its status is failed, which is final", postgres.ErrNotCancellable),
			http.StatusConflict, apiError{Error: "message 7 cannot be cancelled: its status is failed, which is final"}},
		{"cancel refused without a reason", opCancel, postgres.ErrNotCancellable,
			http.StatusConflict, apiError{Error: "message 7 cannot be cancelled: only outbound messages queued or retrying are cancelled"}},
		{"read fails", opRead, errors.New("conn reset at 10.0.0.1"),
			http.StatusInternalServerError, apiError{Error: "the message could not be read; retry later"}},
		{"cancel fails", opCancel, errors.New("conn reset at 10.0.0.1"),
			http.StatusInternalServerError, apiError{Error: "the message could not be cancelled; retry later"}},
	}
	h := &handler{log: zaptest.NewLogger(t)}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			h.writeMessageError(w, 7, tt.op, tt.give)
			var got apiError
			if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
				t.Fatalf("body %q: %v", w.Body, err)
			}
			if w.Code != tt.wantStatus || got != tt.want {
				t.Errorf("writeMessageError(%v) = %d %+v, want %d %+v", tt.give, w.Code, got, tt.wantStatus, tt.want)
			}
		})
	}
}
