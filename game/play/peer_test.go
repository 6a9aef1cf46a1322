package play

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/node"
	"github.com/overworld-p2p/overworld/node/vnet"
	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
)

func testLogger() *slog.Logger {
	if os.Getenv("PLAY_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// testGame is a small world: 2×2 regions of 16 tiles.
func testGame() game.Config {
	cfg := game.DefaultConfig()
	cfg.Seed = 7
	cfg.RegionsX, cfg.RegionsY, cfg.RegionTiles = 2, 2, 16
	return cfg
}

// testNet is a bootstrap node and players on a virtual network
// (vnettest).
type testNet struct {
	t     *testing.T
	net   *vnettest.Cluster
	nodes []*node.Node
	peers []*Peer
	stop  func() // stops the players (Run returns), then the nodes
}

// newTestNet starts count players in region rc; place, if not nil, may move
// player i before it starts publishing.
func newTestNet(t *testing.T, count int, rc game.RegionCoord, place func(i int, p *Peer)) *testNet {
	return newTestNetWith(t, count, rc, place, nil)
}

// newTestNetWith is newTestNet with a hook that adjusts each player's
// config. A player with an account and no HTTP client of its own reaches
// the account server in memory (accountsHTTP).
func newTestNetWith(t *testing.T, count int, rc game.RegionCoord, place func(i int, p *Peer), adjust func(i int, c *Config)) *testNet {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := vnettest.New(t, count, vnettest.Options{Logger: testLogger()})
	tn := &testNet{t: t, net: cl}
	runCtx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var once sync.Once
	tn.stop = func() {
		once.Do(func() {
			stop()
			wg.Wait()
			cl.Close()
		})
	}
	t.Cleanup(tn.stop)
	for i, vp := range cl.Peers() {
		n := vp.Node
		tn.nodes = append(tn.nodes, n)
		start := rc
		pc := Config{
			World: "test", Game: testGame(), Name: fmt.Sprintf("P%d", i), StartRegion: &start,
			PositionInterval: 100 * time.Millisecond, CardInterval: 500 * time.Millisecond,
			RegionEvery: 100 * time.Millisecond, Logger: testLogger(),
		}
		if adjust != nil {
			adjust(i, &pc)
		}
		if pc.Account != nil && pc.Account.HTTPClient == nil {
			pc.Account.HTTPClient = accountsHTTP
		}
		p, err := New(ctx, n, pc)
		if err != nil {
			t.Fatal(err)
		}
		if place != nil {
			place(i, p)
		}
		tn.peers = append(tn.peers, p)
	}
	for _, p := range tn.peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Run(runCtx)
		}()
	}
	return tn
}

// waitFor polls cond until it holds; d bounds the simulated time it may
// take.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	vnettest.EventuallyWithin(t, d, what, cond)
}

// step runs one step of a test in a synctest bubble, where subtests
// cannot run; the log names the step a failure belongs to.
func step(t *testing.T, name string, f func(t *testing.T)) {
	t.Helper()
	t.Logf("step %q", name)
	f(t)
}

// connectedHosts returns two hosts of a virtual network without latency,
// connected, with identities from keys (random when nil); they close when
// the test ends.
func connectedHosts(t *testing.T, keys io.Reader) []host.Host {
	t.Helper()
	if keys == nil {
		keys = crand.Reader
	}
	nw := vnet.New(0)
	var hs []host.Host
	t.Cleanup(func() {
		for _, h := range hs {
			_ = h.Close()
		}
		_ = nw.Close()
	})
	for i := range 2 {
		sk, _, err := crypto.GenerateEd25519Key(keys)
		if err != nil {
			t.Fatal(err)
		}
		h, err := nw.AddHost(sk, vnet.Addr(i+1), vnet.HostOptions{})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	if err := nw.Connect(hs[0].ID(), hs[1].ID()); err != nil {
		t.Fatal(err)
	}
	return hs
}

// sees reports whether p's view lists the player id with a card.
func sees(p *Peer, id game.PlayerID) (PlayerView, bool) {
	for _, o := range p.Snapshot().Players {
		if o.ID == string(id) && !strings.HasPrefix(o.Name, "…") {
			return o, true
		}
	}
	return PlayerView{}, false
}

func hasMessage(p *Peer, kind, from, text string) bool {
	for _, m := range p.Messages() {
		if m.Kind == kind && m.From == from && m.Text == text {
			return true
		}
	}
	return false
}

// isolatedFood returns a food object of region rc with no other food
// within reach of it, so that an eat there can only mean that object.
func isolatedFood(t *testing.T, cfg game.Config, rc game.RegionCoord) game.ObjectEntry {
	t.Helper()
	w, err := game.NewWorld(cfg)
	if err != nil {
		t.Fatal(err)
	}
	objs := w.Objects(rc)
	reach := int64(cfg.ReachUnits) * 2
	for _, e := range objs {
		if e.Object.Kind != game.ObjectFood {
			continue
		}
		alone := true
		for _, o := range w.Objects(rc) {
			if o.ID != e.ID && o.Object.Kind == game.ObjectFood && game.DistSq(o.Pos, e.Pos) <= reach*reach {
				alone = false
			}
		}
		if alone {
			return e
		}
	}
	t.Fatal("no isolated food in the test region")
	return game.ObjectEntry{}
}

// TestPlayersTogether runs four real peers over TCP on 127.0.0.1 through the
// runtime: positions, the race for the last unit of food, a fight, region
// chat and a whisper.
func TestPlayersTogether(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		cfg := testGame()
		rc := game.RegionCoord{X: 1, Y: 0}
		food := isolatedFood(t, cfg, rc)
		// P0 and P1 stand on the food; P2 and P3 a little away in the region.
		tn := newTestNet(t, 4, rc, func(i int, p *Peer) {
			if i < 2 && !p.Place(food.Pos) {
				t.Fatalf("cannot place P%d on the food at %+v", i, food.Pos)
			}
		})
		a, b, c, d := tn.peers[0], tn.peers[1], tn.peers[2], tn.peers[3]

		step(t, "positions", func(t *testing.T) {
			for _, p := range tn.peers {
				for _, q := range tn.peers {
					if p == q {
						continue
					}
					waitFor(t, 30*time.Second, fmt.Sprintf("%s to see %s with a card", p.Name(), q.Name()), func() bool {
						v, ok := sees(p, q.ID())
						return ok && v.Name == q.Name()
					})
				}
			}
			want := a.Player().Pos
			v, _ := sees(b, a.ID())
			if d := game.DistSq(game.Vec{X: v.X, Y: v.Y}, want); d > int64(game.TileUnits)*int64(game.TileUnits) {
				t.Fatalf("P1 shows P0 at (%d,%d), P0 is at %+v", v.X, v.Y, want)
			}
			if st := b.Snapshot().Status; st.Mode != "p2p" || st.Region != rc.String() || st.Coordinator == "" || st.Peers < 3 {
				t.Fatalf("status line %+v", st)
			}
		})

		step(t, "race for the last unit", func(t *testing.T) {
			for _, p := range []*Peer{a, b} {
				waitFor(t, 30*time.Second, p.Name()+" loading the region", func() bool { return p.Loaded(rc) })
			}
			// The race is about the store's rule, not about placement settling
			// while peers join: wait until every peer names the same
			// coordinator and replica for the region.
			waitFor(t, 30*time.Second, "the peers to agree on the region's coordinator", func() bool {
				c0, r0 := a.Regions().Coordinator(coordOf(rc))
				for _, p := range tn.peers[1:] {
					if c, r := p.Regions().Coordinator(coordOf(rc)); c != c0 || r != r0 {
						return false
					}
				}
				return true
			})
			// Leave one unit: a read-write through the coordinator.
			var cur game.VersionedObject
			a.With(func(av *Avatar) { cur, _ = av.World().ObjectTable().Get(food.ID) })
			last := cur.Object
			last.Amount = 1
			value, _ := last.MarshalBinary()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			obj, err := a.Regions().Client().ReadWrite(ctx, coordOf(rc), food.ID.Key(), cur.Version, value)
			if err != nil {
				t.Fatalf("leaving one unit of %s (read at version %d): %v", food.ID, cur.Version, err)
			}
			for _, p := range []*Peer{a, b} {
				waitFor(t, 20*time.Second, p.Name()+" seeing one unit left", func() bool {
					var v game.VersionedObject
					p.With(func(av *Avatar) { v, _ = av.World().ObjectTable().Get(food.ID) })
					return v.Version == obj.Version && v.Object.Amount == 1
				})
			}
			var wg sync.WaitGroup
			results := make([]TakeResult, 2)
			errs := make([]error, 2)
			for i, p := range []*Peer{a, b} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					results[i], errs[i] = p.EatNearest(ctx)
				}()
			}
			wg.Wait()
			won := 0
			for i, err := range errs {
				switch {
				case err == nil:
					won++
					if results[i].After.Object.Amount != 0 || results[i].After.Version != obj.Version+1 {
						t.Errorf("winner committed %+v, want amount 0 at version %d", results[i].After, obj.Version+1)
					}
				case errors.Is(err, ErrTaken):
					if results[i].After.Object.Amount != 0 || results[i].After.Version != obj.Version+1 {
						t.Errorf("loser sees %+v, want the current value (amount 0, version %d)", results[i].After, obj.Version+1)
					}
				default:
					t.Errorf("eat %d: %v", i, err)
				}
			}
			if won != 1 {
				t.Fatalf("%d players ate the last unit (errors %v), want exactly 1", won, errs)
			}
			if sa, sb := a.Player().Score, b.Player().Score; sa+sb != 1 {
				t.Errorf("scores %d and %d: exactly one meal should have counted", sa, sb)
			}
		})

		step(t, "fight", func(t *testing.T) {
			waitFor(t, 20*time.Second, "P0 to know P1's current card", func() bool {
				v, ok := sees(a, b.ID())
				me := b.Player()
				return ok && v.Health == me.Health && v.Skill == me.Skill
			})
			beforeA, beforeB := a.Player().Health, b.Player().Health
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rec, err := a.Attack(ctx, b.ID())
			if err != nil {
				t.Fatal(err)
			}
			if rec.Mismatch || rec.Mine != rec.Theirs {
				t.Fatalf("attacker's record %+v: the two computations differ", rec)
			}
			waitFor(t, 10*time.Second, "the defender to record the fight", func() bool { return len(b.Fights()) > 0 })
			fights := b.Fights()
			theirs := fights[len(fights)-1]
			if theirs.Counter != rec.Counter || theirs.Draw != rec.Draw || theirs.Mine != rec.Mine || theirs.Theirs != rec.Mine || theirs.Mismatch {
				t.Fatalf("defender's record %+v, attacker's %+v", theirs, rec)
			}
			want := game.FightOutcome(a.ID(), b.ID(), rec.Draw, game.Fighter{Skill: 10, Health: beforeA}, game.Fighter{Skill: 10, Health: beforeB})
			if rec.Mine != want {
				t.Fatalf("outcome %+v, game.FightOutcome says %+v", rec.Mine, want)
			}
			if got := b.Player().Health; got != beforeB-want.DefenderDamage {
				t.Errorf("defender health %d -> %d, damage %d", beforeB, got, want.DefenderDamage)
			}
			if got := a.Player().Health; got != beforeA-want.AttackerDamage {
				t.Errorf("attacker health %d -> %d, counter-damage %d", beforeA, got, want.AttackerDamage)
			}
		})

		step(t, "region chat", func(t *testing.T) {
			waitFor(t, 20*time.Second, "P0 in its region's chat", func() bool {
				return a.Chat("hello region", "") == nil
			})
			for _, p := range []*Peer{b, c, d} {
				waitFor(t, 20*time.Second, p.Name()+" hearing P0", func() bool { return hasMessage(p, "chat", a.Name(), "hello region") })
			}
		})

		step(t, "whisper", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := a.Whisper(ctx, c.Name(), "psst, only you"); err != nil {
				t.Fatal(err)
			}
			if !hasMessage(c, "whisper", a.Name(), "psst, only you") {
				t.Fatalf("P2 did not get the whisper: %+v", c.Messages())
			}
			// The whisper is acknowledged only after P2 showed it; anyone else
			// would have it by now too.
			for _, p := range []*Peer{b, d} {
				for _, m := range p.Messages() {
					if strings.Contains(m.Text, "psst") {
						t.Fatalf("%s got someone else's whisper: %+v", p.Name(), m)
					}
				}
			}
			if err := a.Whisper(ctx, "nobody-by-that-name", "hi"); err == nil {
				t.Fatal("a whisper to an unknown player succeeded")
			}
			// Before a card arrives the page names a player by the end of its
			// peer ID; whispering to that name reaches the same player.
			short := shortID(c.Node().Host().ID())
			waitFor(t, 20*time.Second, "P2 in P0's view", func() bool {
				for _, pv := range a.Snapshot().Players {
					if pv.ID == c.Node().Host().ID().String() {
						return true
					}
				}
				return false
			})
			if err := a.Whisper(ctx, short, "by short id"); err != nil {
				t.Fatalf("whisper to %s: %v", short, err)
			}
			if !hasMessage(c, "whisper", a.Name(), "by short id") {
				t.Fatalf("P2 did not get the whisper sent to %s: %+v", short, c.Messages())
			}
		})
	})
}
