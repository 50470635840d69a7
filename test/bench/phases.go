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

// The bench's children log where the time of a large message went: the
// receiver's "large message timings" (the spool, the unwrap's stages, the
// payload's store), the sender's "built as a stream" (the build, the
// save of its record) and "sent". A logCapture keeps the last entry of each such
// message, whatever the level the child prints on its standard error;
// the receiver child prints its timings as one "phases" line of JSON when
// its standard input closes (largeReceive reads them and phaseLines
// prints them), the sender child its phases on its "sent" line.

// Messages of the log lines the bench captures.
const (
	timingsMessage = "large message timings"
	builtMessage   = "built as a stream"
	sentMessage    = "sent"
)

// captured is one entry kept: its time and its fields (the logger's own
// first, in the order logged).
type captured struct {
	at     time.Time
	fields []zapcore.Field
}

// logCapture is a zapcore.Core that keeps the last entry of each of its
// messages.
type logCapture struct {
	mu     *sync.Mutex
	last   map[string]captured
	fields []zapcore.Field
}

func newLogCapture(messages ...string) *logCapture {
	last := make(map[string]captured, len(messages))
	for _, m := range messages {
		last[m] = captured{}
	}
	return &logCapture{mu: &sync.Mutex{}, last: last}
}

func (c *logCapture) Enabled(zapcore.Level) bool { return true }

func (c *logCapture) With(fields []zapcore.Field) zapcore.Core {
	return &logCapture{mu: c.mu, last: c.last, fields: append(append([]zapcore.Field(nil), c.fields...), fields...)}
}

func (c *logCapture) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	c.mu.Lock()
	_, wanted := c.last[e.Message]
	c.mu.Unlock()
	if wanted {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *logCapture) Write(e zapcore.Entry, fields []zapcore.Field) error {
	all := append(append([]zapcore.Field(nil), c.fields...), fields...)
	c.mu.Lock()
	c.last[e.Message] = captured{at: e.Time, fields: all}
	c.mu.Unlock()
	return nil
}

func (c *logCapture) Sync() error { return nil }

// logger returns log with c beside its core.
func (c *logCapture) logger(log *zap.Logger) *zap.Logger {
	return log.WithOptions(zap.WrapCore(func(core zapcore.Core) zapcore.Core { return zapcore.NewTee(core, c) }))
}

// entry is the last entry of message (zero when none was logged).
func (c *logCapture) entry(message string) captured {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last[message]
}

// printTimings writes the "phases" line of the receiver's timings
// (nothing when none were logged).
func (c *logCapture) printTimings(w io.Writer) {
	t := c.entry(timingsMessage)
	if len(t.fields) == 0 {
		return
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range t.fields {
		f.AddTo(enc)
	}
	if b, err := json.Marshal(enc.Fields); err == nil {
		fmt.Fprintf(w, "phases %s\n", b)
	}
}

// sendPhases is " name=duration" for each duration of the sender's last
// build, then the post (from the build's line to the "sent" line).
func (c *logCapture) sendPhases() string {
	built, sent := c.entry(builtMessage), c.entry(sentMessage)
	var b strings.Builder
	for _, f := range built.fields {
		if f.Type == zapcore.DurationType {
			fmt.Fprintf(&b, " %s=%s", f.Key, time.Duration(f.Integer))
		}
	}
	if !built.at.IsZero() && !sent.at.IsZero() {
		fmt.Fprintf(&b, " post=%s", sent.at.Sub(built.at))
	}
	return b.String()
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
		fmt.Sprintf("%-40s %10s", "  write the payload (to the store)", d("payload")),
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
