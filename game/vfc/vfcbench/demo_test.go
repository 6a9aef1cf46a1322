package vfcbench

import (
	"context"
	"reflect"
	"testing"
)

// TestDemoKeepsBounds runs a short demo through a real mirror's egress and
// checks what the report claims: every copy a client holds stays within its
// zone's bound, every client holds every player and object, and VFC sends
// far less than sending everything.
func TestDemoKeepsBounds(t *testing.T) {
	dc := DefaultDemo()
	dc.Clients, dc.Seconds = 12, 6
	rep, err := RunDemo(context.Background(), dc)
	if err != nil {
		t.Fatal(err)
	}
	for _, z := range rep.Zones {
		t.Logf("%s zone %d %s %s: %d pair-frames, %d stale; max age %.3fs, missed %d, value %.1f; exceeded %d; error p99 %.2f max %.2f tiles",
			z.Set, z.Zone, z.Range, z.BoundText, z.PairFrames, z.StaleFrames, z.MaxAgeSeconds, z.MaxMissed, z.MaxValue, z.Exceeded, z.P99ErrorTiles, z.MaxErrorTiles)
		if z.Exceeded > 0 {
			t.Errorf("%s zone %d: %d observations past the bound %s", z.Set, z.Zone, z.Exceeded, z.BoundText)
		}
		// With a round every tick, what a client shows of a player is off
		// by less than the zone's value bound (percent of a tile).
		if z.Set == "players" && z.MaxErrorTiles > 0 && z.MaxErrorTiles*100 >= z.Bound.Value {
			t.Errorf("players zone %d: a client's dead reckoning was %.2f tiles off, bound %s", z.Zone, z.MaxErrorTiles, z.BoundText)
		}
	}
	var pairs int64
	for _, z := range rep.Zones {
		pairs += z.PairFrames
	}
	if pairs == 0 || rep.Missing != 0 {
		t.Errorf("%d observations, %d of copies a client did not hold", pairs, rep.Missing)
	}
	t.Logf("vfc %d B, send-all %d B, area %d B", rep.VFC.Bytes, rep.SendAll.Bytes, rep.Area.Bytes)
	if rep.VFC.Bytes*5 > rep.SendAll.Bytes {
		t.Errorf("VFC sent %d bytes, more than 20%% of send-all's %d", rep.VFC.Bytes, rep.SendAll.Bytes)
	}
}

// TestDemoIsDeterministic: the same config gives the same traffic and
// staleness on every run (simulated time, seeded bots and mirror).
func TestDemoIsDeterministic(t *testing.T) {
	dc := DefaultDemo()
	dc.Clients, dc.Seconds, dc.FrameTicks = 6, 3, 2
	a, err := RunDemo(context.Background(), dc)
	if err != nil {
		t.Fatal(err)
	}
	b, err := RunDemo(context.Background(), dc)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("two runs differ:\n%+v\n%+v", a, b)
	}
}

func TestRoundWorkloadSendsTheUpdatedShare(t *testing.T) {
	for _, pct := range []int{0, 50, 100} {
		row, err := MeasureRounds(RoundSetup{Objects: 1000, UpdatedPercent: pct, MovingPivot: true, Seed: 3}, 200)
		if err != nil {
			t.Fatal(err)
		}
		// 999 objects besides the pivot; the moving pivot is sent too.
		if want := 999*pct/100 + 1; row.Sent != want {
			t.Errorf("%d%% updated: %d sent per round, want %d", pct, row.Sent, want)
		}
		if row.AllocsPerRound > 0.05 {
			t.Errorf("%d%% updated: %.2f allocations per round", pct, row.AllocsPerRound)
		}
	}
}
