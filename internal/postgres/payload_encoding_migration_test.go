package postgres_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// TestMigration00022OnExistingData: migration 00022 applies to a
// database that a release before it filled (a payload stored whole and
// one stored in pieces), which read back as before after it; a
// payload stored as its zlib stream after it reads back too, and while
// one is there the migration's Down refuses (a release before it would
// take the stream for the payload), then goes once it is gone, and the
// payloads stored before read back after Up again.
func TestMigration00022OnExistingData(t *testing.T) {
	ctx := context.Background()
	st := open(t, pgtest.EmptyURL(t))
	if err := st.MigrateTo(ctx, 19); err != nil {
		t.Fatal(err)
	}
	small := []byte("ISA*00*small payload stored whole")
	m := stagedMessage("<whole@p>", &opened{p: small}, nil)
	m.PayloadOpen, m.Payload = nil, small
	wholeID, err := st.SaveInbound(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	piecesID, err := st.SaveInbound(ctx, stagedMessage("<pieces@p>", &opened{p: stagedPayload}, nil))
	if err != nil {
		t.Fatal(err)
	}
	readBack := func(step string) {
		t.Helper()
		for id, want := range map[int64][]byte{wholeID: small, piecesID: stagedPayload} {
			if _, got, err := st.MessagePayload(ctx, id); err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s: payload %d stored before = %d bytes, %v; want %d", step, id, len(got), err, len(want))
			}
		}
	}
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	readBack("up")
	const header = "Content-Type: application/octet-stream\r\n\r\n"
	z := stagedMessage("<zlib@p>", &opened{p: stagedPayload}, stage(t, st, ctx, zlibPayload(t, header)))
	z.PayloadOpen, z.StagedZlib, z.ZlibSkip = nil, true, int64(len(header))
	zlibID, err := st.SaveInbound(ctx, z)
	if err != nil {
		t.Fatal(err)
	}
	if _, got, err := st.MessagePayload(ctx, zlibID); err != nil || !bytes.Equal(got, stagedPayload) {
		t.Errorf("payload stored as zlib = %d bytes, %v; want %d", len(got), err, len(stagedPayload))
	}
	if err := st.MigrateDownTo(ctx, 19); err == nil {
		t.Fatal("down with a payload stored as zlib: nil error, want a refusal")
	}
	readBack("down refused")
	if _, err := st.ExecSQL(ctx, `DELETE FROM messages WHERE id = $1`, zlibID); err != nil {
		t.Fatal(err)
	}
	// This release reads its own schema only: what Down left is read
	// after Up again.
	if err := st.MigrateDownTo(ctx, 19); err != nil {
		t.Fatalf("down: %v", err)
	}
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	readBack("down and up again")
}
