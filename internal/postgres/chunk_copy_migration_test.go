package postgres_test

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// TestMigration00019OnExistingData: migration 00019 applies to a
// database that a release before it filled (a payload and a built body
// stored in pieces), and its Down and Up again too; the pieces stored
// before read back after each step, and a payload stored after reads
// back beside them. Once it applied, a COPY into payload_chunks inserts
// its rows as it reads them: the pieces are in the table (its TOAST
// table grows) while the COPY is still open, where before the server
// held them until the COPY ended. (outbox_body_chunks has the same
// trigger; since migration 00020 nothing writes it.)
func TestMigration00019OnExistingData(t *testing.T) {
	ctx := context.Background()
	st := open(t, pgtest.EmptyURL(t))
	if err := st.MigrateTo(ctx, 18); err != nil {
		t.Fatal(err)
	}
	payload := func(seed byte, n int) []byte {
		b := make([]byte, n)
		rand.NewChaCha8([32]byte{seed}).Read(b)
		return b
	}
	enqueue := func(id string, p []byte) int64 {
		t.Helper()
		m := outbound("P", id, "", nil)
		m.Payload, m.PayloadOpen, m.PayloadSize = nil, func() io.Reader { return bytes.NewReader(p) }, int64(len(p))
		e, err := st.EnqueueOutbound(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return e.ID
	}
	before := payload(1, 5<<19)
	beforeID := enqueue("<before@s>", before)
	// A body frozen in pieces as that release did it, written by hand:
	// this release's claim and build read and write columns of later
	// migrations.
	body := payload(2, 3<<19)
	id, err := st.CountSQL(ctx, `SELECT id FROM outbox WHERE message_id = $1`, beforeID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.ExecSQL(ctx, `
WITH b AS (UPDATE outbox SET headers = '{}', body = '', body_chunked = true, body_size = $2 WHERE id = $1)
INSERT INTO outbox_body_chunks (outbox_id, seq, data) VALUES ($1, 1, $3), ($1, 2, $4)`, id, len(body), body[:1<<20], body[1<<20:]); err != nil {
		t.Fatal(err)
	}
	it := postgres.OutboxItem{ID: id, BodyChunked: true, BodySize: int64(len(body))}

	readBack := func(step string) {
		t.Helper()
		// Down to 18 takes 00022's payloads.encoding too, which this
		// release reads: the payload reads back after up again.
		if _, got, err := st.MessagePayload(ctx, beforeID); step != "down" && (err != nil || !bytes.Equal(got, before)) {
			t.Errorf("%s: payload stored before = %d bytes, %v; want %d", step, len(got), err, len(before))
		}
		var got bytes.Buffer
		if err := st.WriteOutboxBody(ctx, it, &got); err != nil || !bytes.Equal(got.Bytes(), body) {
			t.Errorf("%s: body frozen before = %d bytes, %v; want %d", step, got.Len(), err, len(body))
		}
	}
	triggers := func() int64 {
		t.Helper()
		n, err := st.CountSQL(ctx, `SELECT count(*) FROM pg_trigger WHERE tgname IN ('payload_chunks_row_by_row', 'outbox_body_chunks_row_by_row')`)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, step := range []struct {
		name     string
		run      func() error
		triggers int64
	}{
		{"up", func() error { _, err := st.Migrate(ctx); return err }, 2},
		{"down", func() error { return st.MigrateDownTo(ctx, 18) }, 0},
		{"up again", func() error { _, err := st.Migrate(ctx); return err }, 2},
	} {
		if err := step.run(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if n := triggers(); n != step.triggers {
			t.Errorf("%s: %d row-by-row triggers, want %d", step.name, n, step.triggers)
		}
		readBack(step.name)
	}
	after := payload(3, 3<<20+7)
	if _, got, err := st.MessagePayload(ctx, enqueue("<after@s>", after)); err != nil || !bytes.Equal(got, after) {
		t.Errorf("payload stored after = %d bytes, %v; want %d", len(got), err, len(after))
	}

	// A payload of 12 MiB whose reader stops after 10 MiB until the
	// rows sent so far reach the table: they do while the COPY still
	// reads.
	toast := func() int64 {
		n, err := st.CountSQL(ctx, `SELECT pg_relation_size(reltoastrelid) FROM pg_class WHERE relname = 'payload_chunks'`)
		if err != nil {
			t.Error(err)
		}
		return n
	}
	was := toast()
	big := payload(4, 12<<20)
	m := outbound("P", "<held@s>", "", nil)
	m.Payload, m.PayloadSize = nil, int64(len(big))
	m.PayloadOpen = func() io.Reader {
		return io.MultiReader(bytes.NewReader(big[:10<<20]), readerFunc(func([]byte) (int, error) {
			for deadline := time.Now().Add(time.Minute); toast()-was < 8<<20; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Errorf("TOAST table grew %d bytes during the COPY, want the rows of 8 MiB or more", toast()-was)
					break
				}
			}
			return 0, io.EOF
		}), bytes.NewReader(big[10<<20:]))
	}
	e, err := st.EnqueueOutbound(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if _, got, err := st.MessagePayload(ctx, e.ID); err != nil || !bytes.Equal(got, big) {
		t.Errorf("payload stored while held = %d bytes, %v; want %d", len(got), err, len(big))
	}
}

// readerFunc is a function as an io.Reader.
type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
