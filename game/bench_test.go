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

// benchChain is a 64-region world with 30 bot players (joined by command,
// warmed up for 300 ticks) and a chain of its states every k ticks: each
// state is a Clone taken as the world ran on, so consecutive states share
// the object pages that did not change in between, as the states of a
// synchronizer do. cmds[j] are the commands of the tick after states[j].
type benchChain struct {
	states []*World
	cmds   [][]Command
}

func newBenchChain(b *testing.B, k, n int) benchChain {
	b.Helper()
	cfg := DefaultConfig()
	w := mustWorld(b, cfg)
	var bots []*Bot
	var join []Command
	for i := 0; i < 30; i++ {
		id := PlayerID(fmt.Sprintf("bot-%02d", i))
		join = append(join, Command{Seq: uint64(i), Op: CommandJoin, Player: id, Name: "bot"})
		bots = append(bots, NewBot(cfg, id, 1, DefaultBotPace()))
	}
	w.Advance(join)
	seq := uint64(100)
	tick := func() []Command {
		cmds := make([]Command, 0, len(bots))
		for _, bot := range bots {
			obs, _ := w.BotObserve(bot.ID())
			seq++
			cmds = append(cmds, Command{Stamp: int64(w.Tick()), Seq: seq, Op: CommandInput, Player: bot.ID(), Input: bot.Next(obs)})
		}
		w.Advance(cmds)
		return cmds
	}
	for range 300 {
		tick()
	}
	var c benchChain
	for range n {
		c.states = append(c.states, w.Clone())
		c.cmds = append(c.cmds, tick())
		for range k - 1 {
			tick()
		}
	}
	return c
}

// pingPong visits 0, 1, ..., n-1, n-2, ..., 1, 0, 1, ...: consecutive
// indices are always neighbours in the chain.
func pingPong(i, n int) int {
	p := i % (2 * (n - 1))
	if p < n {
		return p
	}
	return 2*(n-1) - p
}

// BenchmarkCopyFrom measures the trailing-to-leading copy: a world becomes
// a copy of a state 1 (or 100) ticks of play away from the one it holds.
// Compare with BenchmarkClone and BenchmarkDeepCopy.
func BenchmarkCopyFrom(b *testing.B) {
	for _, k := range []int{1, 100} {
		b.Run(fmt.Sprintf("after-%d-ticks", k), func(b *testing.B) {
			c := newBenchChain(b, k, 16)
			dst := c.states[0].Clone()
			changed := 0
			for i := range len(c.states) - 1 {
				for j, p := range c.states[i].objects.pages {
					if c.states[i+1].objects.pages[j] != p {
						changed++
					}
				}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				dst.CopyFrom(c.states[pingPong(i, len(c.states))])
			}
			b.ReportMetric(float64(changed)/float64(len(c.states)-1), "pages-changed/copy")
		})
	}
}

// BenchmarkClone is a new world made a copy of a running one.
func BenchmarkClone(b *testing.B) {
	c := newBenchChain(b, 1, 2)
	b.ReportAllocs()
	for b.Loop() {
		_ = c.states[1].Clone()
	}
}

// BenchmarkDeepCopy is the O(world) copy CopyFrom avoids: every player and
// every object copied (what Clone did before objects were paged).
func BenchmarkDeepCopy(b *testing.B) {
	c := newBenchChain(b, 1, 2)
	src := c.states[1]
	b.ReportAllocs()
	for b.Loop() {
		d := &World{cfg: src.cfg, terrain: src.terrain, tick: src.tick, players: slicesClone(src.players), objects: &ObjectTable{}}
		for _, p := range src.objects.pages {
			d.objects.pages = append(d.objects.pages, &objectPage{region: p.region, entries: slicesClone(p.entries)})
		}
	}
}

func slicesClone[T any](s []T) []T { return append([]T(nil), s...) }

// BenchmarkAdvance measures one tick of the 64-region, 30-player world
// from recorded commands (bot decisions excluded), and the same tick run
// right after a CopyFrom (a rollback followed by re-execution), where the
// first write to each shared page copies it.
func BenchmarkAdvance(b *testing.B) {
	c := newBenchChain(b, 1, 256)
	b.Run("steady", func(b *testing.B) {
		// Restarting the chain costs one CopyFrom per 256 ticks and the
		// first writes after it; both are in the figure, amortised.
		w := c.states[0].Clone()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			j := i % len(c.cmds)
			if j == 0 {
				w.CopyFrom(c.states[0])
			}
			w.Advance(c.cmds[j])
			i++
		}
	})
	b.Run("after-copy", func(b *testing.B) {
		w := c.states[0].Clone()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			j := i % len(c.cmds)
			w.CopyFrom(c.states[j])
			w.Advance(c.cmds[j])
			i++
		}
	})
}
