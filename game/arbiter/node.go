package arbiter

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"time"

	pb "github.com/overworld-p2p/overworld/game/arbiter/arbiterpb"
)

// Errors of the Node's API.
var (
	ErrNotMember  = errors.New("arbiter: not a member of a game")
	ErrBusy       = errors.New("arbiter: already in or joining a game")
	ErrNotOnDuty  = errors.New("arbiter: not on duty")
	ErrNotServing = errors.New("arbiter: on duty but not serving (no lease yet, or handing off)")
)

// member is one entry of the view.
type member struct {
	id    MemberID
	team  Team
	nonce uint32
}

// ownClaim is a claim of this node not yet answered.
type ownClaim struct {
	resource ResourceID
	retryAt  time.Time
}

// queuedClaim is a claim the arbiter holds until it may serve.
type queuedClaim struct {
	from     MemberID
	resource ResourceID
}

// duty is what only the member on duty keeps. It is created when a term
// starts and dropped when it ends, so nothing of it outlives the term.
type duty struct {
	via         Via
	predecessor Stamp // the term that handed over (ViaHandoff)
	pingSeq     uint64
	pingSent    [pingRing]time.Time // send time of ping seq, at seq % pingRing
	pongSeq     map[MemberID]uint64 // newest of this term's PINGs each member answered
	leaseUntil  time.Time
	lastLeased  time.Time // the last time the lease held (the term's start before that)
	nextPing    time.Time

	syncTarget   uint64 // the newest grant known to exist; no grant before we hold it
	syncHave     uint64 // log.have when the sync last made progress
	syncDeadline time.Time
	repairFrom   uint64 // the lowest grant_have PONGs reported since the last PING

	newEpoch bool   // a takeover, to be sealed with a new epoch once leased
	sealed   uint64 // the epoch a sealed takeover left

	queue       []queuedClaim
	leaves      []MemberID // LEAVEs heard before the lease was confirmed
	handoff     *handoff
	catchUpNext time.Time
}

const (
	pingRing = 64
	noRepair = ^uint64(0)
)

// handoff is a SYNC in progress.
type handoff struct {
	queue    []*pb.QueuedClaim // undecided claims, for the successor
	to       MemberID
	next     Stamp
	skipped  []MemberID
	retryAt  time.Time
	deadline time.Time
}

// Node is the rotating arbiter protocol of one member (paper 003) as a
// pure state machine: the caller feeds it received messages (Step), the
// application's requests (Join, Claim, Chat, Leave …) and the passage of
// time (Tick), each with the current time, and carries out the Ready each
// call returns. It has no socket, clock or goroutine and is not safe for
// concurrent use.
type Node struct {
	cfg     Config
	rng     *rand.Rand
	metrics *Metrics
	now     time.Time
	started bool

	phase Phase
	id    MemberID
	game  uint64
	team  Team
	nonce uint32

	joinTeam  Team
	joinSince time.Time
	joinNext  time.Time
	gameHeard time.Time // a joiner's last sign of a running game

	view         []member
	stamp        Stamp
	holder       MemberID  // who serves this node's current term (0: unknown)
	holderHeard  time.Time // the last accepted duty message from holder
	forcedLost   bool      // suspended or abdicated: accept the group's current term
	takeoverHold time.Time // no takeover before this
	seenEpoch    uint64    // the newest epoch an arbiter's message showed, if newer than ours
	seenEpochAt  time.Time
	handedTo     MemberID // the successor named by the HANDOFF this node last saw
	handedNext   Stamp
	viewReqNext  time.Time

	heard  map[MemberID]time.Time // last accepted message of each member
	ponged map[MemberID]pongSeen  // last PONG of each member (the active set)

	duty      *duty
	dutyState []byte // the newest duty state this node knows

	log      grantLog
	reported map[ResourceID]grant // the grant of each resource last reported to the application
	claims   []ownClaim

	leaving       bool
	leaveNext     time.Time
	leaveDeadline time.Time

	out Ready
}

// New returns an idle node for cfg (zero fields take DefaultConfig's
// values). rng draws join nonces and game IDs; pass a seeded one to replay a
// run.
func New(cfg Config, rng *rand.Rand) (*Node, error) {
	if rng == nil {
		return nil, errors.New("arbiter: New needs a *rand.Rand")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("arbiter config: %w", err)
	}
	return &Node{
		cfg:      cfg,
		rng:      rng,
		metrics:  &Metrics{},
		heard:    map[MemberID]time.Time{},
		ponged:   map[MemberID]pongSeen{},
		log:      newGrantLog(cfg.LogWindow),
		reported: map[ResourceID]grant{},
	}, nil
}

// ID is this node's member ID (0 before it is admitted).
func (n *Node) ID() MemberID { return n.id }

// Metrics returns the node's counters.
func (n *Node) Metrics() *Metrics { return n.metrics }

// Config returns the configuration in effect (defaults filled in).
func (n *Node) Config() Config { return n.cfg }

// OnDuty reports whether this node is the arbiter now.
func (n *Node) OnDuty() bool { return n.duty != nil }

// Holder is the member this node believes is on duty (0: unknown).
func (n *Node) Holder() MemberID { return n.holder }

// Status returns a snapshot of the node.
func (n *Node) Status() Status {
	st := Status{
		ID: n.id, Game: n.game, Phase: n.phase, Team: n.team, Stamp: n.stamp, Holder: n.holder,
		OnDuty: n.duty != nil, Leased: n.leased(), Serving: n.serving(),
		GrantSeq: n.log.last, GrantHas: n.log.have,
	}
	if n.duty != nil && n.duty.handoff != nil {
		st.HandOver = n.duty.handoff.to
	}
	for _, m := range n.view {
		st.View = append(st.View, Member{ID: m.id, Team: m.team})
	}
	return st
}

// Grant is one first-come decision: Resource went to Member, the Seq-th
// grant of the game, made at Stamp.
type Grant struct {
	Seq      uint64
	Resource ResourceID
	Member   MemberID
	Stamp    Stamp
}

// Grants returns the grants this node remembers (the last LogWindow), the
// one that stands for each resource, in sequence order: what a driver hands
// to a new mirror, or compares across members.
func (n *Node) Grants() []Grant {
	out := make([]Grant, 0, len(n.log.byResource))
	for _, seq := range n.log.byResource {
		g := n.log.entries[seq]
		out = append(out, Grant{Seq: g.seq, Resource: g.resource, Member: g.to, Stamp: g.stamp})
	}
	slices.SortFunc(out, func(a, b Grant) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

// Stats reports how much state the node holds.
func (n *Node) Stats() Stats {
	s := Stats{View: len(n.view), Heard: len(n.heard) + len(n.ponged), Log: len(n.log.entries) + len(n.reported), OwnClaims: len(n.claims)}
	if n.duty != nil {
		s.Queued = len(n.duty.queue)
	}
	return s
}

// Create starts a new game with this node as its only member and arbiter
// (the paper's first player, §3.5; a mirror group's first mirror).
func (n *Node) Create(now time.Time) (Ready, error) {
	if n.phase != PhaseIdle {
		return Ready{}, ErrBusy
	}
	n.advance(now)
	n.nonce = n.newNonce()
	n.create()
	return n.ready(), nil
}

// Join asks the group for a place, on team (0: any). It retries until the
// arbiter answers; if it hears another joiner and no game, the one that has
// waited longer creates the game (paper §3.5). EventJoined or EventRefused
// tells the outcome.
func (n *Node) Join(now time.Time, team Team) (Ready, error) {
	if n.phase != PhaseIdle {
		return Ready{}, ErrBusy
	}
	n.advance(now)
	n.phase = PhaseJoining
	n.joinTeam = team
	n.nonce = n.newNonce()
	n.joinSince, n.gameHeard = n.now, n.now
	n.sendJoin()
	return n.ready(), nil
}

// Leave takes this node out of the game. On duty, it first hands the duty
// to the next active member (paper §3.4: "the next person in the list
// automatically becomes the server"), then asks to be removed like any
// member. EventLeft follows.
func (n *Node) Leave(now time.Time) (Ready, error) {
	n.advance(now)
	switch {
	case n.phase == PhaseJoining:
		n.leaveGame(ReasonLeft)
	case n.phase != PhaseMember:
		return Ready{}, ErrNotMember
	case len(n.view) == 1:
		n.leaveGame(ReasonLeft)
	case !n.leaving:
		n.leaving = true
		n.leaveDeadline = n.now.Add(n.cfg.LeaveTimeout)
		if n.duty == nil {
			n.sendLeave()
		} else if n.duty.handoff == nil {
			n.startHandoff()
		}
	}
	return n.ready(), nil
}

// Claim asks the arbiter for resource r; the answer comes as EventGrant
// (to this node) or EventDeny. The claim is repeated until answered.
func (n *Node) Claim(now time.Time, r ResourceID) (Ready, error) {
	if n.phase != PhaseMember {
		return Ready{}, ErrNotMember
	}
	n.advance(now)
	if slices.ContainsFunc(n.claims, func(c ownClaim) bool { return c.resource == r }) {
		return n.ready(), nil
	}
	if len(n.claims) >= n.cfg.MaxOwnClaims {
		return n.ready(), fmt.Errorf("arbiter claim %d: %d claims already wait for an answer", r, len(n.claims))
	}
	n.claims = append(n.claims, ownClaim{resource: r})
	n.sendClaim(&n.claims[len(n.claims)-1]) // may answer it at once: do not use the element after
	n.serve()
	return n.ready(), nil
}

// Chat sends a line to this node's team (team) or to everyone; the others
// report it as EventChat (the sender reports nothing).
func (n *Node) Chat(now time.Time, team bool, text string) (Ready, error) {
	if n.phase != PhaseMember {
		return Ready{}, ErrNotMember
	}
	text = strings.ToValidUTF8(text, "\uFFFD")
	if len(text) > MaxChatBytes {
		return Ready{}, fmt.Errorf("arbiter chat: %d bytes, limit %d", len(text), MaxChatBytes)
	}
	n.advance(now)
	n.send(&pb.Envelope{Body: &pb.Envelope_Chat{Chat: &pb.Chat{Team: team, Text: text}}})
	return n.ready(), nil
}

// Expel removes member m from the view (a mirror authority declaring a
// drop). Only the arbiter on duty may, while it serves.
func (n *Node) Expel(now time.Time, m MemberID) (Ready, error) {
	n.advance(now)
	if !n.serving() {
		if n.duty == nil {
			return n.ready(), ErrNotOnDuty
		}
		return n.ready(), ErrNotServing
	}
	if m == n.id || n.placeOf(m) < 0 {
		return n.ready(), fmt.Errorf("arbiter expel %d: not another member of the view", m)
	}
	n.removeMember(m, pb.ViewChange_DROPPED)
	n.serve()
	return n.ready(), nil
}

// SetDutyState sets the opaque state of the duties a driver runs on the
// arbiter (a mirror group's authority: next IDs, state-transfer address …).
// The next HANDOFF carries it to the successor, which gets it in
// EventDutyBegin; every member keeps the newest it saw, for a takeover.
func (n *Node) SetDutyState(b []byte) error {
	if n.duty == nil {
		return ErrNotOnDuty
	}
	if len(b) > MaxDutyState {
		return fmt.Errorf("arbiter duty state of %d bytes: limit %d", len(b), MaxDutyState)
	}
	n.dutyState = slices.Clone(b)
	return nil
}

// Step processes one received message. from is the sender as the
// transport authenticated it (a CRIMP member ID, a peer's ID), or 0 if the
// transport cannot tell (plain multicast); a message whose envelope names
// another sender is refused. Refused messages are counted by reason and
// change nothing.
func (n *Node) Step(now time.Time, from MemberID, b []byte) (Ready, error) {
	env, err := Decode(b)
	if err != nil {
		n.metrics.refuse(RefusedMalformed)
		return Ready{}, err
	}
	claimed := MemberID(env.GetSender())
	if j := env.GetJoin(); j != nil {
		claimed = MemberID(j.GetId()) // a joiner has no ID yet, but may ask for one
	}
	if from != 0 && claimed != 0 && claimed != from {
		n.metrics.refuse(RefusedForgedSender)
		return Ready{}, fmt.Errorf("arbiter %s: message claims member %d, transport says %d", kindName(env), claimed, from)
	}
	n.advance(now)
	n.handle(env)
	n.serve()
	return n.ready(), nil
}

// Tick advances the node to now and runs what is due: PINGs, hand-off
// retries, claim and join retries, takeovers, drops.
func (n *Node) Tick(now time.Time) Ready {
	n.advance(now)
	n.serve()
	return n.ready()
}

// advance moves the clock (never backwards) and runs the timers.
func (n *Node) advance(now time.Time) {
	if !n.started {
		n.started, n.now = true, now
	}
	gap := now.Sub(n.now)
	if now.After(n.now) {
		n.now = now
	}
	if gap >= n.cfg.SuspendAfter && n.phase == PhaseMember && n.duty == nil {
		// We were not running: what we know of the duty may be old. Accept
		// the group's current term and ask for it before acting on our own.
		n.forcedLost = true
		n.takeoverHold = n.now.Add(n.cfg.TakeoverTimeout)
		n.requestView()
	}
	switch n.phase {
	case PhaseJoining:
		if !n.now.Before(n.joinNext) {
			n.sendJoin()
		}
	case PhaseMember:
		n.memberTimers()
	}
}

func (n *Node) memberTimers() {
	if n.leaving && !n.now.Before(n.leaveDeadline) {
		n.leaveGame(ReasonTimedOut)
		return
	}
	if n.leaving && n.duty == nil && !n.now.Before(n.leaveNext) {
		n.sendLeave()
	}
	var due []ResourceID
	for _, c := range n.claims {
		if !n.now.Before(c.retryAt) {
			due = append(due, c.resource)
		}
	}
	for _, r := range due {
		// Sending may answer (and remove) claims when this node is on duty.
		if i := slices.IndexFunc(n.claims, func(c ownClaim) bool { return c.resource == r }); i >= 0 {
			n.sendClaim(&n.claims[i])
		}
	}
	if n.duty != nil {
		n.dutyTimers()
		return
	}
	if n.holderLost() && !n.now.Before(n.viewReqNext) {
		n.requestView()
	}
	if !n.now.Before(n.takeoverAt()) && !n.behind() {
		n.takeOver()
	}
}

// behind reports whether a member recently showed an epoch newer than
// ours: a majority moved on without us. Until we caught up we follow
// nobody of our old epoch, answer no PING, take nothing over and decide
// nothing, so that no majority forms on an epoch the group has left.
func (n *Node) behind() bool {
	return n.seenEpoch>>32 > n.stamp.Epoch>>32 && n.now.Sub(n.seenEpochAt) < 2*n.cfg.TakeoverTimeout
}

// holderLost reports whether this node has lost track of the duty: the
// member it believes on duty has been silent for TakeoverTimeout (for the
// arbiter itself: it has had no lease that long), or it was suspended.
func (n *Node) holderLost() bool {
	if n.duty != nil {
		return n.now.Sub(n.duty.lastLeased) >= n.cfg.TakeoverTimeout
	}
	return n.forcedLost || n.now.Sub(n.holderHeard) >= n.cfg.TakeoverTimeout
}

// takeoverAt is when this node takes the duty over if the arbiter stays
// silent: the k-th member after the silent arbiter's place waits
// TakeoverTimeout + (k-1)·TakeoverStagger.
func (n *Node) takeoverAt() time.Time {
	size := len(n.view)
	me := n.placeOf(n.id)
	if me < 0 || size == 0 {
		return n.now.Add(24 * time.Hour)
	}
	dist := (me - n.stamp.place() + size) % size
	if dist == 0 {
		dist = size
	}
	at := n.holderHeard.Add(n.cfg.TakeoverTimeout + time.Duration(dist-1)*n.cfg.TakeoverStagger)
	if n.forcedLost && at.Before(n.takeoverHold) {
		at = n.takeoverHold
	}
	return at
}

func (n *Node) ready() Ready {
	r := n.out
	n.out = Ready{}
	next := n.now.Add(n.cfg.Heartbeat)
	earlier := func(t time.Time) {
		if !t.IsZero() && t.Before(next) {
			next = t
		}
	}
	switch n.phase {
	case PhaseJoining:
		earlier(n.joinNext)
	case PhaseMember:
		if n.leaving {
			earlier(n.leaveDeadline)
			if n.duty == nil {
				earlier(n.leaveNext)
			}
		}
		for _, c := range n.claims {
			earlier(c.retryAt)
		}
		if d := n.duty; d != nil {
			if d.handoff != nil {
				earlier(d.handoff.retryAt)
				earlier(d.handoff.deadline)
			} else {
				earlier(d.nextPing)
			}
		} else if n.behind() {
			earlier(n.seenEpochAt.Add(2 * n.cfg.TakeoverTimeout))
		} else {
			earlier(n.takeoverAt())
		}
	}
	if next.Before(n.now) {
		next = n.now
	}
	r.NextTick = next
	return r
}

// send multicasts body stamped with the node's clock.
func (n *Node) send(env *pb.Envelope) { n.sendAt(n.stamp, env) }

func (n *Node) sendAt(st Stamp, env *pb.Envelope) {
	env.Game = n.game
	env.Sender = uint32(n.id)
	env.Stamp = st.wire()
	n.emit(env)
}

func (n *Node) emit(env *pb.Envelope) {
	n.out.Messages = append(n.out.Messages, encode(env))
	n.metrics.MessagesSent.Add(1)
}

func (n *Node) event(e Event) { n.out.Events = append(n.out.Events, e) }

func (n *Node) newNonce() uint32 {
	for {
		if v := n.rng.Uint32(); v != 0 {
			return v
		}
	}
}

func (n *Node) placeOf(id MemberID) int {
	for i, m := range n.view {
		if m.id == id {
			return i
		}
	}
	return -1
}

// owner is the member serving ts in the current view (0: none).
func (n *Node) owner(ts uint32) MemberID {
	if p := int(ts / RangeSize); p < len(n.view) {
		return n.view[p].id
	}
	return 0
}

func (n *Node) lapLen() uint32 { return uint32(len(n.view) * RangeSize) }

func (n *Node) majority() int { return len(n.view)/2 + 1 }

func (n *Node) teamOf(id MemberID) Team {
	if p := n.placeOf(id); p >= 0 {
		return n.view[p].team
	}
	return 0
}

// pongSeen is the last PONG heard from a member, to anyone.
type pongSeen struct {
	at   time.Time
	have uint64 // its grant log is complete up to this
}

func (n *Node) active(id MemberID) bool {
	p, ok := n.ponged[id]
	return ok && n.now.Sub(p.at) < n.cfg.ActiveWindow
}

// lagging reports whether member id's grant log is so far behind ours
// that, handed the duty, it would first spend heartbeats catching up.
func (n *Node) lagging(id MemberID) bool {
	return n.log.countAfter(n.ponged[id].have) > maxLag
}

// maxLag is how many grants a successor may miss: what a few PINGs repair.
const maxLag = 4 * MaxRepairs

func (n *Node) sendJoin() {
	n.joinNext = n.now.Add(n.cfg.JoinRetry)
	n.emit(&pb.Envelope{Game: n.cfg.Game, Body: &pb.Envelope_Join{Join: &pb.Join{
		Nonce: n.nonce, Id: uint32(n.cfg.ID), Team: uint32(n.joinTeam),
		WaitedMs: uint64(n.now.Sub(n.joinSince).Milliseconds()),
	}}})
}

func (n *Node) sendLeave() {
	n.leaveNext = n.now.Add(n.cfg.LeaveRetry)
	n.send(&pb.Envelope{Body: &pb.Envelope_Leave{Leave: &pb.Leave{}}})
}

func (n *Node) sendClaim(c *ownClaim) {
	c.retryAt = n.now.Add(n.cfg.ClaimRetry)
	if n.duty != nil {
		// The arbiter's own claim arrives at once.
		n.onClaim(n.id, c.resource, n.stamp)
		return
	}
	n.send(&pb.Envelope{Body: &pb.Envelope_Claim{Claim: &pb.Claim{Resource: uint64(c.resource)}}})
}

func (n *Node) requestView() {
	if n.now.Before(n.viewReqNext) {
		return
	}
	n.viewReqNext = n.now.Add(n.cfg.Heartbeat)
	n.metrics.ViewRequests.Add(1)
	n.send(&pb.Envelope{Body: &pb.Envelope_ViewRequest{ViewRequest: &pb.ViewRequest{}}})
}

// resolveClaim forgets this node's claim of r; it reports whether there was one.
func (n *Node) resolveClaim(r ResourceID) bool {
	i := slices.IndexFunc(n.claims, func(c ownClaim) bool { return c.resource == r })
	if i < 0 {
		return false
	}
	n.claims = slices.Delete(n.claims, i, i+1)
	return true
}

// leaveGame puts the node out of the game.
func (n *Node) leaveGame(r Reason) {
	if n.duty != nil {
		n.duty = nil
		n.event(Event{Kind: EventDutyEnd})
	}
	n.phase = PhaseIdle
	n.leaving = false
	n.claims = nil
	n.view = nil
	n.holder = 0
	clear(n.heard)
	clear(n.ponged)
	n.event(Event{Kind: EventLeft, Reason: r})
}
