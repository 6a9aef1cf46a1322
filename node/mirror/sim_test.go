package mirror

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/node/crimp"
)

// jitteryLink is the network: 0-100 ms of jitter, 10 % loss.
var jitteryLink = crimp.LinkParams{Jitter: 100 * time.Millisecond, Loss: 0.10}

// lossyDelays cover CRIMP's recovery under that network: the last delay
// is CRIMP's history (1 s), so every packet CRIMP delivers is in time.
var lossyDelays = []time.Duration{0, 100 * time.Millisecond, time.Second}

func logStats(t *testing.T, c *cluster) {
	t.Helper()
	for i, s := range c.mirrors {
		st := s.Metrics()
		t.Logf("mirror %d: %d commands sent, %d received; checkpoints agreed %d, mismatched %d; resyncs %d; rollbacks %d (leading %d), re-executed %d; too late %d; crimp repairs %d, via FEC %d",
			i+1, st.CommandsSent, st.CommandsReceived, st.Agreed, st.Mismatched, st.Resyncs,
			st.TSS["rollbacks"], st.LeadingRollbacks, st.TSS["reexecuted"], st.TSS["too_late"], st.CRIMP["delivered_repair"], st.CRIMP["delivered_fec"])
	}
}

// TestMirrorsAgreeUnderJitterAndLoss is the bar: three mirrors on
// the in-memory CRIMP network with 0-100 ms jitter and 10 % loss, six bots
// (two on each mirror), ten minutes of simulated time: every mirror's last
// state has the same hash at every checkpoint.
func TestMirrorsAgreeUnderJitterAndLoss(t *testing.T) {
	c := newCluster(t, clusterOpts{mirrors: 3, link: jitteryLink, delays: lossyDelays, history: time.Second, fec: 3, seed: 42})
	for i := range 6 {
		c.bot(i%3, c.player(fmt.Sprintf("bot%d", i)), uint64(i))
	}
	c.run(10 * time.Minute)
	logStats(t, c)
	n, bad := c.agreement()
	if bad != "" {
		t.Fatalf("after %d agreeing checkpoints: %s", n, bad)
	}
	if n < 595 {
		t.Fatalf("only %d checkpoints were made by all three mirrors in ten minutes", n)
	}
	for i, s := range c.mirrors {
		st := s.Metrics()
		if st.Mismatched != 0 || st.TSS["too_late"] != 0 {
			t.Errorf("mirror %d: %d mismatches, %d commands too late", i+1, st.Mismatched, st.TSS["too_late"])
		}
		if st.TSS["rollbacks"] == 0 {
			t.Errorf("mirror %d never rolled back under 100 ms of jitter: the test does not exercise TSS", i+1)
		}
	}
	t.Logf("%d checkpoints agree on all three mirrors", n)
}

// TestMidGameJoin: a mirror that joins a running game through the
// authority (state transfer: the last state, the epoch, the pending
// commands) catches up and agrees with the others from then on; a bot on
// it plays with the others.
func TestMidGameJoin(t *testing.T) {
	o := clusterOpts{mirrors: 2, link: crimp.LinkParams{Delay: 10 * time.Millisecond, Jitter: 20 * time.Millisecond, Loss: 0.02},
		delays: []time.Duration{0, 50 * time.Millisecond, 300 * time.Millisecond}, history: time.Second, fec: 2, seed: 7}
	c := newCluster(t, o)
	for i := range 4 {
		c.bot(i%2, c.player(fmt.Sprintf("early%d", i)), uint64(i))
	}
	c.run(time.Minute)
	for j := range 2 {
		c.net.SetLink(site(2), site(j), o.link)
	}
	joined := c.clock.Now()
	m3 := c.addMirror(o, 2)
	t.Logf("mirror 3 joined (ID %d) after %v of play, ready %v later", m3.ID(), time.Minute, c.clock.Now().Sub(joined))
	late := c.bot(2, c.player("late"), 99)
	c.run(time.Minute)
	logStats(t, c)
	n, bad := c.agreement(0, 1, 2)
	if bad != "" {
		t.Fatalf("after %d agreeing checkpoints: %s", n, bad)
	}
	if n < 55 {
		t.Fatalf("only %d checkpoints made by all three mirrors in the minute after the join", n)
	}
	if st := m3.Metrics(); st.Mismatched != 0 || st.Resyncs != 0 {
		t.Fatalf("the joined mirror needed fixing: %d mismatches, %d resyncs", st.Mismatched, st.Resyncs)
	}
	var players int
	m3.Inspect(func(_, last *State) { players = len(last.World().Players()) })
	if players != 5 {
		t.Fatalf("the joined mirror's world has %d players, want 5", players)
	}
	if v := late.View(); len(v.Players) == 0 && v.Self.Score == 0 && !v.HasSelf {
		t.Fatalf("the bot on the joined mirror sees nothing: %+v", v)
	}
	t.Logf("%d checkpoints agree since the join", n)
}

// watchedSaves calls onSave with every character saved, before saving it.
type watchedSaves struct {
	Characters
	onSave func(tok string, ch game.Character)
}

func (w *watchedSaves) Save(ctx context.Context, tok string, ch game.Character, version int64) (int64, error) {
	w.onSave(tok, ch)
	return w.Characters.Save(ctx, tok, ch, version)
}

// TestKilledMirrorPlayersReconnect: a mirror dies; the authority drops it
// at 3/4 of CRIMP's history; a player who reconnects to another mirror
// within the grace period finds its character as the world has it (not a
// fresh one); a player who does not is released from the world, and when
// it comes back later it gets the character the dead mirror saved to the
// account server, which was its last trailing state's; and when the
// reconnected player leaves, its character is saved from the last
// trailing state.
func TestKilledMirrorPlayersReconnect(t *testing.T) {
	var m3 *Server
	var bob player
	var bobSaves, unlikeLeading int
	o := clusterOpts{mirrors: 3, link: crimp.LinkParams{Delay: 5 * time.Millisecond, Jitter: 10 * time.Millisecond},
		delays: []time.Duration{0, 50 * time.Millisecond, 200 * time.Millisecond}, history: time.Second, seed: 3,
		tweak: func(i int, c *Config) {
			c.ReleaseAfter = 10 * time.Second
			if i != 2 {
				return
			}
			// Every save mirror 3 makes of bob (periodic, every 5 s) is
			// his character in its last state at that moment.
			c.Characters = &watchedSaves{Characters: c.Characters, onSave: func(tok string, ch game.Character) {
				if tok != bob.tok {
					return
				}
				bobSaves++
				m3.Inspect(func(leading, last *State) {
					p, _ := last.World().Player(game.PlayerID(bob.account))
					if want := game.CharacterOf(p); ch != want {
						t.Errorf("mirror 3 saved bob as %+v; its last state has %+v", ch, want)
					}
					if p, _ := leading.World().Player(game.PlayerID(bob.account)); game.CharacterOf(p) != ch {
						unlikeLeading++
					}
				})
			}}
		}}
	c := newCluster(t, o)
	m3 = c.mirrors[2]
	for i := range 2 {
		c.bot(i, c.player(fmt.Sprintf("steady%d", i)), uint64(i))
	}
	ann := c.player("ann")
	bob = c.player("bob")
	annC := c.bot(2, ann, 11)
	c.bot(2, bob, 12)
	c.run(30 * time.Second)

	// Ann stops playing (so her character stays put), then mirror 3 dies.
	annC.Drop()
	c.run(2 * time.Second)
	var before game.Player
	c.mirrors[0].Inspect(func(_, last *State) { before, _ = last.World().Player(game.PlayerID(ann.account)) })
	if before.ID == "" {
		t.Fatal("ann is not in the world")
	}
	c.mirrors[2].Close()
	dropped := func() bool {
		var n int
		c.mirrors[0].member.crimp(func(nd *crimp.Node) { n = len(nd.Members()) })
		return n == 1
	}
	start := c.clock.Now()
	c.runUntil(5*time.Second, "the authority to drop mirror 3", dropped)
	// Simulated time: the bound is exact up to the last session packet
	// mirror 3 sent before it died and the polling step.
	silent := c.clock.Now().Sub(start)
	t.Logf("mirror 3 dropped %v after it died (3/4 of the 1 s history is 750 ms)", silent)
	if silent < 750*time.Millisecond-crimp.DefaultConfig().SessionInterval || silent > time.Second {
		t.Fatalf("mirror 3 dropped %v after it died, not at 3/4 of the 1 s history", silent)
	}

	// Ann reconnects to mirror 2 within the grace period.
	ann.tok = c.token(ann, c.clock.Now(), time.Hour)
	again := c.connect(1, ann)
	c.runUntil(5*time.Second, "ann back", func() bool { return again.View().HasSelf })
	v := again.View()
	if !v.Restored {
		t.Fatal("the welcome does not say the character was kept")
	}
	got := v.Self
	if got.Score != before.Score || got.Skill != before.Skill || got.Name != before.Name {
		t.Fatalf("ann came back as %+v, was %+v", got, before)
	}
	if before.Alive && got.Pos != before.Pos {
		t.Fatalf("ann came back at %v, was at %v", got.Pos, before.Pos)
	}
	// Bob did not come back: released after ReleaseAfter.
	gone := func() bool {
		var in bool
		for _, m := range c.mirrors[:2] {
			m.Inspect(func(_, last *State) {
				_, ok := last.World().Player(game.PlayerID(bob.account))
				in = in || ok
			})
		}
		return !in
	}
	c.runUntil(20*time.Second, "bob released", gone)
	if n := c.mirrors[0].Metrics(); n.Resyncs != 0 {
		t.Fatalf("resyncs %d", n.Resyncs)
	}
	// Bob comes back (to mirror 1): his character is what mirror 3 last
	// saved to the account server, from its last trailing state.
	if bobSaves == 0 || unlikeLeading == 0 {
		t.Fatalf("mirror 3 saved bob %d times, %d of them unlike the leading state: the test shows nothing", bobSaves, unlikeLeading)
	}
	saved, version := c.chars.Get(bob.account)
	bob.tok = c.token(bob, c.clock.Now(), time.Hour)
	bobAgain := c.connect(0, bob)
	c.runUntil(5*time.Second, "bob back", func() bool { return bobAgain.View().HasSelf })
	if v := bobAgain.View(); !v.Restored || v.Self.Score != saved.Score || v.Self.Skill != saved.Skill || v.Self.Pos != saved.Pos {
		t.Fatalf("bob came back as %+v (restored %v); mirror 3 saved %+v (version %d)", v.Self, v.Restored, saved, version)
	}
	t.Logf("bob: %d saves by mirror 3, all from its last state (%d differ from its leading state); back on mirror 1 as saved", bobSaves, unlikeLeading)

	// Ann plays a little on mirror 2, stops, then leaves: her character
	// is saved as the last state has it at the tick before her leave.
	again.StartBot(21, time.Second/30)
	c.run(10 * time.Second)
	again.Drop()
	c.run(time.Second)
	var last game.Player
	c.mirrors[1].Inspect(func(_, st *State) { last, _ = st.World().Player(game.PlayerID(ann.account)) })
	_, v0 := c.chars.Get(ann.account)
	c.clock.AfterFunc(0, again.conn.Closed)
	c.runUntil(5*time.Second, "ann's save", func() bool { _, v := c.chars.Get(ann.account); return v > v0 })
	saved, _ = c.chars.Get(ann.account)
	want := game.CharacterOf(last)
	if saved.Pos != want.Pos || saved.Score != want.Score || saved.Skill != want.Skill || abs64(int64(saved.Hunger-want.Hunger)) > 1 || abs64(int64(saved.Health-want.Health)) > 1 {
		t.Fatalf("saved %+v, the last state had %+v", saved, want)
	}
	n, bad := c.agreement(0, 1)
	if bad != "" {
		t.Fatal(bad)
	}
	t.Logf("ann saved as %+v; %d checkpoints agree on mirrors 1 and 2", saved, n)
}

// offsetClock is a clock that reads off ahead of another.
type offsetClock struct {
	crimp.Clock
	off *atomic.Int64
}

func (o offsetClock) Now() time.Time { return o.Clock.Now().Add(time.Duration(o.off.Load())) }

// TestClockSkew: a mirror whose clock runs 50 ms ahead is found out from
// CRIMP's session echoes, by both sides; neither is ready (/readyz 503)
// while it lasts, and both are again once the clock is set right.
func TestClockSkew(t *testing.T) {
	c := newCluster(t, clusterOpts{mirrors: 1, seed: 5, delays: []time.Duration{0, 50 * time.Millisecond, 200 * time.Millisecond}, history: time.Second})
	c.net.SetLink(site(0), site(1), crimp.LinkParams{Delay: 5 * time.Millisecond, Jitter: 2 * time.Millisecond})
	off := &atomic.Int64{}
	off.Store(int64(50 * time.Millisecond))
	cc := crimp.DefaultConfig()
	cc.History = time.Second
	fast, err := New(Config{Game: c.game, CRIMP: cc, Transport: c.net.Endpoint(site(1)), Clock: offsetClock{c.clock, off},
		Spawn: func(f func()) { c.clock.AfterFunc(0, f) }, AccountKey: c.pub, Characters: c.chars, Logger: testLogger(), Seed: 9,
		AuthorityPublicKey: c.authPub()})
	if err != nil {
		t.Fatal(err)
	}
	if err := fast.Start(); err != nil {
		t.Fatal(err)
	}
	c.mirrors = append(c.mirrors, fast)
	c.seen = append(c.seen, map[uint64][32]byte{})
	beyond := func(s *Server, peer uint32) bool {
		sk, ok := s.Skew()[peer]
		return ok && sk.Beyond(5*time.Millisecond)
	}
	c.runUntil(10*time.Second, "the skew found by both", func() bool { return beyond(c.mirrors[0], 2) && beyond(fast, 1) })
	for _, m := range []struct {
		s    *Server
		peer uint32
		want time.Duration
	}{{c.mirrors[0], 2, 50 * time.Millisecond}, {fast, 1, -50 * time.Millisecond}} {
		sk := m.s.Skew()[m.peer]
		t.Logf("mirror %d measures mirror %d's clock at %v ± %v", m.s.ID(), m.peer, sk.Offset, sk.Uncertainty)
		if d := sk.Offset - m.want; d < -sk.Uncertainty || d > sk.Uncertainty {
			t.Errorf("measured %v ± %v, the truth is %v", sk.Offset, sk.Uncertainty, m.want)
		}
		if m.s.Ready() {
			t.Errorf("mirror %d is ready although a clock is 50 ms off", m.s.ID())
		}
		rec := httptest.NewRecorder()
		m.s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "skew") {
			t.Errorf("/readyz of mirror %d: %d %q", m.s.ID(), rec.Code, rec.Body.String())
		}
	}
	var metric string
	reg := prometheus.NewRegistry()
	reg.MustRegister(c.mirrors[0].Collectors()...)
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "mirror_clock_skew_seconds" {
			metric = mf.String()
		}
	}
	if !strings.Contains(metric, `value:"2"`) {
		t.Errorf("mirror_clock_skew_seconds has no series for mirror 2: %s", metric)
	}
	off.Store(0)
	fixed := c.clock.Now()
	c.runUntil(10*time.Second, "both ready with the clock set right", func() bool { return c.mirrors[0].Ready() && fast.Ready() })
	t.Logf("both ready again %v after the clock was set right", c.clock.Now().Sub(fixed))
}

// cutLinkOpts is two mirrors on 5 ms links whose last delay (300 ms) is
// well inside CRIMP's history (1 s): a test that cuts the link for 600 ms
// has each get the other's commands too late for its last state, though
// CRIMP still recovers them.
func cutLinkOpts(seed int64) clusterOpts {
	return clusterOpts{mirrors: 2, link: crimp.LinkParams{Delay: 5 * time.Millisecond}, seed: seed,
		delays: []time.Duration{0, 50 * time.Millisecond, 300 * time.Millisecond}, history: time.Second}
}

// TestResyncAfterDivergence: the link between two mirrors fails for longer
// than the last delay, so each gets the other's commands too late (CRIMP
// still recovers them within its history): the last states differ, the
// hash exchange finds it within a couple of seconds, both sides dump their
// state, the non-authority fetches the authority's, and from then on they
// agree again.
func TestResyncAfterDivergence(t *testing.T) {
	dumps := []string{t.TempDir(), t.TempDir()}
	o := cutLinkOpts(23)
	o.tweak = func(i int, cfg *Config) { cfg.DataDir = dumps[i] }
	c := newCluster(t, o)
	c.bot(0, c.player("left"), 1)
	c.bot(1, c.player("right"), 2)
	c.run(5 * time.Second)
	c.net.Disconnect(c.eps[0], c.eps[1])
	cut := c.clock.Now()
	c.run(600 * time.Millisecond)
	c.net.Connect(c.eps[0], c.eps[1])
	c.runUntil(10*time.Second, "mirror 2 resynced", func() bool { return c.mirrors[1].Metrics().Resyncs > 0 })
	t.Logf("mirror 2 resynced %v after the cut", c.clock.Now().Sub(cut))
	for i, s := range c.mirrors {
		st := s.Metrics()
		if st.TSS["too_late"] == 0 || st.Mismatched == 0 {
			t.Errorf("mirror %d: %d too late, %d mismatches: the cut did not make them diverge", i+1, st.TSS["too_late"], st.Mismatched)
		}
	}
	if n := c.mirrors[0].Metrics().Resyncs; n != 0 {
		t.Errorf("the authority resynced %d times; it is the reference", n)
	}
	// Both states of the mismatch are on disk and decode.
	for i, dir := range dumps {
		files, _ := filepath.Glob(filepath.Join(dir, "mismatches", "*.state"))
		if len(files) == 0 {
			t.Fatalf("mirror %d dumped no state", i+1)
		}
		b, err := os.ReadFile(files[0])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := UnmarshalState(b, c.game); err != nil {
			t.Fatalf("mirror %d's dump %s: %v", i+1, files[0], err)
		}
		t.Logf("mirror %d dumped %s", i+1, filepath.Base(files[0]))
	}
	// From the resync on they agree.
	after := map[uint64]bool{}
	for tick := range c.seen[1] {
		after[tick] = true
	}
	for i := range c.seen {
		clear(c.seen[i])
	}
	c.run(10 * time.Second)
	n, bad := c.agreement()
	if bad != "" || n < 8 {
		t.Fatalf("after the resync: %d agreeing checkpoints; %s", n, bad)
	}
	logStats(t, c)
}

// TestAutoDelays: with AutoDelays each mirror re-tunes its inner delays
// from the latencies it observes (tss.Retuner, ChooseDelays), keeps the
// group's last delay, and the mirrors still agree.
func TestAutoDelays(t *testing.T) {
	start := []time.Duration{0, 400 * time.Millisecond, time.Second}
	c := newCluster(t, clusterOpts{mirrors: 2, link: crimp.LinkParams{Delay: 10 * time.Millisecond, Jitter: 40 * time.Millisecond}, seed: 31,
		delays: start, history: time.Second, fec: 2, tweak: func(_ int, cfg *Config) { cfg.AutoDelays = true }})
	for i := range 4 {
		c.bot(i%2, c.player(fmt.Sprintf("tuner%d", i)), uint64(i))
	}
	c.run(3 * time.Minute)
	for i, s := range c.mirrors {
		var delays []time.Duration
		s.Inspect(func(_, _ *State) { delays = s.sync.Config().Delays })
		st := s.Metrics()
		t.Logf("mirror %d: delays %v after %d re-tunings; rollbacks %d", i+1, delays, st.TSS["reconfigured"], st.TSS["rollbacks"])
		if st.TSS["reconfigured"] == 0 || slices.Equal(delays, start) {
			t.Errorf("mirror %d never re-tuned its delays", i+1)
		}
		if delays[len(delays)-1] != start[len(start)-1] {
			t.Errorf("mirror %d changed the group's last delay to %v", i+1, delays[len(delays)-1])
		}
	}
	n, bad := c.agreement()
	if bad != "" || n < 170 {
		t.Fatalf("%d agreeing checkpoints; %s", n, bad)
	}
}

// TestThirtyBotsThreeMirrors is MIRROR_MODE.md §6's Mirror 1: three
// mirrors, thirty bots, 25 ms links with 5 % loss, five minutes of
// simulated time (two unless MIRROR_TEST_FULL is set: the five take about
// a minute of CPU): no hash mismatch; every client's updates are at most one
// frame plus its round trip old (the age of an update: its arrival minus
// the end of the leading tick it shows, in simulated time, so the figure
// is the protocol's, not the machine's); rollback counts and depths are
// exported on /metrics.
func TestThirtyBotsThreeMirrors(t *testing.T) {
	c := newCluster(t, clusterOpts{mirrors: 3, link: crimp.LinkParams{Delay: 25 * time.Millisecond, Loss: 0.05}, delays: lossyDelays,
		history: time.Second, fec: 2, seed: 30})
	var ages []time.Duration
	const clientDelay = time.Millisecond // each way (ConnectLocal)
	for i := range 30 {
		lc := c.bot(i%3, c.player(fmt.Sprintf("bot%d", i)), uint64(i))
		s := c.mirrors[i%3]
		lc.mu.Lock()
		lc.onFrame = func(frame []byte, at time.Time) {
			f, err := DecodeServerFrame(frame)
			if err != nil || f.GetUpdate() == nil {
				return
			}
			var end int64
			s.Inspect(func(_, _ *State) {
				cfg := s.sync.Config()
				end = cfg.Epoch + int64(f.GetUpdate().LeadingTick)*int64(cfg.TickPeriod)
			})
			ages = append(ages, at.Sub(time.Unix(0, end)))
		}
		lc.mu.Unlock()
	}
	play := 2 * time.Minute
	if os.Getenv("MIRROR_TEST_FULL") != "" {
		play = 5 * time.Minute
	}
	c.run(play)
	logStats(t, c)
	n, bad := c.agreement()
	if want := int(play/time.Second) - 10; bad != "" || n < want {
		t.Fatalf("%d agreeing checkpoints in %v (want %d); %s", n, play, want, bad)
	}
	for i, s := range c.mirrors {
		if st := s.Metrics(); st.Mismatched != 0 {
			t.Errorf("mirror %d: %d hash mismatches", i+1, st.Mismatched)
		}
	}
	slices.Sort(ages)
	p99 := ages[len(ages)*99/100]
	bound := time.Second/30 + 2*clientDelay
	t.Logf("%d updates; age p50 %v, p99 %v, max %v (bound: one frame plus the round trip, %v)", len(ages), ages[len(ages)/2], p99, ages[len(ages)-1], bound)
	if p99 > bound {
		t.Errorf("update age p99 %v over one frame plus the round trip (%v)", p99, bound)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c.mirrors[1].Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, mf := range mfs {
		found[mf.GetName()] = true
	}
	for _, name := range []string{"tss_rollbacks_total", "tss_rollback_depth_ticks", "mirror_leading_rollbacks_total"} {
		if !found[name] {
			t.Errorf("%s is not exported", name)
		}
	}
}

// TestLeaveSaveWaitsForTheAuthority: the link between mirror 2 and the
// authority fails for longer than the last delay while mirror 2's player
// walks, and the player leaves right after it heals, before the next
// checkpoint. Mirror 2 executed steps that reached the authority too late,
// so its last state has the player where the game everyone else plays
// never had them. The save waits for the authority's hash: it differs,
// mirror 2 resyncs, and what is saved is the authority's departure, not
// mirror 2's own reading.
func TestLeaveSaveWaitsForTheAuthority(t *testing.T) {
	c := newCluster(t, cutLinkOpts(29))
	walker := c.player("walker")
	lc := c.bot(1, walker, 3)
	c.run(3 * time.Second)
	// Start just past a checkpoint tick, so that the cut and the leave
	// both come before the next one: mirror 2 learns that it differs only
	// after it has read the leaving character.
	cfg := c.mirrors[1].sync.Config()
	tick := func() uint64 { return cfg.TickOf(c.clock.Now().UnixNano()) }
	c.runUntil(2*time.Second, "a tick just past a checkpoint", func() bool { n := tick() % cfg.CheckpointTicks; return n >= 2 && n < 6 })
	c.net.Disconnect(c.eps[0], c.eps[1])
	c.run(600 * time.Millisecond)
	c.net.Connect(c.eps[0], c.eps[1])
	c.run(60 * time.Millisecond)
	_, v0 := c.chars.Get(walker.account)
	lc.Close()
	var own game.Character
	waited := false
	c.runUntil(10*time.Second, "walker's save", func() bool {
		c.mirrors[1].locked(func() {
			if u := c.mirrors[1].unconfirmed; len(u) > 0 {
				own, waited = u[0].own, true
			}
		})
		_, v := c.chars.Get(walker.account)
		return v > v0
	})
	saved, _ := c.chars.Get(walker.account)
	var dep Departure
	c.mirrors[0].Inspect(func(_, last *State) {
		for _, d := range last.Departures() {
			if d.Player == game.PlayerID(walker.account) {
				dep = d
			}
		}
	})
	st1, st2 := c.mirrors[0].Metrics(), c.mirrors[1].Metrics()
	t.Logf("left at tick %d; mirror 2 read %+v, the authority had %+v, saved %+v; authority: %d too late; mirror 2: %d mismatches, %d resyncs, leave saves %v",
		dep.Tick, own, dep.Character, saved, st1.TSS["too_late"], st2.Mismatched, st2.Resyncs, st2.LeaveSaves)
	switch {
	case dep.Tick == 0:
		t.Fatal("the authority has no departure of walker")
	case !waited:
		t.Fatal("mirror 2 saved without waiting for the authority's confirmation")
	case own == dep.Character:
		t.Fatal("mirror 2's reading is the authority's: the cut made nothing differ, the test shows nothing")
	case saved != dep.Character:
		t.Fatalf("saved %+v, the authority's state had %+v", saved, dep.Character)
	case st2.Resyncs == 0 || st2.LeaveSaves["agreed"] != 1:
		t.Fatalf("mirror 2 resynced %d times, leave saves %v", st2.Resyncs, st2.LeaveSaves)
	}
}

// TestLeaveTooLateForTheAuthority: a player leaves while the link between
// their mirror and the authority is down for longer than the last delay,
// so the leave reaches the authority too late and its game keeps the
// player. Mirror 2 finds its state differs and resyncs, which brings the
// player back on mirror 2 with no session; mirror 2 then sends the leave
// again, and the player is gone everywhere.
func TestLeaveTooLateForTheAuthority(t *testing.T) {
	c := newCluster(t, cutLinkOpts(31))
	ghost := c.player("ghost")
	lc := c.bot(1, ghost, 4)
	c.run(2 * time.Second)
	c.net.Disconnect(c.eps[0], c.eps[1])
	c.run(100 * time.Millisecond)
	lc.Close()
	c.run(500 * time.Millisecond)
	c.net.Connect(c.eps[0], c.eps[1])
	in := func(i int) bool {
		var ok bool
		c.mirrors[i].Inspect(func(leading, last *State) {
			_, a := leading.World().Player(game.PlayerID(ghost.account))
			_, b := last.World().Player(game.PlayerID(ghost.account))
			ok = a || b
		})
		return ok
	}
	c.runUntil(10*time.Second, "mirror 2 resynced", func() bool { return c.mirrors[1].Metrics().Resyncs > 0 })
	if st := c.mirrors[0].Metrics(); st.TSS["too_late"] == 0 {
		t.Fatal("nothing reached the authority too late: the test shows nothing")
	}
	c.runUntil(10*time.Second, "the player gone from both mirrors", func() bool { return !in(0) && !in(1) })
	if st := c.mirrors[1].Metrics(); st.OrphanLeaves != 1 || st.LeaveSaves["agreed"] != 1 {
		t.Fatalf("mirror 2 sent %d orphan leaves (want 1); leave saves %v (want one agreed: the player as the authority's game still had them)", st.OrphanLeaves, st.LeaveSaves)
	}
	c.run(3 * time.Second)
	a, b := c.mirrors[0].Checkpoints(), c.mirrors[1].Checkpoints()
	newest := uint64(0)
	for tick := range a {
		if _, ok := b[tick]; ok {
			newest = max(newest, tick)
		}
	}
	if newest == 0 || a[newest] != b[newest] {
		t.Fatalf("the mirrors' newest common checkpoint, tick %d, differs", newest)
	}
}
