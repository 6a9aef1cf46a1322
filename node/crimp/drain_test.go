package crimp

import (
	"errors"
	"math/rand"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// handNet steps bare nodes by hand on one instant-delivery LAN: every
// packet reaches every other live node at once (in order), unless lose
// says it is lost on that link. A node that is not up is neither ticked
// nor reached: a silent (stalled or dead) process.
type handNet struct {
	t      *testing.T
	nodes  map[MemberID]*Node
	ids    []MemberID // ascending
	up     map[MemberID]bool
	lose   func(from, to MemberID, p *Packet) bool
	now    time.Time
	got    map[MemberID]map[Key]Delivery
	events map[MemberID][]Event
	// dropAt: when the first node reported member 3's drop (the authority).
	dropAt time.Time
}

type handPacket struct {
	from MemberID
	b    []byte
}

// newHandNet builds members 1..n with 1 the authority, knowing each other
// from the start.
func newHandNet(t *testing.T, n int, tweak func(c *Config)) *handNet {
	h := &handNet{t: t, nodes: map[MemberID]*Node{}, up: map[MemberID]bool{}, now: simStart,
		got: map[MemberID]map[Key]Delivery{}, events: map[MemberID][]Event{}}
	for i := 1; i <= n; i++ {
		id := MemberID(i)
		cfg := Config{ID: id, History: time.Second, DropAfter: 300 * time.Millisecond, SessionInterval: 50 * time.Millisecond,
			TickInterval: 10 * time.Millisecond, Deterministic: true, AuthorityPublicKey: testAuthorityPub}
		for j := 1; j <= n; j++ {
			if j != i {
				cfg.Peers = append(cfg.Peers, MemberID(j))
			}
		}
		if id == 1 {
			cfg.Authority, cfg.AuthorityKey = true, testAuthorityKey
		}
		if tweak != nil {
			tweak(&cfg)
		}
		node, err := New(cfg, rand.New(rand.NewSource(int64(i))))
		if err != nil {
			t.Fatal(err)
		}
		h.nodes[id], h.up[id] = node, true
		h.ids = append(h.ids, id)
		h.got[id] = map[Key]Delivery{}
	}
	return h
}

func handAddr(id MemberID) netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(1000+id))
}

// take records what node id's call produced and carries its packets.
func (h *handNet) take(id MemberID, r Ready) {
	queue := []handPacket{}
	var record func(id MemberID, r Ready)
	record = func(id MemberID, r Ready) {
		for _, d := range r.Deliveries {
			if _, dup := h.got[id][d.Key]; dup {
				h.t.Errorf("member %d: %v delivered twice", id, d.Key)
			}
			h.got[id][d.Key] = d
		}
		for _, e := range r.Events {
			h.events[id] = append(h.events[id], e)
			if e.Kind == EventMemberDropped && e.Member == 3 && h.dropAt.IsZero() {
				h.dropAt = h.now
			}
		}
		for _, b := range r.Packets {
			queue = append(queue, handPacket{id, b})
		}
	}
	record(id, r)
	for len(queue) > 0 {
		hp := queue[0]
		queue = queue[1:]
		p, err := Decode(hp.b)
		if err != nil {
			h.t.Fatalf("member %d sent an undecodable packet: %v", hp.from, err)
		}
		for _, to := range h.ids {
			if to == hp.from || !h.up[to] || h.lose != nil && h.lose(hp.from, to, p) {
				continue
			}
			r, err := h.nodes[to].Step(h.now, handAddr(hp.from), hp.b)
			if err != nil && !errors.Is(err, ErrRefused) {
				h.t.Fatalf("member %d stepping %s of %d: %v", to, p.Kind, hp.from, err)
			}
			record(to, r)
		}
	}
}

// tick ticks every live node at the current time, then moves it on one
// interval.
func (h *handNet) tick() {
	for _, id := range h.ids {
		if h.up[id] {
			h.take(id, h.nodes[id].Tick(h.now))
		}
	}
	h.now = h.now.Add(10 * time.Millisecond)
}

func (h *handNet) run(d time.Duration) {
	for end := h.now.Add(d); h.now.Before(end); {
		h.tick()
	}
}

// send makes node id (its key in nodes; its member ID may have changed)
// send its packet seq.
func (h *handNet) send(id MemberID, seq uint32) {
	r, err := h.nodes[id].Send(h.now, testPayload(h.nodes[id].ID(), seq, 20))
	if err != nil {
		h.t.Fatal(err)
	}
	h.take(id, r)
}

// runUntilDrop runs until the authority dropped member 3, at most 1 s.
func (h *handNet) runUntilDrop() {
	for end := h.now.Add(time.Second); h.dropAt.IsZero(); h.tick() {
		if !h.now.Before(end) {
			h.t.Fatal("member 3 was never dropped")
		}
	}
}

// loseData loses data packet seq of member 3 on the way to the members in to.
func loseData(seq uint32, to ...MemberID) func(from, to MemberID, p *Packet) bool {
	lost := slices.Clone(to)
	return func(from, dst MemberID, p *Packet) bool {
		return from == 3 && p.Kind == KindData && p.Seq == seq && slices.Contains(lost, dst)
	}
}

// checkDelivered fails unless every member in ids delivered key k within
// the history of its sending, and reports how.
func (h *handNet) checkDelivered(k Key, ids ...MemberID) {
	h.t.Helper()
	for _, id := range ids {
		d, ok := h.got[id][k]
		switch {
		case !ok:
			m := h.nodes[id].Metrics()
			h.t.Errorf("member %d never delivered %v (abandoned %d, losses %d, stats %+v)",
				id, k, m.Abandoned.Load(), m.Losses.Load(), h.nodes[id].Stats())
		case d.ReceivedAt.Sub(d.SentAt) > time.Second:
			h.t.Errorf("member %d delivered %v after %v", id, k, d.ReceivedAt.Sub(d.SentAt))
		}
	}
}

// TestDroppedMembersLossIsRepaired: member 3 sends packet 1, which reaches
// member 2 but not the authority, then packet 2, which reaches both and
// makes the authority suspect packet 1 (one of N=3 pieces of evidence), and
// goes silent. The authority drops it with the recovery outstanding; it
// must still recover packet 1, from member 2, and deliver it as member 3's.
func TestDroppedMembersLossIsRepaired(t *testing.T) {
	h := newHandNet(t, 3, func(c *Config) { c.N = 3 })
	h.run(100 * time.Millisecond)
	h.lose = loseData(1, 1)
	h.send(3, 1)
	h.send(3, 2)
	h.up[3] = false
	h.runUntilDrop()
	if silent := h.dropAt.Sub(simStart.Add(100 * time.Millisecond)); silent < 300*time.Millisecond {
		t.Fatalf("dropped after %v of silence", silent)
	}
	if _, early := h.got[1][Key{3, 1}]; early {
		t.Fatal("the authority recovered the packet before the drop: the test shows nothing")
	}
	h.run(300 * time.Millisecond)
	h.checkDelivered(Key{3, 1}, 1, 2)
	h.checkDelivered(Key{3, 2}, 1, 2)
	if d := h.got[1][Key{3, 1}]; d.Via != ViaRepair || d.ReceivedAt.Before(h.dropAt) {
		t.Errorf("the authority delivered %v %s at %v, the drop was at %v", d.Key, d.Via, d.ReceivedAt.Sub(simStart), h.dropAt.Sub(simStart))
	}
	a := h.nodes[1].Metrics()
	if a.Abandoned.Load() != 0 || a.DeliveredAfterDrop.Load() != 1 || h.nodes[2].Metrics().RepairsSent.Load() == 0 {
		t.Errorf("authority: abandoned %d, delivered after the drop %d; member 2 repairs %d",
			a.Abandoned.Load(), a.DeliveredAfterDrop.Load(), h.nodes[2].Metrics().RepairsSent.Load())
	}
	// The drop was reported at once, before the delivery.
	if ev := h.events[1]; len(ev) == 0 || ev[0].Kind != EventMemberDropped || ev[0].Member != 3 {
		t.Errorf("authority events %+v", ev)
	}
}

// TestDroppedMembersTailIsRecovered: member 3's last packet reaches only
// member 2, and nothing member 3 sent after it shows the gap to the
// others (it goes silent at once). The authority and member 4 learn of the
// packet from member 2's session packets, which report how far member 2
// heard the draining member, and recover it from member 2.
func TestDroppedMembersTailIsRecovered(t *testing.T) {
	h := newHandNet(t, 4, nil)
	h.run(100 * time.Millisecond)
	h.lose = loseData(2, 1, 4)
	h.send(3, 1)
	h.send(3, 2)
	h.up[3] = false
	h.runUntilDrop()
	for _, id := range []MemberID{1, 4} {
		if _, early := h.got[id][Key{3, 2}]; early {
			t.Fatalf("member %d recovered the tail before the drop: the test shows nothing", id)
		}
	}
	h.run(300 * time.Millisecond)
	h.checkDelivered(Key{3, 1}, 1, 2, 4)
	h.checkDelivered(Key{3, 2}, 1, 2, 4)
	for _, id := range []MemberID{1, 4} {
		m := h.nodes[id].Metrics()
		if d := h.got[id][Key{3, 2}]; d.Via != ViaRepair || m.DeliveredAfterDrop.Load() != 1 || m.Abandoned.Load() != 0 || m.Losses.Load() != 0 {
			t.Errorf("member %d: tail %s, delivered after the drop %d, abandoned %d, losses %d",
				id, d.Via, m.DeliveredAfterDrop.Load(), m.Abandoned.Load(), m.Losses.Load())
		}
	}
}

// TestDrainingMemberStaysRefused: what a dropped member sends after its
// drop (it was stalled, not dead) is refused as before, while the others
// still recover its earlier packets; a packet nobody holds is given up as
// a loss (not abandoned) and the drain ends after the history. The dropped
// member itself starts over with nothing left over, and when it joins
// again it gets a new ID, never confused with the drained one.
func TestDrainingMemberStaysRefused(t *testing.T) {
	h := newHandNet(t, 3, nil)
	h.run(100 * time.Millisecond)
	// Packet 1 reaches nobody, packet 2 only member 2: member 2 knows 1 is
	// missing, but its sender has gone silent and cannot repair it.
	h.lose = func(from, to MemberID, p *Packet) bool {
		return from == 3 && p.Kind == KindData && (p.Seq == 1 || p.Seq == 2 && to == 1)
	}
	h.send(3, 1)
	h.send(3, 2)
	h.up[3] = false
	h.runUntilDrop()
	h.lose = nil
	h.run(100 * time.Millisecond)
	// Member 3 comes back and sends on: refused; it learns of its drop.
	h.up[3] = true
	h.send(3, 3)
	h.run(100 * time.Millisecond)
	c := h.nodes[3]
	if !slices.ContainsFunc(h.events[3], func(e Event) bool { return e.Kind == EventDropped }) {
		t.Fatalf("member 3 did not learn of its drop: %+v", h.events[3])
	}
	if st := c.Stats(); c.ID() != 0 || st.Sources != 0 || st.Draining != 0 || st.Pending != 0 || st.Cached != 0 {
		t.Fatalf("dropped member 3 kept state: id %d, %+v", c.ID(), st)
	}
	for _, id := range []MemberID{1, 2} {
		if _, ok := h.got[id][Key{3, 3}]; ok {
			t.Errorf("member %d delivered packet 3, sent after the drop", id)
		}
		if st := h.nodes[id].Stats(); st.Draining != 1 {
			t.Errorf("member %d during the drain: %+v", id, st)
		}
	}
	h.checkDelivered(Key{3, 2}, 1, 2)
	// It joins again, while the others still drain ID 3.
	r, err := c.Join(h.now)
	if err != nil {
		t.Fatal(err)
	}
	h.take(3, r)
	h.run(50 * time.Millisecond)
	if c.ID() == 0 || c.ID() == 3 {
		t.Fatalf("member 3 joined again as %d", c.ID())
	}
	h.send(3, 1)
	h.checkDelivered(Key{c.ID(), 1}, 1, 2)
	// After the history the drain is over: the packet nobody held is a
	// loss given up, not abandoned.
	h.run(time.Second)
	for _, id := range []MemberID{1, 2} {
		n := h.nodes[id]
		m := n.Metrics()
		if _, ok := h.got[id][Key{3, 1}]; ok {
			t.Errorf("member %d delivered packet 1, which nobody held", id)
		}
		if st := n.Stats(); st.Draining != 0 || m.Abandoned.Load() != 0 || m.Losses.Load() != 1 {
			t.Errorf("member %d after the drain: abandoned %d, losses %d, %+v", id, m.Abandoned.Load(), m.Losses.Load(), st)
		}
		if !slices.Contains(n.Members(), c.ID()) || slices.Contains(n.Members(), 3) {
			t.Errorf("member %d members %v", id, n.Members())
		}
	}
	// A request for the drained member's packet no longer makes anyone
	// track it.
	req, _ := (&Packet{Kind: KindRequest, Sender: 2, Time: h.now.UnixNano(), Source: 3, Seq: 1}).Encode(nil)
	if r, err := h.nodes[1].Step(h.now, handAddr(2), req); err != nil || len(r.Packets) != 0 || h.nodes[1].Stats().Pending != 0 {
		t.Errorf("authority after the drain, on a request for 3/1: %v %+v %+v", err, r, h.nodes[1].Stats())
	}
}

// TestSessionHasRoomForDrains: a session packet of a full group, with the
// echoes of every other member and the tails of as many dropped members
// as a node drains, fits a packet for every MaxGroup.
func TestSessionHasRoomForDrains(t *testing.T) {
	for g := 2; g <= MaxMembers; g++ {
		n, err := New(Config{ID: 1, MaxGroup: g, Authority: true, AuthorityKey: testAuthorityKey}, rand.New(rand.NewSource(1)))
		if err != nil {
			t.Fatal(err)
		}
		if n.maxDraining < 1 || n.maxDraining > g-1 {
			t.Fatalf("MaxGroup %d: drains at most %d", g, n.maxDraining)
		}
		p := &Packet{Kind: KindSession, Sender: 1, NextSeq: 1, OldestSeq: 1}
		for i := range g - 1 {
			p.Echoes = append(p.Echoes, Echo{Peer: MemberID(i + 2)})
		}
		for i := range n.maxDraining {
			p.Tails = append(p.Tails, Tail{Source: MemberID(i + 100), Next: 1})
		}
		if _, err := p.Encode(nil); err != nil {
			t.Fatalf("MaxGroup %d, %d tails: %v", g, n.maxDraining, err)
		}
	}
}

// TestSenderDeathDoesNotSplitDelivery: on a LAN losing 10 % of packets,
// member 3 sends 20 packets and dies right after the last one. Whichever of
// its packets reached member 1 or 2 reaches both (within the history),
// whether it was the last one or not. Every member learns of the drop
// (the authority repeats it: with a single copy, one member in ten missed
// it and did not drain). Deterministic for each seed; across them, members
// must deliver some packets after the drop.
func TestSenderDeathDoesNotSplitDelivery(t *testing.T) {
	var afterDrop uint64
	for seed := int64(1); seed <= 40; seed++ {
		c := newStaticCluster(t, 3, seed, LinkParams{Delay: time.Millisecond, Jitter: time.Millisecond, Loss: 0.10}, func(cfg *Config) {
			cfg.AuthorityPublicKey = testAuthorityPub
			if cfg.ID == 1 {
				cfg.Authority, cfg.AuthorityKey = true, testAuthorityKey
			}
		})
		c.clock.RunFor(300 * time.Millisecond)
		for seq := uint32(1); seq <= 20; seq++ {
			c.clock.RunFor(10 * time.Millisecond)
			if err := c.members[2].Send(testPayload(3, seq, 20)); err != nil {
				t.Fatal(err)
			}
		}
		c.members[2].Close() // its packets in flight still arrive
		c.clock.RunFor(2 * time.Second)
		sawDrop := func(i int) bool {
			return slices.ContainsFunc(c.events[i], func(e Event) bool { return e.Kind == EventMemberDropped && e.Member == 3 })
		}
		if !sawDrop(0) || !sawDrop(1) {
			t.Errorf("seed %d: member 2 missed the drop", seed)
			continue
		}
		for _, age := range c.ages {
			if age > c.history {
				t.Fatalf("seed %d: delivered a packet %v old", seed, age)
			}
		}
		for seq := uint32(1); seq <= 20; seq++ {
			k := Key{3, seq}
			if c.got[0][k] != c.got[1][k] {
				t.Errorf("seed %d: %v delivered %d times at member 1, %d at member 2", seed, k, c.got[0][k], c.got[1][k])
			}
		}
		for i := range 2 {
			afterDrop += c.members[i].Metrics().DeliveredAfterDrop.Load()
		}
		c.net.Close()
	}
	t.Logf("%d packets delivered after their sender's drop", afterDrop)
	if afterDrop == 0 {
		t.Fatal("no packet delivered after the drop: the test shows nothing")
	}
}
