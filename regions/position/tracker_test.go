package position

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

func testLimits() Limits {
	c := DefaultConfig()
	c.Width, c.Height = 3, 3
	return c.Limits()
}

func upd(seq uint64, x, y int32, sent time.Time) *Update {
	g := testLimits().Grid
	r := g.RegionOf(Vec{x, y})
	return &Update{Player: []byte("p"), Seq: seq, X: x, Y: y, RegionX: int32(r.X), RegionY: int32(r.Y), SentUnixMicro: sent.UnixMicro()}
}

func relocated(u *Update, n uint32) *Update {
	u.Relocations = n
	return u
}

func TestTracker(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	p := peer.ID("p")
	type step struct {
		u      *Update
		now    time.Time
		want   Verdict
		reason string
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"first update accepted", []step{{upd(1, 100, 100, t0), t0, Accept, ""}}},
		{"sequence zero malformed", []step{{upd(0, 100, 100, t0), t0, Reject, ReasonMalformed}}},
		{"duplicate ignored", []step{
			{upd(5, 100, 100, t0), t0, Accept, ""},
			{upd(5, 100, 100, t0), ms(10), Ignore, ReasonDuplicate},
		}},
		{"reordered within window ignored", []step{
			{upd(10, 100, 100, ms(150)), ms(150), Accept, ""},
			{upd(9, 100, 100, t0), ms(160), Ignore, ReasonReordered},
		}},
		{"replay beyond window rejected", []step{
			{upd(100, 100, 100, ms(150)), ms(150), Accept, ""},
			{upd(2, 100, 100, t0), ms(160), Reject, ReasonReplay},
		}},
		{"walk at the speed limit accepted", []step{
			{upd(1, 1000, 1000, t0), t0, Accept, ""},
			// 1024 units/s for 150 ms = 153 units.
			{upd(2, 1153, 1000, ms(150)), ms(400), Accept, ""},
		}},
		{"teleport rejected", []step{
			{upd(1, 1000, 1000, t0), t0, Accept, ""},
			{upd(2, 5000, 1000, ms(150)), ms(150), Reject, ReasonTeleport},
		}},
		{"bunched arrivals of a fast walk accepted", []step{
			{upd(1, 1000, 1000, t0), t0, Accept, ""},
			{upd(2, 1700, 1000, ms(700)), ms(1), Accept, ""}, // arrives 1 ms later: sent 700 ms later
		}},
		{"timestamp from the future rejected", []step{
			{upd(1, 1000, 1000, ms(5000)), t0, Reject, ReasonFuture},
		}},
		{"gap counted as loss", []step{
			{upd(1, 1000, 1000, t0), t0, Accept, ""},
			{upd(4, 1000, 1000, ms(450)), ms(450), Accept, ""},
		}},
		{"position outside the world", []step{
			{&Update{Player: []byte("p"), Seq: 1, X: -5, Y: 0}, t0, Reject, ReasonOutOfWorld},
		}},
		{"region does not match position", []step{
			{&Update{Player: []byte("p"), Seq: 1, X: 100, Y: 100, RegionX: 1}, t0, Reject, ReasonWrongRegion},
		}},
		{"respawn announced by a relocation accepted", []step{
			{upd(1, 1000, 1000, t0), t0, Accept, ""},
			{relocated(upd(2, 5000, 1000, ms(150)), 1), ms(150), Accept, ""},
			{relocated(upd(3, 5100, 1000, ms(300)), 1), ms(300), Accept, ""},
		}},
		{"relocation into another region rejected", []step{
			{upd(1, 1000, 1000, t0), t0, Accept, ""},
			{relocated(upd(2, 9000, 1000, ms(150)), 1), ms(150), Reject, ReasonTeleport},
		}},
		{"relocations faster than the interval rejected", []step{
			{upd(1, 1000, 1000, t0), t0, Accept, ""},
			{relocated(upd(2, 5000, 1000, ms(150)), 1), ms(150), Accept, ""},
			{relocated(upd(3, 1000, 1000, ms(300)), 2), ms(300), Reject, ReasonRelocation},
			{relocated(upd(4, 1000, 1000, ms(3200)), 3), ms(3200), Accept, ""},
		}},
		{"relocation count going back rejected", []step{
			{relocated(upd(1, 1000, 1000, t0), 4), t0, Accept, ""},
			{relocated(upd(2, 1000, 1000, ms(150)), 3), ms(150), Reject, ReasonRelocation},
		}},
		{"velocity above limit", []step{
			{&Update{Player: []byte("p"), Seq: 1, X: 100, Y: 100, Vx: 5000}, t0, Reject, ReasonTooFast},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := NewTracker(testLimits())
			for i, s := range c.steps {
				v, reason := tr.Observe(p, s.u, s.now)
				if v != s.want || reason != s.reason {
					t.Fatalf("step %d: got %v %q, want %v %q", i, v, reason, s.want, s.reason)
				}
			}
		})
	}
	tr := NewTracker(testLimits())
	tr.Observe(p, upd(1, 1000, 1000, t0), t0)
	tr.Observe(p, upd(4, 1000, 1000, ms(450)), ms(450))
	if got := tr.Stats().Lost; got != 2 {
		t.Errorf("lost %d, want 2", got)
	}
	tr.Forget(ms(451))
	if tr.Len() != 0 {
		t.Errorf("forget kept %d players", tr.Len())
	}
}

func TestInterest(t *testing.T) {
	g := Grid{Width: 3, Height: 3, RegionUnits: 1000}
	if got := g.Neighbourhood(g.RegionOf(Vec{0, 0}), 1); len(got) != 4 {
		t.Errorf("corner neighbourhood %v, want 4 regions", got)
	}
	if got := g.Neighbourhood(g.RegionOf(Vec{1500, 1500}), 1); len(got) != 9 {
		t.Errorf("centre neighbourhood %v, want 9 regions", got)
	}
	// In the middle of region 0,0 only its neighbourhood; near the border
	// with 1,0 also the regions seen from there.
	if got := g.Subscriptions(Vec{500, 500}, 0, 100); len(got) != 1 {
		t.Errorf("mid-region subscriptions %v, want 1", got)
	}
	if got := g.Subscriptions(Vec{950, 500}, 0, 100); len(got) != 2 {
		t.Errorf("near-border subscriptions %v, want 2", got)
	}
	if got := g.RegionOf(Vec{-10, 99999}); got.X != 0 || got.Y != 2 {
		t.Errorf("outside clamps to %v", got)
	}
}

func TestDeadReckon(t *testing.T) {
	got := DeadReckon(Vec{100, 100}, Vec{1000, -1000}, 500*time.Millisecond, time.Second)
	if got != (Vec{600, -400}) {
		t.Errorf("dead reckoning %v", got)
	}
	if got := DeadReckon(Vec{0, 0}, Vec{1000, 0}, 5*time.Second, time.Second); got.X != 1000 {
		t.Errorf("extrapolation not capped: %v", got)
	}
}

// TestTrackerTimeWindow: the sender's timestamps count only within
// [arrival-MaxDelay, arrival+MaxClockSkew], so a lie about time buys at
// most that much walking, and no gap overflows the distance arithmetic.
func TestTrackerTimeWindow(t *testing.T) {
	lim := testLimits()
	t0 := time.Unix(1_000_000, 0)
	p := peer.ID("p")
	speed := int32(lim.MaxSpeed)
	t.Run("backdated by weeks, then a jump", func(t *testing.T) {
		tr := NewTracker(lim)
		if v, r := tr.Observe(p, upd(1, 1000, 1000, t0), t0); v != Accept {
			t.Fatalf("first update: %v %s", v, r)
		}
		weeks := t0.Add(-6 * 7 * 24 * time.Hour)
		if v, r := tr.Observe(p, upd(2, 1000, 1000, weeks), t0.Add(10*time.Millisecond)); v != Ignore || r != ReasonStale {
			t.Fatalf("update stamped weeks ago: %v %s, want ignore %s", v, r, ReasonStale)
		}
		now := t0.Add(20 * time.Millisecond)
		if v, r := tr.Observe(p, upd(3, 20000, 20000, now), now); v != Reject || r != ReasonTeleport {
			t.Fatalf("jump after it: %v %s, want reject %s", v, r, ReasonTeleport)
		}
	})
	t.Run("the most a lie buys", func(t *testing.T) {
		// The first update as old as allowed, the next as far ahead as
		// allowed, arriving together.
		tr := NewTracker(lim)
		tr.Observe(p, upd(1, 1000, 1000, t0.Add(-lim.MaxDelay)), t0)
		credit := lim.MaxDelay + lim.MaxClockSkew
		reach := int32(int64(speed)*credit.Milliseconds()/1000) + lim.SpeedTolerance
		if v, r := tr.Observe(p, upd(2, 1000+reach, 1000, t0.Add(lim.MaxClockSkew)), t0); v != Accept {
			t.Fatalf("walk of %d units in the credited %s: %v %s", reach, credit, v, r)
		}
		tr = NewTracker(lim)
		tr.Observe(p, upd(1, 1000, 1000, t0.Add(-lim.MaxDelay)), t0)
		if v, r := tr.Observe(p, upd(2, 1000+reach+2, 1000, t0.Add(lim.MaxClockSkew)), t0); v != Reject || r != ReasonTeleport {
			t.Fatalf("walk beyond the credit: %v %s, want reject %s", v, r, ReasonTeleport)
		}
	})
	t.Run("no overflow", func(t *testing.T) {
		for _, dt := range []time.Duration{0, time.Second, 24 * time.Hour, 1 << 62, -time.Hour} {
			a, b := Vec{0, 0}, Vec{1<<28 - 1, 1<<28 - 1}
			got := withinReach(a, b, dt, 1<<30, 0)
			want := dt > 0
			if got != want {
				t.Errorf("dt %s at top speed across the largest world: reachable %v, want %v", dt, got, want)
			}
			if !withinReach(a, a, dt, speed, 0) {
				t.Errorf("dt %s: standing still is not reachable", dt)
			}
		}
	})
}

func TestAuthorLimiter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := NewAuthorLimiter(100*time.Millisecond, 3, 2)
	for i := range 3 {
		if !l.Allow("a", "t", t0) {
			t.Fatalf("message %d of the burst refused", i)
		}
	}
	if l.Allow("a", "t", t0) {
		t.Fatal("fourth message at once allowed")
	}
	if !l.Allow("a", "other", t0) {
		t.Fatal("another topic shares the bucket")
	}
	if !l.Allow("a", "t", t0.Add(100*time.Millisecond)) {
		t.Fatal("refill after one period refused")
	}
	// Full table: a newcomer takes the least recently used place.
	if !l.Allow("b", "t", t0.Add(150*time.Millisecond)) || l.Len() != 2 {
		t.Fatalf("newcomer: len %d", l.Len())
	}
	if l.Refused() != 1 {
		t.Fatalf("refused %d, want 1", l.Refused())
	}
}
