package main

import (
	"context"
	"sync"
	"time"

	"github.com/edihub/edihub/test/cluster"
)

// Restart back-off of a replica that exited on its own or was killed (the
// kill -9 of docs/local-stack.md): the first restart comes after restartMin; a replica
// that exits again within restartStable of its start waits twice as long
// each time, up to restartMax, so one that cannot start does not spin.
const (
	restartMin    = time.Second
	restartMax    = 30 * time.Second
	restartStable = time.Minute
)

// restarter starts replicas again after they exit, as a Deployment's
// ReplicaSet would, until Stop. It is safe for concurrent use.
type restarter struct {
	ctx  context.Context
	done chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex
	stopping bool
	started  map[string]time.Time     // last start, by replica name
	backoff  map[string]time.Duration // next wait, by replica name
}

func newRestarter(ctx context.Context) *restarter {
	return &restarter{ctx: ctx, done: make(chan struct{}), started: map[string]time.Time{}, backoff: map[string]time.Duration{}}
}

// Started records that r (re)started now.
func (s *restarter) Started(r *cluster.Replica) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started[r.Spec.Name] = time.Now()
}

// Exited schedules a restart of r, which exited with err, unless the stack
// stops.
func (s *restarter) Exited(r *cluster.Replica, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping || s.ctx.Err() != nil {
		return
	}
	name := r.Spec.Name
	wait := s.backoff[name]
	if wait == 0 || time.Since(s.started[name]) > restartStable {
		wait = restartMin
	}
	s.backoff[name] = min(2*wait, restartMax)
	say("%s exited (%v); the other replicas keep running; restarting it in %v", name, err, wait)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.done:
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.stopping {
			return
		}
		if err := r.Start(); err != nil {
			say("%s not restarted: %v", name, err)
			return
		}
		s.started[name] = time.Now()
		say("%s restarted, pid %d", name, r.PID())
	}()
}

// Stop ends all restarts: a pending one is dropped, one under way has
// finished when Stop returns (so the caller's stop of the cluster sees its
// process).
func (s *restarter) Stop() {
	s.mu.Lock()
	if !s.stopping {
		s.stopping = true
		close(s.done)
	}
	s.mu.Unlock()
	s.wg.Wait()
}
