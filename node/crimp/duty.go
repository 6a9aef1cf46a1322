package crimp

import (
	"cmp"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"time"
)

// Duty mode: the authority as a duty that moves.
//
// With Config.Key set, no member is the authority by configuration. The
// founder holds the duty in epoch 1; from then on it moves in two ways,
// each of which starts the next epoch:
//
//   - HandOver: the holder signs a hand-over naming the next holder and
//     carrying the whole AuthorityState (members and keys, next ID, recent
//     drops). Members of the holder's epoch accept it from the holder only.
//   - Campaign: a member that has heard nothing from the holder for
//     TakeoverAfter asks for votes; each member votes at most once per
//     epoch, and only when it has not heard the holder for TakeoverAfter
//     either. With the signed votes of a majority of the members the
//     candidate multicasts a takeover carrying them, signed by itself.
//
// Every membership decision (establish, deny, drop) carries the epoch and
// is signed with the key of the member holding the duty in it; a member
// accepts one only in its own epoch and from that epoch's holder, so a
// former holder's decisions are refused (stale_epoch) and so are a
// non-holder's (not_holder, forged). Keys are bound to IDs by the signed
// establishments and hand-overs, so no member can speak with another's.
//
// Leases. The holder takes decisions only while a majority of the members
// (itself included) echoed, in a session packet that also says they follow
// its epoch, one of its own session packets sent within LeaseTimeout. A
// member votes only after TakeoverAfter > LeaseTimeout of silence from the
// holder and stops following once it voted, so by the time a majority
// voted the old holder's lease is over: two holders never decide at once,
// and a partition side without a majority admits and drops nothing (and
// node/duty's arbiter, leased the same way, grants nothing there). A
// holder's admissions in the last LeaseTimeout before a
// takeover may go unheard by the new holder, so a takeover skips MaxGroup
// IDs, and the new holder drops the members it does not know (they join
// again). Admissions themselves can pause the lease: a new member counts
// towards the majority before its first session echoes the holder. (This
// assumes one-way delays well below TakeoverAfter - LeaseTimeout, and that
// session packets are the senders' own: CRIMP does not authenticate the
// sender of unsigned packets, so a hostile member can keep a cut-off
// holder's lease alive by forging its peers' sessions, or delay a takeover
// by forging the holder's; it cannot take a decision.)
//
// Keys. A member learns the others' keys from the establishments (its own
// lists the members before it; those it hears while joining are checked
// once it is in). Sessions carry a digest of the keys the sender knows; the
// holder answers a digest unlike its own, and every History anyway, with
// its state as a hand-over to itself (a refresh), and each member with its
// own admission (the establishment that admitted it, signed by the holder
// of its epoch), so that a member that lost an establishment learns the
// key. A member missing keys counts a
// smaller majority: a candidate that missed members could believe it won
// a takeover that the others refuse (they count their own majority), so
// takeovers are safe for every member that checks them, but such a
// candidate acts on its own until the others' proofs reach it.
//
// Laggards. Members keep the last maxProofs hand-overs and takeovers as
// received. A holder (or the member that just handed over) that hears a
// session of an older epoch multicasts those the laggard lacks, in order,
// at most once per JoinTimeout. A member more than maxProofs epochs behind
// cannot verify the chain: after refusing decisions of a newer epoch for
// 2·History without catching up, while its own holder shows a newer epoch
// or has fallen silent, it counts itself dropped (EventDropped) and must
// join again. (Decisions alone do not make it give up: a member could sign
// one of any epoch. Forging its holder's sessions as well could.)

// verdict is what checkDuty decides about a packet.
type verdict uint8

const (
	verdictAccept verdict = iota
	verdictIgnore         // harmless and of no use (an old proof, another joiner's answer)
	verdictRefuse         // counted by reason
)

// maxProofs bounds the hand-overs and takeovers a member keeps to bring
// laggards up to date.
const maxProofs = 8

// Errors of the duty API.
var (
	ErrNoDutyMode  = errors.New("crimp: not in duty mode (no Config.Key)")
	ErrNotHolder   = errors.New("crimp: this member does not hold the authority duty")
	ErrNoLease     = errors.New("crimp: the holder has no lease from a majority")
	ErrHolderAlive = errors.New("crimp: the holder was heard within TakeoverAfter")
)

// dutyState is what a member knows of the duty.
type dutyState struct {
	epoch       uint64
	holder      MemberID
	keys        map[MemberID]ed25519.PublicKey // members of the group and their keys, self included
	holderHeard time.Time

	votedEpoch uint64 // the newest epoch this member voted in
	votedAt    time.Time
	campaign   *campaign

	proofs       []proof // the last maxProofs hand-overs and takeovers, epoch ascending
	proofsSentAt time.Time

	// early holds other members' establishments heard while this member
	// was still joining: it cannot check them yet, but one may admit a
	// member its own establishment (sent before) does not list.
	early [][]byte

	// admission is the establishment that admitted this member (signed by
	// its epoch's holder), multicast again for members that lack its key.
	admission, pendingAdmission []byte
	admissionEpoch              uint64
	admissionSentAt             time.Time

	aheadSince    time.Time // when this member first refused a decision of an epoch it cannot reach (zero: none since it last caught up)
	holderMovedOn bool      // its holder's sessions show a newer epoch

	refreshAt  time.Time // holder: when to multicast its state again
	keysSentAt time.Time // holder: the last refresh sent for a member whose keys differ
}

// maxEarly bounds the establishments a joiner keeps for later.
const maxEarly = 8

type proof struct {
	epoch  uint64
	signer MemberID
	raw    []byte
}

// campaign is this member's bid for the duty.
type campaign struct {
	epoch uint64
	votes map[MemberID]heardVote
	next  time.Time // when to repeat our vote
	until time.Time // when to give up
}

type heardVote struct {
	sig []byte
	at  time.Time
}

func (n *Node) initDuty() {
	n.duty.keys = map[MemberID]ed25519.PublicKey{}
	if n.cfg.Key != nil && n.cfg.Founder {
		n.duty.epoch, n.duty.holder = 1, n.id
		n.duty.keys[n.id] = n.cfg.Key.Public().(ed25519.PublicKey)
	}
}

// resetDuty forgets the duty when this member is dropped: it joins afresh.
func (n *Node) resetDuty() {
	n.duty = dutyState{keys: map[MemberID]ed25519.PublicKey{}}
}

// holds reports whether this member holds the authority (the fixed
// authority, or the duty's holder).
func (n *Node) holds() bool {
	if n.cfg.Key == nil {
		return n.cfg.Authority
	}
	return n.id != 0 && n.duty.holder == n.id
}

// mayDecide reports whether this member may take a membership decision
// now: the fixed authority always, a duty holder while leased.
func (n *Node) mayDecide() bool {
	if n.cfg.Key == nil {
		return n.cfg.Authority
	}
	return n.holds() && n.leased()
}

func (n *Node) signingKey() ed25519.PrivateKey {
	if n.cfg.Key != nil {
		return n.cfg.Key
	}
	return n.cfg.AuthorityKey
}

// decision stamps a membership decision with the duty epoch.
func (n *Node) decision(p *Packet) *Packet {
	p.Epoch = n.duty.epoch
	if n.cfg.Key != nil && p.Kind == KindDeny {
		p.HolderKey, p.Cert = n.cfg.Key.Public().(ed25519.PublicKey), n.cfg.KeyCert
	}
	return p
}

// majority is how many members (self included) make a majority of the
// group as this member knows it.
func (n *Node) majority() int { return max(len(n.duty.keys), 1)/2 + 1 }

// leased reports whether a majority echoed a recent session of this holder
// and follows its epoch.
func (n *Node) leased() bool {
	got := 1
	for id := range n.duty.keys {
		s := n.sources[id]
		if id == n.id || s == nil || s.epoch != n.duty.epoch || !s.follows {
			continue
		}
		if n.now.Sub(time.Unix(0, s.echoOfMe)) < n.cfg.LeaseTimeout {
			got++
		}
	}
	return got >= n.majority()
}

// follows reports whether this member supports its epoch's holder: it has
// not voted for a newer epoch recently.
func (n *Node) follows() bool {
	if n.cfg.Key == nil || n.duty.epoch == 0 {
		return false
	}
	return n.duty.votedEpoch <= n.duty.epoch || n.now.Sub(n.duty.votedAt) >= 2*n.cfg.TakeoverAfter
}

// certified reports whether key may be a member's: GroupKey certified it,
// or there is no GroupKey.
func (n *Node) certified(key, cert []byte) bool {
	if len(key) != KeySize {
		return false
	}
	return n.cfg.GroupKey == nil || len(cert) == CertSize && ed25519.Verify(n.cfg.GroupKey, key, cert)
}

// Holder returns the member holding the authority duty and its epoch, as
// this member knows them (0, 0 before it joined). With a fixed authority it
// returns the member's own ID if it is the authority.
func (n *Node) Holder() (MemberID, uint64) {
	if n.cfg.Key == nil {
		if n.cfg.Authority {
			return n.id, 0
		}
		return 0, 0
	}
	return n.duty.holder, n.duty.epoch
}

// MemberKey returns the public key bound to member id in duty mode (nil if
// unknown): what checks a message the duty holder signed above CRIMP (a
// mirror's releases, checkpoints and state transfers).
func (n *Node) MemberKey(id MemberID) ed25519.PublicKey {
	return slices.Clone(n.duty.keys[id])
}

// Leased reports whether this member holds the duty and may decide now.
func (n *Node) Leased() bool { return n.mayDecide() }

// AuthorityState exports this member's view of the duty state: what a
// hand-over from it would carry (without the move).
func (n *Node) AuthorityState() AuthorityState {
	st := AuthorityState{Epoch: n.duty.epoch, Holder: n.duty.holder, NextID: n.nextID}
	for id, k := range n.duty.keys {
		st.Members = append(st.Members, MemberKey{ID: id, Key: slices.Clone(k)})
		st.NextID = max(st.NextID, id+1)
	}
	slices.SortFunc(st.Members, func(a, b MemberKey) int { return cmp.Compare(a.ID, b.ID) })
	type drop struct {
		id MemberID
		at time.Time
	}
	var drops []drop
	for id, at := range n.tombstones {
		if _, member := n.duty.keys[id]; !member {
			drops = append(drops, drop{id, at})
		}
	}
	// The newest drops, then by ID: the same state from the same history.
	slices.SortFunc(drops, func(a, b drop) int {
		if c := b.at.Compare(a.at); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	for i := 0; i < len(drops) && i < MaxHandedDrops; i++ {
		st.Dropped = append(st.Dropped, drops[i].id)
		st.NextID = max(st.NextID, drops[i].id+1)
	}
	slices.Sort(st.Dropped)
	return st
}

// HandOver gives the duty to member to: it multicasts the signed hand-over
// with the authority state, and from then on this member follows to. Only
// the holder may, while leased.
func (n *Node) HandOver(now time.Time, to MemberID) (Ready, error) {
	if n.cfg.Key == nil {
		return Ready{}, ErrNoDutyMode
	}
	n.advance(now)
	switch {
	case !n.holds():
		return n.ready(), ErrNotHolder
	case to == n.id:
		return n.ready(), nil
	case n.duty.keys[to] == nil:
		return n.ready(), fmt.Errorf("crimp hand-over to %d: not a member with a known key", to)
	case !n.leased():
		return n.ready(), ErrNoLease
	}
	st := n.AuthorityState()
	st.Epoch, st.Holder = n.duty.epoch+1, to
	n.emit(&Packet{Kind: KindHandover, Authority: &st})
	raw := n.out.Packets[len(n.out.Packets)-1]
	n.metrics.HandOvers.Add(1)
	n.install(st, n.id, raw)
	return n.ready(), nil
}

// Campaign bids for the duty after the holder fell silent: this member
// votes for itself in the next epoch and asks the others; with a majority
// of votes it takes the duty over (EventDuty). It fails while the holder
// was heard within TakeoverAfter. Calling it again while a bid runs does
// nothing; a bid gives up after 2·TakeoverAfter.
func (n *Node) Campaign(now time.Time) (Ready, error) {
	if n.cfg.Key == nil {
		return Ready{}, ErrNoDutyMode
	}
	n.advance(now)
	switch {
	case n.id == 0:
		return n.ready(), ErrNotMember
	case n.holds():
		return n.ready(), nil
	case n.duty.campaign != nil:
		return n.ready(), nil
	case n.now.Sub(n.duty.holderHeard) < n.cfg.TakeoverAfter:
		return n.ready(), ErrHolderAlive
	}
	e := max(n.duty.epoch, n.duty.votedEpoch) + 1
	c := &campaign{epoch: e, votes: map[MemberID]heardVote{}, until: n.now.Add(2 * n.cfg.TakeoverAfter)}
	n.duty.campaign = c
	n.duty.votedEpoch, n.duty.votedAt = e, n.now
	c.votes[n.id] = heardVote{sig: ed25519.Sign(n.cfg.Key, VoteMessage(e, n.id)), at: n.now}
	n.metrics.Campaigns.Add(1)
	n.sendVote()
	n.checkWin()
	return n.ready(), nil
}

// noteAhead records that this member refused a decision of an epoch it has
// not reached.
func (n *Node) noteAhead(now time.Time) {
	if n.duty.aheadSince.IsZero() {
		n.duty.aheadSince = now
	}
}

// dutyTimers repeats a running campaign's vote and ends it when it
// expires, and gives up a membership that stayed behind the group's epoch.
func (n *Node) dutyTimers() {
	d := &n.duty
	behind := !n.holds() && (d.holderMovedOn || n.now.Sub(d.holderHeard) >= n.cfg.TakeoverAfter)
	if a := d.aheadSince; !a.IsZero() && n.id != 0 && behind && n.now.Sub(a) > 2*n.cfg.History {
		n.metrics.GaveUp.Add(1)
		n.onDrop(n.id)
		return
	}
	c := n.duty.campaign
	if c == nil {
		return
	}
	if !n.now.Before(c.until) || n.duty.epoch >= c.epoch {
		n.duty.campaign = nil
		return
	}
	if !n.now.Before(c.next) {
		n.sendVote()
	}
}

func (n *Node) sendVote() {
	c := n.duty.campaign
	c.next = n.now.Add(n.cfg.JoinTimeout)
	n.emit(&Packet{Kind: KindVote, Epoch: c.epoch, Member: n.id, VoteSig: c.votes[n.id].sig})
}

// checkWin takes the duty over once the campaign holds the fresh votes of
// a majority. Only votes heard within TakeoverAfter count: a voter whose
// vote is older may follow the old holder again.
func (n *Node) checkWin() {
	c := n.duty.campaign
	var votes []Vote
	for id, v := range c.votes {
		if n.duty.keys[id] != nil && n.now.Sub(v.at) < n.cfg.TakeoverAfter {
			votes = append(votes, Vote{Voter: id, Sig: v.sig})
		}
	}
	if len(votes) < n.majority() {
		return
	}
	slices.SortFunc(votes, func(a, b Vote) int { return cmp.Compare(a.Voter, b.Voter) })
	if len(votes) > MaxDutyGroup {
		votes = votes[:MaxDutyGroup]
	}
	st := n.AuthorityState()
	st.Epoch, st.Holder = c.epoch, n.id
	// The former holder may have admitted members in its lease's last
	// moments that nobody here heard of; it could not have admitted more
	// than MaxGroup. Skip their IDs.
	st.NextID += MemberID(n.cfg.MaxGroup)
	n.emit(&Packet{Kind: KindTakeover, Epoch: c.epoch, NextID: st.NextID, Votes: votes})
	raw := n.out.Packets[len(n.out.Packets)-1]
	n.metrics.Takeovers.Add(1)
	n.install(st, n.id, raw)
}

// install moves this member to the epoch of st, proven by raw (signed by
// signer).
func (n *Node) install(st AuthorityState, signer MemberID, raw []byte) {
	d := &n.duty
	d.epoch, d.holder = st.Epoch, st.Holder
	if len(st.Members) > 0 {
		own := d.keys[n.id]
		clear(d.keys)
		for _, m := range st.Members {
			d.keys[m.ID] = m.Key
		}
		if own != nil {
			d.keys[n.id] = own
		}
	}
	n.nextID = max(n.nextID, st.NextID)
	for _, id := range st.Dropped {
		if _, dead := n.tombstones[id]; !dead && len(n.tombstones) < maxTombstones {
			n.tombstones[id] = n.now
		}
		if s := n.sources[id]; s != nil {
			n.retire(s) // a drop this member missed
		}
	}
	d.holderHeard = n.now
	d.aheadSince, d.holderMovedOn = time.Time{}, false
	if c := d.campaign; c != nil && c.epoch <= d.epoch {
		d.campaign = nil
	}
	d.proofs = append(d.proofs, proof{epoch: st.Epoch, signer: signer, raw: slices.Clone(raw)})
	if len(d.proofs) > maxProofs {
		d.proofs = slices.Delete(d.proofs, 0, len(d.proofs)-maxProofs)
	}
	if d.holder == n.id {
		// The new holder knows every member as a source, so that it can
		// drop the silent ones; their silence counts from now.
		for id := range d.keys {
			if id != n.id && n.sources[id] == nil && len(n.sources)+1 < n.cfg.MaxGroup {
				s := n.addSource(id)
				s.lastHeard = n.now
			}
		}
	}
	n.out.Events = append(n.out.Events, Event{Kind: EventDuty, Member: d.holder, Epoch: d.epoch})
}

// relayProofs multicasts the proofs a member at epoch lacks, if this member
// holds the duty or signed the newest move, at most once per JoinTimeout.
func (n *Node) relayProofs(epoch uint64) {
	d := &n.duty
	if epoch >= d.epoch || len(d.proofs) == 0 || n.now.Sub(d.proofsSentAt) < n.cfg.JoinTimeout {
		return
	}
	if !n.holds() && d.proofs[len(d.proofs)-1].signer != n.id {
		return
	}
	d.proofsSentAt = n.now
	for _, p := range d.proofs {
		if p.epoch > epoch {
			n.out.Packets = append(n.out.Packets, slices.Clone(p.raw))
			n.metrics.ProofsRelayed.Add(1)
		}
	}
}

// dutyEstablish is the holder's establishment of s: the epoch, the new
// member's key, its own key and certificate, and every member with its key.
func (n *Node) dutyEstablish(s *source) *Packet {
	p := n.decision(&Packet{Kind: KindEstablish, Nonce: s.nonce, Member: s.id, StateAddr: n.cfg.StateAddr})
	p.Key = n.duty.keys[s.id]
	p.HolderKey, p.Cert = n.cfg.Key.Public().(ed25519.PublicKey), n.cfg.KeyCert
	ids := make([]MemberID, 0, len(n.duty.keys))
	for id := range n.duty.keys {
		if id != s.id && id != n.id {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		p.Members = append(p.Members, id)
		p.Keys = append(p.Keys, n.duty.keys[id])
	}
	return p
}

// joinedDuty takes the duty state from the establishment that admitted
// this member (checkDuty verified it).
func (n *Node) joinedDuty(p *Packet) {
	d := &n.duty
	clear(d.keys)
	d.epoch, d.holder, d.holderHeard = p.Epoch, p.Sender, n.now
	d.keys[p.Sender] = ed25519.PublicKey(slices.Clone(p.HolderKey))
	d.keys[n.id] = n.cfg.Key.Public().(ed25519.PublicKey)
	for i, m := range p.Members {
		if k := p.keyOf(i); len(k) == KeySize && len(d.keys) < n.cfg.MaxGroup {
			d.keys[m] = ed25519.PublicKey(slices.Clone(k))
		}
	}
	n.nextID = max(n.nextID, p.Member+1)
	d.admission, d.admissionEpoch, d.pendingAdmission = d.pendingAdmission, p.Epoch, nil
	early := d.early
	d.early = nil
	for _, b := range early {
		q, err := Decode(b)
		if err != nil {
			continue
		}
		if _, v := n.checkDecision(n.now, q, b); v == verdictAccept && q.Member != n.id {
			n.learnKey(q.Member, q.Key)
			if s := n.learn(q.Member); s != nil && !s.started {
				s.started, s.settled, s.floor = true, true, 1
			}
		}
	}
}

// refreshKeys takes the member keys of the holder's refresh (establishments
// or drops this member missed), except of members it knows were dropped
// and its own.
func (n *Node) refreshKeys(st *AuthorityState) {
	own := n.duty.keys[n.id]
	clear(n.duty.keys)
	for _, m := range st.Members {
		if _, dead := n.tombstones[m.ID]; !dead {
			n.duty.keys[m.ID] = m.Key
			n.nextID = max(n.nextID, m.ID+1)
		}
	}
	if own != nil {
		n.duty.keys[n.id] = own
	}
	n.nextID = max(n.nextID, st.NextID)
}

// keysSum digests the member IDs and keys this member knows (FNV-1a over
// them in ID order), so that sessions reveal a member that missed one.
func (n *Node) keysSum() uint64 {
	if n.cfg.Key == nil {
		return 0
	}
	ids := make([]MemberID, 0, len(n.duty.keys))
	for id := range n.duty.keys {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	h := fnv.New64a()
	var b [4]byte
	for _, id := range ids {
		binary.BigEndian.PutUint32(b[:], uint32(id))
		h.Write(b[:])
		h.Write(n.duty.keys[id])
	}
	return h.Sum64()
}

// sendRefresh multicasts the holder's state of its own epoch every
// History, so that a member that missed an establishment learns the key.
func (n *Node) sendRefresh() {
	if n.cfg.Key == nil || !n.mayDecide() || n.now.Before(n.duty.refreshAt) {
		return
	}
	n.duty.refreshAt = n.now.Add(n.cfg.History)
	st := n.AuthorityState()
	n.emit(&Packet{Kind: KindHandover, Authority: &st})
}

// learnKey records a new member's key from an establishment of the holder.
func (n *Node) learnKey(id MemberID, key []byte) {
	if len(key) == KeySize && (n.duty.keys[id] != nil || len(n.duty.keys) < n.cfg.MaxGroup) {
		n.duty.keys[id] = ed25519.PublicKey(slices.Clone(key))
	}
	n.nextID = max(n.nextID, id+1)
}

// handleDuty handles the duty-mode packets of a member (hand-over, vote,
// takeover) and notes that the holder spoke; it reports whether p was one
// of those.
func (n *Node) handleDuty(p *Packet, raw []byte) bool {
	if p.Sender == n.duty.holder {
		n.duty.holderHeard = n.now
	}
	if p.Kind == KindSession {
		if p.Sender == n.duty.holder && p.Epoch > n.duty.epoch {
			n.duty.holderMovedOn = true
		}
		// Even a member we dropped learns the moves it missed, so that it
		// can verify its drop and join again.
		n.relayProofs(p.Epoch)
		d := &n.duty
		if p.Epoch == d.epoch && p.KeysSum != n.keysSum() {
			// One of us lost an establishment (or a drop): the holder's
			// refresh, and each member's own admission, tell the keys.
			if n.holds() && n.now.Sub(d.keysSentAt) >= n.cfg.JoinTimeout {
				d.keysSentAt = n.now
				d.refreshAt = time.Time{}
				n.sendRefresh()
			}
			if d.admission != nil && d.admissionEpoch == d.epoch && n.now.Sub(d.admissionSentAt) >= n.cfg.SessionInterval {
				d.admissionSentAt = n.now
				n.out.Packets = append(n.out.Packets, slices.Clone(d.admission))
			}
		}
		return false
	}
	switch p.Kind {
	case KindHandover:
		if p.Authority.Epoch == n.duty.epoch {
			n.refreshKeys(p.Authority)
			return true
		}
		n.install(*p.Authority, p.Sender, raw)
	case KindTakeover:
		st := n.AuthorityState()
		st.Epoch, st.Holder, st.NextID = p.Epoch, p.Sender, max(st.NextID, p.NextID)
		st.Members = nil // keep the keys this member knows
		n.install(st, p.Sender, raw)
	case KindVote:
		n.onVote(p)
	default:
		return false
	}
	return true
}

// onVote counts a vote for our campaign, or casts ours for the candidate
// if the holder has been silent for TakeoverAfter and we have not voted
// in that epoch (one vote per epoch, so at most one candidate wins it).
func (n *Node) onVote(p *Packet) {
	d := &n.duty
	if c := d.campaign; c != nil && p.Member == n.id && p.Epoch == c.epoch {
		c.votes[p.Sender] = heardVote{sig: p.VoteSig, at: n.now}
		n.checkWin()
		return
	}
	if p.Epoch <= d.epoch || p.Epoch <= d.votedEpoch || p.Member == n.id || p.Member == d.holder ||
		d.keys[p.Member] == nil || n.holds() || n.now.Sub(d.holderHeard) < n.cfg.TakeoverAfter {
		return
	}
	d.votedEpoch, d.votedAt = p.Epoch, n.now
	n.metrics.VotesCast.Add(1)
	n.emit(&Packet{Kind: KindVote, Epoch: p.Epoch, Member: p.Member, VoteSig: ed25519.Sign(n.cfg.Key, VoteMessage(p.Epoch, p.Member))})
}

// checkDuty vets a packet in duty mode before anything else sees it: the
// membership decisions, the duty's moves and the votes must be signed by
// whoever may send them, in the right epoch.
func (n *Node) checkDuty(now time.Time, p *Packet, b []byte) (Refusal, verdict) {
	d := &n.duty
	switch p.Kind {
	case KindEstablish, KindDeny:
		if n.id == 0 {
			if !n.joining || p.Nonce != n.nonce {
				if n.joining && p.Kind == KindEstablish {
					d.early = append(d.early, slices.Clone(b))
					if len(d.early) > maxEarly {
						d.early = slices.Delete(d.early, 0, 1)
					}
				}
				return 0, verdictIgnore // another joiner's answer
			}
			// The joiner knows nobody yet: it trusts a certified holder
			// (any holder without a GroupKey) answering its own nonce.
			if !n.certified(p.HolderKey, p.Cert) || !ed25519.Verify(ed25519.PublicKey(p.HolderKey), SignedPart(b), p.Signature) {
				return RefusedJoinAnswer, verdictRefuse
			}
			if p.Kind == KindEstablish {
				d.pendingAdmission = slices.Clone(b)
			}
			return n.checkTime(now, p)
		}
		if p.Kind == KindDeny {
			return 0, verdictIgnore
		}
		r, v := n.checkDecision(now, p, b)
		if r == RefusedStale {
			// A member's own admission, multicast again because we lack
			// its key: signed by our epoch's holder, so the key is good,
			// but it admits nobody now.
			if _, dead := n.tombstones[p.Member]; !dead && d.keys[p.Member] == nil && p.Member != n.id {
				n.learnKey(p.Member, p.Key)
			}
			return 0, verdictIgnore
		}
		return r, v
	case KindDrop:
		if n.id == 0 {
			return 0, verdictIgnore
		}
		return n.checkDecision(now, p, b)
	case KindHandover:
		st := p.Authority
		switch {
		case n.id != 0 && st.Epoch == d.epoch && st.Holder == d.holder && p.Sender == d.holder:
			// The holder's periodic refresh of its epoch's state.
			if !n.signedBy(p.Sender, p, b) {
				return RefusedHandover, verdictRefuse
			}
			return n.checkTime(now, p)
		case n.id == 0 || st.Epoch <= d.epoch:
			return 0, verdictIgnore // an old move, relayed for a laggard
		case st.Epoch > d.epoch+1:
			n.noteAhead(now)
			return RefusedEpochAhead, verdictRefuse
		case p.Sender != d.holder || !n.signedBy(p.Sender, p, b):
			return RefusedHandover, verdictRefuse
		}
	case KindTakeover:
		switch {
		case n.id == 0 || p.Epoch <= d.epoch:
			return 0, verdictIgnore
		case !n.signedBy(p.Sender, p, b) || n.validVotes(p) < n.majority():
			return RefusedTakeover, verdictRefuse
		}
	case KindVote:
		if n.id == 0 {
			return 0, verdictIgnore
		}
		k := d.keys[p.Sender]
		if k == nil || !ed25519.Verify(k, VoteMessage(p.Epoch, p.Member), p.VoteSig) {
			return RefusedVote, verdictRefuse
		}
	}
	return 0, verdictAccept
}

// checkDecision accepts a decision of this member's epoch signed by that
// epoch's holder, stamped within the history.
func (n *Node) checkDecision(now time.Time, p *Packet, b []byte) (Refusal, verdict) {
	switch {
	case p.Epoch < n.duty.epoch:
		return RefusedStaleEpoch, verdictRefuse
	case p.Epoch > n.duty.epoch:
		n.noteAhead(now)
		return RefusedEpochAhead, verdictRefuse
	case p.Sender != n.duty.holder:
		return RefusedNotHolder, verdictRefuse
	case !n.signedBy(p.Sender, p, b):
		switch p.Kind {
		case KindEstablish:
			return RefusedEstablish, verdictRefuse
		case KindDeny:
			return RefusedDeny, verdictRefuse
		}
		return RefusedDrop, verdictRefuse
	}
	return n.checkTime(now, p)
}

func (n *Node) checkTime(now time.Time, p *Packet) (Refusal, verdict) {
	if age := now.Sub(time.Unix(0, p.Time)); age > n.cfg.History || age < -n.cfg.History {
		return RefusedStale, verdictRefuse
	}
	return 0, verdictAccept
}

// signedBy reports whether member id's known key signed packet b.
func (n *Node) signedBy(id MemberID, p *Packet, b []byte) bool {
	k := n.duty.keys[id]
	return k != nil && ed25519.Verify(k, SignedPart(b), p.Signature)
}

// validVotes counts the distinct members this member knows whose valid
// vote for the takeover's sender in its epoch the takeover carries.
func (n *Node) validVotes(p *Packet) int {
	msg := VoteMessage(p.Epoch, p.Sender)
	count := 0
	for _, v := range p.Votes { // ascending, so distinct (validate)
		if k := n.duty.keys[v.Voter]; k != nil && ed25519.Verify(k, msg, v.Sig) {
			count++
		}
	}
	return count
}
