package postgres_test

import (
	"context"
	"fmt"
	"io"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// stallingReader produces size bytes of a repeating pattern; once it has
// produced at bytes, it calls stall once (outside the store's view, from
// the COPY's feeding goroutine) before going on.
type stallingReader struct {
	size, at, off int64
	stall         func()
	once          sync.Once
}

func (r *stallingReader) Read(p []byte) (int, error) {
	if r.off >= r.size {
		return 0, io.EOF
	}
	if r.off >= r.at {
		r.once.Do(r.stall)
	}
	n := int64(len(p))
	if left := r.size - r.off; n > left {
		n = left
	}
	if r.off < r.at && r.off+n > r.at {
		n = r.at - r.off
	}
	for i := range p[:n] {
		p[i] = byte('a' + (r.off+int64(i))%26)
	}
	r.off += n
	return int(n), nil
}

// TestLongCopyOutlivesAStalledServer: a server that stops reading in the
// middle of a payload's COPY (paused, starved of CPU, waiting on its disk)
// but whose host still acknowledges is alive, however long the stall: the
// client's send window stays closed for longer than the dead-peer timeout,
// and the message must still be stored once the server resumes. (Linux's
// TCP_USER_TIMEOUT counts a closed window as a dead peer; the bench's
// 2 GiB receive lost its connection so, "copy payload: unexpected EOF".)
func TestLongCopyOutlivesAStalledServer(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	const deadPeer = 3 * time.Second
	st := openStore(t, url, postgres.Options{DeadPeerTimeout: deadPeer})
	watch := pgtest.Conn(t, url)

	var (
		stalled  = make(chan int, 1)
		resumed  = make(chan struct{})
		stallErr error
	)
	stall := func() {
		// The COPY's backend, seen from another connection.
		var pid int
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := watch.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND query ILIKE 'copy%payload_chunks%'`).Scan(&pid)
			if err == nil || time.Now().After(deadline) {
				if err != nil {
					stallErr = fmt.Errorf("find the COPY's backend: %w", err)
					close(resumed)
					return
				}
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			stallErr = fmt.Errorf("stop backend %d: %w", pid, err)
			close(resumed)
			return
		}
		stalled <- pid
		go func() {
			defer close(resumed)
			time.Sleep(3 * deadPeer)
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				stallErr = fmt.Errorf("resume backend %d: %w", pid, err)
			}
		}()
	}
	t.Cleanup(func() {
		select {
		case pid := <-stalled:
			_ = syscall.Kill(pid, syscall.SIGCONT)
		default:
		}
		<-resumed
	})

	// Enough payload after the stall to fill both ends' socket buffers.
	const size = 96 << 20
	src := &stallingReader{size: size, at: 4 << 20, stall: stall}
	m := &postgres.InboundMessage{Partner: "P", AS2From: "P", AS2To: "S", MessageID: "<stalled@p>", Status: postgres.InboundProcessed,
		MDNMode: "none", PayloadSize: size, PayloadOpen: func() io.Reader { return src }}
	began := time.Now()
	id, err := st.SaveInbound(ctx, m)
	<-resumed
	if stallErr != nil {
		t.Fatal(stallErr)
	}
	if err != nil {
		t.Fatalf("SaveInbound across a %s stall of the server (dead-peer timeout %s) = %v after %s, want the message stored",
			3*deadPeer, deadPeer, err, time.Since(began).Round(time.Millisecond))
	}
	stored, err := st.CountSQL(ctx, `SELECT coalesce(sum(length(data)), 0) FROM payload_chunks WHERE message_id = $1`, id)
	if err != nil || stored != size {
		t.Fatalf("stored payload = %d bytes, %v; want %d", stored, err, size)
	}
}

// stallingWriter takes nothing for stall on its first write, as an HTTP
// client that stops reading a payload download would, then everything.
type stallingWriter struct {
	stall time.Duration
	once  sync.Once
	n     int64
}

func (w *stallingWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { time.Sleep(w.stall) })
	w.n += int64(len(p))
	return len(p), nil
}

// TestPayloadReadOutlivesASlowReader: a payload streamed out while its
// reader stops taking bytes for longer than the dead-peer timeout (the
// server's window to us stays closed that long, while our kernel answers
// its probes) must still arrive whole: the server must not take us for
// dead.
func TestPayloadReadOutlivesASlowReader(t *testing.T) {
	ctx := context.Background()
	const deadPeer = 3 * time.Second
	st := openStore(t, pgtest.URL(t), postgres.Options{DeadPeerTimeout: deadPeer})
	const size = 64 << 20
	src := &stallingReader{size: size, at: size, stall: func() {}}
	id, err := st.SaveInbound(ctx, &postgres.InboundMessage{Partner: "P", AS2From: "P", AS2To: "S", MessageID: "<slow-reader@p>",
		Status: postgres.InboundProcessed, MDNMode: "none", PayloadSize: size, PayloadOpen: func() io.Reader { return src }})
	if err != nil {
		t.Fatal(err)
	}
	w := &stallingWriter{stall: 3 * deadPeer}
	if _, err := st.WritePayload(ctx, id, func(hub.MessageInfo) io.Writer { return w }); err != nil {
		t.Fatalf("WritePayload to a reader that stalled %s (dead-peer timeout %s) = %v, want the payload", 3*deadPeer, deadPeer, err)
	}
	if w.n != size {
		t.Fatalf("WritePayload wrote %d bytes, want %d", w.n, size)
	}
}
