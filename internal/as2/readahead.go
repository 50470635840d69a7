package as2

import (
	"errors"
	"io"
	"sync"
	"time"
)

// UnwrapStream runs the layers of a message as a pipeline: each CMS
// layer's input and output pass through a readahead, whose goroutine reads
// its source (and so runs every reader below it: the file read, the
// decryption, the MIME parse and digests of a signed part, the inflate)
// into a few buffers ahead of the layer that consumes them. The slowest
// stage then sets the pace, on as many cores as there are stages, in
// constant memory (raBuffers × raBufferSize per boundary).

// StreamStats is where the time of an UnwrapStream went, by stage: the
// time each stage's goroutine spent doing its own work (reading its input
// from the previous stage's buffers, waiting for them, is not counted).
// The stages run at the same time, so their sum can exceed the wall time.
type StreamStats struct {
	// Read is reading the body. Decrypt is the CMS parse and decryption
	// of an enveloped layer. Verify is the MIME parse of what a layer
	// decrypted, the digests of a signed part and its signature check.
	// Inflate is the CMS parse and inflate of a compressed layer.
	// Payload is writing the payload to UnwrapStream's writer.
	Read, Decrypt, Verify, Inflate, Payload time.Duration
	// Total is UnwrapStream's wall time.
	Total time.Duration
}

// The stages a readahead's producer runs, for StreamStats.
const (
	stageRead = iota
	stageDecryptRun
	stageVerifyRun
	stageInflateRun
)

// raBuffers and raBufferSize size a readahead: enough to keep both sides
// busy, little enough to keep memory constant.
const (
	raBuffers    = 3
	raBufferSize = 128 << 10
)

// errReadaheadStopped is what a stopped readahead returns to a reader
// still reading it: only on a path that already failed.
var errReadaheadStopped = errors.New("as2: stream stage stopped")

// readahead reads src in a goroutine of its own into a few buffers, which
// Read hands out in order; the source's error (io.EOF included) comes
// after its data. Its consumer is one goroutine. stop ends the goroutine
// and waits for it: only then may src be read by anyone else.
type readahead struct {
	src   io.Reader
	full  chan *raBuf
	free  chan *raBuf
	done  chan struct{}
	exit  chan struct{}
	once  sync.Once
	cur   *raBuf
	stage int
	// up is the readahead src reads from, when there is one; busy time
	// is this one's read time less up's wait.
	up *readahead
	// read is the producer's time in src.Read (valid after exit); wait
	// the consumer's time blocked for a buffer.
	read, wait time.Duration
}

type raBuf struct {
	b      []byte
	n, off int
	err    error
}

func newReadahead(src io.Reader, stage int, up *readahead) *readahead {
	r := &readahead{
		src: src, stage: stage, up: up,
		full: make(chan *raBuf, raBuffers), free: make(chan *raBuf, raBuffers),
		done: make(chan struct{}), exit: make(chan struct{}),
	}
	for range raBuffers {
		r.free <- raPool.Get().(*raBuf)
	}
	go r.run()
	return r
}

// raPool keeps readahead buffers for the next message.
var raPool = sync.Pool{New: func() any { return &raBuf{b: make([]byte, raBufferSize)} }}

// release gives the stopped readahead's buffers back to raPool.
func (r *readahead) release() {
	if r.cur != nil {
		r.free <- r.cur
		r.cur = nil
	}
	for {
		select {
		case b := <-r.full:
			r.free <- b
		default:
			close(r.free)
			for b := range r.free {
				b.n, b.off, b.err = 0, 0, nil
				raPool.Put(b)
			}
			return
		}
	}
}

func (r *readahead) run() {
	defer close(r.exit)
	for {
		var b *raBuf
		select {
		case b = <-r.free:
		case <-r.done:
			return
		}
		t := time.Now()
		b.off = 0
		b.n, b.err = fill(r.src, b.b)
		r.read += time.Since(t)
		select {
		case r.full <- b:
		case <-r.done:
			return
		}
		if b.err != nil {
			return
		}
	}
}

// fill reads src into b until it is full or src fails (io.EOF
// included), and returns the bytes read and the error.
func fill(src io.Reader, b []byte) (int, error) {
	n, empty := 0, 0
	for n < len(b) {
		m, err := src.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
		if m == 0 {
			if empty++; empty >= 100 {
				return n, io.ErrNoProgress
			}
		}
	}
	return n, nil
}

// Read hands out the buffered bytes; after the last, src's error.
func (r *readahead) Read(p []byte) (int, error) {
	for r.cur == nil || r.cur.off == r.cur.n {
		if r.cur != nil {
			if r.cur.err != nil {
				return 0, r.cur.err
			}
			r.free <- r.cur // never blocks: free holds every buffer
			r.cur = nil
		}
		t := time.Now()
		select {
		case r.cur = <-r.full:
		case <-r.done:
			return 0, errReadaheadStopped
		}
		r.wait += time.Since(t)
	}
	n := copy(p, r.cur.b[r.cur.off:r.cur.n])
	r.cur.off += n
	return n, nil
}

// signal asks the goroutine to end; safe to call more than once.
func (r *readahead) signal() { r.once.Do(func() { close(r.done) }) }

// stop ends the goroutine and waits for it.
func (r *readahead) stop() {
	r.signal()
	<-r.exit
}

// finish reads the rest of r (the layer above reads what follows it from
// src afterwards, the bytes r holds would be missing) and stops it. The
// error is src's, nil at its end.
func (r *readahead) finish() error {
	_, err := io.Copy(io.Discard, r)
	r.stop()
	return err
}

// pipeline is the readaheads of one UnwrapStream, in the order they were
// started (each one's source reads from the one before).
type pipeline struct {
	stages []*readahead
}

// add starts a readahead of src for stage.
func (p *pipeline) add(src io.Reader, stage int) *readahead {
	var up *readahead
	if n := len(p.stages); n > 0 {
		up = p.stages[n-1]
	}
	r := newReadahead(src, stage, up)
	p.stages = append(p.stages, r)
	return r
}

// stop ends every readahead still running: all are told first, so that
// none waits on another, then waited for.
func (p *pipeline) stop() {
	for _, r := range p.stages {
		r.signal()
	}
	for _, r := range p.stages {
		<-r.exit
	}
}

// release gives the buffers of the stopped pipeline back.
func (p *pipeline) release() {
	for _, r := range p.stages {
		r.release()
	}
	p.stages = nil
}

// stats fills s from the stopped pipeline; total is the wall time.
func (p *pipeline) stats(s *StreamStats, total time.Duration) {
	s.Total = total
	busy := total
	for i := len(p.stages) - 1; i >= 0; i-- {
		r := p.stages[i]
		own := r.read
		if r.up != nil {
			own -= r.up.wait
		}
		own = max(own, 0)
		switch r.stage {
		case stageRead:
			s.Read += own
		case stageDecryptRun:
			s.Decrypt += own
		case stageVerifyRun:
			s.Verify += own
		case stageInflateRun:
			s.Inflate += own
		}
	}
	if n := len(p.stages); n > 0 {
		busy -= p.stages[n-1].wait
	}
	s.Payload += max(busy, 0)
}
