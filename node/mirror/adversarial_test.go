package mirror

import (
	"crypto/ed25519"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"

	"github.com/overworld-p2p/overworld/bootstrap/accounts/token"
	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/tss"
	"github.com/overworld-p2p/overworld/node/crimp"
)

// The attacks of the issue, each played against real mirrors: every one
// is refused and counted, and the honest players go on (the mirrors keep
// agreeing).

// arena is two mirrors with two honest bots, one per mirror.
func arena(t *testing.T) (*cluster, []player) {
	c := newCluster(t, clusterOpts{mirrors: 2, link: crimp.LinkParams{Delay: 5 * time.Millisecond, Jitter: 10 * time.Millisecond},
		delays: []time.Duration{0, 50 * time.Millisecond, 300 * time.Millisecond}, history: time.Second, seed: 17})
	ps := []player{c.player("honest1"), c.player("honest2")}
	for i, p := range ps {
		c.bot(i, p, uint64(i))
	}
	c.run(3 * time.Second)
	return c, ps
}

// goesOn runs the arena and checks that the mirrors made new checkpoints
// and agree on all of them.
func goesOn(t *testing.T, c *cluster) {
	t.Helper()
	before, _ := c.agreement()
	c.run(5 * time.Second)
	n, bad := c.agreement()
	if bad != "" {
		t.Fatalf("the mirrors disagree after the attack: %s", bad)
	}
	if n < before+4 {
		t.Fatalf("the game stalled: %d agreeing checkpoints before, %d after five more seconds", before, n)
	}
	for i, s := range c.mirrors {
		if st := s.Metrics(); st.Mismatched != 0 || st.Resyncs != 0 {
			t.Fatalf("mirror %d: %d mismatches, %d resyncs", i+1, st.Mismatched, st.Resyncs)
		}
	}
}

// rogue joins the CRIMP group as a member of its own (it passed the
// private network's admission, as a compromised or buggy mirror would)
// and returns it with its member ID.
func rogue(t *testing.T, c *cluster) (*crimp.Member, uint32) {
	t.Helper()
	ep := c.net.Endpoint("rogue")
	for i := range c.mirrors {
		c.net.SetLink("rogue", site(i), crimp.LinkParams{Delay: 5 * time.Millisecond})
	}
	node, err := crimp.New(crimp.Config{History: time.Second, AuthorityPublicKey: c.authPub()}, rand.New(rand.NewSource(99)))
	if err != nil {
		t.Fatal(err)
	}
	var id crimp.MemberID
	m := crimp.NewMember(node, ep, c.clock, crimp.MemberOptions{OnEvent: func(e crimp.Event) {
		if e.Kind == crimp.EventJoined {
			id = e.Member
		}
	}})
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if err := m.Join(); err != nil {
		t.Fatal(err)
	}
	c.runUntil(5*time.Second, "the rogue admitted", func() bool { return id != 0 })
	c.run(500 * time.Millisecond) // every mirror knows it
	return m, uint32(id)
}

func roguePayload(t *testing.T, c Command) []byte {
	t.Helper()
	pm, err := commandMessage(c)
	if err != nil {
		t.Fatal(err)
	}
	return encode(pm)
}

func refusedEverywhere(t *testing.T, c *cluster, reason string) {
	t.Helper()
	for i, s := range c.mirrors {
		if n := s.Metrics().Refused[reason]; n == 0 {
			t.Errorf("mirror %d did not count %s", i+1, reason)
		} else {
			t.Logf("mirror %d counted %d %s", i+1, n, reason)
		}
	}
}

func playerIn(c *cluster, mirror int, p game.PlayerID) (game.Player, bool) {
	var got game.Player
	var ok bool
	c.mirrors[mirror].Inspect(func(_, last *State) { got, ok = last.World().Player(p) })
	return got, ok
}

// TestAdversarialInputForAnotherPlayer: a client naming another player in
// its input is refused (and told so) and moves nobody; its session goes
// on. A CRIMP member sending commands for a player whose ingress it is not
// is refused by every mirror's state, deterministically.
func TestAdversarialInputForAnotherPlayer(t *testing.T) {
	c, ps := arena(t)
	victim := game.PlayerID(ps[0].account)
	cheat := c.connect(1, c.player("cheat"))
	c.runUntil(5*time.Second, "the cheat playing", func() bool { return cheat.View().HasSelf })
	victimAt, _ := playerIn(c, 0, victim)
	for range 5 {
		cheat.SendInput(game.Input{Player: victim, MoveX: 127, Fight: true}, false)
		c.run(time.Second / 30)
	}
	refusedEverywhere(t, &cluster{mirrors: c.mirrors[1:]}, refusedWrongPlayer)
	if cheat.Closed() {
		t.Fatalf("a few bad inputs ended the session: %v", cheat.Err())
	}
	if p, _ := playerIn(c, 0, victim); p.FightCounter != victimAt.FightCounter {
		t.Fatal("the victim fought on the cheat's inputs")
	}
	// The session goes on: its own inputs still move its own player.
	x0 := cheat.View().Self.Pos.X
	for range 20 {
		cheat.SendInput(game.Input{MoveX: 127}, false)
		c.run(time.Second / 30)
	}
	c.run(500 * time.Millisecond)
	if x := cheat.View().Self.Pos.X; x == x0 {
		t.Errorf("the cheat's own inputs no longer move it")
	}
	// Persisting ends the session.
	for range 20 {
		cheat.SendInput(game.Input{Player: victim, MoveX: 127}, false)
	}
	c.run(500 * time.Millisecond)
	if !cheat.Closed() {
		t.Error("sixteen refused inputs did not end the session")
	}

	r, rid := rogue(t, c)
	before, _ := playerIn(c, 0, victim)
	for i := range 60 {
		cmd := Command{Command: game.Command{Stamp: c.clock.Now().UnixNano(), Mirror: rid, Seq: uint64(i + 1),
			Op: game.CommandInput, Player: victim, Input: game.Input{Player: victim, Fight: true}}}
		if err := r.Send(roguePayload(t, cmd)); err != nil {
			t.Fatal(err)
		}
		c.run(time.Second / 30)
	}
	c.run(time.Second)
	for i, s := range c.mirrors {
		if n := s.Metrics().Refused[refusedNotIngress]; n < 60 {
			t.Errorf("mirror %d refused %d of the rogue's 60 commands for %s", i+1, n, victim)
		}
	}
	after, _ := playerIn(c, 0, victim)
	if after.FightCounter-before.FightCounter > 10 {
		t.Errorf("the victim started %d fights in two seconds: the rogue's commands were taken", after.FightCounter-before.FightCounter)
	}
	goesOn(t, c)
}

// TestAdversarialForgedIngress: a CRIMP member claiming another mirror as
// a command's ingress is refused as forged.
func TestAdversarialForgedIngress(t *testing.T) {
	c, ps := arena(t)
	r, _ := rogue(t, c)
	victim := game.PlayerID(ps[0].account)
	cmd := Command{Command: game.Command{Stamp: c.clock.Now().UnixNano(), Mirror: 1, Seq: 1 << 40,
		Op: game.CommandLeave, Player: victim}}
	if err := r.Send(roguePayload(t, cmd)); err != nil {
		t.Fatal(err)
	}
	c.run(time.Second)
	refusedEverywhere(t, c, refusedForged)
	if _, ok := playerIn(c, 1, victim); !ok {
		t.Fatal("the forged leave took the victim out")
	}
	goesOn(t, c)
}

// TestAdversarialStampFromTheFuture: a command stamped a second ahead of
// every mirror's clock is refused and counted; nothing waits for it.
func TestAdversarialStampFromTheFuture(t *testing.T) {
	c, _ := arena(t)
	r, rid := rogue(t, c)
	for i := range 20 {
		cmd := Command{Command: game.Command{Stamp: c.clock.Now().Add(time.Second).UnixNano(), Mirror: rid, Seq: uint64(i + 1),
			Op: game.CommandJoin, Player: game.PlayerID(fmt.Sprintf("ghost%d", i)), Name: "Ghost"}}
		if err := r.Send(roguePayload(t, cmd)); err != nil {
			t.Fatal(err)
		}
	}
	c.run(3 * time.Second)
	refusedEverywhere(t, c, refusedFuture)
	if _, ok := playerIn(c, 0, "ghost0"); ok {
		t.Fatal("a join stamped in the future was taken")
	}
	goesOn(t, c)
}

// TestAdversarialDuplicateCommand: the same (mirror, seq) sent twice in
// two CRIMP packets is applied once and counted as a duplicate.
func TestAdversarialDuplicateCommand(t *testing.T) {
	c, _ := arena(t)
	r, rid := rogue(t, c)
	cmd := Command{Command: game.Command{Stamp: c.clock.Now().UnixNano(), Mirror: rid, Seq: 7,
		Op: game.CommandJoin, Player: "twin", Name: "Twin"}}
	for range 2 {
		if err := r.Send(roguePayload(t, cmd)); err != nil {
			t.Fatal(err)
		}
	}
	c.run(2 * time.Second)
	refusedEverywhere(t, c, refusedDuplicate)
	if _, ok := playerIn(c, 0, "twin"); !ok {
		t.Fatal("the command was not applied at all")
	}
	goesOn(t, c)
}

// TestAdversarialUndecodablePayload: garbage in a CRIMP payload is counted
// and dropped.
func TestAdversarialUndecodablePayload(t *testing.T) {
	c, _ := arena(t)
	r, _ := rogue(t, c)
	for _, b := range [][]byte{{0xff, 0xff, 0xff}, []byte("not protobuf at all"), {0x0a, 0x03, 1, 2, 3}} {
		if err := r.Send(b); err != nil {
			t.Fatal(err)
		}
	}
	c.run(time.Second)
	refusedEverywhere(t, c, refusedPayload)
	goesOn(t, c)
}

// TestAdversarialOversizedFrame: a client frame over MaxClientFrame ends
// the session and is counted (over the WebSocket, TestWebSocketAdversaries
// checks the 1009 close).
func TestAdversarialOversizedFrame(t *testing.T) {
	c, _ := arena(t)
	big := c.connect(0, c.player("big"))
	c.runUntil(5*time.Second, "playing", func() bool { return big.View().HasSelf })
	big.Send(make([]byte, MaxClientFrame+1))
	c.run(time.Second)
	if !big.Closed() || !strings.Contains(fmt.Sprint(big.Err()), refusedOversized) {
		t.Fatalf("the session survived an oversized frame: closed %v, %v", big.Closed(), big.Err())
	}
	refusedEverywhere(t, &cluster{mirrors: c.mirrors[:1]}, refusedOversized)
	goesOn(t, c)
}

// TestAdversarialBadTokens: a token signed by another key, an expired
// one, one issued to another peer, a hello signed with the wrong key and
// an undecodable frame: each session is refused with its reason counted,
// and nobody joins.
func TestAdversarialBadTokens(t *testing.T) {
	c, _ := arena(t)
	now := c.clock.Now()
	mallory := c.player("mallory")
	_, otherKey, _ := ed25519.GenerateKey(rand.New(rand.NewSource(1)))
	forged, err := token.Sign(otherKey, token.Claims{Session: "s", Account: "acct-mallory", Player: "mallory", Peer: mallory.id, IssuedAt: now, Expiry: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	someone := c.player("someone")
	cases := []struct {
		name   string
		key    crypto.PrivKey
		tok    string
		reason string
	}{
		{"forged signature", mallory.key, forged, refusedBadToken},
		{"expired", mallory.key, c.token(mallory, now.Add(-2*time.Hour), time.Hour), refusedBadToken},
		{"another peer's token", mallory.key, someone.tok, refusedBadToken},
		{"garbage", mallory.key, "ow1.garbage.garbage", refusedBadToken},
	}
	for _, tc := range cases {
		lc := ConnectLocal(c.mirrors[0], tc.key, tc.tok, c.clock, time.Millisecond)
		c.run(500 * time.Millisecond)
		if !lc.Closed() || !strings.Contains(fmt.Sprint(lc.Err()), tc.reason) || lc.View().HasSelf {
			t.Errorf("%s: closed %v, err %v, playing %v", tc.name, lc.Closed(), lc.Err(), lc.View().HasSelf)
		}
	}
	// A hello whose signature is not by the token's key.
	wrong := ConnectLocal(c.mirrors[0], someone.key, mallory.tok, c.clock, time.Millisecond)
	c.run(500 * time.Millisecond)
	if !wrong.Closed() || !strings.Contains(fmt.Sprint(wrong.Err()), refusedBadToken) {
		t.Errorf("a hello by another key than the token's: %v", wrong.Err())
	}
	// Frames that do not decode: refused one by one, then the session ends.
	junk := ConnectLocal(c.mirrors[0], mallory.key, mallory.tok, c.clock, time.Millisecond)
	c.run(100 * time.Millisecond)
	for range 20 {
		junk.Send([]byte{0xff, 0x01})
	}
	c.run(500 * time.Millisecond)
	if !junk.Closed() {
		t.Error("twenty undecodable frames did not end the session")
	}
	st := c.mirrors[0].Metrics()
	if st.Refused[refusedBadToken] < 5 || st.Refused[refusedBadFrame] == 0 {
		t.Errorf("refusals counted: %v", st.Refused)
	}
	t.Logf("mirror 1 refused: %v", st.Refused)
	if _, ok := playerIn(c, 0, "acct-mallory"); ok {
		t.Fatal("mallory got in")
	}
	goesOn(t, c)
}

// TestAdversarialInputFlood: a client sending many inputs per tick gets
// at most one command per tick out of its mirror (the rest coalesced, the
// flood beyond the rate limit refused), and its last input wins.
func TestAdversarialInputFlood(t *testing.T) {
	c, _ := arena(t)
	flood := c.connect(0, c.player("flood"))
	c.runUntil(5*time.Second, "playing", func() bool { return flood.View().HasSelf })
	sent0 := c.mirrors[0].Metrics().CommandsSent
	for range 30 {
		for range 5 {
			flood.SendInput(game.Input{MoveX: -127}, false)
		}
		flood.SendInput(game.Input{MoveX: 127}, false)
		c.run(time.Second / 30)
	}
	c.run(500 * time.Millisecond)
	st := c.mirrors[0].Metrics()
	// 30 ticks of the flooder plus the honest bot's one per tick.
	if sent := st.CommandsSent - sent0; sent > 2*(30+17) {
		t.Fatalf("%d commands left the mirror in a second and a half", sent)
	}
	if st.Refused[refusedCoalesced] == 0 || st.Refused[refusedRateLimited] == 0 {
		t.Fatalf("refused: %v", st.Refused)
	}
	t.Logf("refused %d coalesced and %d rate-limited inputs", st.Refused[refusedCoalesced], st.Refused[refusedRateLimited])
	goesOn(t, c)
}

// TestAdversarialForgedAuthority: the authority's decisions at the mirror
// layer (releases, the checkpoints a mismatching mirror resyncs to) count
// only with its signature. CRIMP does not authenticate sender IDs, so a
// member can get a payload delivered as the authority's (member 1's); the
// test hands mirror 2 such deliveries directly, as CRIMP would, and also
// has a real rogue member multicast a release of its own. Every one is
// refused and counted; nobody is released, nobody resyncs.
func TestAdversarialForgedAuthority(t *testing.T) {
	c, ps := arena(t)
	r, rid := rogue(t, c)
	victimMirror := crimp.MemberID(2)
	now := c.clock.Now().UnixNano()
	release := Command{Command: game.Command{Stamp: now, Mirror: 1, Seq: 1 << 40}, Release: uint32(victimMirror)}
	rm, err := commandMessage(release)
	if err != nil {
		t.Fatal(err)
	}
	var tick uint64
	c.mirrors[1].Inspect(func(_, last *State) { tick = last.Tick() })
	every := c.mirrors[1].sync.Config().CheckpointTicks
	// A checkpoint the last state has not made yet: if it were believed,
	// mirror 2 would find its own hash different from the authority's.
	lie := checkpointMessage(tss.Checkpoint{Tick: (tick/every + 2) * every, Hash: [32]byte{0xba, 0xd}})
	_, otherKey, err := ed25519.GenerateKey(c.rng)
	if err != nil {
		t.Fatal(err)
	}
	genuine := signedPeerMessage(c.authKey, rm) // as if recorded off the wire and replayed by another member
	forgeries := []struct {
		from    crimp.MemberID
		payload []byte
		reason  string
	}{
		{1, encode(rm), refusedAuthorityUnsigned},                                          // an unsigned release in the authority's name
		{1, encode(lie), refusedAuthorityUnsigned},                                         // an unsigned checkpoint in its name
		{1, signedPeerMessage(otherKey, rm), refusedAuthoritySignature},                    // signed with another key
		{1, signedPeerMessage(otherKey, lie), refusedAuthoritySignature},                   // the same for a checkpoint
		{crimp.MemberID(rid), genuine, refusedAuthorityUnsigned},                           // the authority's signed release, sent by another
		{crimp.MemberID(rid), signedPeerMessage(c.authKey, lie), refusedAuthorityUnsigned}, // (a signed lie stands for a stolen key: refused from anyone but member 1)
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
	// A real member multicasts an unsigned release of its own.
	own := release
	own.Mirror = rid
	if err := r.Send(roguePayload(t, own)); err != nil {
		t.Fatal(err)
	}
	c.run(time.Second)
	refusedEverywhere(t, c, refusedAuthorityUnsigned)
	for i := range c.mirrors {
		if _, ok := playerIn(c, i, game.PlayerID(ps[1].account)); !ok {
			t.Fatalf("mirror %d: the player of mirror 2 was released", i+1)
		}
	}
	goesOn(t, c)
}
