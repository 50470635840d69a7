package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// saved is the outcome of one SaveInbound.
type saved struct {
	id  int64
	err error
}

// waitLine waits until n receipts wait in st's line of the group commit.
func waitLine(t *testing.T, st *postgres.Store, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); st.ReceiptsWaiting() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d receipts in line, want %d", st.ReceiptsWaiting(), n)
		}
	}
}

// lineUp saves each of ms in a goroutine of its own, in line behind a
// flush that HoldReceipts pretends, in the order given, and returns their
// outcomes once ReleaseReceipts let them through.
func lineUp(ctx context.Context, t *testing.T, st *postgres.Store, ms ...*postgres.InboundMessage) []saved {
	t.Helper()
	st.HoldReceipts()
	out := make([]saved, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() {
			id, err := st.SaveInbound(ctx, m)
			out[i] = saved{id, err}
		})
		waitLine(t, st, i+1)
	}
	st.ReleaseReceipts()
	wg.Wait()
	return out
}

// xmins are the transactions that wrote each message row of ids.
func xmins(t *testing.T, st *postgres.Store, ids ...int64) map[int64]int {
	t.Helper()
	got := map[int64]int{}
	for _, id := range ids {
		x, err := st.CountSQL(context.Background(), `SELECT xmin::text::bigint FROM messages WHERE id = $1`, id)
		if err != nil {
			t.Fatal(err)
		}
		got[x]++
	}
	return got
}

// checkStored checks that each message of ids is stored once with its
// payload, its MDN and one received event, and wantOutbox outbox rows.
func checkStored(t *testing.T, st *postgres.Store, ids []int64, wantOutbox int64) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []struct {
		sql  string
		want int64
	}{
		{`SELECT count(*) FROM messages WHERE id = ANY($1)`, int64(len(ids))},
		{`SELECT count(*) FROM payloads WHERE message_id = ANY($1)`, int64(len(ids))},
		{`SELECT count(*) FROM mdns WHERE message_id = ANY($1)`, int64(len(ids))},
		{`SELECT count(*) FROM events WHERE type = 'received' AND message = ANY($1)`, int64(len(ids))},
		{`SELECT count(DISTINCT message) FROM events WHERE type = 'received' AND message = ANY($1)`, int64(len(ids))},
		{`SELECT count(*) FROM outbox WHERE kind = 'mdn' AND message_id = ANY($1)`, wantOutbox},
	} {
		if n, err := st.CountSQL(ctx, q.sql, ids); err != nil || n != q.want {
			t.Errorf("%s = %d, %v; want %d", q.sql, n, err, q.want)
		}
	}
	if n, err := st.CountSQL(ctx, `SELECT count(*) FROM messages`); err != nil || n != int64(len(ids)) {
		t.Errorf("messages stored %d, %v; want %d", n, err, len(ids))
	}
}

// TestReceiptsConcurrent: many receipts saved at once each land exactly
// once, with their payload, MDN, event and async MDN's outbox row, and
// every one of them went through a flush of the group commit.
func TestReceiptsConcurrent(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	const n = 64
	out := make([]saved, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			m := receipt(fmt.Sprintf("<c-%d@p>", i))
			if i%4 == 0 {
				m.MDNMode, m.MDNURL, m.Outbox = "async", "http://p.example/mdn", true
			}
			id, err := st.SaveInbound(ctx, m)
			out[i] = saved{id, err}
		})
	}
	wg.Wait()
	ids := make([]int64, 0, n)
	seen := map[int64]bool{}
	for i, o := range out {
		if o.err != nil || o.id == 0 || seen[o.id] {
			t.Fatalf("receipt %d: id %d, %v (ids so far %v)", i, o.id, o.err, ids)
		}
		seen[o.id] = true
		ids = append(ids, o.id)
	}
	checkStored(t, st, ids, n/4)
	if flushes, receipts, fallbacks := st.ReceiptFlushes(); receipts != n || flushes > n || fallbacks != 0 {
		t.Errorf("flushes %d of %d receipts, %d fell back; want the %d receipts, none falling back", flushes, receipts, fallbacks, n)
	}
}

// TestReceiptBatch: receipts waiting in line are written in one
// transaction, each with its own outcome: a copy of a Message-ID earlier
// in the same batch and a Message-ID stored before are duplicates, a
// failure is stored without payload, an async MDN is queued; the
// received events follow the messages' ids, given in the order of the
// Message-IDs (here also the line's).
func TestReceiptBatch(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	first, err := st.SaveInbound(ctx, receipt("<stored@p>"))
	if err != nil {
		t.Fatal(err)
	}
	failed := receipt("<failed@p>")
	failed.Status, failed.Payload, failed.Filename = postgres.InboundError, nil, ""
	async := receipt("<async@p>")
	async.MDNMode, async.MDNURL, async.Outbox = "async", "http://p.example/mdn", true
	noMDN := receipt("<no-mdn@p>")
	noMDN.MDNMode, noMDN.MDN = "none", nil
	batch := []*postgres.InboundMessage{receipt("<a@p>"), receipt("<a@p>"), receipt("<stored@p>"), failed, async, receipt("<b@p>"), noMDN}
	batch[1].Filename = "SECOND_COPY.edi" // the first copy is the one stored
	// Each its own payload, MDN body and header fields: the batch's
	// statement takes them from their arrays by the receipt's ordinal,
	// in the order of the Message-IDs, not the line's.
	for i, m := range batch {
		if m.Payload != nil {
			m.Payload = fmt.Appendf(nil, "ISA*%02d~", i)
		}
		if m.MDN != nil {
			m.MDN = &postgres.StoredMDN{Header: map[string][]string{"Content-Type": {"multipart/report"}, "X-Receipt": {strconv.Itoa(i)}},
				Body: fmt.Appendf(nil, "mdn %d", i), Disposition: "processed"}
		}
	}
	_, before, _ := st.ReceiptFlushes()
	out := lineUp(ctx, t, st, batch...)

	for i, o := range out {
		dup := i == 1 || i == 2
		if dup && !errors.Is(o.err, postgres.ErrDuplicateInbound) || !dup && (o.err != nil || o.id == 0) {
			t.Errorf("receipt %d (%s): id %d, %v", i, batch[i].MessageID, o.id, o.err)
		}
	}
	ids := []int64{out[0].id, out[3].id, out[4].id, out[5].id, out[6].id}
	if x := xmins(t, st, ids...); len(x) != 1 {
		t.Errorf("the batch's receipts were written by %d transactions, want one: %v", len(x), x)
	}
	_, receipts, fallbacks := st.ReceiptFlushes()
	if receipts-before != len(batch) || fallbacks != 0 {
		t.Errorf("receipts flushed %d, fallbacks %d; want %d, 0", receipts-before, fallbacks, len(batch))
	}
	var events []int64
	for _, e := range allEvents(t, st) {
		if e.Type == postgres.EventReceived {
			events = append(events, e.Message)
		}
	}
	want := []int64{first, out[0].id, out[4].id, out[5].id, out[6].id} // the failure has none
	if fmt.Sprint(events) != fmt.Sprint(want) {
		t.Errorf("received events for %v, want %v", events, want)
	}
	if n, err := st.CountSQL(ctx, `SELECT count(*) FROM duplicates`); err != nil || n != 2 {
		t.Errorf("duplicates counted %d, %v; want 2", n, err)
	}
	for _, c := range []struct {
		what, table string
		id, want    int64
	}{
		{"payloads of the failure", "payloads", out[3].id, 0},
		{"MDNs of the failure", "mdns", out[3].id, 1},
		{"payloads of the receipt without MDN", "payloads", out[6].id, 1},
		{"MDNs of the receipt without MDN", "mdns", out[6].id, 0},
		{"payloads of the first <a@p>", "payloads", out[0].id, 1},
	} {
		if n, err := st.CountSQL(ctx, `SELECT count(*) FROM `+c.table+` WHERE message_id = $1`, c.id); err != nil || n != c.want {
			t.Errorf("%s: %d, %v; want %d", c.what, n, err, c.want)
		}
	}
	if n, err := st.CountSQL(ctx, `SELECT count(*) FROM messages m JOIN events e ON e.message = m.id
 WHERE m.id = $1 AND m.filename = $2 AND e.detail->>'filename' = $2`, out[0].id, batch[0].Filename); err != nil || n != 1 {
		t.Errorf("<a@p> stored with its first copy's file name and event: %d, %v; want 1", n, err)
	}
	if n, err := st.CountSQL(ctx, `SELECT count(*) FROM outbox WHERE kind = 'mdn' AND message_id = $1`, out[4].id); err != nil || n != 1 {
		t.Errorf("outbox rows of the async MDN %d, %v; want 1", n, err)
	}
	for _, i := range []int{0, 3, 4, 5, 6} {
		m := batch[i]
		if m.Payload != nil {
			if n, err := st.CountSQL(ctx, `SELECT count(*) FROM payloads WHERE message_id = $1 AND data = $2`, out[i].id, m.Payload); err != nil || n != 1 {
				t.Errorf("receipt %d (%s): its own payload stored %d times, %v; want once", i, m.MessageID, n, err)
			}
		}
		if m.MDN != nil {
			if n, err := st.CountSQL(ctx, `SELECT count(*) FROM mdns WHERE message_id = $1 AND body = $2 AND headers->'X-Receipt'->>0 = $3`,
				out[i].id, m.MDN.Body, strconv.Itoa(i)); err != nil || n != 1 {
				t.Errorf("receipt %d (%s): its own MDN stored %d times, %v; want once", i, m.MessageID, n, err)
			}
		}
	}
	if n, err := st.CountSQL(ctx, `SELECT count(*) FROM outbox WHERE message_id = $1 AND body = $2 AND headers->'X-Receipt'->>0 = '4'`,
		out[4].id, batch[4].MDN.Body); err != nil || n != 1 {
		t.Errorf("the async MDN's outbox row with its own MDN: %d, %v; want 1", n, err)
	}
}

// TestReceiptBatchBadReceipt: a receipt that fails fails its batch's
// transaction; the others are then written one by one and stored, and
// only the bad one reports an error.
func TestReceiptBatchBadReceipt(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	bad := receipt("<bad@p>")
	bad.MDNMode = "carrier pigeon" // refused by the CHECK constraint of messages.mdn_mode
	batch := []*postgres.InboundMessage{receipt("<a@p>"), bad, receipt("<b@p>"), receipt("<c@p>")}
	out := lineUp(ctx, t, st, batch...)

	if out[1].err == nil || errors.Is(out[1].err, postgres.ErrDuplicateInbound) {
		t.Errorf("bad receipt: id %d, %v; want an error", out[1].id, out[1].err)
	}
	ids := []int64{out[0].id, out[2].id, out[3].id}
	for i, o := range out {
		if i != 1 && (o.err != nil || o.id == 0) {
			t.Errorf("receipt %d: id %d, %v", i, o.id, o.err)
		}
	}
	checkStored(t, st, ids, 0)
	if x := xmins(t, st, ids...); len(x) != len(ids) {
		t.Errorf("after the batch failed, its receipts were written by %d transactions, want one each: %v", len(x), x)
	}
	if _, _, fallbacks := st.ReceiptFlushes(); fallbacks != 1 {
		t.Errorf("fallbacks %d, want 1", fallbacks)
	}
}

// TestReceiptFlushesKeepTheirConnection: the flushes of a line that
// takes two batches run on one connection from the pool, given back once
// the line is empty; a failed batch gives it back at once, its receipts
// written one by one on the pool's connections.
func TestReceiptFlushesKeepTheirConnection(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	for round, bad := range []bool{false, true} {
		const n = 40 // two batches: 32 and 8
		st.HoldReceipts()
		out := make([]saved, n)
		var wg sync.WaitGroup
		for i := range n {
			m := receipt(fmt.Sprintf("<keep-%d-%d@p>", round, i))
			if bad && i == 3 {
				m.MDNMode = "carrier pigeon" // refused: the first batch falls back to one by one
			}
			wg.Go(func() {
				id, err := st.SaveInbound(ctx, m)
				out[i] = saved{id, err}
			})
			waitLine(t, st, i+1) // in this order: the bad receipt is in the first batch
		}
		flushes0, _, _ := st.ReceiptFlushes()
		acquires0, _ := st.PoolConns()
		st.ReleaseReceipts()
		wg.Wait()
		acquires, acquired := st.PoolConns()
		flushes, _, _ := st.ReceiptFlushes()
		for i, o := range out {
			if (o.err == nil) == (bad && i == 3) || (o.err == nil && o.id == 0) {
				t.Errorf("round %d, receipt %d: id %d, %v", round, i, o.id, o.err)
			}
		}
		// The failed batch gives its connection back, its 32 receipts are
		// written one by one on the pool's, and the next batch takes one.
		want := int64(1)
		if bad {
			want = 1 + 32 + 1
		}
		if flushes-flushes0 != 2 || acquires-acquires0 != want || acquired != 0 {
			t.Errorf("round %d: %d flushes took %d connections from the pool, %d still taken; want 2 flushes, %d, 0",
				round, flushes-flushes0, acquires-acquires0, acquired, want)
		}
	}
}

// TestReceiptWaiterCancelled: a caller whose context ends while it waits
// in line leaves without its receipt being written, and the others are;
// once its receipt is taken into a batch, its context no longer matters:
// it gets the batch's outcome.
func TestReceiptWaiterCancelled(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	st, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	// In line: leaves.
	st.HoldReceipts()
	cctx, cancel := context.WithCancel(ctx)
	gone := make(chan saved, 1)
	go func() {
		id, err := st.SaveInbound(cctx, receipt("<gone@p>"))
		gone <- saved{id, err}
	}()
	waitLine(t, st, 1)
	stays := make(chan saved, 1)
	go func() {
		id, err := st.SaveInbound(ctx, receipt("<stays@p>"))
		stays <- saved{id, err}
	}()
	waitLine(t, st, 2)
	cancel()
	if o := <-gone; !errors.Is(o.err, context.Canceled) {
		t.Errorf("cancelled waiter: id %d, %v; want context.Canceled", o.id, o.err)
	}
	waitLine(t, st, 1)
	st.ReleaseReceipts()
	if o := <-stays; o.err != nil {
		t.Errorf("the other waiter: %v", o.err)
	}
	if n, err := st.CountSQL(ctx, `SELECT count(*) FROM messages WHERE message_id = '<gone@p>'`); err != nil || n != 0 {
		t.Errorf("the cancelled waiter's receipt was stored (%d, %v)", n, err)
	}

	// Taken: its batch waits for another transaction that holds its
	// Message-ID (the unique index makes it wait), and it is cancelled
	// meanwhile; it still gets the batch's outcome.
	blocker := pgtest.Conn(t, url)
	tx, err := blocker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO messages (direction, partner, as2_from, as2_to, message_id, status, completed_at)
VALUES ('inbound', 'P', 'P', 'S', '<lead@p>', 'error', now())`); err != nil {
		t.Fatal(err)
	}
	st.HoldReceipts()
	cctx, cancel = context.WithCancel(ctx)
	taken := make(chan saved, 2)
	for i, msgID := range []string{"<lead@p>", "<taken@p>"} {
		go func() {
			id, err := st.SaveInbound(cctx, receipt(msgID))
			taken <- saved{id, err}
		}()
		waitLine(t, st, i+1)
	}
	st.ReleaseReceipts()
	waitLine(t, st, 0)
	cancel()
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if o := <-taken; o.err != nil || o.id == 0 {
			t.Errorf("a receipt taken into a batch, then cancelled: id %d, %v; want it stored", o.id, o.err)
		}
	}
}

// TestReceiptBatchesTwoReplicas: two replicas (two stores, two pools)
// flush batches of the same Message-IDs lined up in opposite orders,
// both in flight at once: a third transaction holds the middle
// Message-ID until both batches wait on a lock. The batches take their
// Message-IDs in one order (sorted), so neither waits for the other in
// a cycle: no deadlock, no batch rewritten one by one, each Message-ID
// stored once. (Taken in line order, each batch would hold the
// Message-IDs the other still needs: PostgreSQL would abort one of them
// as deadlocked and its receipts would fall back to one by one.)
func TestReceiptBatchesTwoReplicas(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	stores := make([]*postgres.Store, 2)
	for i := range stores {
		st, err := postgres.Open(ctx, url, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		stores[i] = st
	}
	msgIDs := []string{"<a@p>", "<b@p>", "<held@p>", "<x@p>", "<y@p>"}
	blocker := pgtest.Conn(t, url)
	tx, err := blocker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // a no-op once committed
	if _, err := tx.Exec(ctx, `INSERT INTO messages (direction, partner, as2_from, as2_to, message_id, status, completed_at)
VALUES ('inbound', 'P', 'P', 'S', '<held@p>', 'processed', now())`); err != nil {
		t.Fatal(err)
	}

	out := make([]map[string]saved, len(stores))
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for i, st := range stores {
		line := slices.Clone(msgIDs)
		if i == 1 {
			slices.Reverse(line)
		}
		out[i] = map[string]saved{}
		st.HoldReceipts()
		for j, msgID := range line {
			wg.Go(func() {
				id, err := st.SaveInbound(ctx, receipt(msgID))
				mu.Lock()
				defer mu.Unlock()
				out[i][msgID] = saved{id, err}
			})
			waitLine(t, st, j+1)
		}
	}
	for _, st := range stores {
		st.ReleaseReceipts()
	}
	waitLockWaiters(t, pgtest.Conn(t, url), 2)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	for _, msgID := range msgIDs {
		stored := 0
		for i := range stores {
			switch o := out[i][msgID]; {
			case o.err == nil && o.id != 0:
				stored++
			case !errors.Is(o.err, postgres.ErrDuplicateInbound):
				t.Errorf("replica %d, %s: id %d, %v", i, msgID, o.id, o.err)
			}
		}
		want := 1
		if msgID == "<held@p>" {
			want = 0 // the blocker's
		}
		if stored != want {
			t.Errorf("%s stored by %d replicas, want %d", msgID, stored, want)
		}
		if n, err := stores[0].CountSQL(ctx, `SELECT count(*) FROM messages WHERE message_id = $1`, msgID); err != nil || n != 1 {
			t.Errorf("%s: %d rows, %v; want 1", msgID, n, err)
		}
	}
	for i, st := range stores {
		if flushes, receipts, fallbacks := st.ReceiptFlushes(); receipts != len(msgIDs) || fallbacks != 0 {
			t.Errorf("replica %d: %d flushes of %d receipts, %d fell back; want %d receipts, none falling back",
				i, flushes, receipts, fallbacks, len(msgIDs))
		}
	}
}

// waitLockWaiters waits until n sessions of c's database wait for
// another transaction (a row or unique-index conflict). c must not be in
// a transaction: pg_stat_activity is read once per transaction.
func waitLockWaiters(t *testing.T, c *pgx.Conn, n int64) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		var got int64
		if err := c.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
 WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'transactionid'`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions wait for a transaction, want %d", got, n)
		}
	}
}
