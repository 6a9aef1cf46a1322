package vfc

import (
	"testing"
)

// TestOracle runs 10,000 random rounds (ten random settings, a thousand
// rounds each) with objects and views joining and leaving and pivots
// moving, and after every round checks, from the sends alone, that no copy
// a view holds is past its zone's bound in any dimension, that every
// object was sent, that no current copy was sent again and that removed
// objects are dropped exactly where a copy was held.
func TestOracle(t *testing.T) {
	const settings, rounds = 10, 1000
	total, sent := 0, 0
	for seed := uint64(1); seed <= settings; seed++ {
		c := seeded(seed)
		cfg := randomConfig(c, 20+c.IntN(60), false)
		h, err := newHarness(c, cfg, true, signedDiff)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		for r := 0; r < rounds; r++ {
			h.step()
			if err := h.round(true); err != nil {
				t.Fatalf("seed %d round %d: %v\nsettings: %+v", seed, r, err, cfg)
			}
			total++
		}
		sent += h.sends
	}
	if total != settings*rounds || sent == 0 {
		t.Fatalf("%d rounds, %d sends", total, sent)
	}
}

// TestOracleLargeSetting is the same check on one setting with 400
// objects and five views, where zone passes dominate.
func TestOracleLargeSetting(t *testing.T) {
	c := seeded(99)
	cfg := randomConfig(c, 400, false)
	for len(cfg.Views) < 5 {
		cfg.Views = append(cfg.Views, randomViewConfig(c, 400, len(cfg.Sets), func(ObjectID) bool { return true }))
	}
	h, err := newHarness(c, cfg, true, signedDiff)
	if err != nil {
		t.Fatal(err)
	}
	for r := 0; r < 300; r++ {
		h.step()
		if err := h.round(true); err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
	}
}
