package vfc

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

// cmbV1 is figure 7, CMB version 1: every object written since the last
// round goes to every client. D starts at 1 (the setup transfer).
type cmbV1 struct{ d []bool }

func (c *cmbV1) update(o ObjectID) { c.d[o] = true }

func (c *cmbV1) round() []ObjectID {
	var u []ObjectID
	for o, d := range c.d {
		if d {
			u = append(u, ObjectID(o))
			c.d[o] = false
		}
	}
	return u
}

// cmbV2 is figure 8, CMB version 2: one vector κ for every client, state
// per object. gated adds our correction: the time bound applies only to a
// copy an update has made stale.
type cmbV2 struct {
	k      Vector
	gated  bool
	d      []bool
	sTheta []time.Duration
	sSigma []int
	sNu    []int64
}

func newV2(n int, k Vector, gated bool) *cmbV2 {
	c := &cmbV2{k: k, gated: gated, d: make([]bool, n), sTheta: make([]time.Duration, n), sSigma: make([]int, n), sNu: make([]int64, n)}
	for o := range c.d {
		c.d[o] = true
	}
	return c
}

func (c *cmbV2) update(o ObjectID, v int64) {
	c.sSigma[o]++ // line 1
	if float64(c.sSigma[o]) >= c.k.Sequence || math.Abs(float64(v-c.sNu[o])) >= c.k.Value {
		c.d[o] = true // lines 2-4
	}
}

func (c *cmbV2) round(t time.Duration, val []int64) []ObjectID {
	var u []ObjectID
	for o := range c.d {
		td := t - c.sTheta[o] // line 4
		timeUp := float64(td) >= math.Ceil(c.k.Time*float64(time.Second)) && (!c.gated || c.sSigma[o] > 0)
		if c.d[o] || timeUp { // line 5
			u = append(u, ObjectID(o))
			c.d[o] = false
			c.sTheta[o], c.sSigma[o], c.sNu[o] = t, 0, val[o]
		}
	}
	return u
}

// TestAllSequenceOneIsVersion1: with every zone at [., 1, .] the CMB sends
// each view exactly the objects written since the last round, as figure 7
// does, round for round, in both modes and whatever the zones and pivots.
func TestAllSequenceOneIsVersion1(t *testing.T) {
	for _, literal := range []bool{false, true} {
		for seed := uint64(1); seed <= 8; seed++ {
			t.Run(fmt.Sprintf("literal=%v/seed=%d", literal, seed), func(t *testing.T) {
				c := seeded(seed)
				cfg := randomConfig(c, 30+c.IntN(40), literal)
				for s := range cfg.Sets {
					for z := range cfg.Sets[s].Scale {
						cfg.Sets[s].Scale[z] = MustParseVector("[., 1, .]")
					}
				}
				h, err := newHarness(c, cfg, false, signedDiff)
				if err != nil {
					t.Fatal(err)
				}
				ref := &cmbV1{d: make([]bool, cfg.Objects)}
				for o := range ref.d {
					ref.d[o] = true
				}
				h.onWrite = func(o ObjectID, _ int64) { ref.update(o) }
				for r := 0; r < 300; r++ {
					h.step()
					if err := h.round(false); err != nil {
						t.Fatal(err)
					}
					want := ref.round()
					for _, sv := range h.views {
						if got := h.m.Sends(sv.id); !slices.Equal(got, want) {
							t.Fatalf("round %d view %d: sent %v, version 1 sends %v", r, sv.id, got, want)
						}
					}
				}
			})
		}
	}
}

// TestOneGlobalVectorIsVersion2: with one zone (one global κ) every view
// gets what figure 8 sends, round for round: exactly in Literal mode, and
// in the corrected mode once figure 8 too skips unchanged objects at their
// time bound (and exactly when there is no time bound).
func TestOneGlobalVectorIsVersion2(t *testing.T) {
	absDiff := func(sent, cur int64) float64 { return math.Abs(float64(cur - sent)) }
	cases := []struct {
		name    string
		literal bool
		gated   bool
		diff    func(sent, cur int64) float64
		noTime  bool
	}{
		{"literal", true, false, absDiff, false},
		{"corrected", false, true, signedDiff, false},
		{"corrected without time bound", false, false, signedDiff, true},
	}
	for _, tc := range cases {
		for seed := uint64(1); seed <= 12; seed++ {
			t.Run(fmt.Sprintf("%s/seed=%d", tc.name, seed), func(t *testing.T) {
				c := seeded(seed)
				n := 20 + c.IntN(40)
				k := randomScale(c, 1)[0]
				if tc.noTime {
					k.Time = Unbounded
				}
				cfg := Config[int32]{
					Objects: n,
					Literal: tc.literal,
					Sets:    []SetConfig[int32]{{Objects: allObjects(n), Scale: []Vector{k}}},
				}
				for v := 0; v < 3; v++ {
					cfg.Views = append(cfg.Views, randomViewConfig(c, n, 1, func(ObjectID) bool { return true }))
				}
				h, err := newHarness(c, cfg, false, tc.diff)
				if err != nil {
					t.Fatal(err)
				}
				ref := newV2(n, k, tc.gated)
				h.onWrite = ref.update
				for r := 0; r < 300; r++ {
					h.step()
					if err := h.round(false); err != nil {
						t.Fatal(err)
					}
					want := ref.round(h.now, h.val)
					for _, sv := range h.views {
						if got := h.m.Sends(sv.id); !slices.Equal(got, want) {
							t.Fatalf("κ = %v, round %d at %v, view %d: sent %v, version 2 sends %v", k, r, h.now, sv.id, got, want)
						}
					}
				}
			})
		}
	}
}

// twoZones is one set, pivot object 0, Z = [2], C = ⟨[., 1, .], κM⟩:
// object 1 is sent on every write within 2 of the pivot and never beyond.
func twoZones(literal bool, inner Vector) Config[int32] {
	return Config[int32]{
		Objects: 2,
		Literal: literal,
		Sets:    []SetConfig[int32]{{Objects: allObjects(2), Zones: []int32{2}, Scale: []Vector{inner, Weakest}}},
		Views:   []ViewConfig{{Pivots: []ObjectID{0}}},
	}
}

func mustRound(t *testing.T, m *CMB[int32, int], at time.Duration) []ObjectID {
	t.Helper()
	if err := m.Round(at); err != nil {
		t.Fatal(err)
	}
	return slices.Clone(m.Sends(0))
}

// TestZonesApplyInTheirOwnRound shows the lag figure 9 has and the
// corrected mode removes: a far object written and moved next to the pivot
// in one round is sent in that round, not the next.
func TestZonesApplyInTheirOwnRound(t *testing.T) {
	for _, literal := range []bool{false, true} {
		m, err := New[int32, int](twoZones(literal, MustParseVector("[., 1, .]")), nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = m.Update(1, pt(50, 0), 0)
		mustRound(t, m, 0) // the setup transfer
		_ = m.Update(1, pt(1, 0), 1)
		got := mustRound(t, m, time.Second)
		if literal {
			if len(got) != 0 {
				t.Errorf("literal: sent %v in the round the object came close; figure 9 uses last round's zone", got)
			}
			// The next write is judged with the new zone.
			_ = m.Update(1, pt(1, 0), 2)
			if got := mustRound(t, m, 2*time.Second); !slices.Equal(got, []ObjectID{1}) {
				t.Errorf("literal, a round later: sent %v, want [1]", got)
			}
		} else if !slices.Equal(got, []ObjectID{1}) {
			t.Errorf("corrected: sent %v in the round the object came close, want [1]", got)
		}
	}
}

// TestValueDifferenceIsAbsolute: figure 8 tests |ν(u) − Sν| ≥ κν; figure 9
// prints ν(u) − Sν, so a value falling far below the one sent never
// triggers. The corrected mode takes the absolute value.
func TestValueDifferenceIsAbsolute(t *testing.T) {
	for _, literal := range []bool{false, true} {
		m, err := New[int32, int](twoZones(literal, MustParseVector("[., ., 10]")), func(sent, cur int) float64 { return float64(cur - sent) })
		if err != nil {
			t.Fatal(err)
		}
		_ = m.Update(1, pt(1, 0), 100)
		mustRound(t, m, 0)
		_ = m.Update(1, pt(1, 0), 60) // 40 below what the view holds
		got := mustRound(t, m, time.Second)
		if literal && len(got) != 0 {
			t.Errorf("literal: a drop of 40 against κν = 10 sent %v; figure 9's signed test never fires on drops", got)
		}
		if !literal && !slices.Equal(got, []ObjectID{1}) {
			t.Errorf("corrected: a drop of 40 against κν = 10 sent %v, want [1]", got)
		}
	}
}

// TestUnchangedObjectsAreNotResent: with κθ = 0.5 s figure 9 resends an
// object every half second though nobody wrote it; the corrected mode
// sends it again only after a write, then within the time bound.
func TestUnchangedObjectsAreNotResent(t *testing.T) {
	for _, literal := range []bool{false, true} {
		m, err := New[int32, int](twoZones(literal, MustParseVector("[0.5, 5, .]")), nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = m.Update(1, pt(1, 0), 1)
		mustRound(t, m, 0)
		sends := 0
		for r := 1; r <= 20; r++ {
			sends += len(mustRound(t, m, time.Duration(r)*100*time.Millisecond))
		}
		if literal && sends != 2*4 {
			t.Errorf("literal: %d sends of two unchanged objects in 2 s with κθ = 0.5 s, want 8", sends)
		}
		if !literal && sends != 0 {
			t.Errorf("corrected: %d sends of unchanged objects", sends)
		}
		// One write at 2.05 s: stale from then; the last send was at 0 (or
		// 2 s in literal mode), so the time bound is already past.
		_ = m.Update(1, pt(1, 0), 2)
		got := mustRound(t, m, 2100*time.Millisecond)
		if !literal && !slices.Equal(got, []ObjectID{1}) {
			t.Errorf("corrected: a write 2 s after the last send went out as %v, want [1] at once", got)
		}
		if literal && len(got) != 0 {
			t.Errorf("literal: sent %v 0.1 s after the last periodic send", got)
		}
	}
}

// TestDropsOnlyWhereACopyWasHeld: removing an object reports it to the
// views that were sent it, and its ID returns only after that round.
func TestDropsOnlyWhereACopyWasHeld(t *testing.T) {
	m, err := New[int32, int](twoZones(false, MustParseVector("[., 1, .]")), nil)
	if err != nil {
		t.Fatal(err)
	}
	mustRound(t, m, 0)
	late, err := m.AddView(ViewConfig{Name: "late", Pivots: []ObjectID{0}})
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := m.AddObject(0, pt(1, 1), 7)
	if err != nil || fresh != 2 {
		t.Fatalf("AddObject = %d, %v", fresh, err)
	}
	if err := m.RemoveObject(1); err != nil {
		t.Fatal(err)
	}
	if again, _ := m.AddObject(0, pt(0, 0), 0); again == 1 {
		t.Fatal("object 1 reused before its drop went out")
	}
	if err := m.Round(time.Second); err != nil {
		t.Fatal(err)
	}
	if got := m.Drops(0); !slices.Equal(got, []ObjectID{1}) {
		t.Errorf("view 0 drops %v, want [1]", got)
	}
	if got := m.Drops(late); len(got) != 0 {
		t.Errorf("late view, never sent object 1, drops %v", got)
	}
	if got := m.Sends(late); !slices.Equal(got, []ObjectID{0, 2, 3}) {
		t.Errorf("late view sends %v, want [0 2 3]", got)
	}
	if o, _ := m.AddObject(0, pt(0, 0), 0); o != 1 {
		t.Errorf("after the drop round the free ID 1 should be reused, got %d", o)
	}
}
