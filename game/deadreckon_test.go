package game

import "testing"

func TestExtrapolate(t *testing.T) {
	pos, vel := Vec{1000, 2000}, Vec{30, -15}
	cases := []struct {
		ms   int64
		want Vec
	}{
		{0, pos},
		{-5, pos},
		{100, Vec{1000 + 30*3, 2000 - 15*3}},    // 100 ms = 3 ticks at 30 Hz
		{1000, Vec{1000 + 30*30, 2000 - 15*30}}, // one second
		{5000, Vec{1000 + 30*30, 2000 - 15*30}}, // capped at maxMillis
	}
	if got := Extrapolate(Vec{}, Vec{1 << 30, -(1 << 30)}, 1000, 30, 1000); got != (Vec{30 * TileUnits, -30 * TileUnits}) {
		t.Errorf("hostile velocity extrapolated to %+v", got)
	}
	for _, c := range cases {
		if got := Extrapolate(pos, vel, c.ms, 30, 1000); got != c.want {
			t.Errorf("Extrapolate(%d ms) = %+v, want %+v", c.ms, got, c.want)
		}
	}
}

// TestExtrapolateMatchesSimulation: a player moving in open ground is
// where dead reckoning from an earlier update says it is.
func TestExtrapolateMatchesSimulation(t *testing.T) {
	w, p := newTestWorld(t)
	ru := w.cfg.RegionUnits()
	p.Pos = Vec{ru - TileUnits*3/2, TileUnits * 3 / 2} // in the open border band
	w.Step([]Input{{Player: "p", MoveY: 127}})
	last := *p
	for i := 0; i < 6; i++ { // 200 ms
		w.Step([]Input{{Player: "p", MoveY: 127}})
	}
	if got := Extrapolate(last.Pos, last.Vel, 200, w.cfg.TickRate, 1000); got != p.Pos {
		t.Fatalf("dead reckoning says %+v, simulation %+v", got, p.Pos)
	}
}

func TestSmoother(t *testing.T) {
	s := NewSmoother()
	if got := s.Update(Vec{100, 100}); got != (Vec{100, 100}) {
		t.Fatalf("first update should jump, got %+v", got)
	}
	target := Vec{300, 100}
	prev := int64(1 << 62)
	for i := 0; i < 100; i++ {
		got := s.Update(target)
		gap := DistSq(got, target)
		if gap > prev {
			t.Fatalf("gap grew: %d -> %d", prev, gap)
		}
		prev = gap
	}
	if s.Shown != target {
		t.Fatalf("never converged: %+v", s.Shown)
	}
	far := Vec{300 + 10*TileUnits, 100}
	if got := s.Update(far); got != far {
		t.Fatalf("large correction should snap, got %+v", got)
	}
}
