package game

import (
	"fmt"
	"testing"
)

func TestCopyFromIsExactAndIsolated(t *testing.T) {
	w, _ := runBots(t, 3, 6, 300)
	c := newEmptyWorld(t) // another config: CopyFrom takes src's
	c.CopyFrom(w)
	if c.Hash() != w.Hash() || c.Config() != w.Config() || c.Tick() != w.Tick() {
		t.Fatal("copy differs from its source")
	}
	// Change one object in each world through a rule, then directly.
	var eater PlayerID
	for _, p := range w.Players() {
		if p.Alive {
			eater = p.ID
			break
		}
	}
	food := placeNextTo(w, w.ref(eater), ObjectFood)
	before, _ := c.objects.Get(food.ID)
	w.ref(eater).EatReadyAt = 0
	ev := w.Step([]Input{{Player: eater, Eat: true}})
	if len(ev) == 0 {
		t.Fatal("the eat did nothing")
	}
	if now, _ := c.objects.Get(food.ID); now != before {
		t.Fatalf("an eat in the source changed the copy: %+v -> %+v", before, now)
	}
	orig, _ := w.objects.Get(food.ID)
	c.objects.Set(food.ID, VersionedObject{Version: 999, Object: before.Object})
	if now, _ := w.objects.Get(food.ID); now != orig {
		t.Fatalf("a write to the copy changed the source: %+v -> %+v", orig, now)
	}
	// Players are copied, not shared.
	c.ref("bot-01").Health = 1
	if p, _ := w.Player("bot-01"); p.Health == 1 {
		t.Fatal("a player edit in the copy reached the source")
	}
	// Copying back makes them equal again, and copying a world onto itself
	// changes nothing.
	c.CopyFrom(w)
	h := w.Hash()
	w.CopyFrom(w)
	if c.Hash() != h || w.Hash() != h {
		t.Fatal("copy back or self copy changed a state")
	}
}

// Every world of one config shares one terrain, generated once, and new
// worlds start on the terrain's shared object pages.
func TestTerrainShared(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Seed = 4242
	a, b := mustWorld(t, cfg), mustWorld(t, cfg)
	if a.terrain != b.terrain || a.Map(RegionCoord{1, 2}) != b.Map(RegionCoord{1, 2}) {
		t.Fatal("two worlds of one config built two terrains")
	}
	for i, p := range a.objects.pages {
		if p != a.terrain.initial[i] || !p.shared.Load() {
			t.Fatalf("page %d of a new world is not the terrain's shared page", i)
		}
	}
	other := cfg
	other.Seed++
	if c := mustWorld(t, other); c.terrain == a.terrain {
		t.Fatal("another seed reused the terrain")
	}
	// Rules-only config changes keep the terrain.
	rules := cfg
	rules.HungerTicks = 7
	if d := mustWorld(t, rules); d.terrain != a.terrain {
		t.Fatal("a config differing only in rules built a new terrain")
	}
	// Reads need no lock: many goroutines read one terrain at once (run
	// with -race).
	done := make(chan struct{})
	for g := 0; g < 4; g++ {
		go func() {
			defer func() { done <- struct{}{} }()
			w := a.Clone()
			for y := 0; y < cfg.RegionsY; y++ {
				for x := 0; x < cfg.RegionsX; x++ {
					if w.Map(RegionCoord{x, y}).Size != cfg.RegionTiles {
						panic(fmt.Sprintf("region %d,%d", x, y))
					}
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
}
