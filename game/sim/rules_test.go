package sim

import (
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/game"
)

// A bot's bars follow game.World's rules: a bot that is never fed starves,
// dies and respawns at the same ticks, with the same health and hunger on
// the way, as a player standing still in a world; a fatal blow keeps it
// down for the world's respawn time.
func TestBotBarsFollowTheWorldsRules(t *testing.T) {
	cfg := workloadGame(2)
	w, err := game.NewWorld(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AddPlayer("bot", "bot"); err != nil {
		t.Fatal(err)
	}
	a := &actor{game: cfg, me: game.NewPlayer("bot", "bot", game.Vec{})}
	tickAt := func(tick uint64) time.Time {
		// The start of the wall-clock tick (wallTick rounds down).
		return time.UnixMilli(int64((tick*1000 + uint64(cfg.TickRate) - 1) / uint64(cfg.TickRate)))
	}
	// Line the world's ticks up with wall-clock ticks: world tick n is
	// wall tick base+n, and base is a multiple of the hunger interval.
	base := uint64(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()) * uint64(cfg.TickRate) / 1000
	base -= base % (cfg.HungerTicks * 2)
	a.lived = base
	if got := a.wallTick(tickAt(base + 1)); got != base+1 {
		t.Fatalf("tickAt is off: wall tick %d, want %d", got, base+1)
	}
	deaths := 0
	for n := uint64(1); n <= cfg.HungerTicks*(game.MaxHunger+game.MaxHealth)+cfg.RespawnTicks+10; n++ {
		a.mu.Lock()
		alive := a.liveLocked(tickAt(base + n))
		a.mu.Unlock()
		w.Step(nil)
		want, _ := w.Player("bot")
		got := a.me
		if alive != want.Alive || got.Health != want.Health || got.Hunger != want.Hunger || got.Deaths != want.Deaths {
			t.Fatalf("tick %d: bot %+v, world %+v", n, got, want)
		}
		deaths = int(got.Deaths)
	}
	if deaths != 1 {
		t.Fatalf("the bot starved %d times, want once", deaths)
	}

	// A fatal blow: down for RespawnTicks, then back whole.
	now := tickAt(base + 100_000)
	a.mu.Lock()
	a.liveLocked(now)
	fatal := a.takeDamage(now, game.MaxHealth, "killer")
	a.mu.Unlock()
	if !fatal || a.me.Alive || a.me.Deaths != 2 {
		t.Fatalf("after a fatal blow: %+v", a.me)
	}
	if a.alive(now.Add(time.Duration(cfg.RespawnTicks-1) * time.Second / time.Duration(cfg.TickRate))) {
		t.Fatal("the bot came back before the respawn time")
	}
	if !a.alive(now.Add(time.Duration(cfg.RespawnTicks+1)*time.Second/time.Duration(cfg.TickRate))) || a.me.Health != game.MaxHealth {
		t.Fatalf("the bot did not come back after the respawn time: %+v", a.me)
	}
}
