package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

type hubEvent struct {
	ID        int64  `json:"id"`
	Type      string `json:"type"`
	Message   int64  `json:"message"`
	Partner   string `json:"partner"`
	Direction string `json:"direction"`
}

// TestServeLifecycle runs two stations through serve: the sender has a
// webhook and queues with an Idempotency-Key. The repeated request gets
// the same message; the delivered outcome appears in the sender's event
// feed and reaches its webhook, signed; the receiver's feed has the
// received event; the leader's purger ran on both.
func TestServeLifecycle(t *testing.T) {
	secret := "hub-webhook-secret"
	var mu sync.Mutex
	var hooked []hubEvent
	var bad []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte(r.Header.Get("X-Edihub-Timestamp") + "." + r.Header.Get("X-Edihub-Event-Id") + "."))
		mac.Write(body)
		mu.Lock()
		defer mu.Unlock()
		if r.Header.Get("X-Edihub-Signature") != "sha256="+hex.EncodeToString(mac.Sum(nil)) {
			bad = append(bad, "signature "+r.Header.Get("X-Edihub-Signature"))
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var e hubEvent
		if err := json.Unmarshal(body, &e); err != nil {
			bad = append(bad, err.Error())
		}
		hooked = append(hooked, e)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer hook.Close()

	a, b := newHubStation(t, "HUB ALPHA"), newHubStation(t, "HUB-BRAVO")
	secretFile := filepath.Join(a.dir, "webhook.secret")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a.extraEnv = []string{"EDIHUB_WEBHOOK_URL", hook.URL + "/events", "EDIHUB_WEBHOOK_SECRET_FILE", secretFile}
	a.start(t, b, "sign: sha-256", "mdn: sync", "mdn_signed: true", "retry_window: 2h")
	b.start(t, a, "sign: sha-256", "mdn: sync")

	// The webhook forwarder takes its place in the feed when it first
	// runs; wait for it before making events.
	conn, err := pgx.Connect(context.Background(), a.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	deadline := time.Now().Add(30 * time.Second)
	for {
		var cursors int
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM event_cursors WHERE name = 'webhook'`).Scan(&cursors); err != nil {
			t.Fatal(err)
		}
		if cursors == 1 && strings.Contains(a.logs.String(), "purge finished") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no webhook cursor or purge run:\n%s", a.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	post := func(doc string) (int, hubMessage) {
		req, _ := http.NewRequest("POST", "http://"+a.as2Addr+"/api/v1/messages?partner="+url.QueryEscape(b.name), strings.NewReader(doc))
		req.Header.Set("Authorization", "Bearer "+a.token)
		req.Header.Set("Idempotency-Key", "po-4711")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m hubMessage
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	c1, q1 := post("ISA*00*~")
	c2, q2 := post("ISA*00*~")
	c3, _ := post("ISA*01*~")
	if c1 != http.StatusAccepted || c2 != http.StatusOK || q2.ID != q1.ID || c3 != http.StatusUnprocessableEntity {
		t.Fatalf("POSTs with one key = %d, %d (id %d vs %d), other document %d; want 202, 200 same id, 422", c1, c2, q2.ID, q1.ID, c3)
	}
	var m hubMessage
	for deadline := time.Now().Add(30 * time.Second); m.Status != "delivered"; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("message %d: status %q, error %q", q1.ID, m.Status, m.Error)
		}
		a.api(t, "GET", q1.Location, "", nil, &m)
	}

	var feed struct {
		Events     []hubEvent `json:"events"`
		NextCursor string     `json:"next_cursor"`
	}
	if c := a.api(t, "GET", "/api/v1/events", "", nil, &feed); c != 200 || len(feed.Events) != 1 ||
		feed.Events[0].Type != "delivered" || feed.Events[0].Message != q1.ID || feed.Events[0].Partner != b.name {
		t.Errorf("sender's feed = %d %+v, want one delivered event for message %d", c, feed.Events, q1.ID)
	}
	if c := b.api(t, "GET", "/api/v1/events", "", nil, &feed); c != 200 || len(feed.Events) != 1 ||
		feed.Events[0].Type != "received" || feed.Events[0].Partner != a.name || feed.Events[0].Direction != "inbound" {
		t.Errorf("receiver's feed = %d %+v, want one received event", c, feed.Events)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		n := len(hooked)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the webhook got nothing")
		}
	}
	mu.Lock()
	if len(bad) > 0 || len(hooked) != 1 || hooked[0].Type != "delivered" || hooked[0].Message != q1.ID {
		t.Errorf("webhook got %+v (problems %v), want the delivered event of message %d", hooked, bad, q1.ID)
	}
	mu.Unlock()
	if strings.Contains(a.logs.String(), secret) {
		t.Error("the webhook secret appears in the log")
	}
	// Counted once the outcome is recorded, just after the webhook answered.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(a.metrics(t), `edihub_webhook_deliveries_total{result="delivered"} 1`); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(`edihub_webhook_deliveries_total{result="delivered"} is not 1`)
		}
	}
}
