package sim

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// TestRunSmall runs a small simulation end to end and checks that updates
// flow, nothing honest is rejected and the files are written.
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
			t.Errorf("aggregate=%v: honest updates rejected: %v", aggregate, r.Rejected)
		}
		files, err := r.WriteFiles(filepath.Join(t.TempDir(), "out"))
		if err != nil || len(files) != 3 {
			t.Fatalf("write files: %v %v", files, err)
		}
		t.Logf("aggregate=%v: delay p50 %.1f ms p99 %.1f ms, bytes sent/node p50 %.0f B/s", aggregate, r.DelayMS.P50, r.DelayMS.P99, r.BytesSentPerSec.P50)
	}
}
