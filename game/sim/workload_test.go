package sim

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestWorkload runs a small simulation with frequent eats and fights and
// checks that eats commit through the region coordinators, fights are
// fought over the fight protocol, and every outcome is one the report
// explains. It runs in real time, where a starved machine can make a
// request time out; TestVirtualTime checks the same workload strictly.
func TestWorkload(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Players, cfg.Regions = 12, 4
	cfg.Warmup, cfg.Duration = 3*time.Second, 4*time.Second
	cfg.EatEvery, cfg.FightEvery = time.Second, time.Second
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := r.Workload
	if w == nil {
		t.Fatal("no workload in the report")
	}
	var sb strings.Builder
	r.Summary(&sb)
	t.Log("\n" + sb.String())
	if w.EatsCommitted == 0 || w.EatCommitMS.Count == 0 {
		t.Errorf("no eat committed: %+v", w.Outcomes)
	}
	if w.FightsFought == 0 || w.FightRoundTripMS.Count == 0 {
		t.Errorf("no fight fought: %+v", w.Outcomes)
	}
	if w.Outcomes["defend/fought"] < w.Outcomes["fight/fought"] {
		t.Errorf("attackers count %d fights, defenders %d", w.Outcomes["fight/fought"], w.Outcomes["defend/fought"])
	}
	checkOutcomes(t, w, true)
}

// checkOutcomes checks that every outcome is a success or a refusal or
// failure with its reason, that no fight was computed differently by its
// two sides, and, unless failures are allowed, that there is none but
// fights with players who left (churn).
func checkOutcomes(t *testing.T, w *Workload, failuresAllowed bool) {
	t.Helper()
	if n := w.Outcomes["fight/outcome mismatch"]; n != 0 {
		t.Errorf("%d fights computed differently by the two sides", n)
	}
	for k, v := range w.Outcomes {
		op, outcome, _ := strings.Cut(k, "/")
		switch {
		case outcome == "committed" || outcome == "fought" || outcome == "defender defeated":
		case strings.HasPrefix(outcome, "refused: ") && len(outcome) > len("refused: "):
			// Honest refusals: conflicts, empty regions, bots down,
			// nobody in sight, out of sight for the defender.
		case outcome == "failed: the defender left" || outcome == "failed: the attacker left":
			// Churn: the other side left meanwhile.
		case failuresAllowed && strings.HasPrefix(outcome, "failed: ") && len(outcome) > len("failed: "):
			t.Logf("%s: %d %q", op, v, outcome)
		default:
			t.Errorf("%s: %d %q", op, v, outcome)
		}
	}
}

// FuzzSlotOf checks that an object key is accepted only in its canonical
// form and with a slot in range.
func FuzzSlotOf(f *testing.F) {
	for _, s := range []string{"obj/0", "obj/23", "obj/24", "obj/007", "obj/-1", "obj/", "x", "obj/1 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		slot, ok := slotOf(key, 24)
		if !ok {
			return
		}
		if slot < 0 || slot >= 24 || key != fmt.Sprintf("obj/%d", slot) {
			t.Fatalf("accepted %q as slot %d", key, slot)
		}
	})
}
