package as2_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"go.uber.org/goleak"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/testenv/openssltest"
)

// failingWriter fails once more than n bytes were written to it.
type failingWriter struct {
	n   int
	err error
}

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.n -= len(p); w.n < 0 {
		return 0, w.err
	}
	return len(p), nil
}

// TestUnwrapStreamStagesEnd: UnwrapStream runs its layers in goroutines
// (readahead.go); whether it succeeds, fails on the message half-way
// (a flipped ciphertext block, a cut body) or on its payload writer
// half-way (the spool full), every stage has ended when it returns, and
// the error is the one that happened.
func TestUnwrapStreamStagesEnd(t *testing.T) {
	ids := openssltest.Keys(t)
	m := buildOpenSSL(t, ids, "sha256", "aes256", "before", "binary")
	opts := streamOpts(ids, nil, as2.MICContentOnly)
	full := errors.New("spool full")
	flipped := bytes.Clone(m.Body)
	flipped[len(flipped)/2] ^= 1
	tests := []struct {
		name    string
		body    []byte
		payload io.Writer
		wantErr error // nil: succeeds; errAny: any failure
	}{
		{"processed", m.Body, io.Discard, nil},
		{"flipped ciphertext", flipped, io.Discard, errAny},
		{"cut body", m.Body[:len(m.Body)/2], io.Discard, errAny},
		{"payload writer fails", m.Body, as2.PayloadWriter(&failingWriter{n: 100, err: full}), full},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			o := opts
			o.Stats = &as2.StreamStats{}
			_, err := as2.UnwrapStream(m.Header, bytes.NewReader(tt.body), o, tt.payload)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("UnwrapStream() error = %v, want none", err)
			case tt.wantErr == errAny && err == nil, tt.wantErr != nil && tt.wantErr != errAny && !errors.Is(err, tt.wantErr):
				t.Fatalf("UnwrapStream() error = %v, want %v", err, tt.wantErr)
			}
			if o.Stats.Total <= 0 {
				t.Errorf("Stats = %+v, want the total filled in", *o.Stats)
			}
		})
	}
}

// errAny stands for any error in TestUnwrapStreamStagesEnd.
var errAny = errors.New("any error")
