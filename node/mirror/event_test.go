package mirror

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/node/crimp"
)

// eventOpts is o running the event protocol.
func eventOpts(o clusterOpts) clusterOpts {
	tweak := o.tweak
	o.tweak = func(i int, c *Config) {
		c.Protocol = ProtocolEvent
		if tweak != nil {
			tweak(i, c)
		}
	}
	return o
}

func logEventStats(t *testing.T, c *cluster) {
	t.Helper()
	logStats(t, c)
	for i, s := range c.mirrors {
		e := s.Metrics().Event
		t.Logf("mirror %d: moves sent %d, taken %d, redundant copies %d, too late %d; actions sent %d; decided %d (late %d), applied %d, undecided %d, reconciled %d; authoritative events %d; decision delay %v",
			i+1, e.MovesSent, e.MovesTaken, e.MovesRedundant, e.MovesLate, e.ActionsSent, e.Decided, e.DecidedLate, e.Applied, e.Undecided, e.Reconciled, e.Authoritative, e.DecisionDelay)
	}
}

// sameLogs checks that every mirror's log of authoritative events equals
// mirror ref's over the ticks (from, to]: the same consistent events in
// every tick, the same decisions with the same ticks. It returns how many
// ticks with events and decisions were compared.
func sameLogs(t *testing.T, c *cluster, ref int, from, to uint64) (ticks, decisions int) {
	t.Helper()
	want := c.mirrors[ref].AuthoritativeLog()
	in := func(tick uint64) bool { return tick > from && tick <= to }
	for i, s := range c.mirrors {
		if i == ref {
			continue
		}
		got := s.AuthoritativeLog()
		for _, tick := range slices.Sorted(maps.Keys(want.Ticks)) {
			if !in(tick) {
				continue
			}
			if g, ok := got.Ticks[tick]; !ok || !slices.Equal(g, want.Ticks[tick]) {
				t.Fatalf("mirror %d's log of tick %d: %v, mirror %d's: %v", i+1, tick, g, ref+1, want.Ticks[tick])
			}
		}
		for tick := range got.Ticks {
			if _, ok := want.Ticks[tick]; in(tick) && !ok {
				t.Fatalf("mirror %d logged events of tick %d that mirror %d did not", i+1, tick, ref+1)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(want.Decisions)) {
			if tick := want.Decisions[k]; in(tick) && got.Decisions[k] != tick {
				t.Fatalf("mirror %d has decision %s at tick %d, mirror %d at %d", i+1, k, got.Decisions[k], ref+1, tick)
			}
		}
		for k, tick := range got.Decisions {
			if _, ok := want.Decisions[k]; in(tick) && !ok {
				t.Fatalf("mirror %d logged decision %s that mirror %d did not", i+1, k, ref+1)
			}
		}
	}
	for tick := range want.Ticks {
		if in(tick) {
			ticks++
		}
	}
	for _, tick := range want.Decisions {
		if in(tick) {
			decisions++
		}
	}
	return ticks, decisions
}

func lastTick(s *Server) uint64 {
	var t uint64
	s.Inspect(func(_, last *State) { t = last.Tick() })
	return t
}

// TestEventLogsIdenticalUnderLoss is the bar for the event
// protocol: three mirrors on the in-memory network with 0-100 ms of jitter
// and 10 % loss, six bots, two minutes of simulated time: every mirror's
// log of authoritative events (the authority's consistent events and
// decisions) is identical, moves lost beyond their redundancy are repaired
// by the hash exchange, and the last states agree at the end.
func TestEventLogsIdenticalUnderLoss(t *testing.T) {
	c := newCluster(t, eventOpts(clusterOpts{mirrors: 3, link: jitteryLink, delays: lossyDelays, history: time.Second, fec: 3, seed: 42}))
	for i := range 6 {
		c.bot(i%3, c.player(fmt.Sprintf("bot%d", i)), uint64(i))
	}
	from := lastTick(c.mirrors[0])
	c.run(2 * time.Minute)
	logEventStats(t, c)
	// The last few seconds may still be on their way.
	to := lastTick(c.mirrors[0]) - 3*30
	ticks, decisions := sameLogs(t, c, 0, from, to)
	t.Logf("identical logs on all three mirrors: %d ticks with consistent events, %d decisions", ticks, decisions)
	if ticks < 100 || decisions < 100 {
		t.Fatalf("only %d ticks with events and %d decisions in two minutes: the test shows nothing", ticks, decisions)
	}
	var redundant uint64
	for i, s := range c.mirrors {
		st := s.Metrics()
		redundant += st.Event.MovesRedundant
		if st.Event.Undecided != 0 {
			t.Errorf("mirror %d: %d actions never decided", i+1, st.Event.Undecided)
		}
		if st.TSS["rollbacks"] == 0 {
			t.Errorf("mirror %d never rolled back: the test does not exercise TSS", i+1)
		}
	}
	if redundant == 0 {
		t.Error("no redundant move copies arrived: the datagrams carry no redundancy")
	}
	// A move lost with all its copies (about one in 10^4 at 10 % loss)
	// makes a mirror's last state differ until the hash exchange repairs
	// it: the mirrors come to agree on five checkpoints in a row.
	agreeing(t, c, 5, time.Minute)
}

// agreeing runs the cluster until the newest n checkpoint ticks all
// mirrors made carry the same hash on every mirror, failing after limit.
func agreeing(t *testing.T, c *cluster, n int, limit time.Duration) {
	t.Helper()
	c.runUntil(limit, fmt.Sprintf("%d agreeing checkpoints in a row", n), func() bool {
		var all []map[uint64][32]byte
		for _, s := range c.mirrors {
			all = append(all, s.Checkpoints())
		}
		var common []uint64
		for tick := range all[0] {
			in := true
			for _, cps := range all[1:] {
				_, ok := cps[tick]
				in = in && ok
			}
			if in {
				common = append(common, tick)
			}
		}
		slices.Sort(common)
		if len(common) < n {
			return false
		}
		for _, tick := range common[len(common)-n:] {
			for _, cps := range all[1:] {
				if cps[tick] != all[0][tick] {
					return false
				}
			}
		}
		return true
	})
}

// TestEventLateActionsDecidedAtArrival: mirror 3's link to the authority
// is slow from the start (600 ms, past DecideWithin; its round trip is
// past CRIMP's DropAfter, so it stays only because the authority gives a
// new member a round trip before its silence counts), so its actions reach
// the authority after every state that could decide them in their own tick:
// each is decided in the tick it arrived in (a stand-in), mirror 3 takes
// back its guesses (a reset to the last state), no action stays
// undecided, mirror 3 is never dropped, and the mirrors' logs and last
// states agree; with either egress (what clients are sent changes when
// bots start, not the group).
func TestEventLateActionsDecidedAtArrival(t *testing.T) {
	for _, egress := range []EgressMode{EgressVFC, EgressArea} {
		t.Run(egress.String(), func(t *testing.T) {
			o := eventOpts(clusterOpts{mirrors: 3, link: crimp.LinkParams{Delay: 5 * time.Millisecond, Jitter: 5 * time.Millisecond},
				links:  map[[2]int]crimp.LinkParams{{2, 0}: {Delay: 600 * time.Millisecond}},
				delays: []time.Duration{0, 100 * time.Millisecond, time.Second}, history: time.Second, fec: 2, seed: 8,
				tweak: func(_ int, c *Config) { c.Egress = egress }})
			lateActionsDecidedAtArrival(t, newCluster(t, o))
		})
	}
}

func lateActionsDecidedAtArrival(t *testing.T, c *cluster) {
	for i := range 6 {
		c.bot(i%3, c.player(fmt.Sprintf("bot%d", i)), uint64(i+10))
	}
	from := lastTick(c.mirrors[0])
	c.run(time.Minute)
	logEventStats(t, c)
	if n := c.mirrors[0].Metrics().CRIMP["members_dropped"]; n != 0 || c.mirrors[2].ID() != 3 {
		t.Fatalf("the authority dropped %d members; mirror 3 is member %d", n, c.mirrors[2].ID())
	}
	auth, slow := c.mirrors[0].Metrics().Event, c.mirrors[2].Metrics().Event
	if auth.DecidedLate == 0 || slow.Reconciled == 0 {
		t.Fatalf("decided late %d, reconciled on the slow mirror %d: no late action was played", auth.DecidedLate, slow.Reconciled)
	}
	for i, s := range c.mirrors {
		if n := s.Metrics().Event.Undecided; n != 0 {
			t.Errorf("mirror %d: %d actions undecided", i+1, n)
		}
	}
	ticks, decisions := sameLogs(t, c, 0, from, lastTick(c.mirrors[0])-3*30)
	t.Logf("%d actions decided late of %d; logs agree on %d ticks and %d decisions", auth.DecidedLate, auth.Decided, ticks, decisions)
	if n, bad := c.agreement(); bad != "" || n < 50 {
		t.Fatalf("%d agreeing checkpoints; %s", n, bad)
	}
}

// TestEventDivergenceRepaired: mirror 2 is cut off for longer than the
// history, so it loses moves and actions for good; its last state differs
// from the authority's, the hash exchange finds it, mirror 2 installs the
// authority's state, and the last states agree from then on.
func TestEventDivergenceRepaired(t *testing.T) {
	c := newCluster(t, eventOpts(clusterOpts{mirrors: 2, link: crimp.LinkParams{Delay: 5 * time.Millisecond}, seed: 23,
		delays: []time.Duration{0, 50 * time.Millisecond, 300 * time.Millisecond}, history: time.Second}))
	c.bot(0, c.player("left"), 1)
	c.bot(1, c.player("right"), 2)
	c.run(5 * time.Second)
	c.net.Disconnect(c.eps[0], c.eps[1])
	cut := c.clock.Now()
	c.run(600 * time.Millisecond)
	c.net.Connect(c.eps[0], c.eps[1])
	c.runUntil(10*time.Second, "mirror 2 repaired", func() bool { return c.mirrors[1].Metrics().Resyncs > 0 })
	t.Logf("mirror 2 installed the authority's state %v after the cut", c.clock.Now().Sub(cut))
	if st := c.mirrors[1].Metrics(); st.Mismatched == 0 {
		t.Fatalf("mirror 2 resynced without a mismatch: %+v", st)
	}
	if n := c.mirrors[0].Metrics().Resyncs; n != 0 {
		t.Errorf("the authority resynced %d times; it is the reference", n)
	}
	for i := range c.seen {
		clear(c.seen[i])
	}
	c.run(10 * time.Second)
	logEventStats(t, c)
	if n, bad := c.agreement(); bad != "" || n < 8 {
		t.Fatalf("after the repair: %d agreeing checkpoints; %s", n, bad)
	}
}

// TestEventDroppedMirrorsPlayersLeave: a mirror dies; the authority drops
// it and, after ReleaseAfter, releases its players: they leave on every
// mirror in the release's tick (the same tick in every mirror's log), with
// a fixed and with a rotating authority.
func TestEventDroppedMirrorsPlayersLeave(t *testing.T) {
	for _, rotate := range []bool{false, true} {
		t.Run(map[bool]string{false: "fixed", true: "rotate"}[rotate], func(t *testing.T) {
			o := eventOpts(clusterOpts{mirrors: 3, link: crimp.LinkParams{Delay: 5 * time.Millisecond, Jitter: 5 * time.Millisecond},
				delays: []time.Duration{0, 50 * time.Millisecond, 300 * time.Millisecond}, history: time.Second, seed: 31,
				tweak: func(_ int, c *Config) {
					if rotate {
						c.Rotate, c.AuthorityKey, c.AuthorityPublicKey = true, nil, nil
					}
				}})
			c := newCluster(t, o)
			var gone []game.PlayerID
			for i := range 6 {
				p := c.player(fmt.Sprintf("p%d", i))
				c.bot(i%3, p, uint64(i))
				if i%3 == 2 {
					gone = append(gone, game.PlayerID(p.account))
				}
			}
			c.run(5 * time.Second)
			c.mirrors[2].Close()
			c.mirrors = c.mirrors[:2]
			c.runUntil(20*time.Second, "mirror 3's players released on both mirrors", func() bool {
				for i := range c.mirrors {
					for _, p := range gone {
						if _, ok := playerIn(c, i, p); ok {
							return false
						}
					}
				}
				return true
			})
			c.run(2 * time.Second)
			left := map[int]map[game.PlayerID]uint64{}
			for i, s := range c.mirrors {
				left[i] = map[game.PlayerID]uint64{}
				for tick, evs := range s.AuthoritativeLog().Ticks {
					for _, e := range evs {
						if e.Kind == game.EventLeft && slices.Contains(gone, e.Player) {
							left[i][e.Player] = tick
						}
					}
				}
			}
			for _, p := range gone {
				t0, ok0 := left[0][p]
				t1, ok1 := left[1][p]
				if !ok0 || !ok1 || t0 != t1 {
					t.Fatalf("%s left at tick %d (logged %v) on mirror 1, %d (%v) on mirror 2", p, t0, ok0, t1, ok1)
				}
				if left[0][gone[0]] != t0 {
					t.Errorf("the released players left in different ticks: %v", left[0])
				}
			}
			t.Logf("mirror 3's players left in tick %d on both mirrors", left[0][gone[0]])
			if n, bad := c.agreement(0, 1); bad != "" || n < 10 {
				t.Fatalf("%d agreeing checkpoints; %s", n, bad)
			}
		})
	}
}

// TestEventRotatingAuthority: with -authority-mode rotate the mirror
// holding the duty decides; when it dies, the new holder waits one CRIMP
// history and then decides what is left undecided and everything after,
// and the survivors' last states agree.
func TestEventRotatingAuthority(t *testing.T) {
	o := eventOpts(rotateOpts())
	c := newCluster(t, o)
	for i := range 6 {
		c.bot(i%3, c.player(fmt.Sprintf("bot%d", i)), uint64(i+1))
	}
	c.run(10 * time.Second)
	if d := c.mirrors[0].Metrics().Event.Decided; d == 0 {
		t.Fatal("the founder holding the duty decided nothing")
	}
	c.mirrors[0].Close()
	c.mirrors = c.mirrors[1:]
	c.seen = c.seen[1:]
	c.runUntil(10*time.Second, "a new holder", func() bool {
		h := holderOf(c.mirrors[0])
		return h != authorityID && h != 0 && h == holderOf(c.mirrors[1])
	})
	holder := holderOf(c.mirrors[0])
	var by *Server
	for _, s := range c.mirrors {
		if crimp.MemberID(s.ID()) == holder {
			by = s
		}
	}
	c.runUntil(10*time.Second, "the new holder deciding", func() bool { return by.Metrics().Event.Decided > 20 })
	for i := range c.seen {
		clear(c.seen[i])
	}
	c.run(10 * time.Second)
	logEventStats(t, c)
	if n, bad := c.agreement(); bad != "" || n < 8 {
		t.Fatalf("after the take-over: %d agreeing checkpoints; %s", n, bad)
	}
}

// TestRespawnHome: under either protocol a dead player who asks to come
// back at home (a game.CommandRespawn from its ingress, the one rule of
// both) respawns in its home region, at the same place on every mirror.
func TestRespawnHome(t *testing.T) {
	for _, p := range []Protocol{ProtocolCommand, ProtocolEvent} {
		t.Run(p.String(), func(t *testing.T) {
			c := newCluster(t, clusterOpts{mirrors: 2, link: crimp.LinkParams{Delay: 5 * time.Millisecond}, seed: 5,
				delays: []time.Duration{0, 50 * time.Millisecond, 300 * time.Millisecond}, history: time.Second,
				tweak: func(_ int, cfg *Config) { cfg.Protocol = p }})
			w, err := game.NewWorld(c.game)
			if err != nil {
				t.Fatal(err)
			}
			ann := c.player("ann")
			id := game.PlayerID(ann.account)
			home := w.HomeRegion(id)
			away := game.RegionCoord{X: (home.X + 1) % c.game.RegionsX, Y: home.Y}
			// A starving character with one health left dies at the next
			// hunger tick, away from home.
			if _, err := c.chars.Save(t.Context(), ann.tok, game.Character{Pos: w.SpawnPoint(id, away, 0), Health: 1, Hunger: game.MaxHunger, Skill: 10}, 0); err != nil {
				t.Fatal(err)
			}
			lc := c.connect(1, ann)
			c.runUntil(20*time.Second, "ann dead", func() bool { v := lc.View(); return v.HasSelf && !v.Self.Alive })
			lc.SendInput(game.Input{}, true)
			c.runUntil(time.Minute, "ann back at home on both mirrors", func() bool {
				for i := range c.mirrors {
					p, ok := playerIn(c, i, id)
					if !ok || !p.Alive || w.RegionOf(p.Pos) != home {
						return false
					}
				}
				return true
			})
			p0, _ := playerIn(c, 0, id)
			p1, _ := playerIn(c, 1, id)
			if p0.Pos != p1.Pos {
				t.Fatalf("ann respawned at %v on mirror 1, %v on mirror 2", p0.Pos, p1.Pos)
			}
			t.Logf("ann respawned at home %v (%v), having died in %v", home, p0.Pos, away)
		})
	}
}
