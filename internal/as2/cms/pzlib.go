package cms

import (
	"bytes"
	"encoding/binary"
	"hash"
	"hash/adler32"
	"io"
	"runtime"

	"github.com/klauspost/compress/flate"
)

// zlibBlock is the input of one block a parallelZlib compresses on its
// own; zlibWindow the dictionary each block gets from the one before it
// (deflate's window), so the ratio is nearly a serial stream's.
const (
	zlibBlock  = 1 << 20
	zlibWindow = 32 << 10
)

// parallelZlib writes one zlib stream (RFC 1950) whose deflate data is
// compressed in blocks on up to GOMAXPROCS cores, the way pigz does: each
// block is deflated with the 32 KiB of input before it as its dictionary
// and ends in a sync flush (an empty stored block), so the blocks,
// written in order, are one valid deflate stream that any inflater reads;
// the last block ends the stream. The Adler-32 is taken over the input
// as it is written. It holds at most GOMAXPROCS+1 blocks. Every block's
// goroutine ends by itself; Close waits for them all.
type parallelZlib struct {
	dst     io.Writer
	level   int
	max     int
	block   []byte // input not yet handed to a block
	dict    []byte // the last zlibWindow bytes handed on
	adler   hash.Hash32
	pending []*zlibJob // in stream order
	free    []*zlibJob
	writers chan *flate.Writer
	started bool
	err     error
}

type zlibJob struct {
	in, dict []byte
	out      bytes.Buffer
	last     bool
	done     chan struct{}
	err      error
}

func newParallelZlib(dst io.Writer, level int) (*parallelZlib, error) {
	// Checked now: a block's goroutine cannot report a bad level well.
	if _, err := flate.NewWriter(io.Discard, level); err != nil {
		return nil, err
	}
	n := max(runtime.GOMAXPROCS(0), 1)
	return &parallelZlib{dst: dst, level: level, max: n, adler: adler32.New(), writers: make(chan *flate.Writer, n+1)}, nil
}

func (z *parallelZlib) Write(p []byte) (int, error) {
	if z.err != nil {
		return 0, z.err
	}
	if !z.started {
		z.started = true
		// CMF: deflate, 32 KiB window; FLG: the check bits for it.
		if _, z.err = z.dst.Write(zlibHeader(z.level)); z.err != nil {
			return 0, z.err
		}
	}
	z.adler.Write(p)
	n := len(p)
	for len(p) > 0 {
		if z.block == nil {
			z.block = z.job().in[:0]
		}
		c := min(len(p), zlibBlock-len(z.block))
		z.block, p = append(z.block, p[:c]...), p[c:]
		if len(z.block) == zlibBlock {
			if err := z.submit(false); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

// zlibHeader is the two-byte zlib header for level (FLEVEL is advisory).
func zlibHeader(level int) []byte {
	var flevel byte
	switch {
	case level == flate.DefaultCompression || level == 6:
		flevel = 2
	case level >= 7:
		flevel = 3
	case level >= 2:
		flevel = 1
	}
	h := uint16(0x78)<<8 | uint16(flevel)<<6
	if r := h % 31; r != 0 {
		h += 31 - r
	}
	return []byte{byte(h >> 8), byte(h)}
}

// job is a free job (its input buffer reused), or a new one.
func (z *parallelZlib) job() *zlibJob {
	if n := len(z.free); n > 0 {
		j := z.free[n-1]
		z.free = z.free[:n-1]
		return j
	}
	return &zlibJob{in: make([]byte, 0, zlibBlock)}
}

// submit hands z.block on to a goroutine of its own, and writes the
// oldest blocks out while more than z.max are in flight.
func (z *parallelZlib) submit(last bool) error {
	j := z.job()
	j.in, z.block = z.block, nil
	j.dict = append(j.dict[:0], z.dict...)
	if len(j.in) >= zlibWindow {
		z.dict = append(z.dict[:0], j.in[len(j.in)-zlibWindow:]...)
	} else {
		z.dict = append(z.dict, j.in...)
		if len(z.dict) > zlibWindow {
			z.dict = z.dict[len(z.dict)-zlibWindow:]
		}
	}
	j.last, j.err = last, nil
	j.out.Reset()
	j.done = make(chan struct{})
	go z.deflate(j)
	z.pending = append(z.pending, j)
	for len(z.pending) > z.max {
		if err := z.writeOldest(); err != nil {
			return err
		}
	}
	return nil
}

// deflate compresses one block; it never blocks on anything but its CPU.
func (z *parallelZlib) deflate(j *zlibJob) {
	defer close(j.done)
	var w *flate.Writer
	select {
	case w = <-z.writers:
		w.ResetDict(&j.out, j.dict)
	default:
		w, j.err = flate.NewWriterDict(&j.out, z.level, j.dict)
		if j.err != nil {
			return
		}
	}
	if _, j.err = w.Write(j.in); j.err == nil {
		if j.last {
			j.err = w.Close()
		} else {
			j.err = w.Flush()
		}
	}
	select {
	case z.writers <- w:
	default:
	}
}

// writeOldest waits for the oldest block and writes it out.
func (z *parallelZlib) writeOldest() error {
	j := z.pending[0]
	z.pending = z.pending[1:]
	<-j.done
	if z.err == nil {
		z.err = j.err
	}
	if z.err == nil {
		_, z.err = z.dst.Write(j.out.Bytes())
	}
	z.free = append(z.free, j)
	return z.err
}

// Close compresses what is left as the last block, writes every block
// and the Adler-32. It waits for every block's goroutine, error or not.
func (z *parallelZlib) Close() error {
	if !z.started && z.err == nil {
		z.started = true
		_, z.err = z.dst.Write(zlibHeader(z.level))
	}
	if z.err == nil {
		if z.block == nil {
			z.block = z.job().in[:0]
		}
		z.submit(true)
	}
	for len(z.pending) > 0 {
		z.writeOldest()
	}
	if z.err != nil {
		return z.err
	}
	_, z.err = z.dst.Write(binary.BigEndian.AppendUint32(nil, z.adler.Sum32()))
	return z.err
}
