package vfc

import (
	"math"
	"testing"
)

// rawConfig builds a configuration with no care for validity: zone lists
// in any order, bounds that may be negative, NaN or infinite, sets that may
// overlap or miss objects, pivots that may point nowhere.
func rawConfig(c chooser) Config[int32] {
	n := c.IntN(12)
	cfg := Config[int32]{Objects: n, Literal: c.IntN(2) == 0}
	bounds := []float64{0, 0.5, 1, 2, 5, -1, math.NaN(), Unbounded, math.Inf(-1)}
	for s := c.IntN(4); s > 0; s-- {
		var sc SetConfig[int32]
		for k := c.IntN(4); k > 0; k-- {
			sc.Zones = append(sc.Zones, int32(c.IntN(20))-3)
		}
		for k := c.IntN(5); k > 0; k-- {
			sc.Scale = append(sc.Scale, Vector{bounds[c.IntN(len(bounds))], bounds[c.IntN(len(bounds))], bounds[c.IntN(len(bounds))]})
		}
		for k := c.IntN(n + 3); k > 0; k-- {
			sc.Objects = append(sc.Objects, ObjectID(c.IntN(n+2)-1))
		}
		cfg.Sets = append(cfg.Sets, sc)
	}
	for v := c.IntN(3); v > 0; v-- {
		var vc ViewConfig
		for k := c.IntN(3); k > 0; k-- {
			vc.Pivots = append(vc.Pivots, ObjectID(c.IntN(n+2)-1))
		}
		cfg.Views = append(cfg.Views, vc)
	}
	return cfg
}

// FuzzRound drives the CMB with settings and writes chosen by the fuzzer:
// configurations Validate accepts must work in New and the reverse; no
// input panics; and in the corrected mode the oracle holds after every
// round (no copy past its bound, no send without cause).
func FuzzRound(f *testing.F) {
	f.Add([]byte{0})
	f.Add([]byte{1, 5, 2, 0, 3, 1, 4, 9, 9, 9, 1, 0, 2, 7, 7, 7, 3, 3})
	f.Add([]byte{0, 3, 2, 1, 1, 0, 6, 6, 2, 5, 1, 5, 3, 5, 4, 0, 0, 8, 1, 2, 9, 200, 17, 4, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1})
	f.Add([]byte("\x00\x02\x01\x00\x05\x03\x02\x01\x09\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			return
		}
		c := &byteChooser{b: data}
		var cfg Config[int32]
		if c.IntN(2) == 0 {
			cfg = randomConfig(c, 1+c.IntN(30), c.IntN(3) == 0)
		} else {
			cfg = rawConfig(c)
		}
		verr := cfg.Validate()
		h, err := newHarness(c, cfg, true, signedDiff)
		if (verr == nil) != (err == nil) {
			t.Fatalf("Validate says %v, New says %v", verr, err)
		}
		if err != nil {
			return
		}
		for r := 0; r < 40; r++ {
			h.step()
			if err := h.round(!cfg.Literal); err != nil {
				t.Fatalf("round %d: %v\nsettings %+v", r, err, cfg)
			}
		}
	})
}
