package cms

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"sync"

	"github.com/klauspost/compress/flate"

	fastinflate "github.com/edihub/edihub/internal/inflate"
)

// zlibBlock is the input of one block a parallelZlib deflates on its
// own, zlibWindow the dictionary each block gets from the input before
// it (deflate's window), so that the ratio stays nearly a serial
// stream's (a smaller block costs more: each block first deflates its
// dictionary to prime the deflater). maxZlibWorkers bounds its
// goroutines, and with them its memory (a level 1 deflater holds about
// 0.8 MiB, a block in flight about twice zlibBlock).
const (
	zlibBlock      = 256 << 10
	zlibWindow     = 32 << 10
	maxZlibWorkers = 4
)

// errZlibClosed is the error of a write to a parallelZlib after Close or
// Abort.
var errZlibClosed = errors.New("zlib stream closed")

// parallelZlib writes one zlib stream (RFC 1950) whose deflate data is
// compressed in blocks by a fixed set of goroutines (GOMAXPROCS, at most
// maxZlibWorkers), the way pigz does: each block is deflated with the
// 32 KiB of input before it as its dictionary and ends in a sync flush
// (an empty stored block, which leaves the stream byte-aligned and open),
// so the blocks written in order are one deflate stream any inflater
// reads; the last block ends the stream. Each block's Adler-32 is taken
// beside its deflate and the stream's is combined from them in order.
// The writer holds at most workers+1 blocks, and writes the oldest out
// (on the caller's goroutine) as soon as it is done. Close or Abort ends
// the goroutines; it is not safe for concurrent use.
type parallelZlib struct {
	dst     io.Writer
	level   int
	work    chan *zlibJob
	wg      sync.WaitGroup
	maxJobs int
	jobs    int        // allocated
	free    []*zlibJob // allocated, idle
	cur     *zlibJob   // being filled
	pending []*zlibJob // handed to the workers, in stream order
	window  []byte     // the last zlibWindow bytes handed on
	adler   uint32     // of the blocks written out
	started bool       // the header is written
	stopped bool       // the goroutines are gone
	err     error
}

// zlibJob is one block: its input and dictionary, and once done its
// deflate data and Adler-32.
type zlibJob struct {
	in, dict []byte
	last     bool
	out      bytes.Buffer
	adler    uint32
	err      error
	done     chan struct{} // one value per round
}

func newParallelZlib(dst io.Writer, level int) (*parallelZlib, error) {
	// Checked now: a worker cannot report a bad level well.
	if level < flate.HuffmanOnly || level > flate.BestCompression {
		return nil, errors.New("zlib: invalid compression level")
	}
	n := min(max(runtime.GOMAXPROCS(0), 1), maxZlibWorkers)
	// One block being filled while each worker deflates one.
	z := &parallelZlib{dst: dst, level: level, work: make(chan *zlibJob, n+1), maxJobs: n + 1, adler: 1}
	z.wg.Add(n)
	for range n {
		go z.worker()
	}
	return z, nil
}

// worker deflates the blocks it is handed with a deflater of its own
// until the work channel closes.
func (z *parallelZlib) worker() {
	defer z.wg.Done()
	var fw *flate.Writer
	for j := range z.work {
		j.out.Reset()
		j.adler = fastinflate.Adler32(j.in)
		if fw == nil {
			fw, j.err = flate.NewWriterDict(&j.out, z.level, j.dict)
		} else {
			fw.ResetDict(&j.out, j.dict)
		}
		if j.err == nil {
			if _, j.err = fw.Write(j.in); j.err == nil {
				if j.last {
					j.err = fw.Close()
				} else {
					j.err = fw.Flush()
				}
			}
		}
		j.done <- struct{}{}
	}
}

// Write adds p to the stream.
func (z *parallelZlib) Write(p []byte) (int, error) {
	if z.stopped {
		return 0, errZlibClosed
	}
	if z.err != nil {
		return 0, z.err
	}
	n := len(p)
	for len(p) > 0 {
		if z.cur == nil {
			if z.cur = z.job(); z.cur == nil {
				return 0, z.err
			}
		}
		c := copy(z.cur.in[len(z.cur.in):zlibBlock], p)
		z.cur.in, p = z.cur.in[:len(z.cur.in)+c], p[c:]
		if len(z.cur.in) == zlibBlock {
			if err := z.submit(false); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

// job returns an idle block, a new one while fewer than maxJobs exist,
// or else the oldest in flight once it is written out; nil on error.
func (z *parallelZlib) job() *zlibJob {
	for len(z.free) == 0 {
		if z.jobs < z.maxJobs {
			z.jobs++
			j := &zlibJob{in: make([]byte, 0, zlibBlock), dict: make([]byte, 0, zlibWindow), done: make(chan struct{}, 1)}
			return j
		}
		if err := z.writeOldest(); err != nil {
			return nil
		}
	}
	j := z.free[len(z.free)-1]
	z.free = z.free[:len(z.free)-1]
	j.in = j.in[:0]
	return j
}

// submit hands the current block to the workers with the window before
// it as its dictionary, then writes out the blocks already done.
func (z *parallelZlib) submit(last bool) error {
	j := z.cur
	z.cur = nil
	j.last, j.err = last, nil
	j.dict = append(j.dict[:0], z.window...)
	if len(j.in) >= zlibWindow {
		z.window = append(z.window[:0], j.in[len(j.in)-zlibWindow:]...)
	} else {
		z.window = append(z.window, j.in...)
		z.window = z.window[max(0, len(z.window)-zlibWindow):]
	}
	z.pending = append(z.pending, j)
	z.work <- j // never blocks: the channel holds every job
	for len(z.pending) > 0 {
		select {
		case <-z.pending[0].done:
			if err := z.writeOut(); err != nil {
				return err
			}
			continue
		default:
		}
		break
	}
	return z.err
}

// writeOldest waits for the oldest block in flight and writes it out.
func (z *parallelZlib) writeOldest() error {
	<-z.pending[0].done
	return z.writeOut()
}

// writeOut writes the oldest block, done, to the destination (after the
// header, before the first) and frees it.
func (z *parallelZlib) writeOut() error {
	j := z.pending[0]
	z.pending = z.pending[1:]
	z.free = append(z.free, j)
	if z.err == nil {
		z.err = j.err
	}
	if z.err == nil && !z.started {
		z.started = true
		_, z.err = z.dst.Write(zlibHeader(z.level))
	}
	if z.err == nil {
		_, z.err = z.dst.Write(j.out.Bytes())
	}
	z.adler = adler32Combine(z.adler, j.adler, int64(len(j.in)))
	return z.err
}

// Close deflates what is left as the last block, writes every block and
// the Adler-32, and ends the goroutines, error or not.
func (z *parallelZlib) Close() error {
	if z.stopped {
		return errZlibClosed
	}
	if z.err == nil {
		if z.cur == nil {
			z.cur = z.job()
		}
		if z.cur != nil {
			z.submit(true)
		}
	}
	for len(z.pending) > 0 && z.err == nil {
		z.writeOldest()
	}
	if z.err == nil {
		_, z.err = z.dst.Write(binary.BigEndian.AppendUint32(nil, z.adler))
	}
	z.stop()
	return z.err
}

// Abort ends the goroutines without finishing the stream; nothing more
// is written. It is a no-op after Close.
func (z *parallelZlib) Abort() {
	if z.err == nil {
		z.err = errZlibClosed
	}
	z.stop()
}

// stop waits for the blocks in flight and ends the workers.
func (z *parallelZlib) stop() {
	if z.stopped {
		return
	}
	z.stopped = true
	for _, j := range z.pending {
		<-j.done
	}
	z.pending = nil
	close(z.work)
	z.wg.Wait()
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

// adler32Combine is the Adler-32 of two inputs one after the other from
// the first's, the second's and its length (zlib's adler32_combine).
func adler32Combine(adler1, adler2 uint32, len2 int64) uint32 {
	const base = 65521
	rem := uint64(len2 % base)
	sum1 := uint64(adler1 & 0xffff)
	sum2 := rem * sum1 % base
	sum1 += uint64(adler2&0xffff) + base - 1
	sum2 += uint64(adler1>>16) + uint64(adler2>>16) + base - rem
	if sum1 >= base {
		sum1 -= base
	}
	if sum1 >= base {
		sum1 -= base
	}
	if sum2 >= base<<1 {
		sum2 -= base << 1
	}
	if sum2 >= base {
		sum2 -= base
	}
	return uint32(sum2<<16 | sum1)
}
