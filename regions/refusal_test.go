package regions

import (
	"log/slog"
	"testing"
	"time"
)

// TestRefusalLevels: refusals an honest peer causes in a changing network
// (a thin view, a lapsed or overtaken grant, a copy not provable yet, a
// busy replica) are logged at Info; what only a forger or a broken peer
// sends at Warn.
func TestRefusalLevels(t *testing.T) {
	for _, tc := range []struct {
		reason string
		want   slog.Level
	}{
		{refusedNotPlaced, slog.LevelInfo},
		{refusedProofMissing, slog.LevelInfo},
		{refusedProofStale, slog.LevelInfo},
		{refusedProofExpired, slog.LevelInfo},
		{refusedDeposalUnproven, slog.LevelInfo},
		{refusedReplicaExcluded, slog.LevelInfo},
		{refusedHolderUnproven + "/" + refusedAssignmentUnproven, slog.LevelInfo},
		{refusedHolderUnproven + "/" + refusedProofStale, slog.LevelInfo},
		{refusedProofInvalid, slog.LevelWarn},
		{refusedProofHolder, slog.LevelWarn},
		{refusedBounds, slog.LevelWarn},
		{refusedEventForged, slog.LevelWarn},
		{refusedOriginUnproven, slog.LevelWarn},
		{refusedHolderUnproven + "/" + refusedProofInvalid, slog.LevelWarn},
		{refusedHolderUnproven + "/" + refusedProofHolder, slog.LevelWarn},
	} {
		if got := refusalLevel(tc.reason); got != tc.want {
			t.Errorf("reason %s logged at %v, want %v", tc.reason, got, tc.want)
		}
	}
}

// TestRefusalLogRateLimited: one line per reason per refusalLogEvery; the
// next says how many were left out.
func TestRefusalLogRateLimited(t *testing.T) {
	var l refusalLimiter
	t0 := time.Unix(1_700_000_000, 0)
	if ok, _ := l.allow(refusedNotPlaced, t0); !ok {
		t.Fatal("the first refusal was not logged")
	}
	for i := range 5 {
		if ok, _ := l.allow(refusedNotPlaced, t0.Add(time.Duration(i)*time.Second)); ok {
			t.Fatalf("refusal %d within the period logged", i)
		}
	}
	if ok, _ := l.allow(refusedEventForged, t0.Add(time.Second)); !ok {
		t.Fatal("another reason's first refusal was not logged")
	}
	if ok, skipped := l.allow(refusedNotPlaced, t0.Add(refusalLogEvery)); !ok || skipped != 5 {
		t.Fatalf("after the period: logged %v, %d left out, want true, 5", ok, skipped)
	}
}
