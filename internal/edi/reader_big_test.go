package edi_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/edihub/edihub/internal/edi"
)

// repeatReader is a generated document: head, body repeated n times, tail;
// nothing of it is held but the three parts.
type repeatReader struct {
	head, body, tail []byte
	n                int
	cur              []byte
	stage            int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		switch {
		case r.stage == 0:
			r.cur, r.stage = r.head, 1
		case r.n > 0:
			r.cur = r.body
			r.n--
		case r.stage == 1:
			r.cur, r.stage = r.tail, 2
		default:
			return 0, io.EOF
		}
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// x12Body is one 850 of 25 segments with composites and repetitions.
var x12Body = func() []byte {
	var b strings.Builder
	b.WriteString("ST*850*0001~\nBEG*00*SA*PO-4711**20260101~\nREF*DP*038~\n")
	for i := range 20 {
		fmt.Fprintf(&b, "PO1*%d*48*EA*3.25*PE*MG*R5656-2*VN*1234567890*UP*012345678905*ZZ*A>B>C^D>E~\n", i+1)
	}
	b.WriteString("CTT*20~\nSE*24*0001~\n")
	return []byte(b.String())
}()

const x12Head = "ISA*00*          *00*          *ZZ*SENDER         *ZZ*RECEIVER       *260101*1200*^*00501*000000001*0*P*>~\nGS*PO*SENDER*RECEIVER*20260101*1200*1*X*005010~\n"

// x12Interchange is a generated 850 interchange of about size bytes.
func x12Interchange(size int) *repeatReader {
	n := size / len(x12Body)
	return &repeatReader{head: []byte(x12Head), body: x12Body, n: n, tail: []byte(fmt.Sprintf("GE*%d*1~\nIEA*1*000000001~\n", n))}
}

var edifactBody = func() []byte {
	var b strings.Builder
	b.WriteString("UNH+1+ORDERS:D:96A:UN'BGM+220+PO?+4711+9'DTM+137:20260101:102'NAD+BY+5412345000013::9++ACME?'S CORP'")
	for i := range 20 {
		fmt.Fprintf(&b, "LIN+%d++4000862141404:SRS'QTY+21:48'PRI+AAA:3.25'FTX+AAI+++NOTE 12?:30 ??OK'", i+1)
	}
	b.WriteString("UNS+S'CNT+2:20'UNT+86+1'")
	return []byte(b.String())
}()

func edifactInterchange(size int) *repeatReader {
	n := size / len(edifactBody)
	return &repeatReader{head: []byte("UNA:+.? 'UNB+UNOC:3+SENDER:14+RECEIVER:14+260101:1200+1'"), body: edifactBody, n: n, tail: []byte(fmt.Sprintf("UNZ+%d+1'", n))}
}

// TestSegmentReaderConstantMemory reads a generated 1 GiB X12 interchange
// (64 MiB under the race detector) and checks that the heap does not grow
// with it: what is allocated over the whole read, and the largest heap in
// use seen along the way, stay within a few hundred KiB of the start.
func TestSegmentReaderConstantMemory(t *testing.T) {
	src := x12Interchange(bigInterchange)
	sets := src.n
	runtime.GC()
	var before, now runtime.MemStats
	runtime.ReadMemStats(&before)
	sr, err := edi.NewSegmentReader(src, edi.SegmentReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var segments, po1 int
	var maxInuse uint64
	for {
		s, err := sr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Next = %v after %d segments", err, segments)
		}
		segments++
		if s.Tag == "PO1" && s.Element(13).Repetitions() == 2 && string(s.Element(13).Repetition(1).Component(2)) == "E" {
			po1++
		}
		if segments%(1<<20) == 0 {
			runtime.ReadMemStats(&now)
			maxInuse = max(maxInuse, now.HeapInuse)
		}
	}
	runtime.ReadMemStats(&now)
	if want := 4 + 25*sets; segments != want || po1 != 20*sets {
		t.Fatalf("read %d segments, %d PO1 with a composite repetition; want %d and %d", segments, po1, want, 20*sets)
	}
	alloc := now.TotalAlloc - before.TotalAlloc
	grown := int64(maxInuse) - int64(before.HeapInuse)
	t.Logf("%d segments (%d MiB): %d bytes allocated in all (%.4f per segment), heap in use grew at most %d bytes", segments, sr.Offset()>>20, alloc, float64(alloc)/float64(segments), grown)
	const bound = 512 << 10
	if alloc > bound || grown > bound {
		t.Errorf("reading %d MiB allocated %d bytes and grew the heap by %d bytes, want at most %d each", sr.Offset()>>20, alloc, grown, bound)
	}
}

func benchmarkSegmentReader(b *testing.B, src *repeatReader) {
	doc, err := io.ReadAll(src)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		sr, err := edi.NewSegmentReader(bytes.NewReader(doc), edi.SegmentReaderOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := sr.Next(); err != nil {
				if !errors.Is(err, io.EOF) {
					b.Fatal(err)
				}
				break
			}
		}
	}
}

// BenchmarkSegmentReaderX12 reads a generated 100 MiB 850 interchange
// segment by segment, every element, repetition and component split.
func BenchmarkSegmentReaderX12(b *testing.B) { benchmarkSegmentReader(b, x12Interchange(100<<20)) }

// BenchmarkSegmentReaderEDIFACT reads a generated 100 MiB ORDERS
// interchange with release characters.
func BenchmarkSegmentReaderEDIFACT(b *testing.B) {
	benchmarkSegmentReader(b, edifactInterchange(100<<20))
}
