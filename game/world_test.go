package game

import (
	"errors"
	"testing"
)

// goldenHash is the state hash after the standard bot scenario (seed 7,
// 8 bots, 10,000 steps). It changes only when the rules, the map generator
// or the hash encoding change; update it deliberately when they do.
const goldenHash = "3b5969f836477cbf47dbeb58f83022dd6b2b155ca3aca8df2d5a7360e8703d7d"

func TestDeterminismGolden(t *testing.T) {
	w1, ev1 := runBots(t, 7, 8, 10000)
	w2, ev2 := runBots(t, 7, 8, 10000)
	if h1, h2 := hashHex(w1), hashHex(w2); h1 != h2 {
		t.Fatalf("two runs of one scenario differ: %s vs %s", h1, h2)
	}
	if len(ev1) != len(ev2) {
		t.Fatalf("event counts differ: %d vs %d", len(ev1), len(ev2))
	}
	for i := range ev1 {
		if ev1[i] != ev2[i] {
			t.Fatalf("event %d differs: %+v vs %+v", i, ev1[i], ev2[i])
		}
	}
	if got := hashHex(w1); got != goldenHash {
		t.Fatalf("state hash %s, golden %s: the rules or encoding changed", got, goldenHash)
	}
	// The scenario must exercise the rules it pins down.
	kinds := map[EventKind]int{}
	for _, e := range ev1 {
		kinds[e.Kind]++
	}
	t.Logf("events over 10,000 steps: %v", kinds)
	for _, k := range []EventKind{EventAte, EventHit, EventMissed, EventDied, EventRespawned, EventRegionChanged, EventObjectRestored, EventPickedUp} {
		if kinds[k] == 0 {
			t.Errorf("scenario produced no %s events: %v", k, kinds)
		}
	}
}

func TestDifferentSeedsDiffer(t *testing.T) {
	a, _ := runBots(t, 1, 2, 50)
	b, _ := runBots(t, 2, 2, 50)
	if hashHex(a) == hashHex(b) {
		t.Fatal("different seeds gave the same state")
	}
}

func TestCloneIsIndependent(t *testing.T) {
	w, _ := runBots(t, 3, 4, 100)
	c := w.Clone()
	if hashHex(c) != hashHex(w) {
		t.Fatal("clone hashes differently")
	}
	in := []Input{{Player: "bot-00", MoveX: 127}, {Player: "bot-01", Eat: true, PickUp: true}}
	w.Step(in)
	if hashHex(c) == hashHex(w) {
		t.Fatal("stepping the original changed the clone")
	}
	c.Step(in)
	if hashHex(c) != hashHex(w) {
		t.Fatal("clone stepped with the same input diverged")
	}
}

// newTestWorld returns a small world with one player "p".
func newTestWorld(t *testing.T) (*World, *Player) {
	t.Helper()
	w := newEmptyWorld(t)
	if _, err := w.AddPlayer("p", "Pat"); err != nil {
		t.Fatal(err)
	}
	return w, w.ref("p")
}

// ref points at a player inside the world, for tests that set up scenes by
// editing players. The pointer is good until the roster changes.
func (w *World) ref(id PlayerID) *Player {
	i, ok := w.find(id)
	if !ok {
		panic("no player " + string(id))
	}
	return &w.players[i]
}

// findWall returns a wall tile (global tile coordinates) whose west
// neighbour column has three open tiles around the same row, so a player
// can walk east into it.
func findWallEast(t *testing.T, w *World) (int32, int32) {
	t.Helper()
	n := int32(w.cfg.RegionTiles) * int32(w.cfg.RegionsX)
	for ty := int32(3); ty < n-3; ty++ {
		for tx := int32(3); tx < n-3; tx++ {
			if !w.tileAt(tx, ty).Blocks() {
				continue
			}
			ok := true
			for dy := int32(-1); dy <= 1; dy++ {
				for dx := int32(-2); dx <= -1; dx++ {
					if w.tileAt(tx+dx, ty+dy).Blocks() {
						ok = false
					}
				}
			}
			if ok {
				return tx, ty
			}
		}
	}
	t.Fatal("no suitable wall in the map")
	return 0, 0
}

func TestWallStopsMovementFlush(t *testing.T) {
	w, p := newTestWorld(t)
	tx, ty := findWallEast(t, w)
	p.Pos = Vec{(tx-2)*TileUnits + TileUnits/2, ty*TileUnits + TileUnits/2}
	for i := 0; i < 60; i++ {
		w.Step([]Input{{Player: "p", MoveX: 127}})
		if !w.boxFree(p.Pos) {
			t.Fatalf("step %d: player at %+v overlaps a wall", i, p.Pos)
		}
	}
	want := tx*TileUnits - 1 - w.cfg.PlayerRadius
	if p.Pos.X != want {
		t.Fatalf("player stopped at x=%d, want flush against the wall at %d", p.Pos.X, want)
	}
	if p.Vel.X != 0 {
		t.Fatalf("velocity against the wall is %d, want 0", p.Vel.X)
	}
}

func TestWallSlidesDiagonalMove(t *testing.T) {
	w, p := newTestWorld(t)
	tx, ty := findWallEast(t, w)
	p.Pos = Vec{tx*TileUnits - 1 - w.cfg.PlayerRadius, ty*TileUnits + TileUnits/2}
	before := p.Pos
	// Push north-east: x is blocked, y must still move (slide).
	w.Step([]Input{{Player: "p", MoveX: 127, MoveY: -127}})
	if p.Pos.X != before.X {
		t.Fatalf("x moved into the wall: %d -> %d", before.X, p.Pos.X)
	}
	if p.Pos.Y >= before.Y {
		t.Fatalf("did not slide along the wall: y %d -> %d", before.Y, p.Pos.Y)
	}
}

func TestWorldEdgeIsClosed(t *testing.T) {
	w, p := newTestWorld(t)
	for i := 0; i < 3000; i++ {
		w.Step([]Input{{Player: "p", MoveX: -127, MoveY: -127}})
	}
	if p.Pos.X < TileUnits || p.Pos.Y < TileUnits || !w.boxFree(p.Pos) {
		t.Fatalf("player left the world or entered a wall: %+v", p.Pos)
	}
}

func TestSpeedLimitForEveryInput(t *testing.T) {
	cfg := DefaultConfig()
	limit := int64(cfg.MaxSpeed) * int64(cfg.MaxSpeed)
	for x := -128; x <= 127; x++ {
		for y := -128; y <= 127; y++ {
			v := WantedVelocity(cfg, int8(x), int8(y))
			if v.LenSq() > limit {
				t.Fatalf("input (%d,%d) asks for velocity %+v beyond max speed %d", x, y, v, cfg.MaxSpeed)
			}
		}
	}
	// And in the world, under random inputs, no step moves a player
	// further than the limit or into a wall.
	w, _ := newTestWorld(t)
	for i := 0; i < 4; i++ {
		w.AddPlayer(PlayerID(rune('a'+i)), "x")
	}
	rng := NewRand(99)
	for s := 0; s < 3000; s++ {
		before := w.Players()
		var in []Input
		for _, p := range before {
			in = append(in, Input{Player: p.ID, MoveX: int8(rng.IntN(256) - 128), MoveY: int8(rng.IntN(256) - 128)})
		}
		w.Step(in)
		for i, p := range w.Players() {
			if !p.Alive || !before[i].Alive {
				continue
			}
			if d := DistSq(before[i].Pos, p.Pos); d > limit {
				t.Fatalf("step %d: %s moved %d units², limit %d", s, p.ID, d, limit)
			}
			if !w.boxFree(p.Pos) {
				t.Fatalf("step %d: %s inside a wall at %+v", s, p.ID, p.Pos)
			}
		}
	}
}

func TestClampLen(t *testing.T) {
	for _, v := range []Vec{{1000, 0}, {-1000, 1}, {700, 700}, {-35, 35}, {1 << 30, -(1 << 30)}, {3, 4}} {
		for _, m := range []int32{1, 5, 34, 100} {
			got := ClampLen(v, m)
			if got.LenSq() > int64(m)*int64(m) {
				t.Errorf("ClampLen(%+v, %d) = %+v, too long", v, m, got)
			}
			if v.LenSq() <= int64(m)*int64(m) && got != v {
				t.Errorf("ClampLen(%+v, %d) = %+v, changed a short vector", v, m, got)
			}
			if sign32(got.X) != 0 && sign32(got.X) != sign32(v.X) || sign32(got.Y) != 0 && sign32(got.Y) != sign32(v.Y) {
				t.Errorf("ClampLen(%+v, %d) = %+v flipped a sign", v, m, got)
			}
		}
	}
}

func TestISqrt(t *testing.T) {
	for _, n := range []uint64{0, 1, 2, 3, 4, 15, 16, 17, 1 << 40, 1<<62 + 12345, ^uint64(0)} {
		r := ISqrt(n)
		if r*r > n || (r+1)*(r+1) <= n && r+1 != 1<<32 {
			t.Errorf("ISqrt(%d) = %d", n, r)
		}
	}
}

func TestCrossingRegionBorder(t *testing.T) {
	w, p := newTestWorld(t)
	ru := w.cfg.RegionUnits()
	// Start in region (0,0) inside the open band, two tiles from the east
	// border, and walk east.
	p.Pos = Vec{ru - 2*TileUnits, 2*TileUnits + TileUnits/2}
	var changed *Event
	for i := 0; i < 60 && changed == nil; i++ {
		for _, e := range w.Step([]Input{{Player: "p", MoveX: 127}}) {
			if e.Kind == EventRegionChanged {
				changed = &e
			}
		}
	}
	if changed == nil {
		t.Fatal("no region change after walking across the border")
	}
	if changed.From != (RegionCoord{0, 0}) || changed.To != (RegionCoord{1, 0}) {
		t.Fatalf("region change %v -> %v, want 0,0 -> 1,0", changed.From, changed.To)
	}
	if got := w.RegionOf(p.Pos); got != (RegionCoord{1, 0}) {
		t.Fatalf("player now in %v", got)
	}
}

func TestRegionOf(t *testing.T) {
	cfg := DefaultConfig()
	ru := cfg.RegionUnits()
	cases := []struct {
		p    Vec
		want RegionCoord
	}{
		{Vec{0, 0}, RegionCoord{0, 0}},
		{Vec{ru - 1, ru - 1}, RegionCoord{0, 0}},
		{Vec{ru, 0}, RegionCoord{1, 0}},
		{Vec{3*ru + 5, 7*ru + 1}, RegionCoord{3, 7}},
		{Vec{-5, -5}, RegionCoord{0, 0}},
		{Vec{100 * ru, 100 * ru}, RegionCoord{7, 7}},
	}
	for _, c := range cases {
		if got := RegionOf(cfg, c.p); got != c.want {
			t.Errorf("RegionOf(%+v) = %v, want %v", c.p, got, c.want)
		}
	}
}

// placeNextTo puts the player on the object's tile centre.
func placeNextTo(w *World, p *Player, kind ObjectKind) ObjectEntry {
	for _, e := range w.Objects(w.RegionOf(p.Pos)) {
		if e.Object.Kind == kind {
			p.Pos = e.Pos
			return e
		}
	}
	panic("no object of kind")
}

func TestEatInWorld(t *testing.T) {
	w, p := newTestWorld(t)
	p.Hunger = 60
	food := placeNextTo(w, p, ObjectFood)
	ev := w.Step([]Input{{Player: "p", Eat: true}})
	if len(ev) != 1 || ev[0].Kind != EventAte || ev[0].Object != food.ID {
		t.Fatalf("events %+v, want one meal of %s", ev, food.ID)
	}
	if p.Hunger != 40 || p.Score != 1 {
		t.Fatalf("hunger %d score %d after a meal, want 40 and 1", p.Hunger, p.Score)
	}
	now, _ := w.objects.Get(food.ID)
	if now.Version != food.Version+1 || now.Object.Amount != food.Object.Amount-1 {
		t.Fatalf("food %+v after a meal, was %+v", now, food.VersionedObject)
	}
	// Cooldown: an immediate second eat does nothing.
	if ev := w.Step([]Input{{Player: "p", Eat: true}}); len(ev) != 0 {
		t.Fatalf("second eat inside the cooldown produced %+v", ev)
	}
	// Eat it empty; it regrows after FoodRegrowTicks.
	for i := 0; i < 400 && now.Object.Amount > 0; i++ {
		w.Step([]Input{{Player: "p", Eat: true}})
		now, _ = w.objects.Get(food.ID)
	}
	if now.Object.Amount != 0 || now.Object.RegrowAt == 0 {
		t.Fatalf("food not exhausted: %+v", now)
	}
	for w.tick < now.Object.RegrowAt {
		w.Step(nil)
	}
	if again, _ := w.objects.Get(food.ID); again.Object.Amount != again.Object.Max {
		t.Fatalf("food did not regrow: %+v", again)
	}
}

func TestHealthPack(t *testing.T) {
	w, p := newTestWorld(t)
	pack := placeNextTo(w, p, ObjectHealthPack)
	if ev := w.Step([]Input{{Player: "p", PickUp: true}}); len(ev) != 0 {
		t.Fatalf("took a pack at full health: %+v", ev)
	}
	p.Health = 30
	ev := w.Step([]Input{{Player: "p", PickUp: true}})
	if len(ev) != 1 || ev[0].Kind != EventPickedUp || ev[0].Object != pack.ID {
		t.Fatalf("events %+v, want a pick-up of %s", ev, pack.ID)
	}
	if p.Health != 70 {
		t.Fatalf("health %d after a 40-point pack from 30", p.Health)
	}
	if ev := w.Step([]Input{{Player: "p", PickUp: true}}); len(ev) != 0 {
		t.Fatalf("took a pack twice: %+v", ev)
	}
}

func TestStarvationDeathAndRespawn(t *testing.T) {
	w, p := newTestWorld(t)
	p.Hunger, p.Health = MaxHunger, 3
	rc := w.RegionOf(p.Pos)
	var died, respawned bool
	for i := 0; i < 1000 && !respawned; i++ {
		for _, e := range w.Step(nil) {
			switch e.Kind {
			case EventDied:
				died = true
				if p.Alive || p.Health != 0 || p.Deaths != 1 {
					t.Fatalf("after death: %+v", *p)
				}
			case EventRespawned:
				respawned = true
			}
		}
	}
	if !died || !respawned {
		t.Fatalf("died=%v respawned=%v", died, respawned)
	}
	if want := w.SpawnPoint("p", rc, 1); p.Pos != want {
		t.Fatalf("respawned at %+v, want deterministic spawn %+v", p.Pos, want)
	}
	if p.Health != MaxHealth || p.Hunger != 0 || !p.Alive {
		t.Fatalf("respawned state %+v", *p)
	}
}

func TestHungerRises(t *testing.T) {
	w, p := newTestWorld(t)
	for i := uint64(0); i < 10*w.cfg.HungerTicks; i++ {
		w.Step(nil)
	}
	if p.Hunger != 10 {
		t.Fatalf("hunger %d after 10 intervals, want 10", p.Hunger)
	}
}

func TestFightInWorld(t *testing.T) {
	w, p := newTestWorld(t)
	if _, err := w.AddPlayer("q", "Quinn"); err != nil {
		t.Fatal(err)
	}
	p, q := w.ref("p"), w.ref("q")
	q.Pos = p.Pos
	kills := 0
	for i := 0; i < 2000 && kills == 0; i++ {
		for _, e := range w.Step([]Input{{Player: "p", Fight: true}}) {
			if e.Kind == EventDied {
				kills++
				if e.Player != "q" || e.Other != "p" {
					t.Fatalf("death event %+v, want q killed by p", e)
				}
			}
		}
		q.Pos = p.Pos // keep q in range (q respawns elsewhere)
		p.Health = MaxHealth
	}
	if kills == 0 {
		t.Fatal("200 seconds of attacks never killed the target")
	}
	if p.Score < 10 || p.Skill != 11 {
		t.Fatalf("killer score %d skill %d, want ≥10 and 11", p.Score, p.Skill)
	}
}

func TestAddPlayerValidation(t *testing.T) {
	w, _ := newTestWorld(t)
	if _, err := w.AddPlayer("p", "Again"); err == nil {
		t.Error("added a duplicate player")
	}
	if _, err := w.AddPlayer("", "x"); err == nil {
		t.Error("added an empty ID")
	}
	if _, err := w.AddPlayer("z", "bad\x00name"); err == nil {
		t.Error("added a name with a control character")
	}
	if !w.RemovePlayer("p") || w.RemovePlayer("p") {
		t.Error("RemovePlayer did not report presence correctly")
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := DefaultConfig()
	bad.MaxSpeed = TileUnits
	if err := bad.Validate(); err == nil {
		t.Error("accepted a speed that can skip walls")
	}
	bad = DefaultConfig()
	bad.RegionsX = 0
	if _, err := NewWorld(bad); err == nil {
		t.Error("accepted an empty world")
	}
}

func TestObjectTableSetKeepsNewest(t *testing.T) {
	tab := NewObjectTable()
	id := ObjectID{RegionCoord{1, 2}, 0}
	o := Object{Kind: ObjectFood, Amount: 2, Max: 5}
	if !tab.Set(id, VersionedObject{Version: 3, Object: o}) {
		t.Fatal("first Set refused")
	}
	if tab.Set(id, VersionedObject{Version: 2, Object: o}) {
		t.Fatal("older version overwrote a newer one")
	}
	if _, err := tab.ReadWrite(ObjectID{RegionCoord{9, 9}, 0}, 0, o); !errors.Is(err, ErrUnknownObject) {
		t.Fatalf("update of unknown object: %v", err)
	}
}
