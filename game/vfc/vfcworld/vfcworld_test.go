package vfcworld

import (
	"slices"
	"strings"
	"testing"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/vfc"
)

func newWorld(t *testing.T, players ...game.PlayerID) *game.World {
	t.Helper()
	cfg := game.DefaultConfig()
	cfg.RegionsX, cfg.RegionsY = 4, 4
	w, err := game.NewWorld(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range players {
		if _, err := w.AddPlayer(id, string(id)); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

func sendsOf(f *Filter, id game.PlayerID) (players []game.PlayerID, objects int) {
	for _, st := range f.AppendSends(id, nil) {
		if st.Player != "" {
			players = append(players, st.Player)
		} else {
			objects++
		}
	}
	slices.Sort(players)
	return players, objects
}

func TestFirstFrameSendsEverythingThenOnlyChanges(t *testing.T) {
	w := newWorld(t, "ann", "bob", "cyd")
	f, err := New(w, DefaultSettings())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.AddClient("ann"); err != nil {
		t.Fatal(err)
	}
	if err := f.Frame(w); err != nil {
		t.Fatal(err)
	}
	players, objects := sendsOf(f, "ann")
	if !slices.Equal(players, []game.PlayerID{"ann", "bob", "cyd"}) || objects != w.ObjectTable().Len() {
		t.Fatalf("first frame sent players %v and %d objects; want all 3 and %d", players, objects, w.ObjectTable().Len())
	}
	// Nobody moves; only hunger ticks up every HungerTicks. A client is
	// sent a player again only when its state changed since the last send.
	last := map[game.PlayerID]State{}
	for _, st := range f.AppendSends("ann", nil) {
		last[st.Player] = st
	}
	resends, own := 0, 0
	for i := 0; i < 200; i++ {
		w.Step(nil)
		if err := f.Frame(w); err != nil {
			t.Fatal(err)
		}
		for _, st := range f.AppendSends("ann", nil) {
			if st.Player == "" {
				t.Fatalf("tick %d: object %s sent though nobody touched it", w.Tick(), st.Object)
			}
			if samePlayer(last[st.Player], st) {
				t.Fatalf("tick %d: %s resent unchanged", w.Tick(), st.Player)
			}
			last[st.Player] = st
			resends++
			if st.Player == "ann" {
				own++
			}
		}
	}
	// Her own avatar goes out at every hunger step; others at most as
	// often, and later as their zone's time bound allows.
	steps := 200 / int(w.Config().HungerTicks)
	if own != steps || resends > 3*steps || resends < steps+2 {
		t.Errorf("over 200 idle ticks: %d resends, %d of the own avatar; want %d own and at most %d", resends, own, steps, 3*steps)
	}
}

func TestOwnAvatarGoesOutEveryChange(t *testing.T) {
	w := newWorld(t, "ann", "bob")
	f, err := New(w, DefaultSettings())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.AddClient("ann"); err != nil {
		t.Fatal(err)
	}
	_ = f.Frame(w)
	moves := 0
	for i := 0; i < 60; i++ {
		before, _ := w.Player("ann")
		w.Step([]game.Input{{Player: "ann", MoveX: 127, MoveY: int8(i%3 - 1)}})
		after, _ := w.Player("ann")
		if err := f.Frame(w); err != nil {
			t.Fatal(err)
		}
		p, _ := sendsOf(f, "ann")
		changed := !samePlayer(StateOf(0, before), StateOf(0, after))
		if changed {
			moves++
		}
		if changed != slices.Contains(p, "ann") {
			t.Fatalf("tick %d: own avatar changed %v, sent %v", w.Tick(), changed, p)
		}
	}
	if moves == 0 {
		t.Fatal("the avatar never moved; the test proves nothing")
	}
}

func TestLeavingPlayerIsDropped(t *testing.T) {
	w := newWorld(t, "ann", "bob", "cyd")
	f, err := New(w, DefaultSettings())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []game.PlayerID{"ann", "cyd"} {
		if err := f.AddClient(id); err != nil {
			t.Fatal(err)
		}
	}
	_ = f.Frame(w)
	w.RemovePlayer("bob")
	w.Step(nil)
	if err := f.Frame(w); err != nil {
		t.Fatal(err)
	}
	for _, id := range []game.PlayerID{"ann", "cyd"} {
		if got := f.Drops(id); !slices.Equal(got, []game.PlayerID{"bob"}) {
			t.Errorf("%s drops %v, want [bob]", id, got)
		}
	}
	// A newcomer takes bob's slot; nobody is told bob left twice.
	if _, err := w.AddPlayer("dee", "dee"); err != nil {
		t.Fatal(err)
	}
	w.Step(nil)
	if err := f.Frame(w); err != nil {
		t.Fatal(err)
	}
	if got := f.Drops("ann"); len(got) != 0 {
		t.Errorf("second frame drops %v", got)
	}
	if p, _ := sendsOf(f, "ann"); !slices.Equal(p, []game.PlayerID{"dee"}) {
		t.Errorf("newcomer frame sent %v, want [dee]", p)
	}
}

func TestDiff(t *testing.T) {
	s := DefaultSettings()
	walk := State{Tick: 10, Player: "p", Pos: game.Vec{X: 1000, Y: 1000}, Vel: game.Vec{X: 30}, Health: 80, Alive: true}
	later := func(ticks uint64, mod func(*State)) State {
		st := walk
		st.Tick += ticks
		st.Pos.X += int32(ticks) * walk.Vel.X
		if mod != nil {
			mod(&st)
		}
		return st
	}
	cases := []struct {
		name string
		cur  State
		want float64
	}{
		{"on the reckoned line", later(5, nil), 0},
		{"a tile off the line", later(5, func(s *State) { s.Pos.Y += game.TileUnits }), 100},
		{"turned: the lookahead sees the paths part", later(5, func(s *State) { s.Vel = game.Vec{Y: 30} }), float64(30*6) * 100 / game.TileUnits},
		{"stopped: the client reckons on for its 30 ticks", later(5, func(s *State) { s.Vel = game.Vec{} }), float64(30*(30-5)) * 100 / game.TileUnits},
		{"hit for 30", later(0, func(s *State) { s.Health -= 30 }), 30},
		{"healed for 30 (absolute)", later(0, func(s *State) { s.Health += 20 }), 20},
		{"died", later(0, func(s *State) { s.Alive = false }), 100},
		{"scored", later(0, func(s *State) { s.Score++ }), 100},
	}
	for _, c := range cases {
		if got := s.Diff(walk, c.cur); got != c.want {
			t.Errorf("%s: diff %g, want %g", c.name, got, c.want)
		}
	}
	food := State{Object: game.ObjectID{Slot: 1}, Value: game.VersionedObject{Version: 1, Object: game.Object{Kind: game.ObjectFood, Amount: 10, Max: 10}}}
	eaten := food
	eaten.Value.Version, eaten.Value.Object.Amount = 2, 7
	if got := s.Diff(food, eaten); got != 30 {
		t.Errorf("food 10 → 7 of 10: diff %g, want 30", got)
	}
	if got := s.Diff(eaten, food); got != 30 {
		t.Errorf("food 7 → 10 of 10: diff %g, want 30", got)
	}
}

func TestBadSettingsAndClients(t *testing.T) {
	w := newWorld(t, "ann")
	s := DefaultSettings()
	s.Players.Zones = []int32{Tiles(12), 0, Tiles(48)}
	if _, err := New(w, s); err == nil || !strings.Contains(err.Error(), "out of order") {
		t.Errorf("zones out of order: %v", err)
	}
	s = DefaultSettings()
	s.Objects.Scale = []vfc.Vector{vfc.Weakest, vfc.Strongest, vfc.Strongest}
	if _, err := New(w, s); err == nil || !strings.Contains(err.Error(), "does not weaken outward") {
		t.Errorf("strengthening scale: %v", err)
	}
	s = DefaultSettings()
	s.MaxPlayers = 1
	f, err := New(w, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.AddClient("zed"); err == nil || !strings.Contains(err.Error(), "no such player") {
		t.Errorf("client without avatar: %v", err)
	}
	if err := f.AddClient("ann"); err != nil {
		t.Fatal(err)
	}
	if err := f.AddClient("ann"); err == nil {
		t.Error("second view for one client accepted")
	}
	if _, err := w.AddPlayer("bob", "bob"); err != nil {
		t.Fatal(err)
	}
	if err := f.Frame(w); err == nil || !strings.Contains(err.Error(), "limit of 1 players") {
		t.Errorf("player beyond MaxPlayers: %v", err)
	}
}
