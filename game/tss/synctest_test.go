package tss

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// fxCommands returns a command source for RunSyncTest: a few random
// commands per tick, stamped inside the tick.
func fxCommands(seed uint64) func(*fxState) []fxCmd {
	rng := rand.New(rand.NewPCG(seed, 1))
	seq := uint64(0)
	return func(s *fxState) []fxCmd {
		var out []fxCmd
		for range rng.IntN(4) {
			seq++
			out = append(out, fxCmd{
				Stamp:  int64(s.Tick())*1000 + 1 + rng.Int64N(999),
				Mirror: 1, Seq: seq,
				Player: uint8(rng.IntN(fxPlayers)), Op: fxOp(1 + rng.IntN(3)), Arg: int64(rng.IntN(9) - 4),
			})
		}
		slices.SortFunc(out, compareFx)
		return out
	}
}

func TestSyncTestDeterministicState(t *testing.T) {
	rep, err := RunSyncTest[*fxState, fxCmd, fxRecord](newFx(), newFx, 8, 3000, fxCommands(1))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Mismatches != 0 || rep.Ticks != 3000 || rep.Resimulated < 8*(3000-8) {
		t.Fatalf("report %+v, want 3000 ticks, each re-simulated 8 times, no mismatch", rep)
	}
}

// A state whose tick reads map iteration order (every 100th tick it moves
// "the first" player of a map) is caught at the first tick that does it.
func TestSyncTestFindsMapOrder(t *testing.T) {
	players := map[uint8]bool{}
	for p := range uint8(fxPlayers) {
		players[p] = true
	}
	alloc := func() *fxState {
		return &fxState{perturb: func(s *fxState) {
			if s.tick%100 != 0 {
				return
			}
			for p := range players {
				s.pos[p]++
				break
			}
		}}
	}
	rep, err := RunSyncTest[*fxState, fxCmd, fxRecord](alloc(), alloc, 8, 1000, fxCommands(2))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Mismatches == 0 || rep.First != 100 {
		t.Fatalf("report %+v, want the first mismatch at tick 100", rep)
	}
	t.Logf("%+v", rep)
}

// A CopyFrom that forgets a field (the shot counts) shows up at the first
// re-simulated shot after a snapshot of a state that had shots.
type leakyFx struct{ fxState }

func (s *leakyFx) CopyFrom(src *leakyFx) { s.tick, s.pos = src.tick, src.pos }

func TestSyncTestFindsIncompleteCopy(t *testing.T) {
	alloc := func() *leakyFx { return &leakyFx{} }
	next := fxCommands(3)
	rep, err := RunSyncTest[*leakyFx, fxCmd, fxRecord](alloc(), alloc, 4, 200, func(s *leakyFx) []fxCmd { return next(&s.fxState) })
	if err != nil {
		t.Fatal(err)
	}
	if rep.Mismatches == 0 || rep.First == 0 {
		t.Fatalf("report %+v, want a mismatch", rep)
	}
	t.Logf("%+v", rep)
}
