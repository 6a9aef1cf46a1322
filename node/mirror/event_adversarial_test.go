package mirror

import (
	"crypto/ed25519"
	"math/rand"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/tss"
	"github.com/overworld-p2p/overworld/node/crimp"
	"github.com/overworld-p2p/overworld/node/mirror/mirrorpb"
)

// eventArena is arena under the event protocol.
func eventArena(t *testing.T) (*cluster, []player) {
	c := newCluster(t, eventOpts(clusterOpts{mirrors: 2, link: crimp.LinkParams{Delay: 5 * time.Millisecond, Jitter: 10 * time.Millisecond},
		delays: []time.Duration{0, 50 * time.Millisecond, 300 * time.Millisecond}, history: time.Second, seed: 17}))
	ps := []player{c.player("honest1"), c.player("honest2")}
	for i, p := range ps {
		c.bot(i, p, uint64(i))
	}
	c.run(3 * time.Second)
	return c, ps
}

// TestEventAdversarialForgedAuthority: under the event protocol the
// authority's decisions and consistent events, like its releases and
// checkpoints, count only with its signature and only from it. Mirror 2
// is handed forgeries as CRIMP would deliver them (sender IDs are the
// sender's claim), and a real rogue member multicasts its own: decisions
// in the authority's name unsigned, signed with another key, or replayed
// by another member; consistent events likewise; a release and a
// checkpoint signed but sent by the rogue. Each is refused and counted;
// no forged decision is taken, no forged event logged, nobody released.
func TestEventAdversarialForgedAuthority(t *testing.T) {
	c, ps := eventArena(t)
	r, rid := rogue(t, c)
	victim := game.PlayerID(ps[1].account)
	now := c.clock.Now().UnixNano()
	action := Command{Command: game.Command{Stamp: now, Mirror: 2, Seq: 1 << 40, Op: game.CommandInput, Player: victim,
		Input: game.Input{Player: victim, Fight: true}}, Decision: now}
	dm, err := decisionsMessage([]Command{action})
	if err != nil {
		t.Fatal(err)
	}
	far := lastTick(c.mirrors[1]) + 300
	cm := consistentMessages(far, []game.Event{{Tick: far, Kind: game.EventDied, Player: victim}})[0]
	release := Command{Command: game.Command{Stamp: now, Mirror: 1, Seq: 1 << 41}, Release: 2}
	rm, err := commandMessage(release)
	if err != nil {
		t.Fatal(err)
	}
	every := c.mirrors[1].sync.Config().CheckpointTicks
	lie := checkpointMessage(tss.Checkpoint{Tick: (far/every + 1) * every, Hash: [32]byte{0xba, 0xd}})
	_, otherKey, err := ed25519.GenerateKey(c.rng)
	if err != nil {
		t.Fatal(err)
	}
	forgeries := []struct {
		from    crimp.MemberID
		payload []byte
		reason  string
	}{
		{1, encode(dm), refusedAuthorityUnsigned},
		{1, signedPeerMessage(otherKey, dm), refusedAuthoritySignature},
		{crimp.MemberID(rid), signedPeerMessage(c.authKey, dm), refusedAuthorityUnsigned}, // the authority's own, replayed by another
		{1, encode(cm), refusedAuthorityUnsigned},
		{1, signedPeerMessage(otherKey, cm), refusedAuthoritySignature},
		{crimp.MemberID(rid), signedPeerMessage(c.authKey, cm), refusedAuthorityUnsigned},
		{crimp.MemberID(rid), signedPeerMessage(c.authKey, rm), refusedAuthorityUnsigned},
		{crimp.MemberID(rid), signedPeerMessage(c.authKey, lie), refusedAuthorityUnsigned},
	}
	for i, f := range forgeries {
		before := c.mirrors[1].Metrics().Refused[f.reason]
		c.clock.AfterFunc(0, func() {
			c.mirrors[1].onDeliver(crimp.Delivery{Key: crimp.Key{Source: f.from, Seq: uint32(1000 + i)}, Payload: f.payload})
		})
		c.run(100 * time.Millisecond)
		if after := c.mirrors[1].Metrics().Refused[f.reason]; after != before+1 {
			t.Errorf("forgery %d from member %d: %s counted %d, then %d", i, f.from, f.reason, before, after)
		}
	}
	// The rogue multicasts unsigned decisions and consistent events.
	for _, pm := range []*mirrorpb.PeerMessage{dm, cm} {
		if err := r.Send(encode(pm)); err != nil {
			t.Fatal(err)
		}
	}
	c.run(time.Second)
	for i, s := range c.mirrors {
		if n := s.Metrics().Refused[refusedAuthorityUnsigned]; n < 2 {
			t.Errorf("mirror %d refused %d of the rogue's unsigned decisions and events", i+1, n)
		}
		s.locked(func() {
			if _, ok := s.ev.decided.tickOf(actionKey{2, 1 << 40}); ok {
				t.Errorf("mirror %d took the forged decision", i+1)
			}
		})
		if _, ok := s.AuthoritativeLog().Ticks[far]; ok {
			t.Errorf("mirror %d logged the forged consistent event", i+1)
		}
		if _, ok := playerIn(c, i, victim); !ok {
			t.Errorf("mirror %d released the victim", i+1)
		}
	}
	goesOn(t, c)
}

// TestEventAdversarialMoves: moves count only for the players whose
// ingress sent them, and only as datagrams: a rogue member's moves for a
// player of mirror 2 are refused by every mirror's states (the ingress
// rule, deterministically), and moves sent reliably, or a command sent as
// a datagram, are refused as the wrong protocol.
func TestEventAdversarialMoves(t *testing.T) {
	c, ps := eventArena(t)
	r, rid := rogue(t, c)
	victim := game.PlayerID(ps[1].account)
	var seq uint64
	moves := func() []byte {
		var ms []Command
		for range 4 {
			seq++
			ms = append([]Command{{Command: game.Command{Stamp: c.clock.Now().UnixNano(), Seq: seq, Op: game.CommandInput, Player: victim,
				Input: game.Input{Player: victim, MoveX: 127}}}}, ms...)
		}
		return encode(movesMessage(victim, ms))
	}
	for range 30 {
		if err := r.SendUnreliable(moves()); err != nil {
			t.Fatal(err)
		}
		c.run(time.Second / 30)
	}
	if err := r.Send(moves()); err != nil { // moves over the reliable stream
		t.Fatal(err)
	}
	cmd := Command{Command: game.Command{Stamp: c.clock.Now().UnixNano(), Mirror: rid, Seq: 1 << 30, Op: game.CommandInput, Player: victim,
		Input: game.Input{Player: victim, Eat: true}}}
	if err := r.SendUnreliable(roguePayload(t, cmd)); err != nil { // a command as a datagram
		t.Fatal(err)
	}
	c.run(time.Second)
	for i, s := range c.mirrors {
		st := s.Metrics()
		if st.Refused[refusedNotIngress] == 0 || st.Refused[refusedProtocol] < 2 {
			t.Errorf("mirror %d refused %d moves as not from the ingress, %d messages as the wrong protocol", i+1, st.Refused[refusedNotIngress], st.Refused[refusedProtocol])
		}
		t.Logf("mirror %d: %d refused as not the ingress's, %d as the wrong protocol", i+1, st.Refused[refusedNotIngress], st.Refused[refusedProtocol])
	}
	goesOn(t, c)
}

// TestEventRotateForgedDecisions: with a rotating authority, decisions and
// consistent events count only with the key CRIMP bound to the mirror
// holding the duty: signed in the holder's name with another mirror's key,
// the holder's genuine ones sent by another mirror, or a non-holder's own
// (kept a history in case the duty moves to it, then refused): each is
// refused and counted, and none is taken.
func TestEventRotateForgedDecisions(t *testing.T) {
	keys := make([]ed25519.PrivateKey, 3)
	o := eventOpts(rotateOpts())
	tweak := o.tweak
	o.tweak = func(i int, c *Config) {
		tweak(i, c)
		_, keys[i], _ = ed25519.GenerateKey(rand.New(rand.NewSource(int64(80 + i))))
		c.MemberKey = keys[i]
	}
	c := newCluster(t, o)
	victim := c.player("victim")
	c.bot(1, victim, 3)
	c.run(3 * time.Second)
	id := game.PlayerID(victim.account)
	now := c.clock.Now().UnixNano()
	action := Command{Command: game.Command{Stamp: now, Mirror: 2, Seq: 1 << 40, Op: game.CommandInput, Player: id,
		Input: game.Input{Player: id, Eat: true}}, Decision: now}
	dm, err := decisionsMessage([]Command{action})
	if err != nil {
		t.Fatal(err)
	}
	far := lastTick(c.mirrors[1]) + 300
	cm := consistentMessages(far, []game.Event{{Tick: far, Kind: game.EventDied, Player: id}})[0]
	forgeries := []struct {
		from    crimp.MemberID
		payload []byte
		reason  string
	}{
		{1, signedPeerMessage(keys[2], dm), refusedAuthoritySignature},
		{1, signedPeerMessage(keys[2], cm), refusedAuthoritySignature},
		{3, signedPeerMessage(keys[0], dm), refusedAuthoritySignature},
		{3, signedPeerMessage(keys[2], dm), refusedAuthorityUnsigned},
		{3, signedPeerMessage(keys[2], cm), refusedAuthorityUnsigned},
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
	s := c.mirrors[1]
	s.locked(func() {
		if _, ok := s.ev.decided.tickOf(actionKey{2, 1 << 40}); ok {
			t.Error("mirror 2 took a forged decision")
		}
	})
	if _, ok := s.AuthoritativeLog().Ticks[far]; ok {
		t.Error("mirror 2 logged a forged consistent event")
	}
	if n, bad := c.agreement(); n < 1 || bad != "" {
		t.Fatalf("%d ticks compared, %s", n, bad)
	}
}
