package sim

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// TestRunSmall runs a small simulation end to end in real time and checks
// that updates flow and the files are written. Whether honest updates are
// rejected is checked on virtual time (TestVirtualTime, TestChurn): on a
// starved machine the bots' driver and the position services' ticks run
// unevenly, so a tick can stamp a position the driver set long before
// with a late time and the next tick a fresh one with a close time, a
// walk that looks faster than the speed limit (a "teleport").
func TestRunSmall(t *testing.T) {
	for _, aggregate := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.Players, cfg.Regions = 12, 4
		cfg.Warmup, cfg.Duration = 2*time.Second, 3*time.Second
		cfg.Aggregate = aggregate
		// Position multicast alone; TestWorkload adds eats and fights.
		cfg.EatEvery, cfg.FightEvery = 0, 0
		r, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if r.Delivered == 0 || r.DelayMS.Count == 0 {
			t.Fatalf("aggregate=%v: no updates delivered: %+v", aggregate, r)
		}
		if n := len(r.Rejected); n != 0 {
			t.Logf("aggregate=%v: updates rejected on this machine (load %.0f%% busy): %v", aggregate, 100*r.Load.MachineBusy, r.Rejected)
		}
		files, err := r.WriteFiles(filepath.Join(t.TempDir(), "out"))
		if err != nil || len(files) != 3 {
			t.Fatalf("write files: %v %v", files, err)
		}
		t.Logf("aggregate=%v: delay p50 %.1f ms p99 %.1f ms, bytes sent/node p50 %.0f B/s", aggregate, r.DelayMS.P50, r.DelayMS.P99, r.BytesSentPerSec.P50)
	}
}

// TestChurnRealTime runs churn with both leave modes and DHT placement in
// real time, so that the race detector sees the population's joins and
// leaves (the virtual-time tests cannot run under -race; see
// virtual_test.go). It checks that players came and went and positions
// flowed; TestChurn checks the protocol's outcomes.
func TestChurnRealTime(t *testing.T) {
	for _, leave := range []LeaveMode{LeaveHandoff, LeaveCrash} {
		cfg := DefaultConfig()
		cfg.Players, cfg.Regions = 10, 4
		cfg.Warmup, cfg.Duration = 2*time.Second, 4*time.Second
		cfg.SessionMean, cfg.Leave = 3*time.Second, leave
		cfg.DHTPlacement = leave == LeaveCrash
		r, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if c := r.Churn; c.Joins == 0 || c.Leaves == 0 {
			t.Errorf("%s: no churn in the window: %+v", leave, c)
		}
		if r.Delivered == 0 {
			t.Errorf("%s: no updates delivered", leave)
		}
		t.Logf("%s: %d joins, %d leaves, next coordinator %+v, coordinator changes %v", leave, r.Churn.Joins, r.Churn.Leaves,
			r.Churn.NextCoordinatorMS, r.RegionActivity.CoordinatorChanges)
	}
}
