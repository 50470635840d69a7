package chaos

import (
	"testing"
	"time"
)

func TestAvailability(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	post := func(s float64, status int) Post { return Post{At: at(s), Took: 100 * time.Millisecond, Status: status} }
	posts := []Post{
		post(1, 200), post(2, 0), post(3, 502), post(6, 200), // during the kill
		post(11, 200), post(12, 0), // during the database failover: not serving
		post(21, 200), // outside any fault
	}
	kill := &Outcome{Kind: KillLeader, Start: at(0), End: at(7), Serving: true}
	db := &Outcome{Kind: DBFailover, Start: at(10), End: at(14)}
	// SMTP down overlaps the kill: its POSTs count once.
	smtp := &Outcome{Kind: SMTPDown, Start: at(5), End: at(8), Serving: true}
	var v Verdict
	v.availability(posts, []*Outcome{kill, db, smtp})
	if v.ServingPosts != 4 || v.ServingOK != 2 {
		t.Errorf("serving POSTs = %d, 2xx %d; want 4, 2 (each POST once, the failover's left out)", v.ServingPosts, v.ServingOK)
	}
	// 1.1 s → 6.1 s without a 2xx answer, inside the kill.
	if want := 5 * time.Second; v.LongestGap != want {
		t.Errorf("LongestGap = %s, want %s", v.LongestGap, want)
	}
	if kill.Posts != 4 || kill.PostsOK != 2 || db.Posts != 2 || db.PostsOK != 1 {
		t.Errorf("per fault: kill %d/%d, failover %d/%d; want 2/4 and 1/2", kill.PostsOK, kill.Posts, db.PostsOK, db.Posts)
	}
}

func TestQuantiles(t *testing.T) {
	tests := []struct {
		give []time.Duration
		want string
	}{
		{nil, "–"},
		{[]time.Duration{3 * time.Second}, "3.0s / 3.0s / 3.0s"},
		{[]time.Duration{4 * time.Second, time.Second, 3 * time.Second, 2 * time.Second}, "2.0s / 4.0s / 4.0s"},
	}
	for _, tt := range tests {
		if got := quantiles(tt.give); got != tt.want {
			t.Errorf("quantiles(%v) = %q, want %q", tt.give, got, tt.want)
		}
	}
}
