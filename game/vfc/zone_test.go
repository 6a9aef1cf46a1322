package vfc

import (
	"math"
	"testing"
)

// pt is a shorthand for positions in tests.
func pt(x, y int32) Point[int32] { return Point[int32]{x, y} }

// placed builds a CMB over int32 positions with the given settings, puts
// each object at its position and runs one round, so Copy reports zones.
func placed(t *testing.T, cfg Config[int32], at map[ObjectID]Point[int32]) *CMB[int32, int] {
	t.Helper()
	m, err := New[int32, int](cfg, func(sent, cur int) float64 { return float64(cur - sent) })
	if err != nil {
		t.Fatal(err)
	}
	for o := ObjectID(0); int(o) < cfg.Objects; o++ {
		if err := m.Update(o, at[o], 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Round(0); err != nil {
		t.Fatal(err)
	}
	return m
}

func zoneIn(t *testing.T, m *CMB[int32, int], v ViewID, o ObjectID) int {
	t.Helper()
	c, ok := m.Copy(v, o)
	if !ok {
		t.Fatalf("no copy of object %d in view %d", o, v)
	}
	if z, _ := m.ZoneOf(v, o); z != c.Zone {
		t.Fatalf("object %d in view %d: round put it in zone %d, positions say %d", o, v, c.Zone, z)
	}
	return c.Zone
}

func allObjects(n int) []ObjectID {
	out := make([]ObjectID, n)
	for i := range out {
		out[i] = ObjectID(i)
	}
	return out
}

// fig5Scale is the example scale of §2.3: ⟨κm, [.,1,.], [.,2,.], κM⟩.
var fig5Scale = []Vector{Strongest, MustParseVector("[., 1, .]"), MustParseVector("[., 2, .]"), Weakest}

// TestFigure1bZones places five objects around pivot o5 with Z = [1, 2, 3]
// so that, as figure 1.b reads [S §2.1], {o1, o5} fall in z1, {o2, o3} in
// z2 and o4 in z3. Objects are numbered from 0 here: o1 is object 0.
func TestFigure1bZones(t *testing.T) {
	const o1, o2, o3, o4, o5 = 0, 1, 2, 3, 4
	cfg := Config[int32]{
		Objects: 5,
		Sets:    []SetConfig[int32]{{Objects: allObjects(5), Zones: []int32{1, 2, 3}, Scale: fig5Scale}},
		Views:   []ViewConfig{{Name: "P", Pivots: []ObjectID{o5}}},
	}
	m := placed(t, cfg, map[ObjectID]Point[int32]{
		o5: pt(10, 10), // the pivot
		o1: pt(11, 9),  // diagonal neighbour: z = 1
		o2: pt(12, 10), // two along x: z = 2
		o3: pt(9, 12),  // one along x, two along y: z = max = 2
		o4: pt(13, 8),  // three along x: z = 3
	})
	want := map[ObjectID]int{o1: 0, o5: 0, o2: 1, o3: 1, o4: 2}
	for o, z := range want {
		if got := zoneIn(t, m, 0, o); got != z {
			t.Errorf("o%d: zone z%d, want z%d", o+1, got+1, z+1)
		}
	}
}

// TestFigure2TwoViews is figure 2 and the §2.3 summary: one set, Z = [1, 2,
// 3], C = ⟨κm, [.,1,.], [.,2,.], κM⟩, V = {A → {o6}, B → {o5}}; o2 is in z2
// of A and z4 of B, so its consistency is stronger in A.
func TestFigure2TwoViews(t *testing.T) {
	const o1, o2, o3, o4, o5, o6 = 0, 1, 2, 3, 4, 5
	cfg := Config[int32]{
		Objects: 6,
		Sets:    []SetConfig[int32]{{Objects: allObjects(6), Zones: []int32{1, 2, 3}, Scale: fig5Scale}},
		Views:   []ViewConfig{{Name: "A", Pivots: []ObjectID{o6}}, {Name: "B", Pivots: []ObjectID{o5}}},
	}
	m := placed(t, cfg, map[ObjectID]Point[int32]{
		o6: pt(0, 0), o5: pt(6, 0),
		o2: pt(-2, 1), // 2 from P_A, 8 from P_B
		o1: pt(1, 1), o3: pt(4, -1), o4: pt(3, 3),
	})
	const A, B = 0, 1
	cases := []struct {
		view ViewID
		o    ObjectID
		zone int
	}{
		{A, o2, 1}, {B, o2, 3},
		{A, o6, 0}, {B, o5, 0},
		{A, o1, 0}, {B, o1, 3},
		{A, o3, 3}, {B, o3, 1},
		{A, o4, 2}, {B, o4, 2},
		{A, o5, 3}, {B, o6, 3},
	}
	for _, c := range cases {
		if got := zoneIn(t, m, c.view, c.o); got != c.zone {
			t.Errorf("view %c, o%d: zone z%d, want z%d", 'A'+c.view, c.o+1, got+1, c.zone+1)
		}
	}
	if a, b := m.Bound(0, zoneIn(t, m, A, o2)), m.Bound(0, zoneIn(t, m, B, o2)); strongerDimension(a, b) != "" || a == b {
		t.Errorf("o2 is bound by %v in A and %v in B: A should be stronger", a, b)
	}
}

// TestZoneEdges: an object exactly λ away is inside the zone λ bounds; one
// unit further it is in the next [S §3.2: s1 < z ≤ s2].
func TestZoneEdges(t *testing.T) {
	zones := []int32{0, 10, 20}
	scale := []Vector{Strongest, V(1, 1, Unbounded), V(2, 4, Unbounded), Weakest}
	cases := []struct {
		name string
		at   Point[int32]
		zone int
	}{
		{"on the pivot", pt(0, 0), 0},
		{"one past λ1 = 0", pt(1, 0), 1},
		{"at λ2 on x", pt(10, 3), 1},
		{"at λ2 on -y", pt(-4, -10), 1},
		{"at λ2 diagonally", pt(10, -10), 1},
		{"one past λ2", pt(11, 0), 2},
		{"one past λ2 on -x", pt(-11, 10), 2},
		{"at λ3", pt(20, 20), 2},
		{"one past λ3", pt(0, 21), 3},
		{"far out", pt(math.MaxInt32, math.MinInt32), 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config[int32]{
				Objects: 2,
				Sets:    []SetConfig[int32]{{Objects: allObjects(2), Zones: zones, Scale: scale}},
				Views:   []ViewConfig{{Pivots: []ObjectID{0}}},
			}
			m := placed(t, cfg, map[ObjectID]Point[int32]{0: pt(0, 0), 1: c.at})
			if got := zoneIn(t, m, 0, 1); got != c.zone {
				t.Errorf("object at %v: zone %d, want %d", c.at, got, c.zone)
			}
		})
	}
}

// TestZoneExtremeCoordinates: distances across the whole int64 range do
// not overflow into a near zone.
func TestZoneExtremeCoordinates(t *testing.T) {
	cfg := Config[int64]{
		Objects: 3,
		Sets:    []SetConfig[int64]{{Objects: allObjects(3), Zones: []int64{5}, Scale: []Vector{Strongest, Weakest}}},
		Views:   []ViewConfig{{Pivots: []ObjectID{0}}},
	}
	m, err := New[int64, int](cfg, func(sent, cur int) float64 { return float64(cur - sent) })
	if err != nil {
		t.Fatal(err)
	}
	_ = m.Update(0, Point[int64]{math.MinInt64, math.MinInt64}, 0)
	_ = m.Update(1, Point[int64]{math.MaxInt64, math.MinInt64}, 0)
	_ = m.Update(2, Point[int64]{math.MinInt64 + 5, math.MinInt64 + 2}, 0)
	if err := m.Round(0); err != nil {
		t.Fatal(err)
	}
	if c, _ := m.Copy(0, 1); c.Zone != 1 {
		t.Errorf("object 2^64-1 away: zone %d, want the outer zone 1", c.Zone)
	}
	if c, _ := m.Copy(0, 2); c.Zone != 0 {
		t.Errorf("object 5 away near MinInt64: zone %d, want 0", c.Zone)
	}
	if d := Chebyshev(Point[int64]{math.MinInt64, 0}, Point[int64]{math.MaxInt64, 0}); d != math.MaxUint64 {
		t.Errorf("Chebyshev across int64 = %d, want %d", d, uint64(math.MaxUint64))
	}
}

// TestClosestPivotWins is the multi-pivot generalization [S §2.3, fig 3]:
// the pivot nearest the object decides its zone, whichever is listed first.
func TestClosestPivotWins(t *testing.T) {
	zones := []int32{2, 8}
	scale := []Vector{Strongest, V(1, 2, Unbounded), Weakest}
	cases := []struct {
		name   string
		pivots []Point[int32]
		at     Point[int32]
		zone   int
	}{
		{"near the second pivot", []Point[int32]{pt(0, 0), pt(100, 0)}, pt(98, 1), 0},
		{"near the first pivot", []Point[int32]{pt(0, 0), pt(100, 0)}, pt(-2, 2), 0},
		{"between, closer to the second", []Point[int32]{pt(0, 0), pt(20, 0)}, pt(13, 0), 1},
		{"out of both", []Point[int32]{pt(0, 0), pt(20, 0)}, pt(10, 30), 2},
		{"third of three pivots", []Point[int32]{pt(0, 0), pt(50, 50), pt(-50, 50)}, pt(-47, 55), 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := len(c.pivots) + 1
			var pivots []ObjectID
			at := map[ObjectID]Point[int32]{}
			for i, p := range c.pivots {
				pivots = append(pivots, ObjectID(i))
				at[ObjectID(i)] = p
			}
			obj := ObjectID(len(c.pivots))
			at[obj] = c.at
			cfg := Config[int32]{
				Objects: n,
				Sets:    []SetConfig[int32]{{Objects: allObjects(n), Zones: zones, Scale: scale}},
				Views:   []ViewConfig{{Pivots: pivots}},
			}
			m := placed(t, cfg, at)
			if got := zoneIn(t, m, 0, obj); got != c.zone {
				t.Errorf("object at %v with pivots %v: zone %d, want %d", c.at, c.pivots, got, c.zone)
			}
		})
	}
}

// TestObjectSetsOwnZonesAndPivots is the multi-zone generalization [S
// §2.3, fig 4]: each set draws its own zones around its own pivots.
func TestObjectSetsOwnZonesAndPivots(t *testing.T) {
	cfg := Config[int32]{
		Objects: 4,
		Sets: []SetConfig[int32]{
			{Name: "ghosts", Objects: []ObjectID{0, 1}, Zones: []int32{3}, Scale: []Vector{Strongest, Weakest}},
			{Name: "rooms", Objects: []ObjectID{2, 3}, Zones: []int32{10}, Scale: []Vector{V(1, 1, Unbounded), Weakest}},
		},
		Views: []ViewConfig{{SetPivots: [][]ObjectID{{0}, {2}}}},
	}
	m := placed(t, cfg, map[ObjectID]Point[int32]{0: pt(0, 0), 1: pt(5, 0), 2: pt(100, 0), 3: pt(105, 0)})
	if z := zoneIn(t, m, 0, 1); z != 1 {
		t.Errorf("ghost 5 from its pivot with Z=[3]: zone %d, want 1", z)
	}
	if z := zoneIn(t, m, 0, 3); z != 0 {
		t.Errorf("room 5 from its pivot with Z=[10]: zone %d, want 0", z)
	}
}

// TestNoPivotIsOutermost: a view without pivots sees every object in the
// outermost zone.
func TestNoPivotIsOutermost(t *testing.T) {
	cfg := Config[int32]{
		Objects: 2,
		Sets:    []SetConfig[int32]{{Objects: allObjects(2), Zones: []int32{1, 5}, Scale: []Vector{Strongest, V(1, 1, 1), Weakest}}},
		Views:   []ViewConfig{{Name: "spectator"}},
	}
	m := placed(t, cfg, nil)
	for o := ObjectID(0); o < 2; o++ {
		if z := zoneIn(t, m, 0, o); z != 2 {
			t.Errorf("object %d without pivots: zone %d, want 2", o, z)
		}
	}
}
