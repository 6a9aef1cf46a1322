package game

import (
	"slices"
	"testing"
)

// TestAdvanceDeterminism runs 10,000 ticks of bot commands through Advance
// three ways and requires the same state at every tick: a second replay
// of the recorded commands, and a TSS-like pair of states in which the
// leading one sometimes runs wrong commands and is then repaired by a
// CopyFrom of the trailing one at a random tick, after which it must track
// the reference exactly again. Copies go both ways and a third world
// scribbles on pages shared with the others, so a copy-on-write leak in
// either direction shows up as a hash mismatch.
func TestAdvanceDeterminism(t *testing.T) {
	const ticks = 10_000
	s := botScript(t, 11, 12, ticks)

	seen := map[EventKind]int{}
	for _, r := range s.records {
		for _, e := range r.Events {
			seen[e.Kind]++
		}
	}
	t.Logf("events over %d ticks: %v", ticks, seen)
	for k := EventAte; k <= EventLeft; k++ {
		if seen[k] == 0 {
			t.Errorf("the script produced no %s events", k)
		}
	}
	homeRespawns := 0
	for i, cmds := range s.cmds {
		for _, c := range cmds {
			if c.Op == CommandRespawn && i+1 < len(s.records) {
				homeRespawns++
			}
		}
	}
	if homeRespawns == 0 {
		t.Error("the script asked for no respawn at home")
	}

	replay := mustWorld(t, s.cfg)
	for i, cmds := range s.cmds {
		rec := replay.Advance(cmds)
		if replay.Hash() != s.hashes[i] {
			t.Fatalf("tick %d: the replay's state differs from the recorded run", i+1)
		}
		if why, bad := rec.Diverges(s.records[i], 0); bad {
			t.Fatalf("replay: %s", why)
		}
		if !slices.Equal(rec.Events, s.records[i].Events) || !slices.Equal(rec.Positions, s.records[i].Positions) {
			t.Fatalf("tick %d: the replay's record differs", i+1)
		}
	}

	trailing, leading, scribbler := mustWorld(t, s.cfg), mustWorld(t, s.cfg), mustWorld(t, s.cfg)
	rng := NewRand(2024)
	dirty, copies, repairs := false, 0, 0
	for i, cmds := range s.cmds {
		trailing.Advance(cmds)
		if trailing.Hash() != s.hashes[i] {
			t.Fatalf("tick %d: trailing state differs from the reference (copies so far: %d)", i+1, copies)
		}
		if rng.IntN(10) == 0 {
			dirty = true
			leading.Advance(perturb(rng, cmds))
		} else {
			leading.Advance(cmds)
		}
		if !dirty && leading.Hash() != s.hashes[i] {
			t.Fatalf("tick %d: leading state, not perturbed since its last repair, differs from the reference", i+1)
		}
		if i%97 == 0 {
			for _, w := range []*World{trailing, leading, scribbler} {
				if w.Hash() != uncachedHash(w) {
					t.Fatalf("tick %d: a cached page digest is stale", i+1)
				}
			}
		}
		switch r := rng.IntN(40); {
		case r == 0:
			// Rollback: the trailing state is copied onto the leading one.
			leading.CopyFrom(trailing)
			copies++
			if dirty {
				repairs++
			}
			dirty = false
			if leading.Hash() != s.hashes[i] {
				t.Fatalf("tick %d: hash differs right after CopyFrom", i+1)
			}
		case r == 1 && !dirty:
			// The other direction, when the leading state is right.
			trailing.CopyFrom(leading)
			copies++
		case r == 2:
			// A third world takes a copy and writes all over the shared
			// pages; neither source may see it.
			src := trailing
			if rng.IntN(2) == 0 {
				src = leading
			}
			scribbler.CopyFrom(src)
			for range 1 + rng.IntN(20) {
				scribbler.Advance(perturb(rng, cmds))
				scribble(rng, scribbler)
			}
		}
	}
	if repairs < 20 || copies < 200 {
		t.Fatalf("only %d copies, %d of them repairs", copies, repairs)
	}
	t.Logf("%d copies, %d of them repaired a perturbed leading state", copies, repairs)
}

// perturb returns a wrong version of a tick's commands: one dropped, and
// every remaining player eating, picking up and fighting.
func perturb(rng *Rand, cmds []Command) []Command {
	out := slices.Clone(cmds)
	if len(out) > 0 {
		i := rng.IntN(len(out))
		out = slices.Delete(out, i, i+1)
	}
	for i := range out {
		if out[i].Op == CommandInput {
			out[i].Input.Eat, out[i].Input.PickUp, out[i].Input.Fight = true, true, true
			out[i].Input.MoveX = int8(rng.IntN(256) - 128)
		}
	}
	return out
}

// scribble changes objects in random regions directly through the object
// table, as a P2P cache would.
func scribble(rng *Rand, w *World) {
	ids := w.objects.IDs()
	for range 5 {
		id := ids[rng.IntN(len(ids))]
		v, _ := w.objects.Get(id)
		o := v.Object
		o.Amount, o.RegrowAt = 0, w.tick+1+uint64(rng.IntN(100))
		w.objects.Set(id, VersionedObject{Version: v.Version + 1, Object: o})
	}
}

// uncachedHash hashes a deep copy of w whose pages have no cached digest.
func uncachedHash(w *World) [32]byte {
	d := &World{cfg: w.cfg, terrain: w.terrain, tick: w.tick, players: slices.Clone(w.players), objects: &ObjectTable{}}
	for _, p := range w.objects.pages {
		d.objects.pages = append(d.objects.pages, &objectPage{region: p.region, entries: slices.Clone(p.entries)})
	}
	return d.Hash()
}
