package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// TestChunkedPayload stores a payload read from a reader (several pieces
// and a short last one), reads it back whole and streamed, answers a
// resend as a duplicate without reading its payload, and deletes the
// pieces with their payload.
func TestChunkedPayload(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	payload := bytes.Repeat([]byte("0123456789ABCDEF"), (3<<20)/16+1000) // 3 MiB and a bit
	m := &postgres.InboundMessage{Partner: "P", AS2From: "P", AS2To: "S", MessageID: "<big@p>", Status: postgres.InboundProcessed,
		MDNMode: "none", PayloadSize: int64(len(payload)),
		PayloadOpen: func() io.Reader { return bytes.NewReader(payload) }}
	id, err := st.SaveInbound(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	chunks, err := st.CountSQL(ctx, `SELECT count(*) FROM payload_chunks WHERE message_id = $1`, id)
	if err != nil || chunks != 4 {
		t.Fatalf("payload_chunks rows = %d, %v; want 4", chunks, err)
	}
	_, got, err := st.MessagePayload(ctx, id)
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("MessagePayload = %d bytes, %v; want %d", len(got), err, len(payload))
	}
	var streamed bytes.Buffer
	info, err := st.WritePayload(ctx, id, func(hub.MessageInfo) io.Writer { return &streamed })
	if err != nil || !bytes.Equal(streamed.Bytes(), payload) || info.ID != id {
		t.Fatalf("WritePayload = %d bytes, %v", streamed.Len(), err)
	}
	if _, err := st.SaveInbound(ctx, m); !errors.Is(err, postgres.ErrDuplicateInbound) {
		t.Fatalf("resend: %v, want ErrDuplicateInbound", err)
	}
	short := *m
	short.MessageID, short.PayloadSize = "<short@p>", int64(len(payload)+1)
	if _, err := st.SaveInbound(ctx, &short); err == nil {
		t.Fatal("payload shorter than PayloadSize stored")
	}
	if _, err := st.ExecSQL(ctx, `DELETE FROM payloads WHERE message_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if chunks, err = st.CountSQL(ctx, `SELECT count(*) FROM payload_chunks`); err != nil || chunks != 0 {
		t.Fatalf("payload_chunks after the payload was deleted = %d, %v; want 0", chunks, err)
	}
}
