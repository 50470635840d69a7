package main

import (
	"sync"
	"testing"
	"time"

	"github.com/edihub/edihub/test/cluster"
)

// TestRestarter: a replica that exits is started again after restartMin,
// one that keeps exiting soon after its start waits twice as long each
// time, and after Stop nothing is restarted.
func TestRestarter(t *testing.T) {
	r := newRestarter(t.Context())
	var mu sync.Mutex
	var exits []time.Time
	third := make(chan struct{})
	c, err := cluster.Start(cluster.Options{
		Binary:   "/bin/sh",
		Args:     []string{"-c", "exit 3"}, // a replica that dies at once
		Replicas: []cluster.ReplicaSpec{{Name: "replica-1"}},
		OnExit: func(rep *cluster.Replica, err error) {
			mu.Lock()
			exits = append(exits, time.Now())
			if len(exits) == 3 {
				close(third)
			}
			mu.Unlock()
			r.Exited(rep, err)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Started(c.Replicas()[0])
	select {
	case <-third:
	case <-time.After(15 * time.Second):
		t.Fatal("the replica was not restarted twice within 15 s")
	}
	r.Stop()
	stopped := time.Now()
	time.Sleep(4*restartMin + 500*time.Millisecond) // stays: a restart that Stop failed to drop would start a real process only after its real back-off
	if err := c.Stop(time.Second); err != nil {
		t.Error(err)
	}
	mu.Lock()
	defer mu.Unlock()
	// The process lives for milliseconds: each exit is about its start.
	for i, want := range []time.Duration{restartMin, 2 * restartMin} {
		if d := exits[i+1].Sub(exits[i]); d < want || d > want+time.Second {
			t.Errorf("restart %d after %v, want about %v", i+1, d, want)
		}
	}
	for _, e := range exits[3:] {
		t.Errorf("replica ran again and exited %v after Stop", e.Sub(stopped))
	}
}
