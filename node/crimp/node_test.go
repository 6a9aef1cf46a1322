package crimp

import (
	"fmt"
	"math/rand"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// Every packet reaches every other member exactly once under 10% loss
// (independent per receiver, with jitter that reorders), with and without
// FEC.
func TestExactlyOnceUnderLoss(t *testing.T) {
	for _, fec := range []int{0, 2} {
		t.Run(fmt.Sprintf("fec%d", fec), func(t *testing.T) {
			const members, packets = 5, 400
			c := newStaticCluster(t, members, 7+int64(fec), LinkParams{Delay: 2 * time.Millisecond, Jitter: 3 * time.Millisecond, Loss: 0.10},
				func(cfg *Config) { cfg.FEC = fec; cfg.N = 2 })
			c.clock.RunFor(500 * time.Millisecond) // sessions measure delays
			for i := range members {
				c.sendEvery(i, packets, 20*time.Millisecond, time.Duration(i)*3*time.Millisecond)
			}
			c.clock.RunFor(time.Duration(packets)*20*time.Millisecond + 2*c.history)

			var requests uint64
			for i := range members {
				for j := range members {
					if i == j {
						continue
					}
					for seq := uint32(1); seq <= packets; seq++ {
						if n := c.got[i][Key{MemberID(j + 1), seq}]; n != 1 {
							t.Fatalf("member %d got (%d, %d) %d times", i+1, j+1, seq, n)
						}
					}
				}
				if len(c.got[i]) != (members-1)*packets {
					t.Fatalf("member %d delivered %d keys, want %d", i+1, len(c.got[i]), (members-1)*packets)
				}
				m := c.members[i].Metrics()
				requests += m.RequestsSent.Load()
				if m.Losses.Load() != 0 || m.Late.Load() != 0 {
					t.Fatalf("member %d: losses %d late %d", i+1, m.Losses.Load(), m.Late.Load())
				}
			}
			if requests == 0 {
				t.Fatal("10% loss recovered without a single request")
			}
		})
	}
}

// A member cut off for longer than the history recovers what is still in
// the history when it comes back, and never delivers anything older.
func TestNothingDeliveredAfterHistory(t *testing.T) {
	const history = 200 * time.Millisecond
	c := newStaticCluster(t, 2, 3, LinkParams{Delay: time.Millisecond}, func(cfg *Config) {
		cfg.History = history
		cfg.SessionInterval = 50 * time.Millisecond
	})
	c.clock.RunFor(300 * time.Millisecond)
	start := c.clock.Now()
	const interval = 10 * time.Millisecond
	c.sendEvery(0, 200, interval, 0) // seq s is sent at start+(s-1)*interval
	c.clock.RunFor(500 * time.Millisecond)
	c.net.Disconnect(c.eps[0], c.eps[1])
	cutAt := c.clock.Now()
	c.clock.RunFor(700 * time.Millisecond)
	c.net.Connect(c.eps[0], c.eps[1])
	healAt := c.clock.Now()
	c.clock.RunFor(2 * time.Second)

	for _, age := range c.ages {
		if age > history {
			t.Fatalf("delivered a packet %v old, history %v", age, history)
		}
	}
	sentAt := func(seq uint32) time.Time { return start.Add(time.Duration(seq-1) * interval) }
	var recovered, lost int
	for seq := uint32(1); seq <= 200; seq++ {
		n := c.got[1][Key{1, seq}]
		switch at := sentAt(seq); {
		case n > 1:
			t.Fatalf("seq %d delivered %d times", seq, n)
		case !at.After(cutAt) || !at.Before(healAt):
			if n != 1 {
				t.Fatalf("seq %d sent outside the cut not delivered", seq)
			}
		case at.Before(healAt.Add(-history - 2*interval)):
			if n != 0 {
				t.Fatalf("seq %d sent %v before the heal, beyond the history, was delivered", seq, healAt.Sub(at))
			}
			lost++
		case n == 1:
			recovered++
		}
	}
	if lost == 0 || recovered == 0 {
		t.Fatalf("expected both given-up and recovered packets across the cut: lost %d recovered %d", lost, recovered)
	}
	if got := c.members[1].Metrics().Losses.Load(); got == 0 {
		t.Fatal("no loss was given up at the end of the history")
	}
}

// Over a long lossy run the state of every member stays bounded by the
// history: cache, outstanding recoveries, resolved sets and timers.
func TestMemoryBounded(t *testing.T) {
	const members = 3
	const interval = 10 * time.Millisecond
	const history = 300 * time.Millisecond
	c := newStaticCluster(t, members, 11, LinkParams{Delay: 2 * time.Millisecond, Loss: 0.2}, func(cfg *Config) {
		cfg.History = history
	})
	const packets = 6000 // 60 s of simulated traffic per member
	for i := range members {
		c.sendEvery(i, packets, interval, time.Duration(i)*time.Millisecond)
	}
	// Per source, at most one history's worth of packets (plus the
	// interval granularity) is held; three sources per member.
	perHistory := int(history/interval) + 5
	bound := Stats{Cached: members * perHistory, Pending: members * perHistory, Resolved: members * perHistory, Timers: 20 * members * perHistory}
	var peak Stats
	for step := 0; step < 60; step++ {
		c.clock.RunFor(time.Second)
		for i := range members {
			s := c.stats(i)
			peak.Cached = max(peak.Cached, s.Cached)
			peak.Pending = max(peak.Pending, s.Pending)
			peak.Resolved = max(peak.Resolved, s.Resolved)
			peak.Timers = max(peak.Timers, s.Timers)
			if s.Cached > bound.Cached || s.Pending > bound.Pending || s.Resolved > bound.Resolved || s.Timers > bound.Timers {
				t.Fatalf("after %ds member %d holds %+v, bound %+v", step+1, i+1, s, bound)
			}
		}
	}
	t.Logf("peak state %+v (bound %+v)", peak, bound)
	for i := range members {
		if n := c.members[i].Metrics().Delivered.Load(); n < uint64((members-1)*packets*9/10) {
			t.Fatalf("member %d delivered only %d", i+1, n)
		}
	}
}

// Join through the authority, including lost control packets, a denial
// when the group is full, and a drop of a member cut off for 3/4 of the
// history that later has to join again.
func TestMembership(t *testing.T) {
	const history = 400 * time.Millisecond
	c := newEmptyCluster(t, 5)
	c.net.SetLAN("lan", LinkParams{Delay: time.Millisecond, Loss: 0.3})
	base := Config{History: history, MaxGroup: 3, SessionInterval: 50 * time.Millisecond, JoinTimeout: 20 * time.Millisecond, AuthorityPublicKey: testAuthorityPub}
	auth := base
	auth.ID, auth.Authority, auth.StateAddr, auth.AuthorityKey = 1, true, "127.0.0.1:7000", testAuthorityKey
	c.add(auth, "lan", 1)
	c.add(base, "lan", 2)
	c.add(base, "lan", 3)
	for i := 1; i <= 2; i++ {
		if err := c.members[i].Join(); err != nil {
			t.Fatal(err)
		}
	}
	joined := func(i int) *Event {
		for _, e := range c.events[i] {
			if e.Kind == EventJoined {
				return &e
			}
		}
		return nil
	}
	if !c.runUntil(10*time.Second, func() bool { return joined(1) != nil && joined(2) != nil }) {
		t.Fatal("joiners were not established")
	}
	if a, b := joined(1).Member, joined(2).Member; a == b || a < 2 || b < 2 {
		t.Fatalf("assigned IDs %d and %d", a, b)
	}
	if addr := joined(1).StateAddr; addr != auth.StateAddr {
		t.Fatalf("state address %q", addr)
	}
	c.net.SetLAN("lan", LinkParams{Delay: time.Millisecond})
	knowsAll := func() bool {
		for i := range 3 {
			var n int
			c.members[i].Inspect(func(nd *Node) { n = len(nd.Members()) })
			if n != 2 {
				return false
			}
		}
		return true
	}
	if !c.runUntil(5*time.Second, knowsAll) {
		t.Fatal("members did not learn each other")
	}

	// A fourth member is denied: MaxGroup is 3.
	c.add(base, "lan", 4)
	if err := c.members[3].Join(); err != nil {
		t.Fatal(err)
	}
	denied := func() bool {
		for _, e := range c.events[3] {
			if e.Kind == EventDenied && e.Reason == DenyFull {
				return true
			}
		}
		return false
	}
	if !c.runUntil(5*time.Second, denied) {
		t.Fatalf("fourth member not denied: %v", c.events[3])
	}
	c.members[3].Close()

	// Cut member index 2 off; the authority drops it.
	victim := c.id(2)
	c.net.Partition([]*MemEndpoint{c.eps[0], c.eps[1]}, []*MemEndpoint{c.eps[2]})
	dropped := func(i int, kind EventKind, id MemberID) bool {
		for _, e := range c.events[i] {
			if e.Kind == kind && e.Member == id {
				return true
			}
		}
		return false
	}
	if !c.runUntil(5*time.Second, func() bool {
		return dropped(0, EventMemberDropped, victim) && dropped(1, EventMemberDropped, victim)
	}) {
		t.Fatalf("member %d not dropped: %v / %v", victim, c.events[0], c.events[1])
	}
	// Back on the network it is told it was dropped, and joins again under
	// a new ID.
	c.net.Heal()
	if !c.runUntil(5*time.Second, func() bool { return dropped(2, EventDropped, victim) }) {
		t.Fatalf("dropped member never learned it: %v", c.events[2])
	}
	if err := c.members[2].Join(); err != nil {
		t.Fatal(err)
	}
	if !c.runUntil(5*time.Second, func() bool { return c.id(2) != 0 && c.id(2) != victim }) {
		t.Fatalf("member did not rejoin: id %d", c.id(2))
	}
}

// TestFarMemberJoinsAndStays: a member 600 ms from the authority joins and
// stays, though its round trip (1.2 s) is longer than DropAfter (750 ms,
// 3/4 of the default 1 s history): until its first packet arrives it may be
// silent a round trip longer. The grace is bounded: a joiner gone before
// its establishment reaches it is still dropped.
func TestFarMemberJoinsAndStays(t *testing.T) {
	c := newEmptyCluster(t, 7)
	c.net.SetLink("near", "far", LinkParams{Delay: 600 * time.Millisecond})
	base := Config{AuthorityPublicKey: testAuthorityPub}
	auth := base
	auth.ID, auth.Authority, auth.AuthorityKey = 1, true, testAuthorityKey
	c.add(auth, "near", 1)
	c.add(base, "far", 2)
	if err := c.members[1].Join(); err != nil {
		t.Fatal(err)
	}
	if !c.runUntil(10*time.Second, func() bool { return c.id(1) != 0 }) {
		t.Fatal("the far member was not established")
	}
	far := c.id(1)
	eventOf := func(i int, kind EventKind, id MemberID) bool {
		return slices.ContainsFunc(c.events[i], func(e Event) bool { return e.Kind == kind && (id == 0 || e.Member == id) })
	}
	c.clock.RunFor(10 * time.Second)
	var members []MemberID
	c.members[0].Inspect(func(n *Node) { members = n.Members() })
	if eventOf(0, EventMemberDropped, 0) || eventOf(1, EventDropped, 0) || !slices.Equal(members, []MemberID{far}) {
		t.Fatalf("the far member (%d) did not stay: the authority's members %v, events %v / %v", far, members, c.events[0], c.events[1])
	}

	// A joiner whose request is in flight when it dies.
	ghost := c.add(base, "far", 3)
	if err := c.members[ghost].Join(); err != nil {
		t.Fatal(err)
	}
	c.clock.RunFor(300 * time.Millisecond)
	c.members[ghost].Close()
	var id MemberID
	if !c.runUntil(5*time.Second, func() bool {
		for _, e := range c.events[0] {
			if e.Kind == EventMemberJoined && e.Member != far {
				id = e.Member
			}
		}
		return id != 0
	}) {
		t.Fatal("the authority never established the second joiner")
	}
	if !c.runUntil(10*time.Second, func() bool { return eventOf(0, EventMemberDropped, id) }) {
		t.Fatalf("the joiner that died (%d) was never dropped: %v", id, c.events[0])
	}
	if eventOf(0, EventMemberDropped, far) {
		t.Fatalf("the far member was dropped: %v", c.events[0])
	}
}

// The recovery timeline in deterministic mode, step by step on bare Nodes:
// loss detected by the next packet, request at C1·d, the original sender
// repairs at once, a second request within E·d is ignored, and the repair
// is delivered once.
func TestDeterministicRecovery(t *testing.T) {
	mk := func(id MemberID, peers ...MemberID) *Node {
		n, err := New(Config{ID: id, Peers: peers, Deterministic: true, SessionInterval: time.Hour, DropAfter: 2 * time.Hour, History: 3 * time.Hour, TickInterval: time.Second}, rand.New(rand.NewSource(1)))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	a, b := mk(1, 2), mk(2, 1)
	t0 := simStart
	from := netip.MustParseAddrPort("127.0.0.1:1")
	d := a.Config().DefaultDelay // nothing measured: sessions are an hour apart
	a.Tick(t0)
	b.Tick(t0)

	var sent [][]byte
	for seq := uint32(1); seq <= 2; seq++ {
		r, err := a.Send(t0, testPayload(1, seq, 10))
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, r.Packets[0])
	}
	// b misses seq 1; seq 2 reveals the loss (N = 1).
	r, err := b.Step(t0, from, sent[1])
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Deliveries) != 1 || r.Deliveries[0].Seq != 2 || len(r.Packets) != 0 {
		t.Fatalf("after seq 2: %+v", r)
	}
	wantReq := t0.Add(time.Duration(1.5 * float64(d)))
	if !r.NextTick.Equal(wantReq) {
		t.Fatalf("next tick %v, want the request timer at %v", r.NextTick.Sub(t0), wantReq.Sub(t0))
	}
	if r = b.Tick(wantReq.Add(-time.Nanosecond)); len(r.Packets) != 0 {
		t.Fatal("request sent before C1·d")
	}
	r = b.Tick(wantReq)
	if len(r.Packets) != 1 {
		t.Fatalf("no request at C1·d: %+v", r)
	}
	req, _ := Decode(r.Packets[0])
	if req.Kind != KindRequest || req.Source != 1 || req.Seq != 1 {
		t.Fatalf("request %+v", req)
	}
	// The original sender repairs at once, then ignores a repeat.
	r, err = a.Step(wantReq, from, r.Packets[0])
	if err != nil || len(r.Packets) != 1 {
		t.Fatalf("sender did not repair at once: %+v %v", r, err)
	}
	repair := r.Packets[0]
	if p, _ := Decode(repair); p.Kind != KindRepair || p.Seq != 1 {
		t.Fatalf("repair %+v", p)
	}
	if r, _ = a.Step(wantReq.Add(time.Millisecond), from, sent[0][:0:0]); len(r.Packets) != 0 {
		t.Fatal("garbage produced packets")
	}
	reqAgain, _ := (&Packet{Kind: KindRequest, Sender: 2, Time: 1, Source: 1, Seq: 1}).Encode(nil)
	if r, _ = a.Step(wantReq.Add(time.Millisecond), from, reqAgain); len(r.Packets) != 0 {
		t.Fatal("repeat request within E·d was answered")
	}
	if got := a.Metrics().RequestsIgnored.Load(); got != 1 {
		t.Fatalf("requests ignored %d", got)
	}
	// b gets the repair once; a second copy is a duplicate.
	r, _ = b.Step(wantReq.Add(2*d), from, repair)
	if len(r.Deliveries) != 1 || r.Deliveries[0].Via != ViaRepair || r.Deliveries[0].Seq != 1 {
		t.Fatalf("repair delivery %+v", r.Deliveries)
	}
	if r, _ = b.Step(wantReq.Add(2*d), from, repair); len(r.Deliveries) != 0 {
		t.Fatal("duplicate repair delivered")
	}
	// And nothing restarts: the RTO finds the packet resolved.
	if r = b.Tick(wantReq.Add(10 * d)); len(r.Packets) != 0 {
		t.Fatalf("recovery continued after the repair: %d packets", len(r.Packets))
	}
	if b.Stats().Pending != 0 {
		t.Fatalf("pending after repair: %+v", b.Stats())
	}
}

// A member that hears another's request for a packet it also misses does
// not send its own (suppression), and a holder other than the sender waits
// D1·d and stays quiet if it hears a repair first.
func TestSuppression(t *testing.T) {
	mk := func(id MemberID, peers ...MemberID) *Node {
		n, err := New(Config{ID: id, Peers: peers, Deterministic: true, SessionInterval: time.Hour, DropAfter: 2 * time.Hour, History: 3 * time.Hour, TickInterval: time.Second}, rand.New(rand.NewSource(1)))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	a, b, c, holder := mk(1, 2, 3, 4), mk(2, 1, 3, 4), mk(3, 1, 2, 4), mk(4, 1, 2, 3)
	from := netip.MustParseAddrPort("127.0.0.1:1")
	t0 := simStart
	for _, n := range []*Node{a, b, c, holder} {
		n.Tick(t0)
	}
	r1, _ := a.Send(t0, testPayload(1, 1, 10))
	r2, _ := a.Send(t0, testPayload(1, 2, 10))
	holder.Step(t0, from, r1.Packets[0])
	for _, n := range []*Node{b, c} {
		n.Step(t0, from, r2.Packets[0])
	}
	d := b.Config().DefaultDelay
	at := t0.Add(time.Duration(1.5 * float64(d)))
	rb := b.Tick(at)
	if len(rb.Packets) != 1 {
		t.Fatal("b sent no request")
	}
	// c hears b's request before its own timer (same instant, b first).
	rc, _ := c.Step(at.Add(-time.Nanosecond), from, rb.Packets[0])
	if len(rc.Packets) != 0 {
		t.Fatal("c answered a request for a packet it lacks")
	}
	if rc = c.Tick(at); len(rc.Packets) != 0 {
		t.Fatal("c sent a request after hearing b's")
	}
	if got := c.Metrics().RequestsSuppressed.Load(); got != 1 {
		t.Fatalf("suppressed %d", got)
	}
	// The holder schedules a repair at D1·d; the sender's repair cancels it.
	rh, _ := holder.Step(at, from, rb.Packets[0])
	if len(rh.Packets) != 0 {
		t.Fatal("holder repaired at once; only the original sender may")
	}
	ra, _ := a.Step(at, from, rb.Packets[0])
	holder.Step(at.Add(time.Millisecond), from, ra.Packets[0])
	if rh = holder.Tick(at.Add(10 * d)); len(rh.Packets) != 0 {
		t.Fatal("holder repaired after hearing the sender's repair")
	}
	if got := holder.Metrics().RepairsSuppressed.Load(); got != 1 {
		t.Fatalf("repairs suppressed %d", got)
	}
}

// Datagrams (SendUnreliable) reach each member at most once per copy, are
// never requested or repaired, and are lost at the link's rate; a
// non-member cannot send one.
func TestDatagramsAreUnreliable(t *testing.T) {
	const members, sent = 3, 2000
	c := newStaticCluster(t, members, 5, LinkParams{Delay: 2 * time.Millisecond, Jitter: 3 * time.Millisecond, Loss: 0.10}, nil)
	got := make([]int, members)
	for i, m := range c.members {
		m.onDeliver = func(d Delivery) {
			if d.Via != ViaDatagram || d.Seq != 0 || d.Source != 1 || string(d.Payload) != "move" {
				t.Errorf("member %d: delivery %+v", i+1, d)
			}
			got[i]++
		}
	}
	c.clock.RunFor(300 * time.Millisecond)
	for n := range sent {
		c.clock.AfterFunc(time.Duration(n)*5*time.Millisecond, func() {
			if err := c.members[0].SendUnreliable([]byte("move")); err != nil {
				t.Error(err)
			}
		})
	}
	c.clock.RunFor(sent*5*time.Millisecond + c.history)
	for i := 1; i < members; i++ {
		m := c.members[i].Metrics()
		t.Logf("member %d got %d of %d datagrams", i+1, got[i], sent)
		if got[i] == sent || got[i] < sent*8/10 || uint64(got[i]) != m.DatagramsDelivered.Load() {
			t.Errorf("member %d got %d of %d datagrams at 10%% loss (metric %d)", i+1, got[i], sent, m.DatagramsDelivered.Load())
		}
		if m.RequestsSent.Load() != 0 || m.LossesDetected.Load() != 0 {
			t.Errorf("member %d asked for datagrams again: %d requests, %d losses detected", i+1, m.RequestsSent.Load(), m.LossesDetected.Load())
		}
	}
	if n := c.members[0].Metrics().DatagramsSent.Load(); n != sent {
		t.Errorf("sent %d datagrams, metric says %d", sent, n)
	}
	outsider, err := New(Config{AuthorityPublicKey: testAuthorityPub}, rand.New(rand.NewSource(1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outsider.SendUnreliable(c.clock.Now(), []byte("x")); err != ErrNotMember {
		t.Errorf("a non-member's datagram: %v, want ErrNotMember", err)
	}
}
