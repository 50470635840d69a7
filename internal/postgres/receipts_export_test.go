package postgres

import (
	dto "github.com/prometheus/client_model/go"
)

// HoldReceipts makes the group commit of receipts act as if a flush were
// running: SaveInbound calls of the one-statement path wait in line
// until ReleaseReceipts, which ends that flush as a real one ends (the
// line's first receipts become the next batch).
func (s *Store) HoldReceipts() {
	s.receipts.mu.Lock()
	defer s.receipts.mu.Unlock()
	if s.receipts.flushing {
		panic("HoldReceipts: a flush is running")
	}
	s.receipts.flushing = true
}

// ReleaseReceipts ends the flush HoldReceipts pretended.
func (s *Store) ReleaseReceipts() { s.handOff() }

// ReceiptsWaiting counts the receipts in line, not yet taken.
func (s *Store) ReceiptsWaiting() int {
	s.receipts.mu.Lock()
	defer s.receipts.mu.Unlock()
	return len(s.receipts.line)
}

// ReceiptFlushes reports the group commit's metrics: flushes, receipts
// flushed, flushes of several receipts that fell back to one by one.
func (s *Store) ReceiptFlushes() (flushes, receipts, fallbacks int) {
	var h, c dto.Metric
	if err := s.receipts.perFlush.Write(&h); err != nil {
		panic(err)
	}
	if err := s.receipts.fallbacks.Write(&c); err != nil {
		panic(err)
	}
	return int(h.GetHistogram().GetSampleCount()), int(h.GetHistogram().GetSampleSum()), int(c.GetCounter().GetValue())
}

// PoolConns reports the pool's acquires so far and the connections
// acquired now.
func (s *Store) PoolConns() (acquires int64, acquired int32) {
	st := s.pool.Stat()
	return st.AcquireCount(), st.AcquiredConns()
}
