package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/api"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// queue posts a document for partner with filename and returns it as
// queued.
func (e *env) queue(t *testing.T, partner, filename string) api.Queued {
	t.Helper()
	r := e.do(t, "POST", "/api/v1/messages?partner="+url.QueryEscape(partner)+"&filename="+url.QueryEscape(filename), "text/plain", []byte("doc"), token)
	if r.status != http.StatusAccepted {
		t.Fatalf("POST = %d %s", r.status, r.body)
	}
	return decode[api.Queued](t, r)
}

func (e *env) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := pgtest.Conn(t, e.dbURL).Exec(context.Background(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

// TestListSearch: GET /messages finds a message by its Message-ID with
// or without the brackets, by the start of its file name, and the
// messages whose MDN is overdue; bad values are 400s naming the
// parameter.
func TestListSearch(t *testing.T) {
	e := setup(t)
	a := e.queue(t, "GLOBEX", "ORDERS_1.edi")
	b := e.queue(t, "GLOBEX", "ORDERS_2.edi")
	c := e.queue(t, "ACME CORP", "INVOIC_1.edi")
	e.exec(t, `UPDATE messages SET status = 'awaiting-mdn', mdn_overdue = true WHERE id = $1`, c.ID)
	bare := strings.Trim(a.MessageID, "<>")
	tests := []struct {
		query string
		want  []int64
	}{
		{"message_id=" + url.QueryEscape(a.MessageID), []int64{a.ID}},
		{"message_id=" + url.QueryEscape(bare), []int64{a.ID}},
		{"message_id=" + url.QueryEscape(bare) + "&partner=ACME+CORP", []int64{}},
		{"filename=ORDERS_", []int64{b.ID, a.ID}},
		{"filename=ORDERS_2.edi", []int64{b.ID}},
		{"filename=orders_", []int64{}},
		{"filename=ORDERS_&limit=1&cursor=" + fmt.Sprint(b.ID), []int64{a.ID}},
		{"overdue=true", []int64{c.ID}},
		{"overdue=false", []int64{c.ID, b.ID, a.ID}},
	}
	for _, tt := range tests {
		r := e.do(t, "GET", "/api/v1/messages?"+tt.query, "", nil, token)
		if r.status != http.StatusOK {
			t.Errorf("GET ?%s = %d %s", tt.query, r.status, r.body)
			continue
		}
		got := []int64{}
		for _, m := range decode[api.List](t, r).Messages {
			got = append(got, m.ID)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("GET ?%s = %v, want %v", tt.query, got, tt.want)
		}
	}
	for _, tt := range []struct{ query, param string }{
		{"message_id=" + url.QueryEscape("<a\x01b>"), "message_id"},
		{"message_id=" + strings.Repeat("m", api.MaxMessageIDFilter+1), "message_id"},
		{"filename=" + strings.Repeat("f", api.MaxFilenameFilter+1), "filename"},
		{"filename=%FF", "filename"},
		{"filename=a%0Ab", "filename"},
		{"overdue=perhaps", "overdue"},
		{"interchange=1", "interchange"},
	} {
		r := e.do(t, "GET", "/api/v1/messages?"+tt.query, "", nil, token)
		if r.status != http.StatusBadRequest || decode[map[string]string](t, r)["parameter"] != tt.param {
			t.Errorf("GET ?%s = %d %s, want 400 naming %s", tt.query, r.status, r.body, tt.param)
		}
	}
}

// TestTrace: GET /messages/{id}/trace shows a message's attempts with
// their HTTP status and error, its MDN (where its bytes are, not the
// bytes), its events; no payload.
func TestTrace(t *testing.T) {
	e := setup(t)
	q := e.queue(t, "ACME CORP", "po.x12")
	ctx := context.Background()
	claim := func() postgres.OutboxItem {
		t.Helper()
		e.exec(t, `UPDATE outbox SET next_attempt_at = now() WHERE message_id = $1`, q.ID)
		items, err := e.store.ClaimOutbox(ctx, "replica-1", time.Minute, 10)
		if err != nil || len(items) != 1 {
			t.Fatalf("ClaimOutbox = %v, %v", items, err)
		}
		return items[0]
	}
	it := claim()
	if err := e.store.SaveOutboundBuild(ctx, it, postgres.OutboundBuild{Headers: http.Header{"Message-Id": {q.MessageID}}, Body: []byte("built"), MIC: "m=, sha-256", MICAlg: "sha-256"}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.FinishOutbox(ctx, it, postgres.OutboxResult{State: postgres.OutboxPending, HTTPStatus: 503, Error: "HTTP 503 Service Unavailable",
		Message: &postgres.MessageUpdate{Status: "retrying", Error: "HTTP 503 Service Unavailable"}}); err != nil {
		t.Fatal(err)
	}
	it = claim()
	yes := true
	if err := e.store.FinishOutbox(ctx, it, postgres.OutboxResult{State: postgres.OutboxDone, HTTPStatus: 200,
		Message: &postgres.MessageUpdate{Status: "delivered", Disposition: "automatic-action/MDN-sent-automatically; processed", Final: true, MICVerified: &yes},
		MDN:     &postgres.NewMDN{ContentType: "multipart/report", Body: []byte("the signed MDN"), Disposition: "automatic-action/MDN-sent-automatically; processed", MIC: "m=, sha-256", Signed: true}}); err != nil {
		t.Fatal(err)
	}

	r := e.do(t, "GET", q.Location+"/trace", "", nil, token)
	if r.status != http.StatusOK {
		t.Fatalf("GET trace = %d %s", r.status, r.body)
	}
	tr := decode[api.Trace](t, r)
	if tr.Message.ID != q.ID || tr.Message.Status != "delivered" || tr.Message.Location != q.Location {
		t.Errorf("message = %+v", tr.Message)
	}
	if len(tr.Attempts) != 2 || tr.Attempts[0].HTTPStatus == nil || *tr.Attempts[0].HTTPStatus != 503 || tr.Attempts[0].Outcome != "retrying" ||
		tr.Attempts[0].Error != "HTTP 503 Service Unavailable" || tr.Attempts[0].Replica != "replica-1" ||
		tr.Attempts[1].Attempt != 2 || *tr.Attempts[1].HTTPStatus != 200 || tr.Attempts[1].Outcome != "done" {
		t.Errorf("attempts = %s", mustJSON(tr.Attempts))
	}
	if m := tr.MDN; m == nil || m.Disposition != "automatic-action/MDN-sent-automatically; processed" || m.MICVerified == nil || !*m.MICVerified ||
		!m.Signed || m.Size != int64(len("the signed MDN")) || m.Location != q.Location+"/mdn" {
		t.Errorf("mdn = %s", mustJSON(tr.MDN))
	}
	if len(tr.Events) != 1 || tr.Events[0].Type != "delivered" || tr.AsyncMDNs == nil {
		t.Errorf("events = %s, async MDNs %v", mustJSON(tr.Events), tr.AsyncMDNs)
	}
	if strings.Contains(string(r.body), "the signed MDN") || strings.Contains(string(r.body), `"doc"`) || strings.Contains(string(r.body), "built") {
		t.Errorf("trace shows bytes of the payload or MDN: %s", r.body)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &keys); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"message", "attempts", "mdn", "async_mdns", "events"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("trace lacks %q: %s", k, r.body)
		}
	}
	if r := e.do(t, "GET", "/api/v1/messages/99999/trace", "", nil, token); r.status != http.StatusNotFound {
		t.Errorf("trace of an unknown message = %d, want 404", r.status)
	}
	if r := e.do(t, "GET", q.Location+"/trace", "", nil, ""); r.status != http.StatusUnauthorized {
		t.Errorf("trace without the token = %d, want 401", r.status)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestCancel: POST /messages/{id}/cancel fails a queued message with the
// reason; what cannot be cancelled is a 409 that says why.
func TestCancel(t *testing.T) {
	e := setup(t)
	q := e.queue(t, "GLOBEX", "a.edi")
	r := e.do(t, "POST", q.Location+"/cancel", "application/json", []byte(`{"reason": "sent to the wrong partner"}`), token)
	if r.status != http.StatusOK {
		t.Fatalf("cancel = %d %s", r.status, r.body)
	}
	m := decode[api.Message](t, r)
	if m.ID != q.ID || m.Status != "failed" || m.Error != "cancelled: sent to the wrong partner" || r.header.Get("Location") != q.Location {
		t.Errorf("cancelled = %+v, Location %q", m, r.header.Get("Location"))
	}
	if r := e.do(t, "POST", q.Location+"/cancel", "", nil, token); r.status != http.StatusConflict ||
		!strings.Contains(string(r.body), fmt.Sprintf("message %d cannot be cancelled: its status is failed, which is final", q.ID)) {
		t.Errorf("cancel again = %d %s, want 409 saying it is final", r.status, r.body)
	}

	// Being sent right now: a dispatcher holds its claim.
	busy := e.queue(t, "GLOBEX", "b.edi")
	if _, err := e.store.ClaimOutbox(context.Background(), "replica-2", time.Minute, 10); err != nil {
		t.Fatal(err)
	}
	if r := e.do(t, "POST", busy.Location+"/cancel", "", nil, token); r.status != http.StatusConflict ||
		!strings.Contains(string(r.body), "being sent right now (replica replica-2); try again in a few seconds") {
		t.Errorf("cancel while sent = %d %s, want 409 saying try again", r.status, r.body)
	}

	other := e.queue(t, "GLOBEX", "c.edi")
	for _, tt := range []struct {
		name, body string
		param      string
	}{
		{"not JSON", "cancel it", ""},
		{"unknown field", `{"why": "x"}`, ""},
		{"reason too long", `{"reason": "` + strings.Repeat("r", api.MaxCancelReason+1) + `"}`, "reason"},
	} {
		r := e.do(t, "POST", other.Location+"/cancel", "application/json", []byte(tt.body), token)
		if r.status != http.StatusBadRequest || decode[map[string]string](t, r)["parameter"] != tt.param {
			t.Errorf("%s: cancel = %d %s, want 400", tt.name, r.status, r.body)
		}
	}
	if m := decode[api.Message](t, e.do(t, "GET", other.Location, "", nil, token)); m.Status != "queued" {
		t.Errorf("after refused requests the message is %s, want queued", m.Status)
	}
	if r := e.do(t, "POST", "/api/v1/messages/99999/cancel", "", nil, token); r.status != http.StatusNotFound {
		t.Errorf("cancel of an unknown message = %d, want 404", r.status)
	}
	if r := e.do(t, "POST", other.Location+"/cancel", "", nil, ""); r.status != http.StatusUnauthorized {
		t.Errorf("cancel without the token = %d, want 401", r.status)
	}
}

// TestReapply: POST /mdns/{id}/reapply puts an orphan async MDN back to
// pending; anything else is a 409 or a 404.
func TestReapply(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	id, err := e.store.SaveInboxMDN(ctx, &postgres.InboxMDN{AS2From: "GLOBEX", AS2To: "EDIHUB", Header: http.Header{"Content-Type": {"multipart/report"}}, Body: []byte("mdn")})
	if err != nil {
		t.Fatal(err)
	}
	e.exec(t, `UPDATE mdn_inbox SET state = 'orphan', result = 'orphan', reason = 'bad signature', processed_at = now(), fence = 3, partner = 'GLOBEX' WHERE id = $1`, id)
	path := fmt.Sprintf("/api/v1/mdns/%d/reapply", id)
	r := e.do(t, "POST", path, "", nil, token)
	if r.status != http.StatusOK {
		t.Fatalf("reapply = %d %s", r.status, r.body)
	}
	m := decode[api.InboxMDN](t, r)
	if m.ID != id || m.State != "pending" || m.Reason != "" || m.ProcessedAt != nil || m.Fence != nil {
		t.Errorf("re-applied = %s, want pending", mustJSON(m))
	}
	if r := e.do(t, "POST", path, "", nil, token); r.status != http.StatusConflict || !strings.Contains(string(r.body), "not an orphan (it is pending)") {
		t.Errorf("reapply again = %d %s, want 409", r.status, r.body)
	}
	for _, p := range []string{"/api/v1/mdns/99999/reapply", "/api/v1/mdns/x/reapply"} {
		if r := e.do(t, "POST", p, "", nil, token); r.status != http.StatusNotFound {
			t.Errorf("POST %s = %d, want 404", p, r.status)
		}
	}
}
