package as2

import (
	"io"
	"sync"
)

// CompressedOutput takes a streamed payload in the form it arrived in.
// When the payload entity is the whole content of the message's first
// compressed layer and needs no transfer decoding (binary, 7bit or
// 8bit), UnwrapStream writes that layer's zlib stream, as received, to
// Stream and the payload to Plain instead of its payload writer, and
// Message.Zlib says so. Otherwise Stream gets nothing and the payload
// goes to the payload writer as always. The choice is made once the
// entity's header is inflated; until then the zlib stream read so far
// is held in memory, up to MaxZlibHold bytes (past that the payload goes
// to the payload writer). The whole stream is still inflated, and its
// checksum checked, before UnwrapStream returns nil.
type CompressedOutput struct {
	Stream, Plain io.Writer
}

// ZlibPayload describes a payload written as its zlib stream
// (CompressedOutput): the stream inflates to Skip bytes (the payload
// entity's header, up to and including its blank line) followed by the
// payload, Message.PayloadSize bytes, and nothing else.
type ZlibPayload struct {
	Skip int64
}

// MaxZlibHold bounds the zlib stream held while the payload entity's
// header is not inflated yet.
const MaxZlibHold = 4 << 20

// zlibTee passes the zlib stream of a compressed layer to
// CompressedOutput.Stream once keep decided for it. Write runs in the
// inflate's goroutine, keep in the unwrap's, which alone sets kept and
// may read it unlocked.
type zlibTee struct {
	w  io.Writer
	mu sync.Mutex
	// held is the stream read before the decision; decided, kept: the
	// decision.
	held          []byte
	decided, kept bool
}

func (t *zlibTee) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.kept:
		if _, err := t.w.Write(p); err != nil {
			return 0, &writeError{err}
		}
	case t.decided:
	case len(t.held)+len(p) > MaxZlibHold:
		t.decided, t.held = true, nil
	default:
		t.held = append(t.held, p...)
	}
	return len(p), nil
}

// keep decides (once) whether the stream goes to Stream, and reports
// whether it does: not when want is false, nor when more than
// MaxZlibHold bytes were read before. Its error is Stream's.
func (t *zlibTee) keep(want bool) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.decided {
		return t.kept, nil
	}
	t.decided = true
	held := t.held
	t.held = nil
	if !want {
		return false, nil
	}
	t.kept = true
	_, err := t.w.Write(held)
	return true, err
}
