package console

import (
	"context"
	"encoding/json"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/leader"
	"github.com/edihub/edihub/internal/postgres"
)

// statusReporter records this replica's elector status in the database
// (replica_status) so that the hub page of every replica shows the
// leader's workers: every StatusInterval, and within a second of a change
// of leadership (who holds the lease, this replica's term's token).
type statusReporter struct {
	c *Console
	// last is the leadership last recorded.
	last struct {
		isLeader bool
		holder   string
		token    int64
	}
	recorded time.Time
	failing  bool
}

// statusPoll is how often the reporter looks for a change of leadership.
const statusPoll = time.Second

func (s *statusReporter) run(ctx context.Context) {
	t := time.NewTicker(statusPoll)
	defer t.Stop()
	for {
		s.tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// tick records the status when leadership changed or StatusInterval has
// passed since the last recording.
func (s *statusReporter) tick(ctx context.Context) {
	st := s.c.o.Leader()
	now := s.c.now()
	changed := st.IsLeader != s.last.isLeader || st.Holder != s.last.holder || st.FencingToken != s.last.token
	if !changed && !s.recorded.IsZero() && now.Sub(s.recorded) < s.c.o.StatusInterval {
		return
	}
	b, err := json.Marshal(st)
	if err != nil {
		s.c.log.Error("replica status not recorded", zap.Error(err))
		return
	}
	rec := postgres.ReplicaStatus{Identity: st.Identity, IsLeader: st.IsLeader, Status: b, Version: s.c.o.Version, StartedAt: s.c.o.Started}
	if st.IsLeader {
		rec.Token = st.FencingToken
	}
	if err := s.c.o.Hub.RecordReplicaStatus(ctx, rec); err != nil {
		if ctx.Err() == nil && !s.failing {
			s.c.log.Warn("replica status not recorded; the hub pages of other replicas show it as it was; retrying", zap.Error(err))
		}
		s.failing = true
		return
	}
	s.failing = false
	s.recorded = now
	s.last.isLeader, s.last.holder, s.last.token = st.IsLeader, st.Holder, st.FencingToken
}

// leaderWorkers finds the workers of the leader for the hub page: this
// replica's own when it leads, else those the leader last recorded
// (holder is the lease's holder as this replica or the database knows
// it). It returns the status it used and when it was recorded (zero for
// this replica's own), or nil when the leader recorded none lately.
func leaderWorkers(self *leader.Status, holder string, recorded []postgres.ReplicaStatus) (*leader.Status, time.Time) {
	if self != nil && self.IsLeader {
		return self, time.Time{}
	}
	for _, r := range recorded {
		if r.Identity != holder || !r.IsLeader {
			continue
		}
		var st leader.Status
		if err := json.Unmarshal(r.Status, &st); err != nil {
			return nil, time.Time{}
		}
		return &st, r.SeenAt
	}
	return nil, time.Time{}
}
