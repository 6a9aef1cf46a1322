package crimp

import (
	"math"
	"math/rand"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// joinedCluster is an authority (index 0) and joiners that all know each
// other, on a loss-free in-memory LAN.
func joinedCluster(t *testing.T, joiners int) *cluster {
	t.Helper()
	c := newEmptyCluster(t, 77)
	c.net.SetLAN("lan", LinkParams{Delay: time.Millisecond})
	base := Config{History: 400 * time.Millisecond, SessionInterval: 50 * time.Millisecond, JoinTimeout: 20 * time.Millisecond, AuthorityPublicKey: testAuthorityPub}
	auth := base
	auth.ID, auth.Authority, auth.AuthorityKey = 1, true, testAuthorityKey
	c.add(auth, "lan", 1)
	for i := range joiners {
		c.add(base, "lan", int64(i+2))
		if err := c.members[i+1].Join(); err != nil {
			t.Fatal(err)
		}
	}
	if !c.runUntil(10*time.Second, func() bool { return c.allKnow(c.indexes()...) }) {
		t.Fatal("members did not learn each other")
	}
	return c
}

func (c *cluster) indexes() []int {
	out := make([]int, len(c.members))
	for i := range out {
		out[i] = i
	}
	return out
}

// allKnow reports whether each member of idx knows every other one of idx.
func (c *cluster) allKnow(idx ...int) bool {
	for _, i := range idx {
		var known []MemberID
		c.members[i].Inspect(func(n *Node) { known = n.Members() })
		for _, j := range idx {
			if j != i && !slices.Contains(known, c.id(j)) {
				return false
			}
		}
	}
	return true
}

func (c *cluster) view(i int) []MemberID {
	var known []MemberID
	c.members[i].Inspect(func(n *Node) { known = n.Members() })
	return known
}

// droppedEvents counts the drops member i saw of the members at idx
// (itself included).
func (c *cluster) droppedEvents(i int, idx ...int) int {
	n := 0
	for _, e := range c.events[i] {
		for _, j := range idx {
			if (e.Kind == EventMemberDropped || e.Kind == EventDropped) && e.Member == c.id(j) {
				n++
			}
		}
	}
	return n
}

func mustEncode(t *testing.T, p *Packet) []byte {
	t.Helper()
	b, err := p.Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A member with a valid place in the group tries to throw an honest member
// out, and to admit members of its own: drops and establishments in its
// own name, in the authority's name with a forged signature, and the
// authority's genuine drop altered to name another member. Every honest
// member keeps its membership view, keeps delivering, and counts each
// refusal; the attacker's claimed IDs are never learned.
func TestAdversarialMemberDrop(t *testing.T) {
	c := joinedCluster(t, 3)
	honest := []int{0, 1, 2}
	hostile := 3
	victim := c.id(1)
	before := make([][]MemberID, len(c.members))
	for _, i := range honest {
		before[i] = c.view(i)
	}
	// Capture a genuine signed drop: the authority drops a sender it never
	// admitted.
	var genuine []byte
	c.net.Tap(func(_ netip.AddrPort, b []byte) {
		if p, err := Decode(b); err == nil && p.Kind == KindDrop && genuine == nil {
			genuine = append([]byte(nil), b...)
		}
	})
	now := func() int64 { return c.clock.Now().UnixNano() }
	ep := c.eps[hostile]
	send := func(b []byte) {
		if err := ep.Send(b); err != nil {
			t.Fatal(err)
		}
		c.clock.RunFor(20 * time.Millisecond)
	}
	send(mustEncode(t, &Packet{Kind: KindSession, Sender: 40, Time: now(), NextSeq: 1, OldestSeq: 1}))
	if genuine == nil {
		t.Fatal("the authority did not drop an unadmitted sender")
	}
	forged := make([]byte, SignatureSize)
	rand.New(rand.NewSource(1)).Read(forged)
	attacks := []struct {
		name string
		b    []byte
	}{
		{"drop in its own name", mustEncode(t, &Packet{Kind: KindDrop, Sender: c.id(hostile), Time: now(), Member: victim, Signature: forged})},
		{"drop in the authority's name", mustEncode(t, &Packet{Kind: KindDrop, Sender: 1, Time: now(), Member: victim, Signature: forged})},
		{"drop of the authority", mustEncode(t, &Packet{Kind: KindDrop, Sender: 1, Time: now(), Member: 1, Signature: forged})},
		{"genuine drop altered", func() []byte {
			b := append([]byte(nil), genuine...)
			p, _ := Decode(b)
			p.Member = victim
			return mustEncode(t, p) // the authority's signature, now over other bytes
		}()},
		{"establishment of its own member", mustEncode(t, &Packet{Kind: KindEstablish, Sender: 1, Time: now(), Nonce: 9, Member: 50, Signature: forged})},
	}
	refusedBefore := make([]uint64, len(c.members))
	for _, i := range honest {
		m := c.members[i].Metrics()
		refusedBefore[i] = m.Refused(RefusedDrop) + m.Refused(RefusedEstablish)
	}
	for _, a := range attacks {
		send(a.b)
	}
	// The group carries on: everyone still delivers the victim's traffic.
	c.sendEvery(1, 20, 10*time.Millisecond, 0)
	c.clock.RunFor(time.Second)
	for _, i := range honest {
		if got := c.view(i); !slices.Equal(got, before[i]) {
			t.Errorf("member %d's view changed from %v to %v", c.id(i), before[i], got)
		}
		if n := c.droppedEvents(i, 0, 1, 2, hostile); n != 0 {
			t.Errorf("member %d saw %d drops: %v", c.id(i), n, c.events[i])
		}
		if i != 1 {
			for seq := uint32(1); seq <= 20; seq++ {
				if c.got[i][Key{victim, seq}] != 1 {
					t.Fatalf("member %d missed (%d, %d) after the attack", c.id(i), victim, seq)
				}
			}
		}
		m := c.members[i].Metrics()
		if got := m.Refused(RefusedDrop) + m.Refused(RefusedEstablish) - refusedBefore[i]; got != uint64(len(attacks)) {
			t.Errorf("member %d counted %d refusals, want %d", c.id(i), got, len(attacks))
		}
		if slices.Contains(c.view(i), 50) {
			t.Errorf("member %d learned the attacker's member 50", c.id(i))
		}
	}
}

// A replayed decision of the authority is refused once it is older than the
// history: an old drop cannot be aimed at a member that later got the same
// ID, nor an old establishment bring a dead member back.
func TestAdversarialReplayedDrop(t *testing.T) {
	cfg := Config{History: time.Second, SessionInterval: time.Hour, DropAfter: 2 * time.Hour, TickInterval: 10 * time.Millisecond}
	authCfg := cfg
	authCfg.ID, authCfg.Peers, authCfg.Authority, authCfg.AuthorityKey = 1, []MemberID{2, 3}, true, testAuthorityKey
	auth, err := New(authCfg, rand.New(rand.NewSource(1)))
	if err != nil {
		t.Fatal(err)
	}
	memberCfg := cfg
	memberCfg.ID, memberCfg.Peers, memberCfg.AuthorityPublicKey = 2, []MemberID{1, 3}, testAuthorityPub
	member, err := New(memberCfg, rand.New(rand.NewSource(2)))
	if err != nil {
		t.Fatal(err)
	}
	from := netip.MustParseAddrPort("127.0.0.1:1")
	t0 := simStart
	auth.Tick(t0)
	member.Tick(t0)
	// The authority hears from 9, an ID it never admitted, and drops it:
	// a genuine, signed drop.
	stray := mustEncode(t, &Packet{Kind: KindSession, Sender: 9, Time: t0.UnixNano(), NextSeq: 1, OldestSeq: 1})
	r, _ := auth.Step(t0, from, stray)
	var drop []byte
	for _, b := range r.Packets {
		if p, _ := Decode(b); p != nil && p.Kind == KindDrop {
			drop = b
		}
	}
	if drop == nil {
		t.Fatal("no drop from the authority")
	}
	if _, err := member.Step(t0.Add(10*time.Millisecond), from, drop); err != nil {
		t.Fatalf("fresh genuine drop refused: %v", err)
	}
	// The same bytes replayed two histories later.
	later := t0.Add(2 * time.Second)
	if _, err := member.Step(later, from, drop); err == nil {
		t.Fatal("replayed drop accepted")
	}
	if got := member.Metrics().Refused(RefusedStale); got != 1 {
		t.Fatalf("stale refusals %d", got)
	}
	// A member without the authority's key accepts no decision at all.
	blind, err := New(Config{ID: 3, Peers: []MemberID{1, 2}}, rand.New(rand.NewSource(3)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blind.Step(t0.Add(10*time.Millisecond), from, drop); err == nil {
		t.Fatal("member without the authority's key took a drop")
	}
	if _, err := blind.Join(t0); err == nil {
		t.Fatal("join without the authority's key allowed")
	}
}

// A sender that used IDs it was never given gets them dropped; the
// authority then never hands those IDs to a newcomer, who would otherwise
// be ignored by every member as dead.
func TestAdversarialPoisonedIDs(t *testing.T) {
	c := joinedCluster(t, 2)
	next := MemberID(4) // the authority would assign 4 next
	now := c.clock.Now().UnixNano()
	for id := next; id < next+3; id++ {
		if err := c.eps[2].Send(mustEncode(t, &Packet{Kind: KindSession, Sender: id, Time: now, NextSeq: 1, OldestSeq: 1})); err != nil {
			t.Fatal(err)
		}
	}
	c.clock.RunFor(50 * time.Millisecond)
	newcomer := c.add(Config{History: 400 * time.Millisecond, SessionInterval: 50 * time.Millisecond, JoinTimeout: 20 * time.Millisecond, AuthorityPublicKey: testAuthorityPub}, "lan", 9)
	if err := c.members[newcomer].Join(); err != nil {
		t.Fatal(err)
	}
	if !c.runUntil(5*time.Second, func() bool { return c.allKnow(c.indexes()...) }) {
		t.Fatalf("newcomer (ID %d) not known by every member", c.id(newcomer))
	}
	if id := c.id(newcomer); id >= next && id < next+3 {
		t.Fatalf("newcomer got the poisoned ID %d", id)
	}
}

// With n members and the deterministic mode off, a member sends its request
// at once with probability 1/n on each loss (the paper's enhancement). Over
// thousands of losses with a fixed seed the share is within five standard
// deviations of 1/n: the seed makes the run reproducible, the margin makes
// the bound meaningful rather than tuned to one draw.
func TestImmediateRequestShare(t *testing.T) {
	const losses = 4000
	for _, n := range []int{2, 4, 8, 16} {
		peers := make([]MemberID, 0, n-1)
		for id := 2; id <= n; id++ {
			peers = append(peers, MemberID(id))
		}
		node, err := New(Config{ID: 1, Peers: peers, SessionInterval: time.Hour, DropAfter: 2 * time.Hour, History: 10 * time.Second, MaxWindow: 1 << 20}, rand.New(rand.NewSource(int64(n))))
		if err != nil {
			t.Fatal(err)
		}
		from := netip.MustParseAddrPort("127.0.0.1:1")
		now := simStart
		node.Tick(now)
		// Member 2 sends 1, 3, 5, ...: every even sequence number is lost
		// and the next odd one reveals it (N = 1).
		for i := range losses + 1 {
			seq := uint32(2*i + 1)
			b := mustEncode(t, &Packet{Kind: KindData, Sender: 2, Time: now.UnixNano(), Seq: seq, Payload: []byte("x")})
			if _, err := node.Step(now, from, b); err != nil {
				t.Fatal(err)
			}
			now = now.Add(time.Microsecond)
		}
		m := node.Metrics()
		if got := m.LossesDetected.Load(); got != losses {
			t.Fatalf("n=%d: %d losses detected, want %d", n, got, losses)
		}
		immediate := float64(m.RequestsImmediate.Load())
		p := 1 / float64(n)
		mean := losses * p
		sd := math.Sqrt(losses * p * (1 - p))
		t.Logf("n=%d: %d of %d losses requested at once (share %.4f, 1/n = %.4f)", n, int(immediate), losses, immediate/losses, p)
		if immediate < mean-5*sd || immediate > mean+5*sd {
			t.Errorf("n=%d: %v immediate requests, want %v ± %v", n, immediate, mean, 5*sd)
		}
	}
	// And none at all in deterministic mode or with the enhancement off.
	for _, cfg := range []Config{{Deterministic: true}, {NoImmediateRequest: true}} {
		cfg.ID, cfg.Peers = 1, []MemberID{2}
		node, err := New(cfg, rand.New(rand.NewSource(1)))
		if err != nil {
			t.Fatal(err)
		}
		from := netip.MustParseAddrPort("127.0.0.1:1")
		for seq := uint32(1); seq < 200; seq += 2 {
			node.Step(simStart, from, mustEncode(t, &Packet{Kind: KindData, Sender: 2, Time: simStart.UnixNano(), Seq: seq}))
		}
		if got := node.Metrics().RequestsImmediate.Load(); got != 0 {
			t.Errorf("%+v: %d immediate requests", cfg, got)
		}
	}
}

// A joiner's request-join claims to be an hour old, to buy its member a
// long join grace (the authority allows a new member one round trip, as
// the request's age shows, before its silence counts): the grace is capped
// at the history, so the silent member is dropped within DropAfter plus
// the history of its establishment, as a forged round trip of any length.
func TestAdversarialAncientJoinRequest(t *testing.T) {
	c := joinedCluster(t, 0)
	cfg := c.members[0].node.Config()
	rogue := c.net.Endpoint("lan")
	established := func() (MemberID, bool) {
		for _, e := range c.events[0] {
			if e.Kind == EventMemberJoined {
				return e.Member, true
			}
		}
		return 0, false
	}
	old := c.clock.Now().Add(-time.Hour).UnixNano()
	if err := rogue.Send(mustEncode(t, &Packet{Kind: KindRequestJoin, Time: old, Nonce: 77})); err != nil {
		t.Fatal(err)
	}
	if !c.runUntil(time.Second, func() bool { _, ok := established(); return ok }) {
		t.Fatal("the authority did not admit the joiner")
	}
	id, _ := established()
	dropped := func() bool {
		return slices.ContainsFunc(c.events[0], func(e Event) bool { return e.Kind == EventMemberDropped && e.Member == id })
	}
	if !c.runUntil(cfg.DropAfter+cfg.History+2*cfg.TickInterval, dropped) {
		t.Fatalf("member %d, silent since its establishment, not dropped within DropAfter %v + History %v: %v",
			id, cfg.DropAfter, cfg.History, c.events[0])
	}
}

// A member claims that an honest member's stream goes far beyond where it
// is: in a request for one of its packets, and as a dropped member's tail
// in a session. Neither may slide the honest member's window past the
// packets it has still to send: every other member keeps delivering them.
// (Data and repairs in another member's name are not authenticated by
// CRIMP at all; see the package doc.)
func TestAdversarialClaimBeyondTheStream(t *testing.T) {
	c := joinedCluster(t, 3)
	victim, hostile := 1, 3
	c.sendEvery(victim, 20, 30*time.Millisecond, 0)
	c.clock.RunFor(300 * time.Millisecond) // half of them sent
	now := func() int64 { return c.clock.Now().UnixNano() }
	for _, b := range [][]byte{
		mustEncode(t, &Packet{Kind: KindRequest, Sender: c.id(hostile), Time: now(), Source: c.id(victim), Seq: 1 << 30}),
		mustEncode(t, &Packet{Kind: KindSession, Sender: c.id(hostile), Time: now(), NextSeq: 1, OldestSeq: 1,
			Tails: []Tail{{Source: c.id(victim), Next: 1 << 30}}}),
	} {
		if err := c.eps[hostile].Send(b); err != nil {
			t.Fatal(err)
		}
		c.clock.RunFor(20 * time.Millisecond)
	}
	c.clock.RunFor(time.Second)
	for _, i := range []int{0, 2} {
		for seq := uint32(1); seq <= 20; seq++ {
			if c.got[i][Key{c.id(victim), seq}] != 1 {
				t.Fatalf("member %d did not deliver (%d, %d) after the claims", c.id(i), c.id(victim), seq)
			}
		}
	}
}
