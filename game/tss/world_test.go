package tss_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/tss"
	"github.com/overworld-p2p/overworld/game/tss/tssbench"
)

// These tests run the synchronizer over the real world (*game.World) with
// bot commands (tssbench.Bots, the SimMud-style game.Bot).

type worldSync = tss.Synchronizer[*game.World, game.Command, game.TickRecord]

func smallWorld(seed uint64) game.Config {
	cfg := game.DefaultConfig()
	cfg.Seed = seed
	cfg.RegionsX, cfg.RegionsY = 2, 2
	return cfg
}

func worldAlloc(t testing.TB, cfg game.Config) func() *game.World {
	return func() *game.World {
		w, err := game.NewWorld(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
}

// TestWorldLastStateIsInOrder is the property test on the world: 2
// mirrors × 3 bots, 1–4 trailing states, arrival delays up to the last
// delay; the last state equals the in-order run at every tick, and with a
// zero margin every state converges.
func TestWorldLastStateIsInOrder(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 8
	}
	total := 0
	defer func() { t.Logf("%d rollbacks over %d runs", total, seeds) }()
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 77))
		world := smallWorld(seed + 1)
		wl := tssbench.Workload{World: world, Mirrors: 2, BotsPerMirror: 3, Interval: 30 * time.Millisecond, Commands: 600, Epoch: int64(time.Hour), Seed: seed}
		cmds, err := tssbench.Generate(wl)
		if err != nil {
			t.Fatal(err)
		}
		cfg := tss.Config{Epoch: wl.Epoch, TickPeriod: wl.TickPeriod(), CheckpointTicks: 1}
		d := time.Duration(0)
		cfg.Delays = []time.Duration{0}
		for range 1 + int(seed%4) {
			d += time.Duration(10+rng.IntN(150)) * time.Millisecond
			cfg.Delays = append(cfg.Delays, d)
		}
		if seed%2 == 1 {
			cfg.WeakMargin = game.TileUnits / 4
		}
		type arrival struct {
			at  int64
			cmd game.Command
		}
		var arrivals []arrival
		for _, c := range cmds {
			arrivals = append(arrivals, arrival{c.Stamp + rng.Int64N(int64(d)+1), c})
		}
		slices.SortStableFunc(arrivals, func(a, b arrival) int { return int(min(max(a.at-b.at, -1), 1)) })
		alloc := worldAlloc(t, world)
		s, err := tss.New[*game.World, game.Command, game.TickRecord](cfg, alloc(), alloc, tss.Options[game.Command]{})
		if err != nil {
			t.Fatal(err)
		}
		var cps []tss.Checkpoint
		rollbacks := 0
		for _, a := range arrivals {
			if v := s.Deliver(a.cmd, a.at); v != tss.Accepted {
				t.Fatalf("seed %d: %v for a command within the last delay", seed, v)
			}
			r := s.Tick(a.at)
			cps, rollbacks = append(cps, r.Checkpoints...), rollbacks+len(r.Rollbacks)
		}
		end := arrivals[len(arrivals)-1].at + 2*int64(d) + int64(time.Second)
		r := s.Tick(end)
		cps, rollbacks = append(cps, r.Checkpoints...), rollbacks+len(r.Rollbacks)
		ref, err := tssbench.ReferenceHashes(world, cfg, cmds, s.Leading().Tick())
		if err != nil {
			t.Fatal(err)
		}
		total += rollbacks
		if uint64(len(cps)) != s.Last().Tick() {
			t.Fatalf("seed %d: %d checkpoints for %d ticks", seed, len(cps), s.Last().Tick())
		}
		for _, cp := range cps {
			if cp.Hash != ref[cp.Tick] {
				t.Fatalf("seed %d (%v, margin %d): last state off the in-order run at tick %d", seed, cfg.Delays, cfg.WeakMargin, cp.Tick)
			}
		}
		if cfg.WeakMargin == 0 {
			for i := range s.States() {
				if st := s.State(i); st.Hash() != ref[st.Tick()] {
					t.Fatalf("seed %d (%v): state %d at tick %d did not converge (%d rollbacks)", seed, cfg.Delays, i, st.Tick(), rollbacks)
				}
			}
		}
	}
}

// botTicks returns a RunSyncTest command source: one command per bot per
// tick from tssbench.Bots.
func botTicks(world game.Config, seed uint64, period time.Duration) func(*game.World) []game.Command {
	bots := tssbench.NewBots(world, 2, 3, seed)
	return func(w *game.World) []game.Command { return bots.Tick(w, 0, period) }
}

// TestWorldSyncTest: the world re-simulated 8 ticks back on every one of
// 10,000 bot ticks gives the same hash every time.
func TestWorldSyncTest(t *testing.T) {
	world := smallWorld(5)
	alloc := worldAlloc(t, world)
	ticks := 10_000
	if testing.Short() {
		ticks = 2_000
	}
	rep, err := tss.RunSyncTest[*game.World, game.Command, game.TickRecord](alloc(), alloc, 8, ticks, botTicks(world, 5, time.Second/30))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Mismatches != 0 || rep.Ticks != uint64(ticks) || rep.Resimulated < 8*uint64(ticks-8) {
		t.Fatalf("sync test: %+v", rep)
	}
}

// flakyWorld is the world with injected nondeterminism: every 500th tick
// it nudges "the first" player of a map, which Go iterates in a different
// order each time.
type flakyWorld struct{ *game.World }

func (f *flakyWorld) CopyFrom(src *flakyWorld) { f.World.CopyFrom(src.World) }

func (f *flakyWorld) Advance(cmds []game.Command) game.TickRecord {
	rec := f.World.Advance(cmds)
	if f.Tick()%500 == 0 {
		pos := map[game.PlayerID]game.Vec{}
		for _, p := range f.Players() {
			pos[p.ID] = p.Pos
		}
		for id, p := range pos {
			f.Teleport(id, game.Vec{X: p.X + 1, Y: p.Y})
			break
		}
	}
	return rec
}

func TestWorldSyncTestFindsMapOrder(t *testing.T) {
	world := smallWorld(6)
	alloc := func() *flakyWorld { return &flakyWorld{worldAlloc(t, world)()} }
	next := botTicks(world, 6, time.Second/30)
	rep, err := tss.RunSyncTest[*flakyWorld, game.Command, game.TickRecord](alloc(), alloc, 8, 2000, func(f *flakyWorld) []game.Command { return next(f.World) })
	if err != nil {
		t.Fatal(err)
	}
	if rep.Mismatches == 0 || rep.First != 500 {
		t.Fatalf("sync test of a map-order world: %+v, want the first mismatch at tick 500", rep)
	}
	t.Logf("%+v", rep)
}
