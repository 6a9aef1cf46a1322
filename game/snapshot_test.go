package game

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

// TestSnapshotRoundTrip: a world in mid-game (fights, deaths, eaten food,
// taken packs) decodes to a world with the same hash that evolves exactly
// like the original under the same inputs, and re-encodes to the same
// bytes.
func TestSnapshotRoundTrip(t *testing.T) {
	w, events := runBots(t, 7, 8, 900)
	var died, ate bool
	for _, e := range events {
		died = died || e.Kind == EventDied
		ate = ate || e.Kind == EventAte
	}
	if !died || !ate {
		t.Fatalf("the scenario should have deaths and meals (died %v, ate %v)", died, ate)
	}
	b, err := w.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := SnapshotConfig(b)
	if err != nil || cfg != w.Config() {
		t.Fatalf("SnapshotConfig = %+v, %v; want %+v", cfg, err, w.Config())
	}
	c, err := UnmarshalWorld(b)
	if err != nil {
		t.Fatal(err)
	}
	if c.Hash() != w.Hash() {
		t.Fatalf("decoded world hashes %x, original %x", c.Hash(), w.Hash())
	}
	again, err := c.MarshalBinary()
	if err != nil || !bytes.Equal(again, b) {
		t.Fatalf("re-encoding differs (%v)", err)
	}
	t.Logf("snapshot of %d players and %d objects: %d bytes", len(w.Players()), w.ObjectTable().Len(), len(b))

	bots := map[PlayerID]*Bot{}
	for _, p := range w.Players() {
		bots[p.ID] = NewBot(w.Config(), p.ID, 99, DefaultBotPace())
	}
	twin := map[PlayerID]*Bot{}
	for _, p := range c.Players() {
		twin[p.ID] = NewBot(c.Config(), p.ID, 99, DefaultBotPace())
	}
	for range 600 {
		var a, b []Input
		for _, p := range w.Players() {
			obs, _ := w.BotObserve(p.ID)
			a = append(a, bots[p.ID].Next(obs))
		}
		for _, p := range c.Players() {
			obs, _ := c.BotObserve(p.ID)
			b = append(b, twin[p.ID].Next(obs))
		}
		w.Step(a)
		c.Step(b)
		if w.Hash() != c.Hash() {
			t.Fatalf("tick %d: the decoded world diverged", w.Tick())
		}
	}
}

// TestSnapshotRejects: each kind of corruption is refused with an error
// that names it.
func TestSnapshotRejects(t *testing.T) {
	w, _ := runBots(t, 3, 3, 300)
	good, err := w.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	// Offsets into the encoding of the first player.
	head := len(snapshotMagic) + 1 + ConfigWireSize + 8 + 4
	p0 := w.Players()[0]
	bars := head + 2 + len(p0.ID) + 1 + len(p0.Name) + 4*4
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "magic"},
		{"magic", edit(func(b []byte) []byte { b[0] = 'X'; return b }), "magic"},
		{"format", edit(func(b []byte) []byte { b[4] = 9; return b }), "format 9"},
		{"config", edit(func(b []byte) []byte { b[5+1+8] = 0; b[5+1+9] = 0; return b }), "config"},
		{"truncated", good[:len(good)-3], "left"},
		{"trailing", append(bytes.Clone(good), 0), "trailing"},
		{"players", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[head-4:], 1<<30); return b }), "players in"},
		{"health", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[bars:], 101); return b }), "health"},
		{"skill", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[bars+12:], 0); return b }), "skill"},
		{"object", edit(func(b []byte) []byte { b[len(b)-ObjectWireSize+1] = 7; return b }), "object"},
		{"tile", edit(func(b []byte) []byte { b[len(b)-ObjectWireSize+3] ^= 1; return b }), "terrain has"},
	}
	for _, c := range cases {
		_, err := UnmarshalWorld(c.b)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one mentioning %q", c.name, err, c.want)
		}
	}
	if _, err := UnmarshalConfig(make([]byte, 3)); err == nil {
		t.Error("a 3-byte config decoded")
	}
}

// FuzzUnmarshalWorld: any input either fails cleanly or decodes to a world
// that re-encodes to the same bytes and steps without panicking. Configs
// larger than a 3×3 world are skipped: building a big world's terrain is
// slow, which is why receivers check SnapshotConfig first.
func FuzzUnmarshalWorld(f *testing.F) {
	for _, seed := range []uint64{1, 2} {
		w, _ := runBots(f, seed, 4, 200)
		b, err := w.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	empty := mustWorld(f, botConfig(5))
	b, _ := empty.MarshalBinary()
	f.Add(b)
	f.Add([]byte(snapshotMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := SnapshotConfig(b)
		if err != nil {
			return
		}
		if cfg.RegionsX*cfg.RegionsY > 9 || cfg.RegionTiles > 40 {
			return
		}
		w, err := UnmarshalWorld(b)
		if err != nil {
			return
		}
		again, err := w.MarshalBinary()
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("not canonical (%v)", err)
		}
		var in []Input
		for _, p := range w.Players() {
			in = append(in, Input{Player: p.ID, MoveX: 127, Eat: true, Fight: true, PickUp: true})
		}
		for range 3 {
			w.Step(in)
		}
	})
}
