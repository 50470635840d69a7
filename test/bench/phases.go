package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// The receiver logs where the time of a large message went ("large
// message timings": the spool, the unwrap's stages, the payload's
// store). The receiver child keeps the fields of the last such line and
// prints them on its standard output, as one "phases" line of JSON, when
// its standard input closes; largeReceive reads them and phaseLines
// prints them.

// timingsMessage is the receiver's log line with the timings.
const timingsMessage = "large message timings"

// phaseCapture is a zapcore.Core that keeps the fields of the last
// timingsMessage entry.
type phaseCapture struct {
	mu     *sync.Mutex
	last   *map[string]any
	fields []zapcore.Field
}

func newPhaseCapture() *phaseCapture {
	return &phaseCapture{mu: &sync.Mutex{}, last: new(map[string]any)}
}

func (c *phaseCapture) Enabled(zapcore.Level) bool { return true }

func (c *phaseCapture) With(fields []zapcore.Field) zapcore.Core {
	return &phaseCapture{mu: c.mu, last: c.last, fields: append(append([]zapcore.Field(nil), c.fields...), fields...)}
}

func (c *phaseCapture) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if e.Message == timingsMessage {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *phaseCapture) Write(_ zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range append(append([]zapcore.Field(nil), c.fields...), fields...) {
		f.AddTo(enc)
	}
	c.mu.Lock()
	*c.last = enc.Fields
	c.mu.Unlock()
	return nil
}

func (c *phaseCapture) Sync() error { return nil }

// logger returns log with c beside its core.
func (c *phaseCapture) logger(log *zap.Logger) *zap.Logger {
	return log.WithOptions(zap.WrapCore(func(core zapcore.Core) zapcore.Core { return zapcore.NewTee(core, c) }))
}

// print writes the "phases" line (nothing when no timings were logged).
func (c *phaseCapture) print(w io.Writer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(*c.last) == 0 {
		return
	}
	b, err := json.Marshal(*c.last)
	if err == nil {
		fmt.Fprintf(w, "phases %s\n", b)
	}
}

// readPhases reads the child's "phases" line from the rest of its
// standard output (nil when there is none).
func readPhases(r *bufio.Reader) map[string]any {
	for {
		line, err := r.ReadString('\n')
		if v, ok := strings.CutPrefix(line, "phases "); ok {
			var m map[string]any
			if json.Unmarshal([]byte(v), &m) == nil {
				return m
			}
		}
		if err != nil {
			return nil
		}
	}
}

// phaseLines is the phases, one stage a line, for the report.
func phaseLines(m map[string]any) []string {
	d := func(k string) string {
		v, ok := m[k].(float64) // nanoseconds
		if !ok {
			return "-"
		}
		return time.Duration(v).Round(10 * time.Millisecond).String()
	}
	lines := []string{
		fmt.Sprintf("%-40s %10s", "phase: spool the body", d("spool")),
		fmt.Sprintf("%-40s %10s  (wall; the stages below run at the same time, each on its goroutine)", "phase: unwrap", d("unwrap")),
		fmt.Sprintf("%-40s %10s", "  read the spooled body", d("read")),
		fmt.Sprintf("%-40s %10s", "  decrypt (CMS, AES-256-CBC)", d("decrypt")),
		fmt.Sprintf("%-40s %10s", "  verify (MIME, SHA-256 digest)", d("verify")),
		fmt.Sprintf("%-40s %10s", "  inflate (CMS, zlib)", d("inflate")),
		fmt.Sprintf("%-40s %10s", "  write the payload (spool, store)", d("payload")),
	}
	if _, ok := m["copy"]; ok {
		lines = append(lines,
			fmt.Sprintf("%-40s %10s  (wall, during the unwrap; waiting for pieces %s; the unwrap waited for it %s)",
				"phase: store the payload (INSERT)", d("copy"), d("copy_wait"), d("payload_wait")),
			fmt.Sprintf("%-40s %10s  (MDN; the rest of the store %s, then the message row, MDN, commit %s)",
				"phase: after the unwrap", d("after_unwrap"), d("copy_finish"), d("commit")))
	} else {
		lines = append(lines, fmt.Sprintf("%-40s %10s  (MDN, store)", "phase: after the unwrap", d("after_unwrap")))
	}
	return lines
}
