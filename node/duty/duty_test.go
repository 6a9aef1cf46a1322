package duty

import (
	"bytes"
	"crypto/ed25519"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/game/arbiter"
	"github.com/overworld-p2p/overworld/node/crimp"
)

var simStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// group is members on a crimp.MemNetwork driven by a SimClock.
type group struct {
	t       *testing.T
	clock   *crimp.SimClock
	net     *crimp.MemNetwork
	disc    *crimp.MemNetwork // the LAN discovery group
	eps     []*crimp.MemEndpoint
	members []*Member
	dead    []bool
	grants  []map[arbiter.ResourceID]arbiter.MemberID // per member: the grant that stands, as reported
	answers []map[arbiter.ResourceID]bool             // per member: its own claims answered
	crimpEv [][]crimp.Event
}

func memberKey(i int) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{byte(30 + i)}, ed25519.SeedSize))
}

func testConfig(i int) Config {
	return Config{
		CRIMP: crimp.Config{History: time.Second, SessionInterval: 100 * time.Millisecond, JoinTimeout: 50 * time.Millisecond,
			Key: memberKey(i), StateAddr: "127.0.0.1:7000", MaxGroup: 8},
		Arbiter: arbiter.Config{MaxMembers: 8, Teams: 2},
		Seed:    int64(i + 1),
	}
}

// netSeed seeds the in-memory network's jitter; TestDutySoak runs the
// scenarios over many.
var (
	netSeed int64 = 7
	netLoss float64
)

func newGroup(t *testing.T, n int) *group { return newGroupWith(t, n, nil, nil) }

// newGroupWith builds n members, the first the founder, with tweak applied
// to each configuration and before run on the group before anyone starts.
func newGroupWith(t *testing.T, n int, tweak func(i int, c *Config), before func(g *group)) *group {
	t.Helper()
	clock := crimp.NewSimClock(simStart)
	g := &group{t: t, clock: clock, net: crimp.NewMemNetwork(clock, netSeed), disc: crimp.NewMemNetwork(clock, netSeed+1)}
	g.net.SetLAN("lan", crimp.LinkParams{Delay: time.Millisecond, Jitter: time.Millisecond, Loss: netLoss})
	g.disc.SetLAN("lan", crimp.LinkParams{Delay: time.Millisecond})
	if before != nil {
		before(g)
	}
	for i := range n {
		cfg := testConfig(i)
		if i == 0 {
			cfg.CRIMP.ID, cfg.CRIMP.Founder = 1, true
		}
		if tweak != nil {
			tweak(i, &cfg)
		}
		g.add(cfg)
		if i > 0 {
			if err := g.members[i].Join(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !g.runUntil(20*time.Second, func() bool { return g.settled() }) {
		g.dump()
		t.Fatal("the group did not settle")
	}
	return g
}

func (g *group) add(cfg Config) int {
	g.t.Helper()
	node, err := New(cfg)
	if err != nil {
		g.t.Fatal(err)
	}
	i := len(g.members)
	ep := g.net.Endpoint("lan")
	g.grants = append(g.grants, map[arbiter.ResourceID]arbiter.MemberID{})
	g.answers = append(g.answers, map[arbiter.ResourceID]bool{})
	g.crimpEv = append(g.crimpEv, nil)
	m := NewMember(node, ep, g.clock, MemberOptions{Discovery: g.disc.Endpoint("lan"), OnEvent: func(e Event) {
		switch {
		case e.CRIMP != nil:
			g.crimpEv[i] = append(g.crimpEv[i], *e.CRIMP)
		case e.Arbiter.Kind == arbiter.EventGrant:
			g.grants[i][e.Arbiter.Resource] = e.Arbiter.Member
			if e.Arbiter.Member == arbiter.MemberID(g.id(i)) {
				g.answers[i][e.Arbiter.Resource] = true
			}
		case e.Arbiter.Kind == arbiter.EventDeny:
			g.answers[i][e.Arbiter.Resource] = true
		}
	}})
	if err := m.Start(); err != nil {
		g.t.Fatal(err)
	}
	g.eps = append(g.eps, ep)
	g.members = append(g.members, m)
	g.dead = append(g.dead, false)
	g.t.Cleanup(func() { m.Close() })
	return i
}

func (g *group) id(i int) crimp.MemberID {
	var id crimp.MemberID
	g.members[i].Inspect(func(n *Node) { id = n.ID() })
	return id
}

func (g *group) live() []int {
	var out []int
	for i := range g.members {
		if !g.dead[i] {
			out = append(out, i)
		}
	}
	return out
}

// settled reports whether every live member is in the game with the same
// view, and the CRIMP duty sits with the arbiter on duty, leased.
func (g *group) settled() bool {
	live := g.live()
	var holder crimp.MemberID
	var epoch uint64
	ok := true
	for k, i := range live {
		g.members[i].Inspect(func(n *Node) {
			h, e := n.CRIMP().Holder()
			a := n.Arbiter()
			if a == nil {
				ok = false
				return
			}
			st := a.Status()
			if st.Phase != arbiter.PhaseMember || len(st.View) != len(live) || crimp.MemberID(st.Holder) != h {
				ok = false
			}
			if k == 0 {
				holder, epoch = h, e
			} else if h != holder || e != epoch {
				ok = false
			}
			if h == n.ID() && (!n.CRIMP().Leased() || !st.Serving) {
				ok = false
			}
		})
	}
	return ok && holder != 0
}

func (g *group) runUntil(limit time.Duration, cond func() bool) bool {
	deadline := g.clock.Now().Add(limit)
	for g.clock.Now().Before(deadline) {
		if cond() {
			return true
		}
		g.clock.RunFor(10 * time.Millisecond)
	}
	return cond()
}

func (g *group) dump() {
	for i := range g.members {
		g.members[i].Inspect(func(n *Node) {
			h, e := n.CRIMP().Holder()
			var st arbiter.Status
			if n.Arbiter() != nil {
				st = n.Arbiter().Status()
			}
			var ks []crimp.MemberID
			for _, m := range n.CRIMP().AuthorityState().Members {
				ks = append(ks, m.ID)
			}
			g.t.Logf("keys %v", ks)
			g.t.Logf("index %d id %d dead %v: crimp holder %d epoch %d leased %v members %v; arbiter %s holder %d stamp %v view %d serving %v; refused %v",
				i, n.ID(), g.dead[i], h, e, n.CRIMP().Leased(), n.CRIMP().Members(), st.Phase, st.Holder, st.Stamp, len(st.View), st.Serving, refusals(n.CRIMP().Metrics()))
		})
	}
}

func refusals(m *crimp.Metrics) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range m.Counters() {
		if v != 0 && (len(k) > 8 && k[:8] == "refused_" || k == "proofs_relayed" || k == "votes_cast" || k == "takeovers") {
			out[k] = v
		}
	}
	return out
}

func (g *group) holderIndex() int {
	var h crimp.MemberID
	g.members[g.live()[0]].Inspect(func(n *Node) { h, _ = n.CRIMP().Holder() })
	for _, i := range g.live() {
		if g.id(i) == h {
			return i
		}
	}
	return -1
}

func (g *group) epoch() uint64 {
	var e uint64
	g.members[g.live()[0]].Inspect(func(n *Node) { _, e = n.CRIMP().Holder() })
	return e
}

// claimRound has every live member claim the resources next..next+k, two
// members per resource, so that the arbiter decides contested claims.
func (g *group) claimRound(next arbiter.ResourceID) arbiter.ResourceID {
	live := g.live()
	for k, i := range live {
		for _, r := range []arbiter.ResourceID{next + arbiter.ResourceID(k), next + arbiter.ResourceID((k+1)%len(live))} {
			if err := g.members[i].Claim(r); err != nil {
				g.t.Fatalf("member %d claim %d: %v", g.id(i), r, err)
			}
		}
	}
	return next + arbiter.ResourceID(len(live))
}

// granted reports whether every live member reported a grant of each
// resource in [from, to).
func (g *group) granted(from, to arbiter.ResourceID) bool {
	for _, i := range g.live() {
		for r := from; r < to; r++ {
			if _, ok := g.grants[i][r]; !ok {
				return false
			}
		}
	}
	return true
}

// checkGrants: every resource below upTo was granted, and no two live
// members know different grantees for one. What a member knows is the
// grants it reported (EventGrant) and its arbiter's log (a member that
// learned a grant from a DENY, or caught up from another's log, may have
// reported no event for it).
func (g *group) checkGrants(upTo arbiter.ResourceID) {
	g.t.Helper()
	for r := arbiter.ResourceID(1); r < upTo; r++ {
		var who arbiter.MemberID
		for _, i := range g.live() {
			known := map[arbiter.ResourceID]arbiter.MemberID{}
			for res, m := range g.grants[i] {
				known[res] = m
			}
			g.members[i].Inspect(func(n *Node) {
				for _, gr := range n.Arbiter().Grants() {
					known[gr.Resource] = gr.Member
				}
			})
			m, ok := known[r]
			switch {
			case !ok:
			case who == 0:
				who = m
			case m != who:
				g.t.Errorf("resource %d granted to %d and to %d (member %d)", r, who, m, g.id(i))
			}
		}
		if who == 0 {
			g.t.Errorf("resource %d was never granted", r)
		}
	}
}

// The CRIMP duty follows the arbiter round the group while grants move the
// arbiter's clock: several epochs, the CRIMP holder always the arbiter on
// duty once settled, one grant per resource everywhere.
func TestDutyFollowsArbiterRotation(t *testing.T) {
	g := newGroup(t, 4)
	holders := map[crimp.MemberID]bool{}
	next := arbiter.ResourceID(1)
	for range 12 {
		g.claimRound(next)
		next += arbiter.ResourceID(len(g.live()))
		if !g.runUntil(10*time.Second, g.settled) {
			g.dump()
			t.Fatal("the duty did not settle after a claim round")
		}
		holders[g.id(g.holderIndex())] = true
	}
	if len(holders) < 3 || g.epoch() < 3 {
		t.Fatalf("the CRIMP duty visited %d members in %d epochs; the arbiter should rotate it", len(holders), g.epoch())
	}
	g.runUntil(2*time.Second, func() bool { return false })
	g.checkGrants(next)
	for _, i := range g.live() {
		var m *Metrics
		g.members[i].Inspect(func(n *Node) { m = n.Metrics() })
		if m.SendErrors.Load() != 0 || m.BadPayloads.Load() != 0 {
			t.Errorf("member %d: %d send errors, %d bad payloads", g.id(i), m.SendErrors.Load(), m.BadPayloads.Load())
		}
	}
}

// Killing the process that serves the arbiter costs no grant: the next
// member takes the arbiter over and the CRIMP duty by a vote, drops the
// dead member, and every claim made afterwards is answered once.
func TestDutyKillServingArbiter(t *testing.T) {
	g := newGroup(t, 4)
	next := arbiter.ResourceID(1)
	g.claimRound(next)
	next += 4
	if !g.runUntil(10*time.Second, g.settled) {
		g.dump()
		t.Fatal("no settle after the first round")
	}
	victim := g.holderIndex()
	victimID := g.id(victim)
	epoch := g.epoch()
	g.members[victim].Close()
	g.dead[victim] = true
	// Claims made while the arbiter is dead wait and are answered by its
	// successor.
	g.claimRound(next)
	next += arbiter.ResourceID(len(g.live()))
	if !g.runUntil(20*time.Second, func() bool {
		if !g.settled() {
			return false
		}
		for _, i := range g.live() {
			var view []crimp.MemberID
			g.members[i].Inspect(func(n *Node) { view = n.CRIMP().Members() })
			for _, id := range view {
				if id == victimID {
					return false
				}
			}
		}
		return true
	}) {
		g.dump()
		t.Fatal("the survivors did not take the duty over and drop the dead member")
	}
	if g.epoch() <= epoch || g.id(g.holderIndex()) == victimID {
		t.Fatalf("epoch %d (was %d), holder %d", g.epoch(), epoch, g.id(g.holderIndex()))
	}
	took := uint64(0)
	for _, i := range g.live() {
		g.members[i].Inspect(func(n *Node) { took += n.CRIMP().Metrics().Takeovers.Load() })
	}
	if took == 0 {
		t.Fatal("no CRIMP takeover; the duty moved another way")
	}
	// The game goes on.
	g.claimRound(next)
	next += arbiter.ResourceID(len(g.live()))
	if !g.runUntil(10*time.Second, func() bool { return g.granted(next-arbiter.ResourceID(2*len(g.live())), next) }) {
		g.dump()
		t.Fatal("claims after the kill were not granted")
	}
	g.checkGrants(next)
}

// A partition cuts the holder off with a minority: that side admits no
// mirror and grants no resource, the majority takes both duties over and
// goes on granting, and after the heal the cut-off members (dropped by the
// new holder meanwhile) join again and everyone agrees.
func TestDutyPartitionMinoritySideGrantsNothing(t *testing.T) {
	g := newGroup(t, 5)
	holder := g.holderIndex()
	minority := []int{holder}
	var majority []int
	for _, i := range g.live() {
		switch {
		case i == holder:
		case len(minority) < 2:
			minority = append(minority, i)
		default:
			majority = append(majority, i)
		}
	}
	joiner := g.add(testConfig(9))
	minority = append(minority, joiner)
	eps := func(idx []int) []*crimp.MemEndpoint {
		var out []*crimp.MemEndpoint
		for _, i := range idx {
			out = append(out, g.eps[i])
		}
		return out
	}
	g.net.Partition(eps(minority), eps(majority))
	// The holder's leases (CRIMP's and the arbiter's) run out; until then
	// it still holds the duty and may decide.
	if !g.runUntil(5*time.Second, func() bool {
		var leased bool
		g.members[holder].Inspect(func(n *Node) { leased = n.CRIMP().Leased() || n.Arbiter().Status().Leased })
		return !leased
	}) {
		t.Fatal("the cut-off holder kept its leases")
	}
	if err := g.members[joiner].Join(); err != nil {
		t.Fatal(err)
	}
	// Both sides claim: the minority its own resources 100.., the majority 200...
	for k, i := range minority[:2] {
		if err := g.members[i].Claim(arbiter.ResourceID(100 + k)); err != nil {
			t.Fatal(err)
		}
	}
	for k, i := range majority {
		if err := g.members[i].Claim(arbiter.ResourceID(200 + k)); err != nil {
			t.Fatal(err)
		}
	}
	if !g.runUntil(20*time.Second, func() bool {
		for k := range majority {
			if _, ok := g.grants[majority[0]][arbiter.ResourceID(200+k)]; !ok {
				return false
			}
		}
		return true
	}) {
		g.dump()
		t.Fatal("the majority side granted nothing")
	}
	g.runUntil(3*time.Second, func() bool { return false })
	for _, i := range minority {
		for k := range 2 {
			r := arbiter.ResourceID(100 + k)
			if m, ok := g.grants[i][r]; ok {
				t.Fatalf("the minority side granted resource %d to %d", r, m)
			}
			g.members[i].Inspect(func(n *Node) {
				if n.Arbiter() == nil {
					return
				}
				for _, gr := range n.Arbiter().Grants() {
					if gr.Resource == r {
						t.Fatalf("the minority side's log holds a grant of %d to %d", r, gr.Member)
					}
				}
			})
		}
	}
	if g.id(joiner) != 0 {
		t.Fatalf("the minority side admitted its joiner as %d", g.id(joiner))
	}
	var majHolder crimp.MemberID
	g.members[majority[0]].Inspect(func(n *Node) { majHolder, _ = n.CRIMP().Holder() })
	if majHolder == g.id(holder) || majHolder == 0 {
		t.Fatalf("the majority's CRIMP holder is %d", majHolder)
	}
	g.net.Heal()
	if !g.runUntil(30*time.Second, func() bool {
		return g.settled() && g.id(joiner) != 0
	}) {
		g.dump()
		t.Fatal("no convergence after the heal")
	}
	// The cut-off members joined again as new members (their old claims
	// went with their old membership); the whole group plays on.
	g.claimRound(300)
	if !g.runUntil(10*time.Second, func() bool { return g.granted(300, arbiter.ResourceID(300+len(g.live()))) }) {
		g.dump()
		t.Fatal("claims after the heal were not granted everywhere")
	}
}

// TestDutySoak runs the scenarios over DUTY_SOAK network seeds, with
// DUTY_LOSS (a fraction) of the datagrams lost (skipped without
// DUTY_SOAK).
func TestDutySoak(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("DUTY_SOAK"))
	if n == 0 {
		t.Skip("set DUTY_SOAK=<seeds> (and DUTY_LOSS=<fraction>) to run the scenarios over many network seeds")
	}
	netLoss, _ = strconv.ParseFloat(os.Getenv("DUTY_LOSS"), 64)
	defer func(s int64) { netSeed, netLoss = s, 0 }(netSeed)
	for seed := range int64(n) {
		netSeed = 1000 + seed
		for name, f := range map[string]func(*testing.T){
			"rotation": TestDutyFollowsArbiterRotation, "kill": TestDutyKillServingArbiter, "partition": TestDutyPartitionMinoritySideGrantsNothing,
		} {
			t.Run(name+"/"+strconv.FormatInt(netSeed, 10), f)
		}
	}
}

// A holder that quits on purpose hands both duties on before it goes: the
// others need no vote, and the game goes on.
func TestDutyHolderLeaves(t *testing.T) {
	g := newGroup(t, 4)
	next := g.claimRound(1)
	if !g.runUntil(10*time.Second, g.settled) {
		g.dump()
		t.Fatal("no settle")
	}
	leaver := g.holderIndex()
	leaverID := g.id(leaver)
	if err := g.members[leaver].Leave(); err != nil {
		t.Fatal(err)
	}
	g.clock.RunFor(50 * time.Millisecond)
	g.members[leaver].Close()
	g.dead[leaver] = true
	if !g.runUntil(20*time.Second, func() bool {
		if !g.settled() {
			return false
		}
		for _, i := range g.live() {
			var view []crimp.MemberID
			g.members[i].Inspect(func(n *Node) { view = n.CRIMP().Members() })
			if slices.Contains(view, leaverID) {
				return false
			}
		}
		return true
	}) {
		g.dump()
		t.Fatal("the others did not settle without the leaver")
	}
	for _, i := range g.live() {
		g.members[i].Inspect(func(n *Node) {
			if n.CRIMP().Metrics().Takeovers.Load() != 0 || n.CRIMP().Metrics().Campaigns.Load() != 0 {
				t.Errorf("member %d campaigned or took over: the duty should have been handed over", n.ID())
			}
		})
	}
	next = g.claimRound(next)
	if !g.runUntil(10*time.Second, func() bool { return g.granted(next-arbiter.ResourceID(len(g.live())), next) }) {
		g.dump()
		t.Fatal("claims after the leave were not granted")
	}
	g.checkGrants(next)
}
