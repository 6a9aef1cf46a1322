package game

import (
	"fmt"
	"testing"
)

// BenchmarkStep measures one simulation step of a 3×3 world with 32
// bot-driven players, bot decisions included.
func BenchmarkStep(b *testing.B) {
	cfg := DefaultConfig()
	cfg.RegionsX, cfg.RegionsY = 3, 3
	w, err := NewWorld(cfg)
	if err != nil {
		b.Fatal(err)
	}
	var bots []*Bot
	for i := 0; i < 32; i++ {
		id := PlayerID(fmt.Sprintf("bot-%02d", i))
		w.AddPlayer(id, "bot")
		bots = append(bots, NewBot(cfg, id, 1, DefaultBotPace()))
	}
	in := make([]Input, 0, len(bots))
	b.ReportAllocs()
	for b.Loop() {
		in = in[:0]
		for _, bot := range bots {
			obs, _ := w.BotObserve(bot.ID())
			in = append(in, bot.Next(obs))
		}
		w.Step(in)
	}
}

// BenchmarkStateHash measures hashing the default 8×8 world (512 objects)
// with 32 players.
func BenchmarkStateHash(b *testing.B) {
	w, err := NewWorld(DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 32; i++ {
		w.AddPlayer(PlayerID(fmt.Sprintf("p%02d", i)), "p")
	}
	b.ReportAllocs()
	for b.Loop() {
		w.StateHash()
	}
}

// BenchmarkNewWorld measures generating the default world's terrain and
// objects.
func BenchmarkNewWorld(b *testing.B) {
	for b.Loop() {
		if _, err := NewWorld(DefaultConfig()); err != nil {
			b.Fatal(err)
		}
	}
}
