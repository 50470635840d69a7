package api_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/edihub/edihub/internal/api"
	"github.com/edihub/edihub/internal/postgres"
)

func (e *env) post(t *testing.T, partner, key string, body []byte) response {
	t.Helper()
	req, err := http.NewRequest("POST", e.url+"/api/v1/messages?partner="+partner, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "text/plain")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	// Called from several goroutines at once: t.Error, not t.Fatal.
	r, err := roundTrip(req)
	if err != nil {
		t.Error(err)
		return response{}
	}
	checkAnswer(t, req.Method, req.URL.EscapedPath(), r)
	return r
}

// TestIdempotencyKey: a repeated key with the same document answers 200
// with the first message; a different document with the key is a 422 that
// says so; concurrent requests with one key make one message.
func TestIdempotencyKey(t *testing.T) {
	e := setup(t)
	first := e.post(t, "GLOBEX", "order-4711", []byte("doc"))
	if first.status != http.StatusAccepted {
		t.Fatalf("first POST = %d %s, want 202", first.status, first.body)
	}
	q1 := decode[api.Queued](t, first)
	again := e.post(t, "GLOBEX", "order-4711", []byte("doc"))
	q2 := decode[api.Queued](t, again)
	if again.status != http.StatusOK || q2.ID != q1.ID || q2.MessageID != q1.MessageID || !q2.Replayed || again.header.Get("Location") != q1.Location {
		t.Errorf("repeat POST = %d %+v, want 200 with message %d replayed", again.status, q2, q1.ID)
	}
	other := e.post(t, "GLOBEX", "order-4711", []byte("another doc"))
	if other.status != http.StatusUnprocessableEntity || !strings.Contains(string(other.body), "different document") ||
		decode[map[string]string](t, other)["parameter"] != "Idempotency-Key" {
		t.Errorf("other document = %d %s, want 422 naming the key", other.status, other.body)
	}
	if r := e.post(t, "ACME+CORP", "order-4711", []byte("another doc")); r.status != http.StatusAccepted {
		t.Errorf("same key, other partner = %d %s, want 202", r.status, r.body)
	}
	if r := e.post(t, "GLOBEX", strings.Repeat("k", 256), []byte("doc")); r.status != http.StatusBadRequest {
		t.Errorf("256-byte key = %d, want 400", r.status)
	}
	if r := e.post(t, "GLOBEX", "with space", []byte("doc")); r.status != http.StatusBadRequest {
		t.Errorf("key with a space = %d, want 400", r.status)
	}

	const n = 12
	var wg sync.WaitGroup
	res := make([]response, n)
	for i := range n {
		wg.Go(func() { res[i] = e.post(t, "GLOBEX", "concurrent", []byte("same")) })
	}
	wg.Wait()
	accepted := 0
	ids := map[int64]bool{}
	for _, r := range res {
		switch r.status {
		case http.StatusAccepted:
			accepted++
		case http.StatusOK:
		default:
			t.Errorf("concurrent POST = %d %s", r.status, r.body)
			continue
		}
		ids[decode[api.Queued](t, r).ID] = true
	}
	if accepted != 1 || len(ids) != 1 {
		t.Errorf("%d of %d concurrent POSTs queued, %d messages; want 1 and 1", accepted, n, len(ids))
	}
	list := decode[api.List](t, e.do(t, "GET", "/api/v1/messages?partner=GLOBEX", "", nil, token))
	if len(list.Messages) != 2 {
		t.Errorf("GLOBEX has %d messages, want 2", len(list.Messages))
	}
}

// TestEventsFeed pages through the feed with small limits and the
// returned cursors.
func TestEventsFeed(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	var want []int64
	for i := range 5 {
		id, err := e.store.SaveInbound(ctx, &postgres.InboundMessage{Partner: "GLOBEX", AS2From: "GLOBEX", AS2To: "EDIHUB",
			MessageID: fmt.Sprintf("<%d@globex>", i), Status: postgres.InboundProcessed, MDNMode: "none", Filename: "f.edi", Payload: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	var got []int64
	cursor := ""
	for page := 0; page < 10; page++ {
		r := e.do(t, "GET", "/api/v1/events?limit=2&after="+cursor, "", nil, token)
		if r.status != 200 {
			t.Fatalf("GET events = %d %s", r.status, r.body)
		}
		evs := decode[api.Events](t, r)
		if evs.NextCursor == "" {
			t.Fatal("no next_cursor")
		}
		if len(evs.Events) > 2 {
			t.Fatalf("%d events with limit 2", len(evs.Events))
		}
		for _, ev := range evs.Events {
			if ev.Type != "received" || ev.Partner != "GLOBEX" || ev.Direction != "inbound" || !strings.Contains(string(ev.Detail), "f.edi") {
				t.Errorf("event %+v", ev)
			}
			got = append(got, ev.Message)
		}
		if len(evs.Events) == 0 {
			if evs.NextCursor != cursor && cursor != "" {
				t.Errorf("empty page moved the cursor from %q to %q", cursor, evs.NextCursor)
			}
			break
		}
		cursor = evs.NextCursor
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("feed messages %v, want %v", got, want)
	}
	for _, tt := range []struct{ query, param string }{
		{"after=12", "after"}, {"after=x-1", "after"}, {"limit=0", "limit"}, {"limit=1001", "limit"}, {"since=1", "since"},
	} {
		r := e.do(t, "GET", "/api/v1/events?"+tt.query, "", nil, token)
		if r.status != 400 || decode[map[string]string](t, r)["parameter"] != tt.param {
			t.Errorf("GET events?%s = %d %s, want 400 naming %s", tt.query, r.status, r.body, tt.param)
		}
	}
}
