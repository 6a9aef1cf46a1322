package crimp

import (
	"crypto/ed25519"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// dropsOf3 filters the authority's drops of member 3: the first (the
// decision) is lost on the way to the members in first, the later copies
// to the members in copies. It counts the distinct drops sent.
type dropsOf3 struct {
	first, copies []MemberID
	sent          []int64 // the time stamps of the drops seen, in order
}

func (d *dropsOf3) lose(from, to MemberID, p *Packet) bool {
	if from != 1 || p.Kind != KindDrop || p.Member != 3 {
		return false
	}
	if !slices.Contains(d.sent, p.Time) {
		d.sent = append(d.sent, p.Time)
	}
	if p.Time == d.sent[0] {
		return slices.Contains(d.first, to)
	}
	return slices.Contains(d.copies, to)
}

func droppedThree(ev []Event) int {
	n := 0
	for _, e := range ev {
		if e.Kind == EventMemberDropped && e.Member == 3 {
			n++
		}
	}
	return n
}

// TestLostDropIsRepeated: member 3's last packet reaches only member 2,
// then member 3 goes silent and the authority drops it, but its drop is
// lost on the way to member 2. The authority's next copy of the drop
// reaches member 2 within the history: it reports the drop, drains member
// 3, and its session tells the others of the tail only it holds, which
// they recover from it. (With a single drop, member 2 never learned of it,
// never drained member 3, and the tail reached member 2 alone.)
func TestLostDropIsRepeated(t *testing.T) {
	h := newHandNet(t, 4, nil)
	h.run(100 * time.Millisecond)
	data := loseData(2, 1, 4)
	drops := &dropsOf3{first: []MemberID{2}}
	h.lose = func(from, to MemberID, p *Packet) bool { return data(from, to, p) || drops.lose(from, to, p) }
	h.send(3, 1)
	h.send(3, 2)
	h.up[3] = false
	h.runUntilDrop()
	if droppedThree(h.events[2]) != 0 || droppedThree(h.events[4]) != 1 {
		t.Fatalf("events at the drop: member 2 %+v, member 4 %+v: the test shows nothing", h.events[2], h.events[4])
	}
	if _, early := h.got[1][Key{3, 2}]; early {
		t.Fatal("the authority recovered the tail before the drop: the test shows nothing")
	}
	cfg := h.nodes[1].Config()
	end := h.dropAt.Add(cfg.History - cfg.DropAfter)
	for droppedThree(h.events[2]) == 0 {
		if !h.now.Before(end) {
			t.Fatalf("member 2 had not learned of the drop %v after it (drops sent: %d; stats %+v)",
				h.now.Sub(h.dropAt), len(drops.sent), h.nodes[2].Stats())
		}
		h.tick()
	}
	t.Logf("member 2 learned of the drop %v after it", h.now.Sub(h.dropAt))
	if st := h.nodes[2].Stats(); st.Draining != 1 || slices.Contains(h.nodes[2].Members(), 3) {
		t.Errorf("member 2 after the copy of the drop: members %v, %+v", h.nodes[2].Members(), st)
	}
	h.run(time.Second)
	h.checkDelivered(Key{3, 1}, 1, 2, 4)
	h.checkDelivered(Key{3, 2}, 1, 2, 4)
	for _, id := range []MemberID{2, 4} {
		m := h.nodes[id].Metrics()
		if n := droppedThree(h.events[id]); n != 1 || m.Abandoned.Load() != 0 || m.MembersDropped.Load() != 1 {
			t.Errorf("member %d: %d drop events, %d members dropped, %d abandoned", id, n, m.MembersDropped.Load(), m.Abandoned.Load())
		}
	}
	if n := h.nodes[1].Metrics().DropsRepeated.Load(); n != dropRepeats || len(drops.sent) != dropRepeats+1 {
		t.Errorf("the authority repeated the drop %d times, %d drops on the wire; want %d and %d", n, len(drops.sent), dropRepeats, dropRepeats+1)
	}
	// The copies went out within what is left of the dropped member's
	// history, and then stopped.
	if last := time.Unix(0, drops.sent[len(drops.sent)-1]); last.After(end) {
		t.Errorf("last copy %v after the drop, over %v", last.Sub(h.dropAt), cfg.History-cfg.DropAfter)
	}
	if n := len(h.nodes[1].dropCopies); n != 0 {
		t.Errorf("the authority still has %d drops to repeat", n)
	}
}

// signedDrop is the authority's drop of member id stamped at.
func signedDrop(t *testing.T, key ed25519.PrivateKey, id MemberID, at time.Time) []byte {
	t.Helper()
	b := mustEncode(t, &Packet{Kind: KindDrop, Sender: 1, Time: at.UnixNano(), Member: id, Signature: make([]byte, SignatureSize)})
	copy(b[len(b)-SignatureSize:], ed25519.Sign(key, SignedPart(b)))
	return b
}

// drainEnd runs h until member 2 no longer drains member 3 and returns
// when, with member 2's tombstone of member 3 as it stood at the drop.
func drainEnd(t *testing.T, h *handNet) (end, tomb time.Time) {
	t.Helper()
	h.runUntilDrop()
	tomb = h.nodes[2].tombstones[3]
	if tomb.IsZero() || h.nodes[2].Stats().Draining != 1 {
		t.Fatalf("member 2 at the drop: tombstone %v, %+v", tomb, h.nodes[2].Stats())
	}
	for limit := h.now.Add(2 * time.Second); h.nodes[2].Stats().Draining != 0; h.tick() {
		if !h.now.Before(limit) {
			t.Fatal("member 2 drains member 3 for ever")
		}
	}
	return h.now, tomb
}

// TestRepeatedDropIsIdempotent: a member that gets every copy of a drop
// reports it once, and its drain and tombstone keep the time of the first
// copy: the drain ends when it does for a member whose later copies were
// all lost. Fresh signed copies stepped in by hand change nothing either,
// while a forged copy and a replayed one are refused as before.
func TestRepeatedDropIsIdempotent(t *testing.T) {
	start := func(lost *dropsOf3) *handNet {
		h := newHandNet(t, 4, nil)
		h.run(100 * time.Millisecond)
		h.send(3, 1)
		h.up[3] = false
		h.lose = lost.lose
		return h
	}
	allDrops, firstOnly := &dropsOf3{}, &dropsOf3{copies: []MemberID{2, 4}}
	every, one := start(allDrops), start(firstOnly)
	everyEnd, everyTomb := drainEnd(t, every)
	oneEnd, oneTomb := drainEnd(t, one)
	if len(allDrops.sent) != dropRepeats+1 || len(firstOnly.sent) != dropRepeats+1 {
		t.Fatalf("drops sent: %d and %d, want %d", len(allDrops.sent), len(firstOnly.sent), dropRepeats+1)
	}
	if !everyEnd.Equal(oneEnd) || !everyTomb.Equal(oneTomb) || !every.dropAt.Equal(one.dropAt) {
		t.Errorf("with every copy: drop at %v, drain ended %v, tombstone %v; with the first only: %v, %v, %v",
			every.dropAt.Sub(simStart), everyEnd.Sub(simStart), everyTomb.Sub(simStart),
			one.dropAt.Sub(simStart), oneEnd.Sub(simStart), oneTomb.Sub(simStart))
	}
	for _, id := range []MemberID{2, 4} {
		if n := droppedThree(every.events[id]); n != 1 {
			t.Errorf("member %d reported the drop %d times", id, n)
		}
	}

	// By hand: member 2 took the drop; fresh genuine copies (what the
	// authority repeats) change nothing.
	h := start(&dropsOf3{})
	h.runUntilDrop()
	h.lose = func(from, to MemberID, p *Packet) bool { return p.Kind == KindDrop } // only the copies below
	m := h.nodes[2]
	tomb, until := m.tombstones[3], m.draining[3].drainUntil
	for range 3 {
		h.run(50 * time.Millisecond)
		r, err := m.Step(h.now, handAddr(1), signedDrop(t, testAuthorityKey, 3, h.now))
		if err != nil || len(r.Events) != 0 {
			t.Fatalf("copy of the drop: %v, events %+v", err, r.Events)
		}
		d := m.draining[3]
		if d == nil || !d.drainUntil.Equal(until) || !m.tombstones[3].Equal(tomb) {
			var drain time.Duration
			if d != nil {
				drain = d.drainUntil.Sub(until)
			}
			t.Fatalf("a copy of the drop: draining %v (end moved by %v), tombstone moved from %v to %v",
				d != nil, drain, tomb.Sub(simStart), m.tombstones[3].Sub(simStart))
		}
	}
	if n := droppedThree(h.events[2]); n != 1 || m.Metrics().MembersDropped.Load() != 1 {
		t.Errorf("member 2 reported the drop %d times, counted %d", n, m.Metrics().MembersDropped.Load())
	}
	// A copy signed by another key, and a genuine one replayed after the
	// history, are refused.
	other := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	if _, err := m.Step(h.now, handAddr(4), signedDrop(t, other, 2, h.now)); !errors.Is(err, ErrRefused) || m.Metrics().Refused(RefusedDrop) != 1 {
		t.Errorf("forged copy: %v, %d refused", err, m.Metrics().Refused(RefusedDrop))
	}
	old := signedDrop(t, testAuthorityKey, 4, h.now)
	if _, err := m.Step(h.now.Add(m.Config().History+time.Millisecond), handAddr(1), old); !errors.Is(err, ErrRefused) || m.Metrics().Refused(RefusedStale) != 1 {
		t.Errorf("replayed copy: %v, %d stale", err, m.Metrics().Refused(RefusedStale))
	}
	if got := m.Members(); !slices.Equal(got, []MemberID{1, 4}) {
		t.Errorf("member 2's members %v", got)
	}
}

// tapDrops counts the drops of member id on c's network, and loses the
// first on the way to the members at the indexes in lose (the tap runs
// under the network's lock, before the packet is handed out: it cuts the
// links for that packet alone).
func tapDrops(c *cluster, id MemberID, lose ...int) *int {
	sent := 0
	var cut [][2]int
	c.net.Tap(func(from netip.AddrPort, b []byte) {
		for _, k := range cut {
			delete(c.net.cut, k)
		}
		cut = nil
		if p, err := Decode(b); err != nil || p.Kind != KindDrop || p.Member != id {
			return
		}
		sent++
		if sent > 1 {
			return
		}
		for _, ep := range c.eps {
			if ep.LocalAddr() != from {
				continue
			}
			for _, i := range lose {
				k := [2]int{ep.index, c.eps[i].index}
				c.net.cut[k] = true
				cut = append(cut, k)
			}
		}
	})
	return &sent
}

// TestDutyLostDropIsRepeated: in duty mode the holder repeats its drops
// as the fixed authority does, so that a member that lost the first
// learns of it from a copy within the history; a holder that hands the
// duty over stops repeating (the hand-over carries the recent drops), and
// the new holder does not repeat drops it did not decide.
func TestDutyLostDropIsRepeated(t *testing.T) {
	c := dutyCluster(t, 3)
	sent := tapDrops(c, 4, 1)
	c.members[3].Close()
	live := []int{0, 1, 2}
	if !c.runUntil(2*time.Second, func() bool { return c.droppedEvents(0, 3) == 1 }) {
		t.Fatal("the holder never dropped member 4")
	}
	if c.droppedEvents(1, 3) != 0 {
		t.Fatal("member 2 got the first drop: the test shows nothing")
	}
	dropAt := c.clock.Now()
	if !c.runUntil(c.history, func() bool { return c.droppedEvents(1, 3) == 1 }) {
		t.Fatalf("member 2 had not learned of the drop %v after it (%d drops sent)", c.history, *sent)
	}
	t.Logf("member 2 learned of the drop within %v", c.clock.Now().Sub(dropAt))
	if st := c.stats(1); st.Draining != 1 {
		t.Errorf("member 2 does not drain member 4: %+v", st)
	}
	c.clock.RunFor(c.history)
	for _, i := range live {
		if n := c.droppedEvents(i, 3); n != 1 {
			t.Errorf("member %d reported the drop %d times", c.id(i), n)
		}
	}
	if n := c.members[0].Metrics().DropsRepeated.Load(); n != dropRepeats || *sent != dropRepeats+1 {
		t.Errorf("holder repeated the drop %d times, %d drops on the wire", n, *sent)
	}

	// The duty moves on right after a drop: its copies stop.
	c = dutyCluster(t, 3)
	sent = tapDrops(c, 4)
	c.members[3].Close()
	if !c.runUntil(2*time.Second, func() bool { return c.droppedEvents(0, 3) == 1 }) {
		t.Fatal("the holder never dropped member 4")
	}
	c.handOver(0, 2)
	c.clock.RunFor(c.history)
	for _, i := range live {
		if h, e := c.holder(i); h != 2 || e != 2 {
			t.Errorf("member %d: holder %d epoch %d", c.id(i), h, e)
		}
		if n := c.droppedEvents(i, 3); n != 1 {
			t.Errorf("member %d reported the drop %d times", c.id(i), n)
		}
		if n := c.members[i].Metrics().DropsRepeated.Load(); n != 0 {
			t.Errorf("member %d repeated the drop %d times after the hand-over", c.id(i), n)
		}
	}
	if *sent != 1 {
		t.Errorf("%d drops on the wire", *sent)
	}
}
