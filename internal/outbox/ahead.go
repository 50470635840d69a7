package outbox

import (
	"errors"
	"io"
)

// aheadBuffers is how many bodyBuffer buffers an aheadWriter of a build
// holds: one being filled while the others wait for, or are in, the
// writes after the build (the body's SHA-256, the spool file, the post).
const aheadBuffers = 4

// errAheadClosed is the error of a write to an aheadWriter after Close.
var errAheadClosed = errors.New("build output closed")

// aheadWriter is a buffered writer that writes each full buffer to w on
// a goroutine of its own while the caller fills the next, so that a
// streamed build (its MIC, encryption) runs beside what takes its
// output (the body's SHA-256, the spool file, the request's body)
// instead of waiting for it: on two cores, one message's build and its
// post no longer take turns. It holds at most n buffers of size bytes.
//
// The first error of w is returned by the Write or Flush that finds it
// and by every call after; the writes after it are dropped. Close ends
// the goroutine (without writing what is buffered) and must be called
// on every path; once it returned, or once Flush returned, what w
// recorded is safe to read. It is not safe for concurrent use.
type aheadWriter struct {
	w      io.Writer
	size   int
	n      int
	cur    []byte // being filled; nil when none is taken
	full   chan []byte
	free   chan aheadBuf
	done   chan struct{}
	err    error
	closed bool
}

// aheadBuf is a buffer handed back by the goroutine, with the first
// error of w so far.
type aheadBuf struct {
	b   []byte
	err error
}

func newAheadWriter(w io.Writer, size, n int) *aheadWriter {
	a := &aheadWriter{w: w, size: size, n: n, full: make(chan []byte, n), free: make(chan aheadBuf, n), done: make(chan struct{})}
	for range n {
		a.free <- aheadBuf{} // allocated when first taken
	}
	go a.run()
	return a
}

// run writes the buffers handed to it in order, until Close.
func (a *aheadWriter) run() {
	defer close(a.done)
	var err error
	for b := range a.full {
		if err == nil {
			_, err = a.w.Write(b)
		}
		a.free <- aheadBuf{b: b[:0], err: err} // never blocks: it holds every buffer
	}
}

// receive takes a buffer back from the goroutine, keeping its error.
func (a *aheadWriter) receive() []byte {
	r := <-a.free
	if r.err != nil && a.err == nil {
		a.err = r.err
	}
	return r.b
}

func (a *aheadWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if a.closed {
			return n, errAheadClosed
		}
		if a.err != nil {
			return n, a.err
		}
		if a.cur == nil {
			b := a.receive()
			if b == nil {
				b = make([]byte, 0, a.size)
			}
			a.cur = b
			continue // its error first
		}
		k := copy(a.cur[len(a.cur):cap(a.cur)], p)
		a.cur, p, n = a.cur[:len(a.cur)+k], p[k:], n+k
		if len(a.cur) == cap(a.cur) {
			a.full <- a.cur
			a.cur = nil
		}
	}
	return n, a.err
}

// Flush hands on what is buffered and waits until w has taken all of
// it, returning w's first error.
func (a *aheadWriter) Flush() error {
	if a.closed {
		return errAheadClosed
	}
	if len(a.cur) > 0 {
		a.full <- a.cur
		a.cur = nil
	}
	out := a.n
	if a.cur != nil {
		out--
	}
	back := make([][]byte, out)
	for i := range back {
		back[i] = a.receive()
	}
	for _, b := range back {
		a.free <- aheadBuf{b: b}
	}
	return a.err
}

// Close ends the goroutine once it has written what was handed to it;
// what is still buffered is dropped. Later calls do nothing.
func (a *aheadWriter) Close() {
	if a.closed {
		return
	}
	a.closed = true
	close(a.full)
	<-a.done
}
