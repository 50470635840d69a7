package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// TestCancelCommand: edihub cancel fails a queued message straight in the
// database and prints it as the API shows it; edihub resend queues it
// again. What cannot be cancelled is an error that says why.
func TestCancelCommand(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	st, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	q, err := st.EnqueueOutbound(ctx, postgres.NewOutbound{Partner: "ACME CORP", AS2From: "EDIHUB", AS2To: "ACME CORP",
		MessageID: "<cancel-1@EDIHUB>", MDNMode: "sync", URL: "http://127.0.0.1:1/as2", MaxAttempts: 3, Payload: []byte("doc")})
	if err != nil {
		t.Fatal(err)
	}
	id := strconv.FormatInt(q.ID, 10)
	getenv := env("EDIHUB_DATABASE_URL", url)
	out, errOut, err := runCmd(t, getenv, "cancel", "-reason", "wrong partner", id)
	if err != nil {
		t.Fatalf("edihub cancel = %v: %s", err, errOut)
	}
	var m struct {
		ID        int64  `json:"id"`
		MessageID string `json:"message_id"`
		Status    string `json:"status"`
		Error     string `json:"error"`
		Location  string `json:"location"`
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil || m.ID != q.ID || m.MessageID != q.MessageID || m.Status != "failed" ||
		m.Error != "cancelled: wrong partner" || m.Location != "/api/v1/messages/"+id {
		t.Fatalf("edihub cancel printed %s (%v), want message %s failed, cancelled: wrong partner", out, err, id)
	}
	if out, _, err := runCmd(t, getenv, "resend", id); err != nil || !strings.Contains(out, `"status": "queued"`) {
		t.Errorf("edihub resend after the cancel = %s, %v; want it queued again", out, err)
	}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"queued again, claimed", nil, "being sent right now"},
		{"unknown", []string{"cancel", "999999"}, "no message 999999"},
		{"no id", []string{"cancel"}, "exactly one message ID"},
		{"not an id", []string{"cancel", "abc"}, "not a message id"},
		{"reason too long", []string{"cancel", "-reason", strings.Repeat("r", 501), id}, "at most 500"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if args == nil {
				if _, err := st.ClaimOutbox(ctx, "replica-1", time.Minute, 10); err != nil {
					t.Fatal(err)
				}
				args = []string{"cancel", id}
			}
			_, _, err := runCmd(t, getenv, args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("edihub %v = %v, want an error mentioning %q", args, err, tt.want)
			}
		})
	}
	if _, _, err := runCmd(t, env(), "cancel", id); err == nil || !strings.Contains(err.Error(), "EDIHUB_DATABASE_URL") {
		t.Errorf("edihub cancel without a database = %v, want the variable named", err)
	}
}
