package game

import (
	"fmt"
	"testing"
)

func TestFightSeedIsOrderIndependent(t *testing.T) {
	for c := uint64(0); c < 50; c++ {
		a, b := PlayerID("12D3KooWAlice"), PlayerID("12D3KooWBob")
		if FightSeed(a, b, c) != FightSeed(b, a, c) {
			t.Fatalf("seed depends on argument order at counter %d", c)
		}
		if FightSeed(a, b, c) == FightSeed(a, b, c+1) {
			t.Fatalf("counter %d and %d give one seed", c, c+1)
		}
	}
	// Length prefixes keep ("ab","c") and ("a","bc") apart.
	if FightSeed("ab", "c", 0) == FightSeed("a", "bc", 0) {
		t.Fatal("ambiguous concatenation of IDs")
	}
}

// TestFightOutcomeRanges: results stay in range, the hit flag matches the
// damage, and the roll does not depend on which way round the sides name
// each other. (Whether two peers agree over the network, when their
// inputs may differ, is game/play's TestFightSidesAgree.)
func TestFightOutcomeRanges(t *testing.T) {
	rng := NewRand(5)
	for i := 0; i < 2000; i++ {
		a := PlayerID(fmt.Sprintf("peer-%d", rng.IntN(50)))
		b := PlayerID(fmt.Sprintf("peer-%d", 50+rng.IntN(50)))
		counter := rng.Uint64()
		sa := Fighter{Skill: int32(rng.IntN(MaxSkill) + 1), Health: int32(rng.IntN(MaxHealth) + 1)}
		sb := Fighter{Skill: int32(rng.IntN(MaxSkill) + 1), Health: int32(rng.IntN(MaxHealth) + 1)}
		r := FightOutcome(a, b, counter, sa, sb)
		if r.DefenderDamage < 0 || r.AttackerDamage < 0 || r.Roll < 0 || r.Roll > 99 {
			t.Fatalf("out-of-range result %+v", r)
		}
		if r.Hit != (r.DefenderDamage > 0) {
			t.Fatalf("hit flag and damage disagree: %+v", r)
		}
		// The random draw is the same whichever way round the sides
		// name each other: swapping roles changes only the role-dependent
		// arithmetic, never the roll.
		if swapped := FightOutcome(b, a, counter, sa, sb); swapped.Roll != r.Roll {
			t.Fatalf("roll depends on ID order: %d vs %d", swapped.Roll, r.Roll)
		}
	}
}

func TestFightSkillMatters(t *testing.T) {
	hits := func(skillA, skillD int32) (n int) {
		for c := uint64(0); c < 1000; c++ {
			if FightOutcome("a", "b", c, Fighter{skillA, MaxHealth}, Fighter{skillD, MaxHealth}).Hit {
				n++
			}
		}
		return n
	}
	strong, weak := hits(90, 10), hits(10, 90)
	if strong <= weak {
		t.Fatalf("a skilled attacker hit %d/1000, an unskilled one %d/1000", strong, weak)
	}
}
