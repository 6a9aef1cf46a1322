package play

import (
	"testing"

	"github.com/overworld-p2p/overworld/game"
)

func newTestAvatar(t *testing.T) *Avatar {
	t.Helper()
	a, err := NewAvatar(testGame(), "me", "Me")
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// The avatar's metabolism is game.World's: a player who never eats starves
// at the same tick in both, with the same health along the way.
func TestAvatarMetabolismMatchesWorld(t *testing.T) {
	cfg := testGame()
	a := newTestAvatar(t)
	w, err := game.NewWorld(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AddPlayer("me", "Me"); err != nil {
		t.Fatal(err)
	}
	ticks := int(cfg.HungerTicks)*(game.MaxHunger+game.MaxHealth) + 10
	for i := range ticks {
		a.Step(0, 0)
		w.Step([]game.Input{{Player: "me"}})
		got := a.Player()
		want, _ := w.Player("me")
		if got.Health != want.Health || got.Hunger != want.Hunger || got.Alive != want.Alive || got.Deaths != want.Deaths || got.Score != want.Score {
			t.Fatalf("tick %d: avatar %+v, world %+v", i+1, got, want)
		}
	}
	if a.Player().Deaths != 1 {
		t.Fatalf("the avatar should have starved once: %+v", a.Player())
	}
}

func TestAvatarDeathAndRespawn(t *testing.T) {
	cfg := testGame()
	a := newTestAvatar(t)
	ev, died := a.Damage(game.MaxHealth+5, "killer")
	if !died || ev.Kind != game.EventDied || ev.Other != "killer" {
		t.Fatalf("fatal damage: %+v %v", ev, died)
	}
	if p := a.Player(); p.Alive || p.Health != 0 || p.Deaths != 1 {
		t.Fatalf("after death: %+v", p)
	}
	if _, ok := a.TryFight(); ok {
		t.Fatal("a dead player fought")
	}
	before := a.Player().Pos
	var respawned bool
	for i := uint64(0); i <= cfg.RespawnTicks && !respawned; i++ {
		for _, e := range a.Step(127, 0) {
			respawned = respawned || e.Kind == game.EventRespawned
		}
		if p := a.Player(); !p.Alive && p.Pos != before {
			t.Fatal("a dead player moved")
		}
	}
	p := a.Player()
	if !respawned || !p.Alive || p.Health != game.MaxHealth || p.Hunger != 0 {
		t.Fatalf("after the respawn delay: %+v (respawned=%v)", p, respawned)
	}
	// The respawn tick also moves the player one step.
	want := a.World().SpawnPoint("me", a.World().RegionOf(before), 1)
	if d := game.DistSq(p.Pos, want); d > int64(cfg.MaxSpeed)*int64(cfg.MaxSpeed) {
		t.Fatalf("respawned at %+v, want a step from the second spawn point %+v", p.Pos, want)
	}
}

func TestAvatarOutcomes(t *testing.T) {
	a := newTestAvatar(t)
	a.Damage(30, "x")
	a.Heal(20)
	if h := a.Player().Health; h != game.MaxHealth-10 {
		t.Fatalf("health %d after -30 +20", h)
	}
	a.Heal(50)
	if h := a.Player().Health; h != game.MaxHealth {
		t.Fatalf("healing went past the maximum: %d", h)
	}
	a.Feed(1)
	if p := a.Player(); p.Score != 1 || p.Hunger != 0 {
		t.Fatalf("after a meal: %+v", p)
	}
	a.Rewarded()
	if p := a.Player(); p.Score != 11 || p.Skill != 11 {
		t.Fatalf("after a win: %+v", p)
	}
	c1, ok1 := a.TryFight()
	_, ok2 := a.TryFight()
	if !ok1 || ok2 || c1 != 0 {
		t.Fatalf("cooldown: first %v (counter %d), second %v", ok1, c1, ok2)
	}
	for range testGame().ActionCooldownTicks {
		a.Step(0, 0)
	}
	if c, ok := a.TryFight(); !ok || c != 1 {
		t.Fatalf("after the cooldown: %v counter %d", ok, c)
	}
	a.Restore(0, 7, -4, 500)
	if p := a.Player(); p.Health != game.MaxHealth || p.Hunger != 0 || p.Score != 0 || p.Skill != game.MaxSkill {
		t.Fatalf("restore clamps: %+v", p)
	}
	a.Restore(40, game.MaxHunger+9, 3, 2)
	if p := a.Player(); p.Health != 40 || p.Hunger != game.MaxHunger || p.Score != 3 || p.Skill != 2 {
		t.Fatalf("restore of a starving character: %+v", p)
	}
}

func TestAvatarMovesWithCollision(t *testing.T) {
	a := newTestAvatar(t)
	start := a.Player().Pos
	for range 60 {
		a.Step(127, 0)
	}
	p := a.Player()
	if p.Pos == start {
		t.Fatal("the avatar did not move")
	}
	if a.World().TileAt(p.Pos).Blocks() {
		t.Fatalf("the avatar ended inside a wall at %+v", p.Pos)
	}
}

func TestParseObjectKey(t *testing.T) {
	for _, c := range []struct {
		key  string
		slot int
		ok   bool
	}{
		{"obj/0", 0, true}, {"obj/7", 7, true}, {"obj/8", 0, false}, {"obj/01", 0, false},
		{"obj/-1", 0, false}, {"obj/", 0, false}, {"x/1", 0, false}, {"obj/99999999", 0, false},
	} {
		slot, ok := parseObjectKey(c.key, 8)
		if ok != c.ok || (ok && slot != c.slot) {
			t.Errorf("parseObjectKey(%q) = %d, %v; want %d, %v", c.key, slot, ok, c.slot, c.ok)
		}
	}
}
