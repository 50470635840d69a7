package postgres_test

import (
	"bytes"
	"compress/zlib"
	"context"
	"errors"
	"io"
	"testing"

	"go.uber.org/goleak"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// noLeak checks, after the test's cleanups (its store closed), that it
// left no goroutine running.
func noLeak(t *testing.T) {
	// The shared test server may start during the test (the first to
	// ask for it): its process's waiter lives as long as the server.
	ignore := []goleak.Option{goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/edihub/edihub/internal/testenv/pgserver.(*Server).Start.func1")}
	t.Cleanup(func() { goleak.VerifyNone(t, ignore...) })
}

// stagedPayload is 3 MiB and a bit: several pieces and a short last one.
var stagedPayload = bytes.Repeat([]byte("0123456789ABCDEF"), (3<<20)/16+1000)

// stage stages p for partner P, written in uneven writes.
func stage(t *testing.T, st *postgres.Store, ctx context.Context, p []byte) *postgres.StagedPayload {
	t.Helper()
	s, err := st.StageInboundPayload(ctx, "P")
	if err != nil {
		t.Fatalf("StageInboundPayload: %v", err)
	}
	for len(p) > 0 {
		n := min(len(p), 100_003)
		if k, err := s.Write(p[:n]); k != n || err != nil {
			t.Fatalf("Write = %d, %v; want %d, nil", k, err, n)
		}
		p = p[n:]
	}
	return s
}

// opened is a PayloadOpen that counts its calls.
type opened struct {
	p     []byte
	calls int
}

func (o *opened) open() io.Reader { o.calls++; return bytes.NewReader(o.p) }

func stagedMessage(id string, o *opened, s *postgres.StagedPayload) *postgres.InboundMessage {
	return &postgres.InboundMessage{Partner: "P", AS2From: "P", AS2To: "S", MessageID: id, Status: postgres.InboundProcessed,
		Disposition: "automatic-action/MDN-sent-automatically; processed", MDNMode: "none",
		PayloadSize: int64(len(o.p)), PayloadOpen: o.open, Staged: s}
}

// wantNoStage checks that nothing of a stage is left: no placeholder
// row, no piece that is not a stored message's.
func wantNoStage(t *testing.T, st *postgres.Store) {
	t.Helper()
	ctx := context.Background()
	if n, err := st.CountSQL(ctx, `SELECT count(*) FROM messages WHERE message_id LIKE 'edihub-staged-%'`); err != nil || n != 0 {
		t.Errorf("placeholder rows = %d, %v; want 0", n, err)
	}
	if n, err := st.CountSQL(ctx, `SELECT count(*) FROM payload_chunks c WHERE NOT EXISTS
		(SELECT 1 FROM messages m WHERE m.id = c.message_id AND m.message_id NOT LIKE 'edihub-staged-%')`); err != nil || n != 0 {
		t.Errorf("pieces of no stored message = %d, %v; want 0", n, err)
	}
}

// TestStagedPayload stores a payload staged as it was written: the
// pieces are the message's, read back whole, the received event is
// there, PayloadOpen was not needed, and nothing of the stage is left.
func TestStagedPayload(t *testing.T) {
	noLeak(t)
	ctx := context.Background()
	st := pgtest.Store(t)
	o := &opened{p: stagedPayload}
	s := stage(t, st, ctx, stagedPayload)
	id, err := st.SaveInbound(ctx, stagedMessage("<staged@p>", o, s))
	if err != nil {
		t.Fatalf("SaveInbound: %v", err)
	}
	s.Abort() // after a commit: nothing to do
	if o.calls != 0 {
		t.Errorf("PayloadOpen called %d times, want 0 (the stage stored it)", o.calls)
	}
	if n, err := st.CountSQL(ctx, `SELECT count(*) FROM payload_chunks WHERE message_id = $1`, id); err != nil || n != 4 {
		t.Fatalf("payload_chunks rows = %d, %v; want 4", n, err)
	}
	if _, got, err := st.MessagePayload(ctx, id); err != nil || !bytes.Equal(got, stagedPayload) {
		t.Fatalf("MessagePayload = %d bytes, %v; want the %d staged", len(got), err, len(stagedPayload))
	}
	if n, err := st.CountSQL(ctx, `SELECT count(*) FROM events WHERE type = 'received' AND message = $1`, id); err != nil || n != 1 {
		t.Errorf("received events = %d, %v; want 1", n, err)
	}
	wantNoStage(t, st)
}

// TestStagedPayloadAbort: an aborted stage, with pieces already stored,
// leaves nothing and gives its connection back; stages take half the
// pool at most.
func TestStagedPayloadAbort(t *testing.T) {
	noLeak(t)
	ctx := context.Background()
	st, err := postgres.Open(ctx, pgtest.URL(t), postgres.Options{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a := stage(t, st, ctx, stagedPayload)
	b := stage(t, st, ctx, stagedPayload[:10])
	if _, err := st.StageInboundPayload(ctx, "P"); !errors.Is(err, postgres.ErrNoStage) {
		t.Fatalf("third stage on a pool of 4: %v, want ErrNoStage", err)
	}
	a.Abort()
	a.Abort()
	c := stage(t, st, ctx, nil)
	b.Abort()
	c.Abort()
	wantNoStage(t, st)
	if n, err := st.CountSQL(ctx, `SELECT count(*) FROM messages`); err != nil || n != 0 {
		t.Errorf("messages = %d, %v; want 0", n, err)
	}
}

// TestStagedPayloadDuplicate: a resend of a stored message is a
// duplicate and its stage leaves nothing; the resend of a failed receipt
// replaces it with its staged payload (PayloadOpen unused: the stage may
// be the only copy).
func TestStagedPayloadDuplicate(t *testing.T) {
	noLeak(t)
	ctx := context.Background()
	st := pgtest.Store(t)
	first := &opened{p: []byte("first")}
	if _, err := st.SaveInbound(ctx, stagedMessage("<dup@p>", first, nil)); err != nil {
		t.Fatal(err)
	}
	o := &opened{p: stagedPayload}
	if _, err := st.SaveInbound(ctx, stagedMessage("<dup@p>", o, stage(t, st, ctx, stagedPayload))); !errors.Is(err, postgres.ErrDuplicateInbound) {
		t.Fatalf("resend: %v, want ErrDuplicateInbound", err)
	}
	wantNoStage(t, st)

	failed := &postgres.InboundMessage{Partner: "P", AS2From: "P", AS2To: "S", MessageID: "<failed@p>", Status: postgres.InboundError,
		Disposition: "automatic-action/MDN-sent-automatically; processed/error: decryption-failed", MDNMode: "none"}
	if _, err := st.SaveInbound(ctx, failed); err != nil {
		t.Fatal(err)
	}
	id, err := st.SaveInbound(ctx, stagedMessage("<failed@p>", o, stage(t, st, ctx, stagedPayload)))
	if err != nil {
		t.Fatalf("resend of a failed receipt: %v", err)
	}
	if _, got, err := st.MessagePayload(ctx, id); err != nil || !bytes.Equal(got, stagedPayload) {
		t.Fatalf("MessagePayload = %d bytes, %v; want the %d sent", len(got), err, len(stagedPayload))
	}
	if o.calls != 0 {
		t.Errorf("PayloadOpen called %d times, want 0 (the stage replaced the failed receipt)", o.calls)
	}
	wantNoStage(t, st)
}

// failedStage is a stage of stagedPayload whose transaction failed half
// way (its request cancelled after 2 MiB): the rest is written all the
// same, without an error.
func failedStage(t *testing.T, st *postgres.Store) *postgres.StagedPayload {
	t.Helper()
	sctx, cancel := context.WithCancel(context.Background())
	s := stage(t, st, sctx, stagedPayload[:2<<20])
	cancel()
	if n, err := s.Write(stagedPayload[2<<20:]); n != len(stagedPayload)-2<<20 || err != nil {
		t.Fatalf("Write after the failure = %d, %v; want all, nil", n, err)
	}
	return s
}

// TestStagedPayloadFailedStage: a stage whose transaction failed half-way
// (its request cancelled) does not fail the writes, and SaveInbound then
// stores the payload from PayloadOpen.
func TestStagedPayloadFailedStage(t *testing.T) {
	noLeak(t)
	st := pgtest.Store(t)
	s := failedStage(t, st)
	o := &opened{p: stagedPayload}
	id, err := st.SaveInbound(context.Background(), stagedMessage("<cancelled@p>", o, s))
	if err != nil {
		t.Fatalf("SaveInbound: %v", err)
	}
	if _, got, err := st.MessagePayload(context.Background(), id); err != nil || !bytes.Equal(got, stagedPayload) {
		t.Fatalf("MessagePayload = %d bytes, %v; want the %d sent", len(got), err, len(stagedPayload))
	}
	if o.calls != 1 {
		t.Errorf("PayloadOpen called %d times, want 1 (the stage failed)", o.calls)
	}
	wantNoStage(t, st)
}

// TestStagedPayloadFailedOnlyCopy: a failed stage without PayloadOpen
// (the payload's only copy) stores nothing and says so (ErrStageFailed,
// which the receiver answers as any failed store: nothing accepted,
// resend); a second attempt with the used stage fails the same way.
func TestStagedPayloadFailedOnlyCopy(t *testing.T) {
	noLeak(t)
	st := pgtest.Store(t)
	s := failedStage(t, st)
	m := stagedMessage("<only@p>", &opened{p: stagedPayload}, s)
	m.PayloadOpen = nil
	for attempt := 1; attempt <= 2; attempt++ {
		if _, err := st.SaveInbound(context.Background(), m); !errors.Is(err, postgres.ErrStageFailed) {
			t.Fatalf("SaveInbound attempt %d: %v, want ErrStageFailed", attempt, err)
		}
	}
	if n, err := st.CountSQL(context.Background(), `SELECT count(*) FROM messages WHERE message_id = '<only@p>'`); err != nil || n != 0 {
		t.Errorf("messages stored = %d, %v; want 0", n, err)
	}
	wantNoStage(t, st)
}

// zlibPayload is stagedPayload's entity (a header, then the payload)
// compressed, as a partner's compressed layer carries it.
func zlibPayload(t *testing.T, header string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := zlib.NewWriter(&b)
	if _, err := zw.Write(append([]byte(header), stagedPayload...)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestStagedPayloadZlib stores a payload staged as the zlib stream it
// arrived in (migration 00022): WritePayload inflates it to the
// payload, byte for byte, its header skipped, and reports the payload's
// size, not the stream's. A stored stream that is not the payload's
// (altered, or inflating to more) fails the read instead of giving
// other bytes.
func TestStagedPayloadZlib(t *testing.T) {
	noLeak(t)
	ctx := context.Background()
	st := pgtest.Store(t)
	const header = "Content-Type: application/edi-x12\r\n\r\n"
	stream := zlibPayload(t, header)
	save := func(msgID string, z []byte, size int64) int64 {
		t.Helper()
		m := stagedMessage(msgID, &opened{p: stagedPayload}, stage(t, st, ctx, z))
		m.PayloadOpen, m.PayloadSize, m.StagedZlib, m.ZlibSkip = nil, size, true, int64(len(header))
		id, err := st.SaveInbound(ctx, m)
		if err != nil {
			t.Fatalf("SaveInbound: %v", err)
		}
		return id
	}
	id := save("<zlib@p>", stream, int64(len(stagedPayload)))
	if n, err := st.CountSQL(ctx, `SELECT sum(octet_length(data)) FROM payload_chunks WHERE message_id = $1`, id); err != nil || n != int64(len(stream)) {
		t.Fatalf("payload_chunks bytes = %d, %v; want the %d of the zlib stream", n, err, len(stream))
	}
	m, got, err := st.MessagePayload(ctx, id)
	if err != nil || !bytes.Equal(got, stagedPayload) || m.Size != int64(len(stagedPayload)) {
		t.Fatalf("MessagePayload = %d bytes (size %d), %v; want the %d staged", len(got), m.Size, err, len(stagedPayload))
	}
	wantNoStage(t, st)

	altered := bytes.Clone(stream)
	altered[len(altered)/2] ^= 0x55
	longer := save("<longer@p>", stream, int64(len(stagedPayload))-1)
	for name, id := range map[string]int64{"altered": save("<altered@p>", altered, int64(len(stagedPayload))), "longer": longer} {
		if _, got, err := st.MessagePayload(ctx, id); err == nil {
			t.Errorf("%s stream: MessagePayload = %d bytes, nil; want an error", name, len(got))
		}
	}
}
