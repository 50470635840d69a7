package main

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/leader"
)

// TestWaitOrHung: hung workers end serve at once (no HTTP or dispatcher
// drain first, which would let the hung worker act beside the next
// leader); otherwise serve waits for every component and returns what
// they returned.
func TestWaitOrHung(t *testing.T) {
	hungErr := fmt.Errorf("%w: [heartbeat] still running 5s after leadership ended", leader.ErrWorkersHung)
	hung := make(chan error, 1)
	hung <- hungErr
	never := make(chan struct{})
	defer close(never)
	done := make(chan error, 1)
	go func() { done <- waitOrHung(func() error { <-never; return nil }, hung) }()
	select {
	case err := <-done:
		if !errors.Is(err, leader.ErrWorkersHung) {
			t.Errorf("waitOrHung with hung workers = %v, want ErrWorkersHung", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waitOrHung waited for the drain although the workers hung")
	}

	boom := errors.New("boom")
	for _, want := range []error{nil, boom} {
		if err := waitOrHung(func() error { return want }, make(chan error)); !errors.Is(err, want) || (want == nil && err != nil) {
			t.Errorf("waitOrHung = %v, want %v", err, want)
		}
	}
}
