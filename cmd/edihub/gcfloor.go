package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"

	"go.uber.org/zap"
)

// defaultHeapFloor is EDIHUB_GC_HEAP_FLOOR_BYTES's default.
const defaultHeapFloor = 64 << 20

// The heap floor. Between messages edihub's live heap is a few MiB, and
// with the runtime's default (GOGC=100) the collector runs each time the
// heap has grown by that much again: under a steady stream of AS2
// messages, each allocating some 90 KiB (half of it pgx's buffers for the
// one statement that stores it), that is several collections a second,
// and their marking, assists and sweeping were about 3% of the served
// process's CPU (the bench's profile; about 0.2% with the floor). With the floor the heap goal is max(floor, 2 × live):
// a small live heap may grow to floor before it is collected, and a large
// one (a large message in memory) is collected as before, at twice its
// size. The soft memory limit (GOMEMLIMIT, or 85% of the container's
// limit) still bounds the heap whatever the floor, as it bounds GOGC.

// heapFloorPercent is the GC percent that makes the heap goal
// max(floor, 2 × live): 100 when the live heap is half the floor or
// more, else what brings the goal up to floor.
func heapFloorPercent(live, floor uint64) int {
	const maxPercent = 1 << 20
	if live == 0 || 2*live >= floor {
		return 100
	}
	return int(min(floor*100/live-100, maxPercent))
}

// heapFloor adjusts the GC percent after each collection to the live
// heap that collection found (heapFloorPercent).
type heapFloor struct {
	floor  uint64
	sample []metrics.Sample
	prev   int // the GC percent before, restored by stop

	mu      sync.Mutex
	percent int // last set
	stopped bool
}

// gcCycle is unreachable as soon as it is made: its finalizer runs after
// the next collection, which it reports. It holds a pointer, so that it
// is not a tiny allocation (whose finalizers may never run).
type gcCycle struct{ f *heapFloor }

// applyHeapFloor keeps the Go heap goal at least floor bytes (see above)
// until its stop, unless floor is 0 or GOGC is set (an operator's GOGC
// wins): then it returns nil.
func applyHeapFloor(log *zap.Logger, getenv func(string) string, floor int64) *heapFloor {
	if floor <= 0 {
		return nil
	}
	if v := getenv("GOGC"); v != "" {
		log.Info("Go heap floor not applied: GOGC is set", zap.String("GOGC", v))
		return nil
	}
	f := &heapFloor{floor: uint64(floor), sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	f.prev = debug.SetGCPercent(100)
	f.percent = 100
	f.arm()
	log.Info("Go heap floor set: the collector lets the heap grow to at least this many bytes (EDIHUB_GC_HEAP_FLOOR_BYTES)", zap.Int64("bytes", floor))
	return f
}

func (f *heapFloor) arm() {
	runtime.SetFinalizer(&gcCycle{f: f}, func(c *gcCycle) { c.f.collected() })
}

// collected runs after each collection: it sets the percent for the
// next one and waits for it.
func (f *heapFloor) collected() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return
	}
	metrics.Read(f.sample)
	if f.sample[0].Value.Kind() == metrics.KindUint64 {
		if p := heapFloorPercent(f.sample[0].Value.Uint64(), f.floor); p != f.percent {
			debug.SetGCPercent(p)
			f.percent = p
		}
	}
	f.arm()
}

// gcPercent is the GC percent last set.
func (f *heapFloor) gcPercent() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.percent
}

// stop ends the adjustments and restores the GC percent; a nil f is no
// floor.
func (f *heapFloor) stop() {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.stopped {
		f.stopped = true
		debug.SetGCPercent(f.prev)
	}
}
