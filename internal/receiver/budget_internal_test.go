package receiver

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// TestBodyReaderReservesWhatArrived: admission reserves nothing, however
// large the declared length; a body grows its reservation as it is read,
// up to the budget exactly (the last step shrinks to what arrived) but
// not past it.
func TestBodyReaderReservesWhatArrived(t *testing.T) {
	const limit = 3*bodyStep + 10
	tests := []struct {
		name     string
		size     int64
		declared int64
		wantErr  error
	}{
		{"Content-Length, the whole budget", limit, limit, nil},
		{"chunked, the whole budget", limit, 0, nil},
		{"chunked, one byte over", limit + 1, 0, errBusy},
		{"small, Content-Length", 13, 13, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBudget(limit, 0)
			res, err := b.admit("P", tt.declared)
			if err != nil {
				t.Fatalf("admit(%d declared) = %v, want admitted", tt.declared, err)
			}
			defer res.release()
			if got := b.inUse(); got != 0 {
				t.Fatalf("after admission %d bytes reserved, want 0", got)
			}
			br := &bodyReader{r: bytes.NewReader(make([]byte, tt.size)), res: res, declared: tt.declared}
			n, err := io.Copy(io.Discard, br)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("reading %d bytes: %d read, error %v, want %v", tt.size, n, err, tt.wantErr)
			}
			if got := b.inUse(); got > limit || (tt.wantErr == nil && got < tt.size) {
				t.Errorf("%d bytes reserved for %d read, want at least what was read and at most %d", got, n, int64(limit))
			}
			if tt.declared > 0 && b.inUse() > tt.declared {
				t.Errorf("%d bytes reserved for a body declaring %d", b.inUse(), tt.declared)
			}
		})
	}
	b := newBudget(limit, 0)
	if _, err := b.admit("P", limit+1); !errors.Is(err, errBusy) {
		t.Errorf("admit(declared over the budget) = %v, want errBusy", err)
	}
}
