package game

import (
	"bytes"
	"errors"
	"testing"
)

// TestEatRaceLastUnit: two players read the same version of a food object
// holding its last unit and both propose eating it. Exactly one update
// applies; the other is rejected with the current value, and eating again
// from that value fails because nothing is left.
func TestEatRaceLastUnit(t *testing.T) {
	tab := NewObjectTable()
	id := ObjectID{RegionCoord{2, 3}, 1}
	start, err := tab.Initialize(id, Object{Kind: ObjectFood, TileX: 4, TileY: 5, Amount: 1, Max: 6})
	if err != nil {
		t.Fatal(err)
	}
	readA, _ := tab.Get(id)
	readB, _ := tab.Get(id)
	proposalA, errA := readA.Object.Eaten(100, 50)
	proposalB, errB := readB.Object.Eaten(100, 50)
	if errA != nil || errB != nil {
		t.Fatalf("both reads should allow a proposal: %v, %v", errA, errB)
	}

	var applied int
	var rejected VersionedObject
	for _, p := range []struct {
		read VersionedObject
		next Object
	}{{readA, proposalA}, {readB, proposalB}} {
		cur, err := tab.ReadWrite(id, p.read.Version, p.next)
		switch {
		case err == nil:
			applied++
		case errors.Is(err, ErrVersionConflict):
			rejected = cur
		default:
			t.Fatalf("unexpected error: %v", err)
		}
	}
	if applied != 1 {
		t.Fatalf("%d eats of the last unit applied, want exactly 1", applied)
	}
	if rejected.Version != start.Version+1 || rejected.Object.Amount != 0 {
		t.Fatalf("loser saw %+v, want the eaten value at version %d", rejected, start.Version+1)
	}
	if _, err := rejected.Object.Eaten(101, 50); !errors.Is(err, ErrNothingLeft) {
		t.Fatalf("retry on the current value: %v, want ErrNothingLeft", err)
	}
	final, _ := tab.Get(id)
	if final.Object.Amount != 0 || final.Version != start.Version+1 {
		t.Fatalf("final %+v", final)
	}
}

func TestObjectRules(t *testing.T) {
	food := Object{Kind: ObjectFood, Amount: 2, Max: 2}
	o, err := food.Eaten(10, 30)
	if err != nil || o.Amount != 1 || o.RegrowAt != 0 {
		t.Fatalf("first bite: %+v %v", o, err)
	}
	o, err = o.Eaten(11, 30)
	if err != nil || o.Amount != 0 || o.RegrowAt != 41 {
		t.Fatalf("last bite: %+v %v", o, err)
	}
	if _, due := o.Regrown(40); due {
		t.Fatal("regrew early")
	}
	if r, due := o.Regrown(41); !due || r.Amount != 2 || r.RegrowAt != 0 {
		t.Fatalf("regrowth: %+v %v", r, due)
	}
	if _, err := food.Taken(1, 1); !errors.Is(err, ErrWrongKind) {
		t.Fatalf("took food as a health pack: %v", err)
	}
	pack := Object{Kind: ObjectHealthPack, Amount: 40, Max: 40}
	if _, err := pack.Eaten(1, 1); !errors.Is(err, ErrWrongKind) {
		t.Fatalf("ate a health pack: %v", err)
	}
}

func TestObjectEncodingRoundTrip(t *testing.T) {
	for _, o := range []Object{
		{Kind: ObjectFood, TileX: 3, TileY: 31, Amount: 5, Max: 8},
		{Kind: ObjectFood, TileX: 255, TileY: 0, Amount: 0, Max: 1, RegrowAt: 1 << 40},
		{Kind: ObjectHealthPack, Amount: 40, Max: 40},
	} {
		b, err := o.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != ObjectWireSize {
			t.Fatalf("encoded %d bytes", len(b))
		}
		got, err := UnmarshalObject(b)
		if err != nil || got != o {
			t.Fatalf("round trip of %+v gave %+v, %v", o, got, err)
		}
	}
}

func TestObjectDecodingRejects(t *testing.T) {
	good, _ := Object{Kind: ObjectFood, Amount: 1, Max: 2}.MarshalBinary()
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	cases := map[string][]byte{
		"empty":         nil,
		"short":         good[:10],
		"long":          append(bytes.Clone(good), 0),
		"format":        mutate(func(b []byte) []byte { b[0] = 2; return b }),
		"kind":          mutate(func(b []byte) []byte { b[1] = 9; return b }),
		"tile":          mutate(func(b []byte) []byte { b[2] = 0xff; return b }),
		"amount>max":    mutate(func(b []byte) []byte { b[7] = 3; return b }),
		"max zero":      mutate(func(b []byte) []byte { b[7], b[9] = 0, 0; return b }),
		"max too big":   mutate(func(b []byte) []byte { b[8] = 0xff; return b }),
		"regrow&amount": mutate(func(b []byte) []byte { b[17] = 1; return b }),
	}
	for name, b := range cases {
		if _, err := UnmarshalObject(b); err == nil {
			t.Errorf("%s: decoded %x", name, b)
		}
	}
}

func TestInputEncodingRoundTrip(t *testing.T) {
	for _, in := range []Input{
		{Player: "12D3KooWabc", MoveX: -127, MoveY: 127, Eat: true},
		{Player: "p", Fight: true, Target: "q", PickUp: true, MoveX: -128},
		{Player: PlayerID(bytes.Repeat([]byte("x"), MaxPlayerIDLen)), Target: PlayerID(bytes.Repeat([]byte("y"), MaxPlayerIDLen))},
	} {
		b, err := in.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > MaxInputWireSize {
			t.Fatalf("encoded %d bytes, above the limit", len(b))
		}
		got, err := UnmarshalInput(b)
		if err != nil || got != in {
			t.Fatalf("round trip of %+v gave %+v, %v", in, got, err)
		}
	}
	if _, err := (Input{}).MarshalBinary(); err == nil {
		t.Fatal("encoded an input without a player")
	}
	for name, b := range map[string][]byte{
		"empty":    nil,
		"format":   {9, 0, 0, 0, 0, 1, 'p', 0, 0},
		"flags":    {1, 0x80, 0, 0, 0, 1, 'p', 0, 0},
		"overrun":  {1, 0, 0, 0, 0, 9, 'p', 0, 0},
		"trailing": {1, 0, 0, 0, 0, 1, 'p', 0, 0, 7},
		"no id":    {1, 0, 0, 0, 0, 0, 0, 0},
		"bad utf8": {1, 0, 0, 0, 0, 1, 0xff, 0, 0},
	} {
		if _, err := UnmarshalInput(b); err == nil {
			t.Errorf("%s: decoded %x", name, b)
		}
	}
}
