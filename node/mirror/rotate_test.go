package mirror

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"math/rand"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/tss"
	"github.com/overworld-p2p/overworld/node/crimp"
	"github.com/overworld-p2p/overworld/node/duty"
)

// rotateOpts is three mirrors in rotate mode on 5 ms links.
func rotateOpts() clusterOpts {
	return clusterOpts{mirrors: 3, link: crimp.LinkParams{Delay: 5 * time.Millisecond, Jitter: 5 * time.Millisecond},
		history: time.Second, seed: 21,
		tweak: func(i int, c *Config) {
			c.Rotate, c.AuthorityKey, c.AuthorityPublicKey = true, nil, nil
		}}
}

func holderOf(s *Server) crimp.MemberID {
	var h crimp.MemberID
	s.locked(func() { h = s.holderID() })
	return h
}

// In rotate mode the mirror that holds the authority duty can die: the
// others take the duty over (CRIMP takeover, arbiter takeover), drop it,
// release its players, admit a new mirror and serve it the state signed
// with the new holder's own key, and every mirror keeps agreeing on the
// state.
func TestRotateHolderDies(t *testing.T) {
	o := rotateOpts()
	c := newCluster(t, o)
	for i := range 3 {
		c.bot(i, c.player(fmt.Sprintf("bot%d", i)), uint64(i+1))
	}
	c.run(10 * time.Second)
	if n, bad := c.agreement(); n < 5 || bad != "" {
		t.Fatalf("before the kill: %d ticks compared, %s", n, bad)
	}
	if h := holderOf(c.mirrors[1]); h != authorityID {
		t.Fatalf("holder %d before the kill, want the founder", h)
	}
	c.mirrors[0].Close()
	c.runUntil(10*time.Second, "the survivors to take the duty over and drop the founder", func() bool {
		h1, h2 := holderOf(c.mirrors[1]), holderOf(c.mirrors[2])
		if h1 != h2 || h1 == authorityID || h1 == 0 {
			return false
		}
		var members []crimp.MemberID
		c.mirrors[1].member.crimp(func(n *crimp.Node) { members = n.Members() })
		return len(members) == 1
	})
	newHolder := holderOf(c.mirrors[1])
	// The dead founder's bot is released by the new holder.
	c.runUntil(10*time.Second, "the dead mirror's player released", func() bool {
		n := 0
		c.mirrors[1].Inspect(func(_, last *State) { n = len(last.World().Players()) })
		return n == 2
	})
	// A new mirror joins through the new holder and gets its state.
	defer func() {
		if t.Failed() {
			for i, m := range c.mirrors {
				var st crimp.AuthorityState
				var leased bool
				m.member.crimp(func(n *crimp.Node) { st, leased = n.AuthorityState(), n.Leased() })
				cs := map[string]uint64{}
				for k, v := range m.member.crimpMetrics().Counters() {
					if v != 0 && (len(k) > 7 && k[:7] == "refused" || k == "joins_withheld" || k == "takeovers" || k == "handovers") {
						cs[k] = v
					}
				}
				t.Logf("mirror %d: id %d state epoch %d holder %d members %d leased %v %v", i+1, m.id, st.Epoch, st.Holder, len(st.Members), leased, cs)
			}
		}
	}()
	for j := range 3 {
		c.net.SetLink(site(3), site(j), o.link)
	}
	c.addMirror(o, 3)
	if h := holderOf(c.mirrors[3]); h != newHolder {
		t.Fatalf("the new mirror sees holder %d, want %d", h, newHolder)
	}
	c.bot(3, c.player("late"), 9)
	mark := len(c.seen[3])
	c.run(10 * time.Second)
	if len(c.seen[3]) <= mark {
		t.Fatal("the new mirror made no checkpoints")
	}
	if n, bad := c.agreement(1, 2, 3); n < 5 || bad != "" {
		t.Fatalf("after the kill: %d ticks compared, %s", n, bad)
	}
	for _, i := range []int{1, 2, 3} {
		if m := c.mirrors[i].m.checkpointsMismatched.Load(); m != 0 {
			t.Errorf("mirror %d: %d mismatched checkpoints", i+1, m)
		}
	}
}

// In rotate mode the authority's decisions are checked against the key
// CRIMP bound to the mirror holding the duty: a release or checkpoint
// signed by another mirror's own key, or the holder's genuine one sent by
// another mirror, is refused and counted, and nobody is released.
func TestRotateForgedAuthority(t *testing.T) {
	keys := make([]ed25519.PrivateKey, 3)
	o := rotateOpts()
	tweak := o.tweak
	o.tweak = func(i int, c *Config) {
		tweak(i, c)
		_, keys[i], _ = ed25519.GenerateKey(rand.New(rand.NewSource(int64(70 + i))))
		c.MemberKey = keys[i]
	}
	c := newCluster(t, o)
	victim := c.player("victim")
	c.bot(1, victim, 3)
	c.run(3 * time.Second)
	release := Command{Command: game.Command{Stamp: c.clock.Now().UnixNano(), Mirror: 1, Seq: 1 << 40}, Release: 2}
	rm, err := commandMessage(release)
	if err != nil {
		t.Fatal(err)
	}
	lie := checkpointMessage(tss.Checkpoint{Tick: 1 << 30, Hash: [32]byte{0xba, 0xd}})
	forgeries := []struct {
		from    crimp.MemberID
		payload []byte
		reason  string
	}{
		{1, signedPeerMessage(keys[2], rm), refusedAuthoritySignature},  // in the holder's name, another mirror's key
		{1, signedPeerMessage(keys[2], lie), refusedAuthoritySignature}, // the same for a checkpoint
		{3, signedPeerMessage(keys[0], rm), refusedAuthoritySignature},  // the holder's genuine release, sent by another
		{3, signedPeerMessage(keys[2], rm), refusedAuthorityUnsigned},   // a non-holder's own signed release: kept a history, then refused
	}
	for i, f := range forgeries {
		before := c.mirrors[1].Metrics().Refused[f.reason]
		c.clock.AfterFunc(0, func() {
			c.mirrors[1].onDeliver(crimp.Delivery{Key: crimp.Key{Source: f.from, Seq: uint32(1000 + i)}, Payload: f.payload})
		})
		c.run(1500 * time.Millisecond)
		if after := c.mirrors[1].Metrics().Refused[f.reason]; after != before+1 {
			t.Errorf("forgery %d from mirror %d: %s counted %d, then %d", i, f.from, f.reason, before, after)
		}
	}
	c.run(time.Second)
	if _, ok := playerIn(c, 1, game.PlayerID(victim.account)); !ok {
		t.Fatal("the victim was released")
	}
	if n, bad := c.agreement(); n < 1 || bad != "" {
		t.Fatalf("%d ticks compared, %s", n, bad)
	}
}

// A holder that shuts down hands the duty on: the others go on without a
// vote.
func TestRotateHolderShutsDown(t *testing.T) {
	c := newCluster(t, rotateOpts())
	for i := range 3 {
		c.bot(i, c.player(fmt.Sprintf("bot%d", i)), uint64(i+1))
	}
	c.run(3 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := c.mirrors[0].Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	c.runUntil(5*time.Second, "the duty handed on", func() bool {
		h1, h2 := holderOf(c.mirrors[1]), holderOf(c.mirrors[2])
		return h1 == h2 && h1 != 0 && h1 != authorityID
	})
	for _, i := range []int{1, 2} {
		if n := c.mirrors[i].member.crimpMetrics().Takeovers.Load(); n != 0 {
			t.Errorf("mirror %d took the duty over (%d): it should have been handed over", i+1, n)
		}
	}
	mark := len(c.seen[1])
	c.run(5 * time.Second)
	if len(c.seen[1]) <= mark {
		t.Fatal("no checkpoints after the shutdown")
	}
	if n, bad := c.agreement(1, 2); n < 1 || bad != "" {
		t.Fatalf("%d ticks compared, %s", n, bad)
	}
}

// TestRotateForgedSender: in rotate mode (and so in LAN mode, where every
// player is a mirror) a member sends a CRIMP data packet in another
// mirror's name, carrying a leave for that mirror's player. CRIMP does not
// authenticate a packet's sender; the mirrors refuse it because its
// sender did not sign it, and the player stays in the world.
func TestRotateForgedSender(t *testing.T) {
	c := newCluster(t, rotateOpts())
	victim := c.player("victim")
	c.bot(1, victim, 1)
	c.run(2 * time.Second)
	vid := crimp.MemberID(c.mirrors[1].ID())
	var next atomic.Uint32
	c.net.Tap(func(_ netip.AddrPort, b []byte) {
		if p, err := crimp.Decode(b); err == nil && p.Kind == crimp.KindData && p.Sender == vid && p.Seq >= next.Load() {
			next.Store(p.Seq + 1)
		}
	})
	c.run(300 * time.Millisecond)
	forger := c.net.Endpoint("forger")
	for i := range c.mirrors {
		c.net.SetLink("forger", site(i), crimp.LinkParams{Delay: 5 * time.Millisecond})
	}
	now := c.clock.Now().UnixNano()
	leave := Command{Command: game.Command{Stamp: now, Mirror: uint32(vid), Seq: 1 << 40, Op: game.CommandLeave, Player: game.PlayerID(victim.account)}}
	// A sequence number the victim reaches only later, so that the forged
	// packet is not a copy of one already delivered; the payload framed as
	// node/duty frames the application's.
	payload := duty.AppPayload(roguePayload(t, leave))
	pkt, err := (&crimp.Packet{Kind: crimp.KindData, Sender: vid, Time: now, Seq: next.Load() + 40, Payload: payload}).Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := forger.Send(pkt); err != nil {
		t.Fatal(err)
	}
	c.run(2 * time.Second)
	for _, i := range []int{0, 2} {
		if n := c.mirrors[i].Metrics().Refused[refusedUnsigned]; n != 1 {
			t.Errorf("mirror %d refused %d unsigned commands, want 1 (refusals %v)", i+1, n, c.mirrors[i].Metrics().Refused)
		}
	}
	for i := range c.mirrors {
		if _, ok := playerIn(c, i, game.PlayerID(victim.account)); !ok {
			t.Errorf("the forged leave took the victim out of mirror %d's game", i+1)
		}
	}
}
