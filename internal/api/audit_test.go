package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/edihub/edihub/internal/api"
	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
)

// hangUpQueue queues nothing, but ends the request's context as it
// returns: the client hung up right after the document was queued.
type hangUpQueue struct{ hangUp context.CancelFunc }

func (q hangUpQueue) Enqueue(context.Context, outbox.Document) (outbox.Queued, error) {
	q.hangUp()
	return outbox.Queued{ID: 7, MessageID: "<7@EDIHUB>", Status: "queued"}, nil
}

// ctxAuditor records the entries and whether their context had ended.
type ctxAuditor struct {
	mu      sync.Mutex
	entries []postgres.AuditEntry
	ended   []error
}

func (a *ctxAuditor) Record(ctx context.Context, e postgres.AuditEntry) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.entries = append(a.entries, e)
	a.ended = append(a.ended, ctx.Err())
	return ctx.Err()
}

// TestAuditOutlivesHangUp: a change whose client hangs up once it is made
// is still recorded: the record is not written with the request's context.
func TestAuditOutlivesHangUp(t *testing.T) {
	ctx, cancel := context.WithCancel(auth.WithPrincipal(context.Background(),
		auth.Principal{Kind: auth.KindToken, User: "olga", TokenName: "ci", Role: auth.RoleOperator}))
	defer cancel()
	aud := &ctxAuditor{}
	h, err := api.New(api.Options{Queue: hangUpQueue{cancel}, Store: struct{ api.Reader }{}, Logger: zaptest.NewLogger(t), Auditor: aud})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/messages?partner=GLOBEX", strings.NewReader("doc"))
	req.RemoteAddr = "192.0.2.3:5555"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	checkAnswer(t, req.Method, apiPrefix+req.URL.EscapedPath(), response{w.Code, w.Header(), w.Body.Bytes()})
	if w.Code != http.StatusAccepted {
		t.Fatalf("POST /messages = %d %s, want 202", w.Code, w.Body)
	}
	aud.mu.Lock()
	defer aud.mu.Unlock()
	if len(aud.entries) != 1 || aud.ended[0] != nil {
		t.Fatalf("audit records %+v, context errors %v; want one, written with a live context", aud.entries, aud.ended)
	}
	if e := aud.entries[0]; e.Actor != "token:ci (olga)" || e.Action != "message.send" || e.Target != "7" || e.Remote != "192.0.2.3" {
		t.Errorf("audit entry = %+v", e)
	}
}
