package mirror

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/vfc/vfcworld"
	"github.com/overworld-p2p/overworld/node/mirror/mirrorpb"
)

// recordingLink is a LocalClient's link that decodes every update it
// carries and can refuse one frame, as a full client queue does.
type recordingLink struct {
	localLink
	mu      sync.Mutex
	refuse  bool
	updates []*mirrorpb.Update
}

func (l *recordingLink) Send(frame []byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if f, err := DecodeServerFrame(frame); err == nil {
		if u := f.GetUpdate(); u != nil {
			if l.refuse {
				l.refuse = false
				return false
			}
			l.updates = append(l.updates, u)
		}
	}
	return l.localLink.Send(frame)
}

func (l *recordingLink) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.updates)
}

// connectRecorded attaches a bot whose frames pass a recordingLink.
func (c *cluster) connectRecorded(i int, p player, seed uint64) (*LocalClient, *recordingLink) {
	c.t.Helper()
	lc := &LocalClient{core: NewClientCore(p.key, p.tok), clock: c.clock, delay: time.Millisecond}
	link := &recordingLink{localLink: localLink{lc}}
	lc.mu.Lock()
	lc.conn = c.mirrors[i].Attach(link)
	lc.mu.Unlock()
	lc.StartBot(seed, time.Second/time.Duration(c.game.TickRate))
	c.runUntil(5*time.Second, p.name+" playing", func() bool { return lc.View().HasSelf })
	return lc, link
}

func worldObjects(w *game.World) int {
	n := 0
	for y := range w.Config().RegionsY {
		for x := range w.Config().RegionsX {
			n += len(w.Objects(game.RegionCoord{X: x, Y: y}))
		}
	}
	return n
}

// TestVFCEgress plays bots on one mirror whose egress runs VFC and checks
// what the clients get through the real client protocol: after the first
// update (everything) only what VFC sends; every client holds every other
// player, and shows each where dead reckoning from the copy puts it; a
// player who leaves is dropped from the others' views; an update the
// client's queue refused makes the next one carry everything again.
func TestVFCEgress(t *testing.T) {
	c := newCluster(t, clusterOpts{mirrors: 1, seed: 5})
	var bots []*LocalClient
	var ids []game.PlayerID
	for i := range 5 {
		p := c.player(fmt.Sprintf("vfc%d", i))
		bots = append(bots, c.bot(0, p, uint64(i)))
		ids = append(ids, game.PlayerID(p.account))
	}
	watcher, link := c.connectRecorded(0, c.player("watcher"), 99)
	c.run(10 * time.Second)

	var objects, players int
	c.mirrors[0].Inspect(func(leading, _ *State) {
		objects, players = worldObjects(leading.World()), len(leading.World().Players())
	})
	first := link.updates[0]
	if n := len(first.Objects); n != objects {
		t.Errorf("first update carried %d objects, the world has %d", n, objects)
	}
	var total, most int
	for _, u := range link.updates[1:] {
		total += len(u.Objects) + len(u.Players)
		most = max(most, len(u.Objects))
	}
	if most >= objects {
		t.Errorf("a later update carried %d objects, all of the world's %d again", most, objects)
	}
	t.Logf("%d updates after the first carried %d records in all (the world: %d players, %d objects)", len(link.updates)-1, total, players, objects)

	reckonTicks, ok := watcher.core.Reckoning()
	if !ok || reckonTicks != vfcworld.DefaultSettings().ReckonTicks {
		t.Fatalf("welcome's reckoning: %d, %v", reckonTicks, ok)
	}
	watcher.With(func(core *ClientCore) {
		v := core.View()
		held := core.HeldPlayers()
		if len(held) != players-1 || len(v.Players) != len(held) {
			t.Fatalf("watcher holds %d players and shows %d; the world has %d besides it", len(held), len(v.Players), players-1)
		}
		for i, h := range held {
			want := vfcworld.Reckon(vfcworld.StateOf(h.Tick, h.Player), v.LeadingTick-h.Tick, reckonTicks)
			if got := v.Players[i]; got.ID != h.Player.ID || got.Pos != want {
				t.Errorf("shows %s at %v, dead reckoning from its copy (tick %d) puts it at %v", got.ID, got.Pos, h.Tick, want)
			}
		}
	})

	// A player leaves: the others drop it.
	gone := ids[0]
	bots[0].Close()
	c.runUntil(5*time.Second, "the watcher dropping "+string(gone), func() bool {
		return !slices.ContainsFunc(watcher.View().Players, func(p game.Player) bool { return p.ID == gone })
	})
	for i, b := range bots[1:] {
		c.runUntil(time.Second, fmt.Sprintf("bot %d dropping %s", i+1, gone), func() bool {
			return !slices.ContainsFunc(b.View().Players, func(p game.Player) bool { return p.ID == gone })
		})
	}

	// The client's queue refuses an update: the next carries everything.
	c.mirrors[0].Inspect(func(leading, _ *State) {
		objects, players = worldObjects(leading.World()), len(leading.World().Players())
	})
	link.mu.Lock()
	link.refuse = true
	link.mu.Unlock()
	before := link.count()
	c.runUntil(time.Second, "an update after the refused one", func() bool { return link.count() > before+1 })
	link.mu.Lock()
	resent := link.updates[before]
	link.mu.Unlock()
	if len(resent.Objects) != objects || len(resent.Players) != players-1 {
		t.Errorf("the update after a refused one carried %d objects and %d players; the world has %d and %d besides the client",
			len(resent.Objects), len(resent.Players), objects, players-1)
	}
}

// TestAreaEgress: with EgressArea the welcome says so and each update
// carries the whole area (the client keeps no copies of its own).
func TestAreaEgress(t *testing.T) {
	c := newCluster(t, clusterOpts{mirrors: 1, seed: 6, tweak: func(_ int, cfg *Config) { cfg.Egress = EgressArea }})
	a := c.bot(0, c.player("a"), 1)
	b := c.bot(0, c.player("b"), 2)
	c.run(3 * time.Second)
	if _, ok := a.core.Reckoning(); ok {
		t.Fatal("area egress announced VFC reckoning")
	}
	va, vb := a.View(), b.View()
	if len(a.core.HeldPlayers()) != 0 {
		t.Errorf("area client kept %d copies", len(a.core.HeldPlayers()))
	}
	near := func(v ClientView, id game.PlayerID) bool {
		return slices.ContainsFunc(v.Players, func(p game.Player) bool { return p.ID == id })
	}
	// Both spawn in their home regions of a 3×3 world: each sees the
	// other exactly when the other is in its 3×3 area.
	w, _ := game.NewWorld(c.game)
	inArea := func(self, other game.Vec) bool {
		return slices.Contains(w.Neighbours(w.RegionOf(self)), w.RegionOf(other))
	}
	if near(va, vb.Player) != inArea(va.Self.Pos, vb.Self.Pos) {
		t.Errorf("a shows b: %v; b in a's area: %v", near(va, vb.Player), inArea(va.Self.Pos, vb.Self.Pos))
	}
}
