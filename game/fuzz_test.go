package game

import (
	"bytes"
	"testing"
)

// FuzzUnmarshalObject: any input either fails cleanly or decodes to an
// object that re-encodes to exactly the same bytes.
func FuzzUnmarshalObject(f *testing.F) {
	for _, o := range []Object{
		{Kind: ObjectFood, TileX: 1, TileY: 2, Amount: 3, Max: 4},
		{Kind: ObjectHealthPack, Amount: 0, Max: 40, RegrowAt: 99},
	} {
		b, _ := o.MarshalBinary()
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := UnmarshalObject(b)
		if err != nil {
			return
		}
		again, err := o.MarshalBinary()
		if err != nil {
			t.Fatalf("decoded object does not encode: %v", err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("not canonical: %x -> %+v -> %x", b, o, again)
		}
	})
}

// FuzzUnmarshalInput: any input either fails cleanly or round-trips, and a
// decoded input steps a world without panicking.
func FuzzUnmarshalInput(f *testing.F) {
	for _, in := range []Input{
		{Player: "p", MoveX: 127, Eat: true},
		{Player: "p", Fight: true, Target: "q", MoveY: -128},
	} {
		b, _ := in.MarshalBinary()
		f.Add(b)
	}
	cfg := DefaultConfig()
	cfg.RegionsX, cfg.RegionsY = 1, 1
	w, err := NewWorld(cfg)
	if err != nil {
		f.Fatal(err)
	}
	w.AddPlayer("p", "P")
	w.AddPlayer("q", "Q")
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := UnmarshalInput(b)
		if err != nil {
			return
		}
		again, err := in.MarshalBinary()
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("not canonical: %x -> %+v -> %x (%v)", b, in, again, err)
		}
		w.Step([]Input{in})
	})
}

// FuzzStep drives a small world with arbitrary command streams (inputs,
// joins, leaves, respawn requests) and checks the invariants every tick
// must keep: nobody inside a wall, nobody faster than the limit, bars
// within range, the roster sorted and without duplicates.
func FuzzStep(f *testing.F) {
	f.Add([]byte{127, 0, 1, 0, 127, 7, 200, 3})
	f.Add([]byte{0, 0, 0x40, 0, 0, 0x20, 127, 0, 1, 0, 0, 0x81, 5, 5, 0x41})
	f.Fuzz(func(t *testing.T, script []byte) {
		if len(script) > 4096 {
			return
		}
		cfg := DefaultConfig()
		cfg.RegionsX, cfg.RegionsY = 2, 1
		w, err := NewWorld(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ids := []PlayerID{"a", "b", "c"}
		for _, id := range ids {
			w.AddPlayer(id, string(id))
		}
		limit := int64(cfg.MaxSpeed) * int64(cfg.MaxSpeed)
		for i := 0; i+3 <= len(script); i += 3 {
			id := ids[int(script[i+2])%len(ids)]
			flags := script[i+2] >> 2
			cmd := Command{Seq: uint64(i), Op: CommandInput, Player: id, Input: Input{Player: id,
				MoveX: int8(script[i]), MoveY: int8(script[i+1]),
				Eat: flags&1 != 0, PickUp: flags&2 != 0, Fight: flags&4 != 0}}
			switch flags >> 3 {
			case 1:
				cmd = Command{Seq: uint64(i), Op: CommandLeave, Player: id}
			case 2:
				cmd = Command{Seq: uint64(i), Op: CommandJoin, Player: id, Name: "N",
					Saved: &Character{Pos: Vec{int32(script[i]) << 8, int32(script[i+1]) << 6}, Health: int32(int8(script[i])), Skill: int32(script[i+1])}}
			case 3:
				cmd = Command{Seq: uint64(i), Op: CommandRespawn, Player: id}
			}
			before := w.Players()
			w.Advance([]Command{cmd})
			now := w.Players()
			for k, p := range now {
				if k > 0 && now[k-1].ID >= p.ID {
					t.Fatalf("roster out of order: %v", now)
				}
				if p.Alive && !w.boxFree(p.Pos) {
					t.Fatalf("%s inside a wall", p.ID)
				}
				if p.Health < 0 || p.Health > MaxHealth || p.Hunger < 0 || p.Hunger > MaxHunger || p.Skill < 1 || p.Skill > MaxSkill {
					t.Fatalf("%s bars out of range: %+v", p.ID, p)
				}
				for _, q := range before {
					if q.ID == p.ID && q.Alive && p.Alive && DistSq(p.Pos, q.Pos) > limit {
						t.Fatalf("%s moved too fast", p.ID)
					}
				}
			}
		}
	})
}
