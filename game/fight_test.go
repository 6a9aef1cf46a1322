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

// TestFightBothSidesAgree simulates the two peers of a fight: each computes
// the outcome from its own copy of the inputs (the defender receives the
// attacker's counter and stats in the request) and they compare results.
func TestFightBothSidesAgree(t *testing.T) {
	type side struct {
		self, other PlayerID
	}
	rng := NewRand(5)
	for i := 0; i < 2000; i++ {
		a := PlayerID(fmt.Sprintf("peer-%d", rng.IntN(50)))
		b := PlayerID(fmt.Sprintf("peer-%d", 50+rng.IntN(50)))
		counter := rng.Uint64()
		sa := Fighter{Skill: int32(rng.IntN(MaxSkill) + 1), Health: int32(rng.IntN(MaxHealth) + 1)}
		sb := Fighter{Skill: int32(rng.IntN(MaxSkill) + 1), Health: int32(rng.IntN(MaxHealth) + 1)}
		atAttacker := FightOutcome(a, b, counter, sa, sb)
		atDefender := FightOutcome(a, b, counter, sa, sb)
		if atAttacker != atDefender {
			t.Fatalf("sides disagree: %+v vs %+v", atAttacker, atDefender)
		}
		if atAttacker.DefenderDamage < 0 || atAttacker.AttackerDamage < 0 || atAttacker.Roll < 0 || atAttacker.Roll > 99 {
			t.Fatalf("out-of-range result %+v", atAttacker)
		}
		if atAttacker.Hit != (atAttacker.DefenderDamage > 0) {
			t.Fatalf("hit flag and damage disagree: %+v", atAttacker)
		}
		// The random draw is the same whichever way round the sides
		// name each other: swapping roles changes only the role-dependent
		// arithmetic, never the roll.
		swapped := FightOutcome(b, a, counter, sa, sb)
		if swapped.Roll != atAttacker.Roll {
			t.Fatalf("roll depends on ID order: %d vs %d", swapped.Roll, atAttacker.Roll)
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
