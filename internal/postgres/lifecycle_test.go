package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

func outbound(partner, id, key string, hash []byte) postgres.NewOutbound {
	return postgres.NewOutbound{
		Partner: partner, AS2From: "S", AS2To: partner, MessageID: id, ContentType: "text/plain",
		MDNMode: "sync", URL: "http://p.example/as2", MaxAttempts: 3, Payload: []byte("x"),
		IdempotencyKey: key, IdempotencyHash: hash,
	}
}

// TestEnqueueIdempotencyKey: the same key and partner give the same
// message; another document with the key is refused; another partner has
// its own keys.
func TestEnqueueIdempotencyKey(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	first, err := st.EnqueueOutbound(ctx, outbound("P", "<1@s>", "k1", []byte("doc-a")))
	if err != nil || first.Replayed {
		t.Fatalf("first enqueue = %+v, %v", first, err)
	}
	again, err := st.EnqueueOutbound(ctx, outbound("P", "<2@s>", "k1", []byte("doc-a")))
	if err != nil {
		t.Fatalf("repeat: %v", err)
	}
	if !again.Replayed || again.ID != first.ID || again.MessageID != "<1@s>" {
		t.Errorf("repeat = %+v, want replay of message %d <1@s>", again, first.ID)
	}
	_, err = st.EnqueueOutbound(ctx, outbound("P", "<3@s>", "k1", []byte("doc-b")))
	if !errors.Is(err, postgres.ErrIdempotencyKeyReused) {
		t.Errorf("other document with the key = %v, want ErrIdempotencyKeyReused", err)
	}
	other, err := st.EnqueueOutbound(ctx, outbound("Q", "<4@s>", "k1", []byte("doc-b")))
	if err != nil || other.Replayed || other.ID == first.ID {
		t.Errorf("other partner = %+v, %v; want a new message", other, err)
	}
	n, err := st.CountSQL(ctx, `SELECT count(*) FROM messages`)
	if err != nil || n != 2 {
		t.Errorf("%d messages, %v; want 2", n, err)
	}
	if n, _ := st.CountSQL(ctx, `SELECT count(*) FROM outbox`); n != 2 {
		t.Errorf("%d outbox rows, want 2", n)
	}
}

// TestEnqueueIdempotencyKeyConcurrent: concurrent enqueues with one key
// make one message; every caller gets it.
func TestEnqueueIdempotencyKeyConcurrent(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	const n = 16
	res := make([]postgres.Enqueued, n)
	errs := make([]error, n)
	testenv.Together(n, func(i int) {
		res[i], errs[i] = st.EnqueueOutbound(ctx, outbound("P", fmt.Sprintf("<%d@s>", i), "same-key", []byte("doc")))
	})
	created := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("enqueue %d: %v", i, errs[i])
		}
		if !res[i].Replayed {
			created++
		}
		if res[i].ID != res[0].ID {
			t.Errorf("enqueue %d got message %d, enqueue 0 got %d", i, res[i].ID, res[0].ID)
		}
	}
	if created != 1 {
		t.Errorf("%d enqueues created a message, want 1", created)
	}
	if c, _ := st.CountSQL(ctx, `SELECT count(*) FROM messages`); c != 1 {
		t.Errorf("%d messages, want 1", c)
	}
}

// TestClaimRetryWindow: past max_attempts a row is claimed again while its
// retry window is open; once both are used up it fails, with its message.
func TestClaimRetryWindow(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	m := outbound("P", "<w@s>", "", nil)
	m.MaxAttempts = 1
	m.RetryWindow = time.Hour
	e, err := st.EnqueueOutbound(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	retry := postgres.OutboxResult{State: postgres.OutboxPending, Error: "HTTP 503", Message: &postgres.MessageUpdate{Status: "retrying"}}
	for attempt := 1; attempt <= 3; attempt++ {
		items, err := st.ClaimOutbox(ctx, "d", time.Minute, 10)
		if err != nil || len(items) != 1 {
			t.Fatalf("claim %d = %d items, %v; want the row (window open)", attempt, len(items), err)
		}
		it := items[0]
		if it.Attempts != attempt || it.RetryWindowLeft < 59*time.Minute || it.RetryWindowLeft > time.Hour {
			t.Fatalf("claim %d: attempts %d, window left %s", attempt, it.Attempts, it.RetryWindowLeft)
		}
		if err := st.FinishOutbox(ctx, it, retry); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.ExecSQL(ctx, `UPDATE outbox SET retry_until = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	items, err := st.ClaimOutbox(ctx, "d", time.Minute, 10)
	if err != nil || len(items) != 0 {
		t.Fatalf("claim after the window = %d items, %v; want none", len(items), err)
	}
	msg, err := st.Message(ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Status != "failed" || msg.Error != "gave up after 3 attempts and the retry window: HTTP 503" {
		t.Errorf("message status %q error %q; want failed after 3 attempts and the window", msg.Status, msg.Error)
	}
}

// TestClaimWithoutWindowKeepsCount: without a window, max_attempts alone
// decides, as before.
func TestClaimWithoutWindowKeepsCount(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	m := outbound("P", "<c@s>", "", nil)
	m.MaxAttempts = 1
	if _, err := st.EnqueueOutbound(ctx, m); err != nil {
		t.Fatal(err)
	}
	items, err := st.ClaimOutbox(ctx, "d", time.Minute, 10)
	if err != nil || len(items) != 1 || items[0].RetryWindowLeft != 0 {
		t.Fatalf("claim = %+v, %v", items, err)
	}
	if err := st.FinishOutbox(ctx, items[0], postgres.OutboxResult{State: postgres.OutboxPending}); err != nil {
		t.Fatal(err)
	}
	if items, _ := st.ClaimOutbox(ctx, "d", time.Minute, 10); len(items) != 0 {
		t.Errorf("claimed a row with no attempts and no window left: %+v", items)
	}
}

func allEvents(t *testing.T, st *postgres.Store) []postgres.Event {
	t.Helper()
	evs, err := st.Events(context.Background(), postgres.EventCursor{}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestEventsFromEveryWriter: the trigger turns each writer's status change
// into one event in the same transaction: the receiver's processed insert,
// the dispatcher's final outcome and its give-up at claim time, an overdue
// flag; nothing for other changes.
func TestEventsFromEveryWriter(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	in := &postgres.InboundMessage{Partner: "P", AS2From: "P", AS2To: "S", MessageID: "<in@p>", Status: postgres.InboundProcessed, MDNMode: "none", Payload: []byte("x")}
	if _, err := st.SaveInbound(ctx, in); err != nil {
		t.Fatal(err)
	}
	bad := &postgres.InboundMessage{Partner: "P", AS2From: "P", AS2To: "S", MessageID: "<bad@p>", Status: postgres.InboundError, MDNMode: "none"}
	if _, err := st.SaveInbound(ctx, bad); err != nil {
		t.Fatal(err)
	}
	ok, _ := st.EnqueueOutbound(ctx, outbound("P", "<ok@s>", "", nil))
	it, _ := st.ClaimOutbox(ctx, "d", time.Minute, 1)
	if err := st.FinishOutbox(ctx, it[0], postgres.OutboxResult{State: postgres.OutboxDone,
		Message: &postgres.MessageUpdate{Status: "delivered", Disposition: "automatic-action/MDN-sent-automatically; processed", Final: true}}); err != nil {
		t.Fatal(err)
	}
	late, _ := st.EnqueueOutbound(ctx, outbound("Q", "<late@s>", "", nil))
	if _, err := st.ExecSQL(ctx, `UPDATE messages SET status = 'awaiting-mdn', mdn_due_at = now() WHERE id = $1`, late.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ExecSQL(ctx, `UPDATE messages SET mdn_overdue = true WHERE id = $1`, late.ID); err != nil {
		t.Fatal(err)
	}
	m := outbound("Q", "<dead@s>", "", nil)
	m.MaxAttempts = 1
	dead, _ := st.EnqueueOutbound(ctx, m)
	if _, err := st.ClaimOutbox(ctx, "crashed", -time.Second, 10); err != nil { // a claim expired unfinished
		t.Fatal(err)
	}
	if _, err := st.ClaimOutbox(ctx, "d", time.Minute, 10); err != nil { // gives up on it
		t.Fatal(err)
	}
	var got []string
	for _, e := range allEvents(t, st) {
		got = append(got, fmt.Sprintf("%s %d %s %s", e.Type, e.Message, e.Partner, e.Direction))
	}
	want := []string{
		fmt.Sprintf("received %d P inbound", 1),
		fmt.Sprintf("delivered %d P outbound", ok.ID),
		fmt.Sprintf("overdue %d Q outbound", late.ID),
		fmt.Sprintf("failed %d Q outbound", dead.ID),
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	evs := allEvents(t, st)
	if d := string(evs[1].Detail); !strings.Contains(d, `"message_id": "<ok@s>"`) || !strings.Contains(d, "processed") {
		t.Errorf("delivered detail %s lacks the Message-ID or disposition", d)
	}
}

// TestEventsPagingUnderConcurrentWriters: writers commit events out of id
// order (each holds its transaction open until the consumer lets one of
// those waiting commit, chosen at random) while the consumer pages with
// small limits; the consumer sees every event exactly once.
func TestEventsPagingUnderConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	// The writers' held transactions may take all of a pool's connections:
	// the consumer, which lets them commit, pages through a pool of its own.
	st, reader := openStore(t, url, postgres.Options{}), openStore(t, url, postgres.Options{})
	const writers, perWriter = 8, 25
	var wg sync.WaitGroup
	writeErr := make(chan error, writers)
	done := make(chan struct{})
	held := make(chan chan struct{}) // a writer's transaction, inserted, waiting to commit
	hold := func() {
		commit := make(chan struct{})
		held <- commit
		<-commit
	}
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				if err := st.InsertInboundHeld(ctx, fmt.Sprintf("P%d", w), fmt.Sprintf("<%d@p>", i), hold); err != nil {
					writeErr <- err
					return
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	r := rand.New(rand.NewPCG(7, 7))
	var waiting []chan struct{}
	seen := map[int64]bool{}
	var order []postgres.EventCursor
	var cursor postgres.EventCursor
	finished := false
	for pages := 0; ; pages++ {
		if pages > 100000 {
			t.Fatal("consumer did not catch up")
		}
	take:
		for {
			select {
			case c := <-held:
				waiting = append(waiting, c)
			case <-done:
				finished = true
				break take
			default:
				break take
			}
		}
		if len(waiting) > 0 {
			i := r.IntN(len(waiting))
			close(waiting[i])
			waiting = slices.Delete(waiting, i, i+1)
		}
		evs, err := reader.Events(ctx, cursor, 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if seen[e.ID] {
				t.Errorf("event %d (cursor %v) returned twice, after %v", e.ID, e.Cursor, cursor)
			}
			seen[e.ID] = true
			order = append(order, e.Cursor)
			cursor = e.Cursor
		}
		if finished && len(evs) == 0 {
			break
		}
	}
	close(writeErr)
	for err := range writeErr {
		t.Fatal(err)
	}
	all := allEvents(t, st)
	if len(all) != writers*perWriter {
		t.Fatalf("%d events stored, want %d", len(all), writers*perWriter)
	}
	for _, e := range all {
		if !seen[e.ID] {
			t.Errorf("consumer missed event %d", e.ID)
		}
	}
	if !slices.IsSortedFunc(order, func(a, b postgres.EventCursor) int {
		if a.TxID != b.TxID {
			return int(a.TxID) - int(b.TxID)
		}
		return int(a.ID - b.ID)
	}) {
		t.Error("events were not returned in feed order")
	}
}

func TestEventCursorRoundTrip(t *testing.T) {
	tests := []struct {
		give    string
		want    postgres.EventCursor
		wantErr bool
	}{
		{give: "", want: postgres.EventCursor{}},
		{give: "0", want: postgres.EventCursor{}},
		{give: "812-1044", want: postgres.EventCursor{TxID: 812, ID: 1044}},
		{give: "812", wantErr: true},
		{give: "a-1", wantErr: true},
		{give: "1--1", wantErr: true},
	}
	for _, tt := range tests {
		got, err := postgres.ParseEventCursor(tt.give)
		if (err != nil) != tt.wantErr || (!tt.wantErr && got != tt.want) {
			t.Errorf("ParseEventCursor(%q) = %v, %v; want %v, error %v", tt.give, got, err, tt.want, tt.wantErr)
		}
		if !tt.wantErr && tt.give != "" && tt.give != "0" && got.String() != tt.give {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tt.give)
		}
	}
}

// TestEventsOrderedByTransactionNumber: the feed sorts transaction ids as
// numbers (9 before 10), then event ids.
func TestEventsOrderedByTransactionNumber(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	if _, err := st.ExecSQL(ctx, `INSERT INTO events (txid, type, message, partner, direction) VALUES
        ('10', 'received', 1, 'P', 'inbound'), ('9', 'received', 2, 'P', 'inbound'), ('9', 'received', 3, 'P', 'inbound')`); err != nil {
		t.Fatal(err)
	}
	var got []string
	var cursor postgres.EventCursor
	for {
		evs, err := st.Events(ctx, cursor, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			break
		}
		got = append(got, evs[0].Cursor.String())
		cursor = evs[0].Cursor
	}
	if want := "9-2 9-3 10-1"; strings.Join(got, " ") != want {
		t.Errorf("feed order %v, want %s", got, want)
	}
}
