package crimp

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"math/rand"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// memberKey is member i's own key in the duty-mode tests.
func memberKey(i int) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{byte(100 + i)}, ed25519.SeedSize))
}

// dutyBase is the duty-mode configuration of the tests: a 400 ms history,
// 50 ms sessions (lease 150 ms, takeover after 200 ms).
func dutyBase(i int) Config {
	return Config{History: 400 * time.Millisecond, SessionInterval: 50 * time.Millisecond, JoinTimeout: 20 * time.Millisecond,
		Key: memberKey(i), StateAddr: "127.0.0.1:7000"}
}

// dutyCluster is a founder (index 0) and joiners on a loss-free LAN, all
// in duty mode.
func dutyCluster(t *testing.T, joiners int) *cluster {
	t.Helper()
	c := newEmptyCluster(t, 91)
	c.net.SetLAN("lan", LinkParams{Delay: time.Millisecond})
	founder := dutyBase(0)
	founder.ID, founder.Founder = 1, true
	c.add(founder, "lan", 1)
	for i := range joiners {
		c.add(dutyBase(i+1), "lan", int64(i+2))
		if err := c.members[i+1].Join(); err != nil {
			t.Fatal(err)
		}
	}
	if !c.runUntil(10*time.Second, func() bool { return c.allKnow(c.indexes()...) && c.agree(c.indexes()...) }) {
		t.Fatal("members did not learn each other and the duty")
	}
	return c
}

func (c *cluster) holder(i int) (MemberID, uint64) {
	var h MemberID
	var e uint64
	c.members[i].Inspect(func(n *Node) { h, e = n.Holder() })
	return h, e
}

// agree reports whether the members at idx all know the same holder and
// epoch, and that holder is one of them holding a lease.
func (c *cluster) agree(idx ...int) bool {
	h, e := c.holder(idx[0])
	if h == 0 {
		return false
	}
	leased := false
	for _, i := range idx {
		hi, ei := c.holder(i)
		if hi != h || ei != e {
			return false
		}
		if c.id(i) == h {
			c.members[i].Inspect(func(n *Node) { leased = n.Leased() })
		}
	}
	return leased
}

// index returns the cluster index of member id.
func (c *cluster) index(id MemberID) int {
	for i := range c.members {
		if c.id(i) == id {
			return i
		}
	}
	c.t.Fatalf("no member %d", id)
	return -1
}

func (c *cluster) handOver(from int, to MemberID) {
	c.t.Helper()
	m := c.members[from]
	var r Ready
	var err error
	m.mu.Lock()
	r, err = m.node.HandOver(c.clock.Now(), to)
	m.finish(r)
	if err != nil {
		c.t.Fatalf("member %d hand-over to %d: %v", c.id(from), to, err)
	}
}

func (c *cluster) tryHandOver(from int, to MemberID) error {
	m := c.members[from]
	m.mu.Lock()
	r, err := m.node.HandOver(c.clock.Now(), to)
	m.finish(r)
	return err
}

func (c *cluster) campaign(i int) error {
	m := c.members[i]
	m.mu.Lock()
	r, err := m.node.Campaign(c.clock.Now())
	m.finish(r)
	return err
}

func (c *cluster) joining(i int) bool {
	var j bool
	c.members[i].Inspect(func(n *Node) { j = n.joining })
	return j
}

func (c *cluster) refused(i int, r Refusal) uint64 { return c.members[i].Metrics().Refused(r) }

func TestDutyFounderAdmits(t *testing.T) {
	c := dutyCluster(t, 3)
	for i := range c.members {
		if h, e := c.holder(i); h != 1 || e != 1 {
			t.Errorf("member %d: holder %d epoch %d, want 1, 1", c.id(i), h, e)
		}
	}
	var st AuthorityState
	c.members[0].Inspect(func(n *Node) { st = n.AuthorityState() })
	if len(st.Members) != 4 || st.NextID != 5 {
		t.Fatalf("founder's state %+v", st)
	}
	for _, m := range st.Members {
		if !bytes.Equal(m.Key, memberKey(c.index(m.ID)).Public().(ed25519.PublicKey)) {
			t.Errorf("member %d's key is not its own", m.ID)
		}
	}
	// Every member's view of the state is the founder's.
	for i := range c.members {
		var got AuthorityState
		c.members[i].Inspect(func(n *Node) { got = n.AuthorityState() })
		if got.Epoch != st.Epoch || !slices.EqualFunc(got.Members, st.Members, func(a, b MemberKey) bool { return a.ID == b.ID && bytes.Equal(a.Key, b.Key) }) {
			t.Errorf("member %d's state %+v differs from the founder's %+v", c.id(i), got, st)
		}
	}
}

// The duty moves round the group while new members join and one falls
// silent: every joiner gets a distinct ID, every member ends on the same
// holder and epoch, and the silent member is dropped by whoever holds the
// duty then.
func TestDutyHandOverDuringAdmissionsAndDrops(t *testing.T) {
	c := dutyCluster(t, 2)
	var joiners []int
	for i := range 4 {
		j := c.add(dutyBase(10+i), "lan", int64(50+i))
		joiners = append(joiners, j)
		if err := c.members[j].Join(); err != nil {
			t.Fatal(err)
		}
	}
	// Hand over while the joins are in flight (admissions pause the lease
	// until the new members' sessions echo the holder: retry until leased).
	c.clock.RunFor(5 * time.Millisecond)
	if !c.runUntil(time.Second, func() bool { return c.tryHandOver(0, 2) == nil }) {
		t.Fatal("member 1 never had a lease to hand over with")
	}
	if !c.runUntil(5*time.Second, func() bool { return c.agree(c.indexes()...) && c.allKnow(c.indexes()...) }) {
		t.Fatal("no agreement after the first hand-over")
	}
	// Member 3 falls silent; the duty moves to a joiner before it is dropped.
	c.members[2].Close()
	c.handOver(c.index(2), c.id(joiners[0]))
	live := slices.DeleteFunc(c.indexes(), func(i int) bool { return i == 2 })
	if !c.runUntil(5*time.Second, func() bool {
		return c.agree(live...) && !slices.Contains(c.view(live[0]), 3) && c.allKnow(live...)
	}) {
		t.Fatal("the silent member was not dropped after the second hand-over")
	}
	ids := map[MemberID]bool{}
	for _, i := range c.indexes() {
		id := c.id(i)
		if id == 0 || ids[id] {
			t.Fatalf("member index %d has ID %d (taken or zero)", i, id)
		}
		ids[id] = true
	}
	for _, i := range live {
		if h, e := c.holder(i); h != c.id(joiners[0]) || e != 3 {
			t.Errorf("member %d: holder %d epoch %d, want %d, 3", c.id(i), h, e, c.id(joiners[0]))
		}
		if n := c.droppedEvents(i, 2); n != 1 {
			t.Errorf("member %d saw %d drops of member 3", c.id(i), n)
		}
	}
}

// After a hand-over, the former holder's decisions are refused as stale,
// a decision signed by a member that does not hold the duty is refused and
// counted, and so are hand-overs and takeovers without the right to them;
// the group's view does not change.
func TestDutyRefusesFormerAndForgedDecisions(t *testing.T) {
	c := dutyCluster(t, 3)
	c.handOver(0, 2)
	if !c.runUntil(5*time.Second, func() bool { return c.agree(c.indexes()...) }) {
		t.Fatal("no agreement after the hand-over")
	}
	now := func() int64 { return c.clock.Now().UnixNano() }
	signed := func(p *Packet, key ed25519.PrivateKey) []byte {
		p.Time = now()
		p.Signature = make([]byte, SignatureSize)
		b := mustEncode(t, p)
		copy(b[len(b)-SignatureSize:], ed25519.Sign(key, SignedPart(b)))
		return b
	}
	victim := c.id(3)
	inject := func(from int, b []byte) {
		if err := c.eps[from].Send(b); err != nil {
			t.Fatal(err)
		}
		c.clock.RunFor(20 * time.Millisecond)
	}
	before := map[Refusal][]uint64{}
	reasons := []Refusal{RefusedStaleEpoch, RefusedNotHolder, RefusedDrop, RefusedHandover, RefusedTakeover, RefusedVote, RefusedEpochAhead}
	for _, r := range reasons {
		for i := range c.members {
			before[r] = append(before[r], c.refused(i, r))
		}
	}
	// The former holder (member 1) drops member 4 in its old epoch, and
	// claims the new epoch it no longer holds.
	inject(0, signed(&Packet{Kind: KindDrop, Sender: 1, Member: victim, Epoch: 1}, memberKey(0)))
	inject(0, signed(&Packet{Kind: KindDrop, Sender: 1, Member: victim, Epoch: 2}, memberKey(0)))
	// Member 3 signs a drop with its own key, in its name and in the
	// holder's; and hands the duty to itself.
	inject(2, signed(&Packet{Kind: KindDrop, Sender: 3, Member: victim, Epoch: 2}, memberKey(2)))
	inject(2, signed(&Packet{Kind: KindDrop, Sender: 2, Member: victim, Epoch: 2}, memberKey(2)))
	var st AuthorityState
	c.members[2].Inspect(func(n *Node) { st = n.AuthorityState() })
	st.Epoch, st.Holder = 3, 3
	inject(2, signed(&Packet{Kind: KindHandover, Sender: 3, Authority: &st}, memberKey(2)))
	// ... takes it over with only its own vote, and with forged votes.
	own := Vote{Voter: 3, Sig: ed25519.Sign(memberKey(2), VoteMessage(3, 3))}
	inject(2, signed(&Packet{Kind: KindTakeover, Sender: 3, Epoch: 3, NextID: 9, Votes: []Vote{own}}, memberKey(2)))
	forged := Vote{Voter: 1, Sig: ed25519.Sign(memberKey(2), VoteMessage(3, 3))}
	inject(2, signed(&Packet{Kind: KindTakeover, Sender: 3, Epoch: 3, NextID: 9, Votes: []Vote{forged, own}}, memberKey(2)))
	inject(2, mustEncode(t, &Packet{Kind: KindVote, Sender: 1, Time: now(), Epoch: 3, Member: 3, VoteSig: forged.Sig}))
	// A decision of an epoch nobody reached.
	inject(2, signed(&Packet{Kind: KindDrop, Sender: 3, Member: victim, Epoch: 9}, memberKey(2)))

	want := map[Refusal]uint64{RefusedStaleEpoch: 1, RefusedNotHolder: 2, RefusedDrop: 1, RefusedHandover: 1, RefusedTakeover: 2, RefusedVote: 1, RefusedEpochAhead: 1}
	for _, i := range []int{1, 3} { // members 2 (the holder) and 4 (the victim)
		for _, r := range reasons {
			if got := c.refused(i, r) - before[r][i]; got != want[r] {
				t.Errorf("member %d counted %d %s refusals, want %d", c.id(i), got, r, want[r])
			}
		}
	}
	// Long enough for a member that really were behind to give up.
	c.clock.RunFor(3 * c.history)
	for i := range c.members {
		if h, e := c.holder(i); h != 2 || e != 2 {
			t.Errorf("member %d: holder %d epoch %d after the attacks, want 2, 2", c.id(i), h, e)
		}
		if n := c.members[i].Metrics().GaveUp.Load(); n != 0 {
			t.Errorf("member %d gave its membership up over a forged decision of a future epoch", c.id(i))
		}
		if n := c.droppedEvents(i, 3); n != 0 {
			t.Errorf("member %d saw the victim dropped", c.id(i))
		}
	}
}

// A partition leaves the holder with a minority: it loses its lease and
// admits nobody on its side, while the majority side votes a new holder in
// and admits its joiner. When the partition heals the former holder
// follows the new one and everyone agrees on one view.
func TestDutyPartitionMinorityHolderAdmitsNothing(t *testing.T) {
	c := dutyCluster(t, 4) // members 1..5; 1 holds the duty
	minorityJoiner := c.add(dutyBase(20), "lan", 60)
	majorityJoiner := c.add(dutyBase(21), "lan", 61)
	minority := []int{0, 1, minorityJoiner}
	majority := []int{2, 3, 4, majorityJoiner}
	side := func(idx []int) []*MemEndpoint {
		var eps []*MemEndpoint
		for _, i := range idx {
			eps = append(eps, c.eps[i])
		}
		return eps
	}
	c.net.Partition(side(minority), side(majority))
	leased := func(i int) bool {
		var l bool
		c.members[i].Inspect(func(n *Node) { l = n.Leased() })
		return l
	}
	// The holder keeps its lease for at most LeaseTimeout.
	if !c.runUntil(time.Second, func() bool { return !leased(0) }) {
		t.Fatal("the minority holder kept its lease")
	}
	withheld := c.members[0].Metrics().Withheld.Load()
	for _, j := range []int{minorityJoiner, majorityJoiner} {
		if err := c.members[j].Join(); err != nil {
			t.Fatal(err)
		}
	}
	// The majority side waits out the holder's silence, then member 3
	// campaigns (the rotating arbiter's takeover names it in node/duty).
	if err := c.campaign(2); !errors.Is(err, ErrHolderAlive) {
		t.Fatalf("campaign while the holder was just heard: %v", err)
	}
	if !c.runUntil(5*time.Second, func() bool { return c.campaign(2) == nil }) {
		t.Fatal("member 3 could never campaign")
	}
	if !c.runUntil(5*time.Second, func() bool { return c.id(majorityJoiner) != 0 && c.agree(2, 3, 4, majorityJoiner) }) {
		t.Fatal("the majority side did not take over and admit its joiner")
	}
	if h, e := c.holder(2); h != 3 || e != 2 {
		t.Fatalf("majority holder %d epoch %d, want 3, 2", h, e)
	}
	c.clock.RunFor(2 * time.Second)
	if id := c.id(minorityJoiner); id != 0 {
		t.Fatalf("the minority holder admitted its joiner as %d", id)
	}
	if c.members[0].Metrics().Withheld.Load() == withheld {
		t.Error("the minority holder counted no withheld join")
	}
	if leased(0) {
		t.Fatal("the minority holder has a lease again")
	}
	for _, i := range minority[:2] {
		if h, e := c.holder(i); h != 1 || e != 1 {
			t.Errorf("minority member %d: holder %d epoch %d", c.id(i), h, e)
		}
		if n := c.droppedEvents(i, 2, 3, 4); n != 0 {
			t.Errorf("minority member %d saw %d drops of the majority", c.id(i), n)
		}
	}
	c.net.Heal()
	// The new holder dropped the minority while it was cut off: they learn
	// the takeover, take their drop and join again, as a mirror does on
	// EventDropped.
	if !c.runUntil(10*time.Second, func() bool {
		for i := range c.members {
			if c.id(i) == 0 && !c.joining(i) {
				if err := c.members[i].Join(); err != nil {
					t.Fatal(err)
				}
			}
		}
		return c.id(minorityJoiner) != 0 && c.agree(c.indexes()...) && c.allKnow(c.indexes()...)
	}) {
		for i := range c.members {
			h, e := c.holder(i)
			t.Logf("member %d (index %d): holder %d epoch %d view %v", c.id(i), i, h, e, c.view(i))
		}
		t.Fatal("no convergence after the heal")
	}
	if h, _ := c.holder(0); h != 3 {
		t.Fatalf("after the heal the holder is %d, want 3", h)
	}
	for _, i := range minority[:2] {
		n := 0
		for _, e := range c.events[i] {
			if e.Kind == EventDropped {
				n++
			}
		}
		if n != 1 {
			t.Errorf("former minority member index %d was dropped %d times, want 1", i, n)
		}
	}
	if c.id(minorityJoiner) == c.id(majorityJoiner) {
		t.Fatal("two joiners got one ID")
	}
}

// A member that missed several moves of the duty is brought up to date by
// the relayed proofs, in order.
func TestDutyLaggardCatchesUp(t *testing.T) {
	c := dutyCluster(t, 3)
	c.net.Partition(side3(c, 0, 1, 2), side3(c, 3))
	c.handOver(0, 2)
	c.clock.RunFor(100 * time.Millisecond)
	c.handOver(1, 3)
	c.clock.RunFor(100 * time.Millisecond)
	// Member 4 was cut off through both moves: three of four members keep
	// the lease going without it.
	c.net.Heal()
	if !c.runUntil(5*time.Second, func() bool { return c.agree(c.indexes()...) }) {
		t.Fatal("the laggard did not catch up")
	}
	if h, e := c.holder(3); h != 3 || e != 3 {
		t.Fatalf("laggard: holder %d epoch %d", h, e)
	}
	if c.members[2].Metrics().ProofsRelayed.Load()+c.members[1].Metrics().ProofsRelayed.Load() == 0 {
		t.Fatal("no proof relayed")
	}
}

// A member cut off while the duty moved more than maxProofs times cannot
// verify the chain: it gives its membership up, joins again and agrees.
func TestDutyFarLaggardJoinsAgain(t *testing.T) {
	c := dutyCluster(t, 3)
	c.net.Partition(side3(c, 0, 1, 2), side3(c, 3))
	from := 0
	for k := range maxProofs + 2 {
		to := c.id((from + 1) % 3)
		if !c.runUntil(time.Second, func() bool { return c.tryHandOver(from, to) == nil }) {
			t.Fatalf("hand-over %d from member %d never leased", k, c.id(from))
		}
		from = (from + 1) % 3
		c.clock.RunFor(60 * time.Millisecond)
	}
	c.net.Heal()
	if !c.runUntil(10*time.Second, func() bool {
		if c.id(3) == 0 && !c.joining(3) {
			if err := c.members[3].Join(); err != nil {
				t.Fatal(err)
			}
		}
		return c.id(3) != 0 && c.agree(c.indexes()...) && c.allKnow(c.indexes()...)
	}) {
		t.Fatal("the far laggard did not come back")
	}
	if c.members[3].Metrics().GaveUp.Load() != 1 {
		t.Fatalf("gave up %d times", c.members[3].Metrics().GaveUp.Load())
	}
}

func side3(c *cluster, idx ...int) []*MemEndpoint {
	var eps []*MemEndpoint
	for _, i := range idx {
		eps = append(eps, c.eps[i])
	}
	return eps
}

// A joiner with a GroupKey accepts only a certified holder, and a holder
// admits only certified joiners.
func TestDutyGroupKeyCertificates(t *testing.T) {
	group := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, ed25519.SeedSize))
	groupPub := group.Public().(ed25519.PublicKey)
	cert := func(k ed25519.PrivateKey) []byte { return ed25519.Sign(group, k.Public().(ed25519.PublicKey)) }
	c := newEmptyCluster(t, 5)
	c.net.SetLAN("lan", LinkParams{Delay: time.Millisecond})
	f := dutyBase(0)
	f.ID, f.Founder, f.GroupKey, f.KeyCert = 1, true, groupPub, cert(f.Key)
	c.add(f, "lan", 1)
	good := dutyBase(1)
	good.GroupKey, good.KeyCert = groupPub, cert(good.Key)
	c.add(good, "lan", 2)
	// An uncertified joiner: no GroupKey of its own, so Validate lets it
	// start, but the holder refuses it.
	c.add(dutyBase(2), "lan", 3)
	for _, i := range []int{1, 2} {
		if err := c.members[i].Join(); err != nil {
			t.Fatal(err)
		}
	}
	if !c.runUntil(5*time.Second, func() bool { return c.id(1) != 0 }) {
		t.Fatal("certified joiner not admitted")
	}
	c.clock.RunFor(time.Second)
	if c.id(2) != 0 || c.refused(0, RefusedJoinKey) == 0 {
		t.Fatalf("uncertified joiner: ID %d, holder refused %d", c.id(2), c.refused(0, RefusedJoinKey))
	}
	// Validate refuses a certificate that does not match the key.
	bad := dutyBase(3)
	bad.GroupKey, bad.KeyCert = groupPub, cert(memberKey(4))
	if _, err := New(bad, rand.New(rand.NewSource(1))); err == nil {
		t.Fatal("a certificate of another key was accepted")
	}
}

// A joiner refuses an answer to its request signed by an uncertified key
// (a member pretending to hold the duty).
func TestDutyJoinerRefusesUncertifiedAnswer(t *testing.T) {
	group := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, ed25519.SeedSize))
	cfg := dutyBase(1)
	cfg.GroupKey, cfg.KeyCert = group.Public().(ed25519.PublicKey), ed25519.Sign(group, cfg.Key.Public().(ed25519.PublicKey))
	n, err := New(cfg, rand.New(rand.NewSource(1)))
	if err != nil {
		t.Fatal(err)
	}
	r, err := n.Join(simStart)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := Decode(r.Packets[0])
	liar := memberKey(7)
	p := &Packet{Kind: KindEstablish, Sender: 5, Time: simStart.UnixNano(), Nonce: req.Nonce, Member: 6, Epoch: 1,
		Key: req.Key, HolderKey: liar.Public().(ed25519.PublicKey), Signature: make([]byte, SignatureSize)}
	b := mustEncode(t, p)
	copy(b[len(b)-SignatureSize:], ed25519.Sign(liar, SignedPart(b)))
	if _, err := n.Step(simStart, netip.MustParseAddrPort("127.0.0.1:1"), b); !errors.Is(err, ErrRefused) {
		t.Fatalf("uncertified answer: %v", err)
	}
	if n.ID() != 0 || n.Metrics().Refused(RefusedJoinAnswer) != 1 {
		t.Fatalf("joiner took ID %d, refused %d", n.ID(), n.Metrics().Refused(RefusedJoinAnswer))
	}
}

func TestDutyConfigValidate(t *testing.T) {
	cases := map[string]func(c *Config){
		"founder without ID":    func(c *Config) { c.Founder = true },
		"ID without founder":    func(c *Config) { c.ID = 3 },
		"fixed authority too":   func(c *Config) { c.Authority, c.ID, c.Founder = true, 1, true },
		"static peers":          func(c *Config) { c.Peers = []MemberID{2} },
		"lease after takeover":  func(c *Config) { c.LeaseTimeout, c.TakeoverAfter = time.Second, time.Second },
		"group too large":       func(c *Config) { c.MaxGroup = MaxDutyGroup + 1 },
		"short key":             func(c *Config) { c.Key = c.Key[:10] },
		"founder without a key": func(c *Config) { c.Key, c.Founder, c.ID = nil, true, 1 },
	}
	for name, tweak := range cases {
		cfg := dutyBase(1)
		tweak(&cfg)
		if _, err := New(cfg, rand.New(rand.NewSource(1))); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzAuthorityState(f *testing.F) {
	for _, p := range samplePackets() {
		if p.Authority != nil {
			b, _ := p.Authority.MarshalBinary()
			f.Add(b)
		}
	}
	f.Add([]byte{AuthorityStateVersion})
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := UnmarshalAuthorityState(b)
		if err != nil {
			return
		}
		if len(st.Members) > MaxDutyGroup || len(st.Dropped) > MaxHandedDrops {
			t.Fatalf("decoded out of bounds: %+v", st)
		}
		again, err := st.MarshalBinary()
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("re-encoding: %v\n in %x\nout %x", err, b, again)
		}
	})
}

// FuzzDutyStep feeds arbitrary datagrams to a duty-mode holder and member:
// no panics, and the state stays bounded.
func FuzzDutyStep(f *testing.F) {
	for _, p := range samplePackets() {
		b, _ := p.Encode(nil)
		f.Add(b, b)
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		cfg := dutyBase(0)
		cfg.ID, cfg.Founder = 1, true
		n, err := New(cfg, rand.New(rand.NewSource(1)))
		if err != nil {
			t.Fatal(err)
		}
		from := netip.MustParseAddrPort("127.0.0.1:9")
		now := simStart
		for i, in := range [][]byte{a, b, a} {
			now = now.Add(time.Duration(i) * 7 * time.Millisecond)
			r, _ := n.Step(now, from, in)
			if len(r.Packets) > n.cfg.MaxRequestsPerTick+maxProofs+4 {
				t.Fatalf("one datagram produced %d packets", len(r.Packets))
			}
			n.Tick(now.Add(time.Second))
		}
		if st := n.Stats(); st.Sources > MaxDutyGroup || len(n.duty.keys) > MaxDutyGroup || len(n.duty.proofs) > maxProofs {
			t.Fatalf("state %+v, %d keys, %d proofs", st, len(n.duty.keys), len(n.duty.proofs))
		}
	})
}
