package game

import (
	"encoding/hex"
	"fmt"
	"testing"
)

// runBots builds the default world with n bot-driven players and runs it
// for steps ticks, returning the world and every event produced.
func runBots(t testing.TB, seed uint64, n, steps int) (*World, []Event) {
	t.Helper()
	cfg := botConfig(seed)
	w := mustWorld(t, cfg)
	bots := make([]*Bot, n)
	for i := range bots {
		id := PlayerID(fmt.Sprintf("bot-%02d", i))
		if _, err := w.AddPlayer(id, fmt.Sprintf("Bot %d", i)); err != nil {
			t.Fatal(err)
		}
		bots[i] = NewBot(cfg, id, seed, DefaultBotPace())
	}
	// Crowd them into one region so that fights happen.
	// Two of them start badly hurt and one starving, so deaths and
	// respawns are part of the run.
	for i, b := range bots {
		p := w.ref(b.ID())
		p.Pos = w.SpawnPoint(b.ID(), RegionCoord{1, 1}, 0)
		switch i {
		case 0, 1:
			p.Health = 12
		case 2:
			p.Hunger, p.Health = MaxHunger, 5
		}
	}
	var events []Event
	inputs := make([]Input, 0, n)
	for s := 0; s < steps; s++ {
		inputs = inputs[:0]
		for _, b := range bots {
			obs, _ := w.BotObserve(b.ID())
			inputs = append(inputs, b.Next(obs))
		}
		events = append(events, w.Step(inputs)...)
	}
	return w, events
}

// botConfig is the 3×3 world the bot scenarios play in.
func botConfig(seed uint64) Config {
	cfg := DefaultConfig()
	cfg.Seed = seed
	cfg.RegionsX, cfg.RegionsY = 3, 3
	return cfg
}

func hashHex(w *World) string {
	h := w.StateHash()
	return hex.EncodeToString(h[:])
}
