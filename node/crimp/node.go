package crimp

import (
	"container/heap"
	"crypto/ed25519"
	"errors"
	"fmt"
	"math/rand"
	"net/netip"
	"slices"
	"time"
)

// Key names one data packet of the group: its original sender and sequence.
type Key struct {
	Source MemberID
	Seq    uint32
}

// Via says how a delivered payload reached this member.
type Via uint8

// Ways a payload arrives.
const (
	ViaOriginal Via = iota + 1
	ViaFEC
	ViaRepair
	// ViaDatagram: an unreliable payload (SendUnreliable). Its Key's Seq is
	// 0: datagrams are not numbered, and a copy may arrive more than once
	// or not at all.
	ViaDatagram
)

func (v Via) String() string {
	switch v {
	case ViaOriginal:
		return "original"
	case ViaFEC:
		return "fec"
	case ViaRepair:
		return "repair"
	case ViaDatagram:
		return "datagram"
	}
	return "invalid"
}

// Delivery is one payload handed to the application, at most once per Key.
// Deliveries are unordered: the synchronizer above orders them.
type Delivery struct {
	Key
	SentAt     time.Time // the original sender's timestamp
	ReceivedAt time.Time // when this member got it; minus SentAt = perceived latency
	Payload    []byte
	Via        Via
}

// EventKind is the type of a membership event.
type EventKind uint8

// Membership events.
const (
	// EventJoined: the authority established this member (Member is the new
	// ID, StateAddr where to fetch the game state).
	EventJoined EventKind = iota + 1
	// EventDenied: the authority refused this member (Reason).
	EventDenied
	// EventMemberJoined: another member was established.
	EventMemberJoined
	// EventMemberDropped: the authority dropped another member.
	EventMemberDropped
	// EventDropped: the authority dropped this member; it must join again.
	EventDropped
	// EventDuty: the authority duty moved (duty mode): Member holds it
	// from Epoch on, this member if Member is its own ID.
	EventDuty
)

func (k EventKind) String() string {
	return [...]string{"invalid", "joined", "denied", "member-joined", "member-dropped", "dropped", "duty"}[min(int(k), 6)]
}

// Event reports a membership change.
type Event struct {
	Kind      EventKind
	Member    MemberID
	StateAddr string
	Reason    DenyReason
	Epoch     uint64 // EventJoined, EventDuty: the duty epoch (duty mode)
}

// Ready is what one call into the Node produced: packets to multicast (in
// order), payloads to deliver, membership events, and the time by which Tick
// must be called next.
type Ready struct {
	Packets    [][]byte
	Deliveries []Delivery
	Events     []Event
	NextTick   time.Time
}

// ErrNotMember is returned by Send before the member is established.
var ErrNotMember = errors.New("crimp: not an established member")

// ErrRefused is wrapped by Step's error for a well-formed packet refused
// for want of authority: a membership decision without the authority's
// signature, or a replayed one.
var ErrRefused = errors.New("crimp: refused")

// Node is the CRIMP protocol state machine of one member. It has no socket,
// clock or goroutine: the caller feeds it received packets (Step), the
// application's payloads (Send) and the passage of time (Tick), each with
// the current time, and carries out the Ready each call returns. A Node is
// not safe for concurrent use.
type Node struct {
	cfg     Config
	rng     *rand.Rand
	metrics *Metrics

	id        MemberID
	nextSeq   uint32      // next sequence number this member sends
	ownOldest uint32      // oldest of its own packets still in the cache
	fecRing   []Redundant // the last cfg.FEC payloads sent, newest first

	cache      map[Key]*stored
	sources    map[MemberID]*source
	tombstones map[MemberID]time.Time // dropped members and when; packets from them are ignored
	// draining: dropped members whose receive state is kept for one more
	// History (see retire), at most maxDraining.
	draining    map[MemberID]*source
	maxDraining int

	timers         timerHeap
	timerSeq       uint64
	requestsInSlot int

	// The history: ring[i % len] holds what entered during interval i.
	ring     []interval
	epoch    time.Time
	curSlot  int64
	inited   bool
	now      time.Time
	nextSess time.Time

	joining  bool
	nonce    uint64
	joinRTO  time.Duration
	joinNext time.Time

	nextID   MemberID // authority: next ID to assign
	dropSent map[MemberID]time.Time
	// dropCopies: the drops this member decided whose copies are still
	// to go out (repeatDrops), at most maxTombstones.
	dropCopies map[MemberID]*dropCopy

	duty dutyState // duty mode (Config.Key): who holds the authority

	out Ready
}

// stored is a packet kept for repairs.
type stored struct {
	sentAt        int64
	payload       []byte
	slot          int64
	repairPending bool
	repairGen     uint32
	ignoreUntil   time.Time
}

// interval is one slot of the history.
type interval struct {
	stored     []Key
	recoveries []Key
}

// source is what a member knows about another member as a sender.
type source struct {
	id        MemberID
	addr      netip.AddrPort
	lastHeard time.Time
	nonce     uint64 // authority: the nonce it joined with
	// joinGrace: the authority established it and has heard nothing from
	// it since; its silence may last this much longer (silenceLimit).
	joinGrace time.Duration

	epoch    uint64 // duty mode: the epoch its last session showed
	follows  bool   // ... and whether it follows that epoch's holder
	echoOfMe int64  // ... and the time (our clock) of our last session it had heard

	delay       time.Duration // one-way delay estimate
	measured    bool
	echoTime    int64     // the time stamp of its last session packet (its clock)
	echoHeardAt time.Time // when we heard that session (our clock)

	// drainUntil: the member was dropped and is draining (in
	// Node.draining, no longer in Node.sources) until then.
	drainUntil time.Time

	started  bool   // floor/highest are meaningful
	settled  bool   // floor came from the member's own account (establishment, session)
	first    uint32 // the first sequence number tracked
	floor    uint32
	highest  uint32
	resolved map[uint32]struct{} // resolved sequence numbers >= floor
	pending  map[uint32]*recovery
}

type recState uint8

const (
	recSuspect     recState = iota + 1 // missing, not yet N packets past it
	recWaitRequest                     // lost; request timer running
	recWaitRepair                      // request sent or heard; RTO running
)

type recovery struct {
	state    recState
	evidence int
	gen      uint32
	slot     int64
}

// New returns a Node for cfg (zero fields take DefaultConfig's values).
// rng drives the request and repair timer draws and the join nonce; pass a
// seeded one to replay a run.
func New(cfg Config, rng *rand.Rand) (*Node, error) {
	if rng == nil {
		return nil, errors.New("crimp: New needs a *rand.Rand")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("crimp config: %w", err)
	}
	n := &Node{
		cfg:        cfg,
		rng:        rng,
		metrics:    &Metrics{},
		id:         cfg.ID,
		nextSeq:    1,
		ownOldest:  1,
		cache:      map[Key]*stored{},
		sources:    map[MemberID]*source{},
		tombstones: map[MemberID]time.Time{},
		draining:   map[MemberID]*source{},
		dropSent:   map[MemberID]time.Time{},
		dropCopies: map[MemberID]*dropCopy{},
		ring:       make([]interval, int(cfg.History/cfg.TickInterval)+1),
		joinRTO:    cfg.JoinTimeout,
		nextID:     cfg.ID + 1,
	}
	// As many draining members as were ever dropped at once (every other
	// member), but no more than the session packet has room for beside
	// the echoes of a full group.
	n.maxDraining = min(cfg.MaxGroup-1, (MaxPacketSize-sessionSize(cfg.MaxGroup-1, 0))/8)
	for _, p := range cfg.Peers {
		s := n.addSource(p)
		s.started, s.settled, s.floor = true, true, 1
		n.nextID = max(n.nextID, p+1)
	}
	n.initDuty()
	return n, nil
}

// ID is this member's identifier (0 until established).
func (n *Node) ID() MemberID { return n.id }

// Metrics returns the member's counters.
func (n *Node) Metrics() *Metrics { return n.metrics }

// Config returns the configuration in effect (defaults filled in).
func (n *Node) Config() Config { return n.cfg }

// Members returns the IDs of the other members this one knows, ascending.
func (n *Node) Members() []MemberID {
	ids := make([]MemberID, 0, len(n.sources))
	for id := range n.sources {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Delay returns the one-way delay estimate to member id and whether it was
// measured (rather than the default).
func (n *Node) Delay(id MemberID) (time.Duration, bool) {
	s := n.sources[id]
	if s == nil {
		return n.cfg.DefaultDelay, false
	}
	return n.delayTo(s), s.measured
}

// Stats sizes the node's state; memory is bounded by these. Draining
// counts the dropped members whose packets are still recovered (see
// doc.go); Pending and Resolved include theirs.
type Stats struct {
	Sources, Cached, Pending, Resolved, Timers, Tombstones, Draining int
}

// Stats reports how much state the node holds.
func (n *Node) Stats() Stats {
	st := Stats{Sources: len(n.sources), Cached: len(n.cache), Timers: len(n.timers), Tombstones: len(n.tombstones), Draining: len(n.draining)}
	for _, m := range []map[MemberID]*source{n.sources, n.draining} {
		for _, s := range m {
			st.Pending += len(s.pending)
			st.Resolved += len(s.resolved)
		}
	}
	return st
}

// Tick advances the node to now: it runs the timers that are due and moves
// expired intervals out of the history (the paper's tic()).
func (n *Node) Tick(now time.Time) Ready {
	n.advance(now)
	return n.ready()
}

// Send multicasts payload as this member's next data packet.
func (n *Node) Send(now time.Time, payload []byte) (Ready, error) {
	if n.id == 0 {
		return Ready{}, ErrNotMember
	}
	if len(payload) > MaxPayload {
		return Ready{}, fmt.Errorf("crimp send: payload of %d bytes over the %d limit", len(payload), MaxPayload)
	}
	n.advance(now)
	seq := n.nextSeq
	n.nextSeq++
	pl := append([]byte(nil), payload...)
	p := &Packet{Kind: KindData, Seq: seq, Payload: pl}
	for _, red := range n.fecRing {
		if dataSize(len(pl), append(p.FEC, red)) > MaxPacketSize {
			break
		}
		p.FEC = append(p.FEC, red)
	}
	n.emit(p)
	n.store(Key{n.id, seq}, n.now.UnixNano(), pl)
	if n.cfg.FEC > 0 {
		n.fecRing = slices.Insert(n.fecRing, 0, Redundant{Seq: seq, SentAt: n.now.UnixNano(), Payload: pl})
		if len(n.fecRing) > n.cfg.FEC {
			n.fecRing = n.fecRing[:n.cfg.FEC]
		}
	}
	n.metrics.DataSent.Add(1)
	return n.ready(), nil
}

// SendUnreliable multicasts payload once as a datagram: no sequence
// number, no FEC, nothing stored, requested or repaired. What the paper's
// event protocol sends unreliably (moves) goes this way; a receiver gets
// it at most once per copy sent, or not at all.
func (n *Node) SendUnreliable(now time.Time, payload []byte) (Ready, error) {
	if n.id == 0 {
		return Ready{}, ErrNotMember
	}
	if len(payload) > MaxPayload {
		return Ready{}, fmt.Errorf("crimp send unreliable: payload of %d bytes over the %d limit", len(payload), MaxPayload)
	}
	n.advance(now)
	n.emit(&Packet{Kind: KindDatagram, Payload: append([]byte(nil), payload...)})
	n.metrics.DatagramsSent.Add(1)
	return n.ready(), nil
}

// Join starts (or restarts) the join handshake: request-join on the group,
// retried with exponential backoff until the authority answers.
func (n *Node) Join(now time.Time) (Ready, error) {
	if n.id != 0 {
		return Ready{}, fmt.Errorf("crimp join: already member %d", n.id)
	}
	if n.cfg.AuthorityPublicKey == nil && n.cfg.Key == nil {
		return Ready{}, errors.New("crimp join: no AuthorityPublicKey to check the authority's answer with")
	}
	n.advance(now)
	n.joining = true
	n.nonce = n.rng.Uint64() | 1
	n.joinRTO = n.cfg.JoinTimeout
	n.sendJoin()
	return n.ready(), nil
}

// Step processes one received datagram. Invalid packets are counted and
// reported and change nothing.
func (n *Node) Step(now time.Time, from netip.AddrPort, b []byte) (Ready, error) {
	p, err := Decode(b)
	if err != nil {
		n.metrics.BadPackets.Add(1)
		return Ready{}, fmt.Errorf("crimp packet from %v: %w", from, err)
	}
	if n.cfg.Key != nil {
		switch r, v := n.checkDuty(now, p, b); v {
		case verdictRefuse:
			n.metrics.Refuse(r)
			return Ready{}, fmt.Errorf("crimp %s from %v: %w: %s", p.Kind, from, ErrRefused, r)
		case verdictIgnore:
			n.advance(now)
			return n.ready(), nil
		}
	} else if AuthoritySigned(p.Kind) {
		if r, ok := n.checkAuthority(now, p, b); !ok {
			n.metrics.Refuse(r)
			return Ready{}, fmt.Errorf("crimp %s from %v: %w: %s", p.Kind, from, ErrRefused, r)
		}
	}
	n.advance(now)
	n.handle(from, p, b)
	return n.ready(), nil
}

// checkAuthority accepts a membership decision only if the authority signed
// it, and only within the history around now: the sender field is the
// sender's own claim, the signature is proof. A replay of an old decision
// (a drop, an establishment of an ID since reused) falls outside the window.
func (n *Node) checkAuthority(now time.Time, p *Packet, b []byte) (Refusal, bool) {
	if n.cfg.AuthorityPublicKey == nil || !ed25519.Verify(n.cfg.AuthorityPublicKey, SignedPart(b), p.Signature) {
		switch p.Kind {
		case KindEstablish:
			return RefusedEstablish, false
		case KindDeny:
			return RefusedDeny, false
		}
		return RefusedDrop, false
	}
	if age := now.Sub(time.Unix(0, p.Time)); age > n.cfg.History || age < -n.cfg.History {
		return RefusedStale, false
	}
	return 0, true
}

func (n *Node) handle(from netip.AddrPort, p *Packet, raw []byte) {
	if p.Sender == n.id && n.id != 0 {
		return // our own packet looped back
	}
	switch p.Kind {
	case KindRequestJoin:
		n.onRequestJoin(p)
		return
	case KindEstablish:
		n.onEstablish(p)
		return
	case KindDeny:
		if n.joining && p.Nonce == n.nonce {
			n.joining = false
			n.out.Events = append(n.out.Events, Event{Kind: EventDenied, Reason: p.Reason})
		}
		return
	}
	if n.id == 0 {
		return // not a member yet: the group's traffic is not ours
	}
	if n.cfg.Key != nil && n.handleDuty(p, raw) {
		return
	}
	if _, dead := n.tombstones[p.Sender]; dead {
		n.redrop(p.Sender)
		return
	}
	src := n.sources[p.Sender]
	if src == nil {
		if n.holds() {
			// The authority knows every member; an unknown one must join.
			if n.mayDecide() {
				n.drop(p.Sender)
			}
			return
		}
		if src = n.learn(p.Sender); src == nil {
			return
		}
	}
	src.lastHeard, src.joinGrace = n.now, 0
	src.addr = from
	switch p.Kind {
	case KindData:
		for i := len(p.FEC) - 1; i >= 0; i-- {
			red := p.FEC[i]
			n.receive(src, red.Seq, red.SentAt, red.Payload, ViaFEC)
		}
		n.receive(src, p.Seq, p.Time, p.Payload, ViaOriginal)
		n.evidence(src, p.Seq)
	case KindRequest:
		n.onRequest(src, p)
	case KindRepair:
		n.onRepair(src, p)
	case KindSession:
		n.onSession(src, p)
	case KindDrop:
		n.onDrop(p.Member)
	case KindDatagram:
		n.onDatagram(src, p)
	}
}

// onDatagram hands an unreliable payload to the application, unless it is
// older than the history (as no data packet is delivered later).
func (n *Node) onDatagram(src *source, p *Packet) {
	if age := n.now.Sub(time.Unix(0, p.Time)); age > n.cfg.History {
		n.metrics.Late.Add(1)
		return
	}
	n.metrics.DatagramsDelivered.Add(1)
	n.out.Deliveries = append(n.out.Deliveries, Delivery{
		Key: Key{Source: src.id}, SentAt: time.Unix(0, p.Time), ReceivedAt: n.now, Payload: p.Payload, Via: ViaDatagram,
	})
}

// advance moves the clock to now: expired intervals leave the history, then
// due timers fire. Time never runs backwards.
func (n *Node) advance(now time.Time) {
	if !n.inited {
		n.inited = true
		n.epoch, n.now, n.nextSess = now, now, now
		// Members known from the start (Config.Peers) were added before
		// the node had a time: their silence counts from now.
		for _, s := range n.sources {
			s.lastHeard = now
		}
	}
	if now.After(n.now) {
		n.ownPause(now.Sub(n.now))
		n.now = now
	}
	target := int64(n.now.Sub(n.epoch) / n.cfg.TickInterval)
	if target-n.curSlot > int64(len(n.ring)) {
		// A long gap (suspended process): expire the whole history once.
		n.curSlot = target - int64(len(n.ring))
	}
	for n.curSlot < target {
		n.curSlot++
		n.requestsInSlot = 0
		n.expire()
	}
	for len(n.timers) > 0 && !n.timers[0].at.After(n.now) {
		n.fire(heap.Pop(&n.timers).(timerEntry))
	}
	if !n.now.Before(n.nextSess) && n.id != 0 {
		n.sendSession()
		n.sendRefresh()
	}
	if n.joining && !n.now.Before(n.joinNext) {
		n.sendJoin()
	}
	n.dutyTimers()
}

// pauseIntervals is how many intervals a node goes without being stepped before the gap
// counts as its own pause (a stalled process, a starved machine) rather
// than time it was watching: its driver steps it at least once an
// interval (Ready.NextTick) while it runs.
const pauseIntervals = 4

// ownPause takes a gap of gap since the node was last stepped. A gap
// longer than pauseIntervals intervals is the node's own pause: the
// members it did not hear from meanwhile may well have sent (their
// packets wait in the socket, read right after the tick that ends the
// pause), so the pause does not count toward their silence. Otherwise
// an authority stalled longer than DropAfter would drop every member on
// its first tick after the stall, before reading a packet. A member that
// really went silent is dropped DropAfter of the authority's running
// time later. Leases are not stretched: their expiry keeps two
// authorities apart, and a paused holder must count its lease as gone.
func (n *Node) ownPause(gap time.Duration) {
	if gap <= pauseIntervals*n.cfg.TickInterval {
		return
	}
	paused := gap - n.cfg.TickInterval
	for _, s := range n.sources {
		s.lastHeard = s.lastHeard.Add(paused)
	}
	n.metrics.Pauses.Add(1)
}

// expire empties the interval that has just fallen out of the history:
// its packets leave the cache and its recoveries are cancelled.
func (n *Node) expire() {
	iv := &n.ring[n.curSlot%int64(len(n.ring))]
	old := n.curSlot - int64(len(n.ring))
	for _, k := range iv.stored {
		if st := n.cache[k]; st != nil && st.slot == old {
			delete(n.cache, k)
			if k.Source == n.id && k.Seq >= n.ownOldest {
				n.ownOldest = k.Seq + 1
			}
		}
	}
	for _, k := range iv.recoveries {
		s := n.tracked(k.Source)
		if s == nil {
			continue
		}
		if rec := s.pending[k.Seq]; rec != nil && rec.slot == old {
			n.metrics.Losses.Add(1)
			n.resolve(s, k.Seq)
		}
	}
	iv.stored, iv.recoveries = iv.stored[:0], iv.recoveries[:0]
	n.membership()
}

// membership runs once per interval: the authority drops members silent for
// longer than silenceLimit; every member forgets members silent for twice
// the history.
func (n *Node) membership() {
	for _, id := range n.Members() {
		s := n.sources[id]
		silent := n.now.Sub(s.lastHeard)
		switch {
		case n.holds() && silent > n.silenceLimit(s):
			if n.mayDecide() {
				n.drop(id)
			}
		case !n.holds() && silent > 2*n.cfg.History:
			n.removeSource(s)
		}
	}
	for id, at := range n.tombstones {
		if n.now.Sub(at) > 4*n.cfg.History {
			delete(n.tombstones, id)
			delete(n.dropSent, id)
		}
	}
	for _, id := range sortedIDs(n.draining) {
		if s := n.draining[id]; !n.now.Before(s.drainUntil) {
			n.endDrain(s)
		}
	}
	n.repeatDrops()
}

// silenceLimit is how long the authority lets member s be silent:
// DropAfter, plus its join grace until it is first heard.
func (n *Node) silenceLimit(s *source) time.Duration { return n.cfg.DropAfter + s.joinGrace }

// joinGrace is the extra silence the authority allows a member it admits
// in answer to request p. The member's first packet answers the
// establishment, so it cannot arrive before a round trip, twice the age of
// the request (members' clocks are synchronized, as CRIMP's ages assume).
// Counted from the establishment alone, a member whose round trip exceeds
// DropAfter (600 ms each way with the default 1 s history) would be dropped
// before its first session could arrive, at every join. At most History:
// non-holders forget a member silent for 2·History, and the drop must
// reach them first (DropAfter is below History by default); a forged or
// skewed time stamp buys no more.
func (n *Node) joinGrace(p *Packet) time.Duration {
	return min(max(2*n.now.Sub(time.Unix(0, p.Time)), 0), n.cfg.History)
}

func (n *Node) store(k Key, sentAt int64, payload []byte) *stored {
	if st := n.cache[k]; st != nil {
		return st
	}
	st := &stored{sentAt: sentAt, payload: payload, slot: n.curSlot}
	n.cache[k] = st
	iv := &n.ring[n.curSlot%int64(len(n.ring))]
	iv.stored = append(iv.stored, k)
	return st
}

func (n *Node) addSource(id MemberID) *source {
	if s := n.draining[id]; s != nil {
		// The ID is back (tombstones outlive the drain, so this takes a
		// full tombstone table or a duty hand-over admitting it again): its
		// old stream is over, the new one starts afresh.
		n.endDrain(s)
	}
	s := &source{id: id, lastHeard: n.now, resolved: map[uint32]struct{}{}, pending: map[uint32]*recovery{}}
	n.sources[id] = s
	n.metrics.MembersJoined.Add(1)
	return s
}

// learn adds a member first heard from directly (not through the authority).
func (n *Node) learn(id MemberID) *source {
	if id == 0 || id == n.id {
		return nil
	}
	if s := n.sources[id]; s != nil {
		return s
	}
	if _, dead := n.tombstones[id]; dead {
		return nil
	}
	if len(n.sources)+1 >= n.cfg.MaxGroup {
		return nil
	}
	return n.addSource(id)
}

func (n *Node) removeSource(s *source) {
	n.metrics.Abandoned.Add(uint64(len(s.pending)))
	delete(n.sources, s.id)
}

// tracked returns the receive state of source id: a member's, or a
// dropped member's while it drains (nil if neither). An ID is never both.
func (n *Node) tracked(id MemberID) *source {
	if s := n.sources[id]; s != nil {
		return s
	}
	return n.draining[id]
}

// withinWindow reports whether seq fits in s's window as it stands. What
// another member says of s's stream (a request, a tail) may add suspects
// inside the window but never slide it: sliding gives up the packets below,
// and a claim far beyond the stream would make every member refuse s's
// next packets as old.
func (s *source) withinWindow(seq uint32, window int) bool {
	return seq-s.floor < uint32(window)
}

func (s *source) isDraining() bool { return !s.drainUntil.IsZero() }

// retire takes dropped member s out of the group but keeps its receive
// state for one more History (draining), so that a packet it sent just
// before it went silent, which reached some members and not others, still
// reaches all: its losses go on being recovered (requested, and repaired
// by any holder), requests for its packets are answered from the cache,
// and session packets report how far this member heard it (Tail), so that
// a member that missed its last packets learns of them. Nothing it sends
// is accepted any more (its tombstone), so its outstanding suspects are
// lost at once: no later packet of its will come to make them so. At the
// end of the drain what is still missing counts as losses (endDrain).
// Draining members are at most maxDraining: a drop beyond ends the
// oldest drain early.
func (n *Node) retire(s *source) {
	delete(n.sources, s.id)
	if !s.started {
		return // nothing known of its stream, nothing to recover
	}
	if len(n.draining) >= n.maxDraining {
		var oldest *source
		for _, id := range sortedIDs(n.draining) {
			if d := n.draining[id]; oldest == nil || d.drainUntil.Before(oldest.drainUntil) {
				oldest = d
			}
		}
		n.endDrain(oldest)
	}
	s.drainUntil = n.now.Add(n.cfg.History)
	n.draining[s.id] = s
	n.lostAll(s)
	n.nextSess = n.now // tell the others at once how far we heard it
}

// endDrain forgets draining member s: what is still missing of its
// packets is given up.
func (n *Node) endDrain(s *source) {
	n.metrics.Losses.Add(uint64(len(s.pending)))
	delete(n.draining, s.id)
}

// lostAll declares every suspect of draining member s lost and starts its
// recovery.
func (n *Node) lostAll(s *source) {
	var lost []uint32
	for q, rec := range s.pending {
		if rec.state == recSuspect {
			lost = append(lost, q)
		}
	}
	slices.Sort(lost) // timer draws in a reproducible order
	for _, q := range lost {
		n.metrics.LossesDetected.Add(1)
		n.startRecovery(s, q, s.pending[q])
	}
}

// sortedIDs returns the keys of m, ascending.
func sortedIDs[V any](m map[MemberID]V) []MemberID {
	ids := make([]MemberID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (n *Node) delayTo(s *source) time.Duration {
	if s == nil || !s.measured {
		return n.cfg.DefaultDelay
	}
	return max(s.delay, n.cfg.MinDelay)
}

func (n *Node) groupSize() int { return len(n.sources) + 1 }

// draw returns a timer delay uniform in [lo·d, (lo+width)·d], or lo·d in
// deterministic mode.
func (n *Node) draw(lo, width float64, d time.Duration) time.Duration {
	f := lo
	if !n.cfg.Deterministic {
		f += n.rng.Float64() * width
	}
	return time.Duration(f * float64(d))
}

func (s *source) isResolved(seq uint32) bool {
	if !s.started || seq < s.floor {
		return s.started
	}
	_, ok := s.resolved[seq]
	return ok
}

// resolve marks seq as done (delivered, late or given up) and moves the
// floor over every resolved sequence number.
func (n *Node) resolve(s *source, seq uint32) {
	delete(s.pending, seq)
	if seq < s.floor {
		return
	}
	s.resolved[seq] = struct{}{}
	for {
		if _, ok := s.resolved[s.floor]; !ok {
			break
		}
		delete(s.resolved, s.floor)
		s.floor++
	}
	if s.floor > s.highest+1 {
		s.highest = s.floor - 1
	}
}

// extend records that every sequence number up to last exists: the ones not
// yet seen become suspects. The window from floor to last is bounded by
// MaxWindow; sequence numbers pushed out of it are abandoned.
func (n *Node) extend(s *source, last uint32) {
	if last <= s.highest {
		return
	}
	if last-s.floor >= uint32(n.cfg.MaxWindow) {
		newFloor := last - uint32(n.cfg.MaxWindow) + 1
		for seq := range s.pending {
			if seq < newFloor {
				delete(s.pending, seq)
				n.metrics.Abandoned.Add(1)
			}
		}
		for seq := range s.resolved {
			if seq < newFloor {
				delete(s.resolved, seq)
			}
		}
		s.floor = newFloor
		s.highest = max(s.highest, newFloor-1)
	}
	iv := &n.ring[n.curSlot%int64(len(n.ring))]
	for seq := max(s.highest+1, s.floor); seq <= last && seq != 0; seq++ {
		if _, ok := s.resolved[seq]; ok {
			continue
		}
		if s.pending[seq] == nil {
			s.pending[seq] = &recovery{state: recSuspect, slot: n.curSlot}
			iv.recoveries = append(iv.recoveries, Key{s.id, seq})
		}
	}
	s.highest = last
}

// evidence counts one packet with sequence seq (or a session announcing
// it) against every suspect below it: N of them declare the suspect lost.
func (n *Node) evidence(s *source, seq uint32) {
	var lost []uint32
	for q, rec := range s.pending {
		if q < seq && rec.state == recSuspect {
			rec.evidence++
			if rec.evidence >= n.cfg.N {
				lost = append(lost, q)
			}
		}
	}
	slices.Sort(lost) // timer draws in a reproducible order
	for _, q := range lost {
		n.metrics.LossesDetected.Add(1)
		n.startRecovery(s, q, s.pending[q])
	}
}

// receive handles one copy of data packet (s, seq): the first copy is stored
// and delivered (if still inside the history), later ones are duplicates.
func (n *Node) receive(s *source, seq uint32, sentAt int64, payload []byte, via Via) {
	if !s.started {
		s.started, s.first, s.floor, s.highest = true, seq, seq, seq-1
	}
	if s.isResolved(seq) {
		n.metrics.Duplicates.Add(1)
		if via == ViaRepair {
			n.metrics.RepairsHeardDup.Add(1)
		}
		return
	}
	n.extend(s, seq-1)
	if s.isDraining() {
		n.lostAll(s)
	}
	if seq > s.highest {
		s.highest = seq
	}
	n.store(Key{s.id, seq}, sentAt, payload)
	n.resolve(s, seq)
	age := n.now.Sub(time.Unix(0, sentAt))
	if age > n.cfg.History {
		n.metrics.Late.Add(1)
		return
	}
	n.metrics.Delivered.Add(1)
	if s.isDraining() {
		n.metrics.DeliveredAfterDrop.Add(1)
	}
	switch via {
	case ViaFEC:
		n.metrics.DeliveredFEC.Add(1)
	case ViaRepair:
		n.metrics.DeliveredRepair.Add(1)
	}
	n.metrics.observeLatency(max(age, 0))
	n.out.Deliveries = append(n.out.Deliveries, Delivery{
		Key: Key{s.id, seq}, SentAt: time.Unix(0, sentAt), ReceivedAt: n.now, Payload: payload, Via: via,
	})
}

// startRecovery begins (or restarts) recovery of a lost packet: a request
// at once with probability 1/n, otherwise after a random wait in
// [C1·d, (C1+C2)·d] during which another member's request suppresses ours.
func (n *Node) startRecovery(s *source, seq uint32, rec *recovery) {
	d := n.delayTo(s)
	if !n.cfg.Deterministic && !n.cfg.NoImmediateRequest && n.rng.Float64() < 1/float64(n.groupSize()) {
		n.metrics.RequestsImmediate.Add(1)
		n.sendRequest(s, seq, rec)
		return
	}
	rec.state = recWaitRequest
	rec.gen++
	n.schedule(n.now.Add(n.draw(n.cfg.C1, n.cfg.C2, d)), timerRequest, Key{s.id, seq}, rec.gen)
}

func (n *Node) sendRequest(s *source, seq uint32, rec *recovery) {
	if n.requestsInSlot >= n.cfg.MaxRequestsPerTick {
		// Over budget: try again in the next interval.
		rec.state = recWaitRequest
		rec.gen++
		n.schedule(n.epoch.Add(time.Duration(n.curSlot+1)*n.cfg.TickInterval), timerRequest, Key{s.id, seq}, rec.gen)
		return
	}
	n.requestsInSlot++
	n.emit(&Packet{Kind: KindRequest, Source: s.id, Seq: seq})
	n.metrics.RequestsSent.Add(1)
	n.waitRepair(s, seq, rec)
}

// waitRepair arms the retransmission timeout F·d after a request was sent
// or heard.
func (n *Node) waitRepair(s *source, seq uint32, rec *recovery) {
	rec.state = recWaitRepair
	rec.gen++
	n.schedule(n.now.Add(time.Duration(n.cfg.F*float64(n.delayTo(s)))), timerRTO, Key{s.id, seq}, rec.gen)
}

func (n *Node) onRequest(from *source, p *Packet) {
	n.metrics.RequestsHeard.Add(1)
	k := Key{p.Source, p.Seq}
	if st := n.cache[k]; st != nil {
		if n.now.Before(st.ignoreUntil) {
			n.metrics.RequestsIgnored.Add(1)
			return
		}
		if p.Source == n.id {
			// The original sender repairs at once.
			n.sendRepair(k, st, n.delayTo(from))
			return
		}
		if st.repairPending {
			n.metrics.RequestsHeardDup.Add(1)
			return
		}
		st.repairPending = true
		st.repairGen++
		n.schedule(n.now.Add(n.draw(n.cfg.D1, n.cfg.D2, n.delayTo(from))), timerRepair, k, st.repairGen)
		return
	}
	// We miss it too: the request stands for ours.
	s := n.tracked(p.Source)
	if s == nil || !s.started || s.isResolved(p.Seq) || !s.withinWindow(p.Seq, n.cfg.MaxWindow) {
		return
	}
	n.extend(s, p.Seq)
	rec := s.pending[p.Seq]
	if rec == nil {
		return
	}
	switch rec.state {
	case recSuspect:
		n.metrics.LossesDetected.Add(1)
		n.metrics.RequestsSuppressed.Add(1)
		n.waitRepair(s, p.Seq, rec)
	case recWaitRequest:
		n.metrics.RequestsSuppressed.Add(1)
		n.waitRepair(s, p.Seq, rec)
	case recWaitRepair:
		n.metrics.RequestsHeardDup.Add(1)
	}
	if s.isDraining() {
		n.lostAll(s) // the ones below it the request revealed
	}
}

// sendRepair multicasts a stored packet and then ignores requests for it
// for E·d, d being the delay the repair had to cover.
func (n *Node) sendRepair(k Key, st *stored, d time.Duration) {
	n.emit(&Packet{Kind: KindRepair, Source: k.Source, Seq: k.Seq, SentAt: st.sentAt, Payload: st.payload})
	n.metrics.RepairsSent.Add(1)
	st.repairPending = false
	st.repairGen++
	st.ignoreUntil = n.now.Add(time.Duration(n.cfg.E * float64(d)))
}

func (n *Node) onRepair(from *source, p *Packet) {
	k := Key{p.Source, p.Seq}
	var d time.Duration
	if p.Source == n.id {
		d = n.delayTo(from)
	} else {
		s := n.tracked(p.Source)
		if s == nil {
			if s = n.learn(p.Source); s == nil {
				return
			}
		}
		d = n.delayTo(s)
		n.receive(s, p.Seq, p.SentAt, p.Payload, ViaRepair)
	}
	if st := n.cache[k]; st != nil {
		if st.repairPending {
			n.metrics.RepairsSuppressed.Add(1)
			st.repairPending = false
			st.repairGen++
		}
		st.ignoreUntil = n.now.Add(time.Duration(n.cfg.E * float64(d)))
	}
}

func (n *Node) onSession(s *source, p *Packet) {
	s.echoTime, s.echoHeardAt = p.Time, n.now
	s.epoch, s.follows = p.Epoch, p.Follows
	for _, e := range p.Echoes {
		if e.Peer != n.id {
			continue
		}
		s.echoOfMe = e.Time
		rtt := n.now.Sub(time.Unix(0, e.Time)) - time.Duration(e.HoldMicros)*time.Microsecond
		if rtt < 0 || rtt > 10*time.Second {
			break
		}
		if !s.measured {
			s.delay, s.measured = rtt/2, true
		} else {
			s.delay = (3*s.delay + rtt/2) / 4
		}
		break
	}
	switch {
	case !s.started:
		s.started, s.settled, s.floor, s.highest = true, true, p.OldestSeq, p.OldestSeq-1
	case !s.settled:
		// First heard through a data packet: also recover what it still
		// holds from before then.
		// Sequence numbers from first up are already accounted for; the
		// ones between the sender's oldest and first become suspects.
		s.settled = true
		if p.OldestSeq < s.first && s.highest-p.OldestSeq < uint32(n.cfg.MaxWindow) {
			for seq := s.first; seq < s.floor; seq++ {
				s.resolved[seq] = struct{}{}
			}
			iv := &n.ring[n.curSlot%int64(len(n.ring))]
			for seq := p.OldestSeq; seq < s.first; seq++ {
				s.pending[seq] = &recovery{state: recSuspect, slot: n.curSlot}
				iv.recoveries = append(iv.recoveries, Key{s.id, seq})
			}
			s.floor = p.OldestSeq
		}
	}
	n.extend(s, p.NextSeq-1)
	n.evidence(s, p.NextSeq)
	// How far the sender heard the members it drains: a draining one's
	// packets up to there are lost here if missing (nothing more of its
	// comes); a member this one has not seen dropped yet takes it as a
	// session of its own.
	for _, t := range p.Tails {
		d := n.tracked(t.Source)
		if d == nil || !d.started || !d.withinWindow(t.Next-1, n.cfg.MaxWindow) {
			continue
		}
		n.extend(d, t.Next-1)
		if d.isDraining() {
			n.lostAll(d)
		} else {
			n.evidence(d, t.Next)
		}
	}
}

func (n *Node) sendSession() {
	n.nextSess = n.now.Add(n.cfg.SessionInterval)
	p := &Packet{Kind: KindSession, NextSeq: n.nextSeq, OldestSeq: min(n.ownOldest, n.nextSeq), Epoch: n.duty.epoch, Follows: n.follows(), KeysSum: n.keysSum()}
	for _, id := range n.Members() {
		s := n.sources[id]
		if s.echoTime == 0 {
			continue
		}
		hold := n.now.Sub(s.echoHeardAt).Microseconds()
		p.Echoes = append(p.Echoes, Echo{Peer: id, Time: s.echoTime, HoldMicros: uint32(min(hold, 1<<32-1))})
	}
	for _, id := range sortedIDs(n.draining) {
		if s := n.draining[id]; s.highest != 0 && s.highest+1 != 0 {
			p.Tails = append(p.Tails, Tail{Source: id, Next: s.highest + 1})
		}
	}
	n.emit(p)
	n.metrics.SessionsSent.Add(1)
}

func (n *Node) sendJoin() {
	p := &Packet{Kind: KindRequestJoin, Nonce: n.nonce}
	if n.cfg.Key != nil {
		p.Key, p.Cert = n.cfg.Key.Public().(ed25519.PublicKey), n.cfg.KeyCert
	}
	n.emit(p)
	n.joinNext = n.now.Add(n.joinRTO)
	n.joinRTO = min(2*n.joinRTO, n.cfg.MaxJoinBackoff)
}

func (n *Node) onRequestJoin(p *Packet) {
	if !n.holds() {
		return
	}
	for _, id := range n.Members() {
		if s := n.sources[id]; s.nonce == p.Nonce {
			// Our answer was lost: repeat it. Not a new decision, so no
			// lease needed (the member already counts in the majority).
			n.establish(s)
			return
		}
	}
	if !n.mayDecide() {
		n.metrics.Withheld.Add(1) // no lease: the joiner retries
		return
	}
	if n.cfg.Key != nil && !n.certified(p.Key, p.Cert) {
		n.metrics.Refuse(RefusedJoinKey)
		return
	}
	if n.groupSize() >= n.cfg.MaxGroup {
		n.emit(n.decision(&Packet{Kind: KindDeny, Nonce: p.Nonce, Reason: DenyFull}))
		return
	}
	// An ID some peer already used without being admitted was dropped and
	// is remembered as dead by every member: never hand it out.
	for n.nextID == 0 || n.dead(n.nextID) {
		n.nextID++
	}
	id := n.nextID
	n.nextID++
	s := n.addSource(id)
	s.nonce, s.joinGrace = p.Nonce, n.joinGrace(p)
	s.started, s.settled, s.floor = true, true, 1
	if n.cfg.Key != nil {
		n.duty.keys[id] = ed25519.PublicKey(p.Key)
		// Members that lose this establishment learn the key from the
		// next refresh: make it soon.
		if soon := n.now.Add(n.cfg.SessionInterval); soon.Before(n.duty.refreshAt) {
			n.duty.refreshAt = soon
		}
	}
	n.establish(s)
	n.out.Events = append(n.out.Events, Event{Kind: EventMemberJoined, Member: id})
}

func (n *Node) establish(s *source) {
	if n.cfg.Key != nil {
		n.emit(n.dutyEstablish(s))
		return
	}
	var others []MemberID
	for _, id := range n.Members() {
		if id != s.id {
			others = append(others, id)
		}
	}
	n.emit(&Packet{Kind: KindEstablish, Nonce: s.nonce, Member: s.id, StateAddr: n.cfg.StateAddr, Members: others})
}

func (n *Node) onEstablish(p *Packet) {
	if n.joining && p.Nonce == n.nonce {
		n.joining = false
		n.id = p.Member
		n.nextSeq, n.ownOldest = 1, 1
		n.learn(p.Sender)
		for _, m := range p.Members {
			n.learn(m)
		}
		n.nextSess = n.now // announce ourselves at once
		if n.cfg.Key != nil {
			n.joinedDuty(p)
		}
		n.out.Events = append(n.out.Events, Event{Kind: EventJoined, Member: n.id, StateAddr: p.StateAddr, Epoch: n.duty.epoch})
		return
	}
	if n.id == 0 || p.Member == n.id {
		return
	}
	if n.cfg.Key != nil {
		n.learnKey(p.Member, p.Key)
	}
	if n.sources[p.Member] != nil {
		return
	}
	if s := n.learn(p.Member); s != nil {
		// A new member's sequence starts at 1.
		s.started, s.settled, s.floor = true, true, 1
		n.out.Events = append(n.out.Events, Event{Kind: EventMemberJoined, Member: p.Member})
	}
}

// dead reports whether id was dropped within the last few histories.
func (n *Node) dead(id MemberID) bool {
	_, ok := n.tombstones[id]
	return ok
}

// maxTombstones bounds the remembered drops, so that a stream of forged
// sender IDs cannot grow the authority's state.
const maxTombstones = 16 * MaxMembers

// drop is the authority declaring id gone.
func (n *Node) drop(id MemberID) {
	s := n.sources[id]
	if s == nil && len(n.tombstones) >= maxTombstones {
		return
	}
	if s != nil {
		n.retire(s)
		n.metrics.MembersDropped.Add(1)
		n.out.Events = append(n.out.Events, Event{Kind: EventMemberDropped, Member: id})
	}
	n.tombstones[id] = n.now
	n.dropSent[id] = n.now
	delete(n.duty.keys, id)
	n.emit(n.decision(&Packet{Kind: KindDrop, Member: id}))
	if n.dropCopies[id] != nil || len(n.dropCopies) < maxTombstones {
		n.dropCopies[id] = &dropCopy{next: n.now.Add(n.dropSpacing()), left: dropRepeats}
	}
}

// dropRepeats is how many more copies of each drop the authority
// multicasts after the first (repeatDrops). A member that misses one drop
// never learns of it otherwise (unless the dropped member keeps talking:
// redrop): it reports no EventMemberDropped, does not drain the member,
// and forgets it only after 2·History of silence. With 4 copies in all, a
// member misses every one with probability p⁴ under independent loss p:
// 1e-4 at 10 % (3 copies would leave 1e-3).
const dropRepeats = 3

// dropCopy is what is left to send of one drop's copies.
type dropCopy struct {
	next time.Time // when the next copy is due
	left int       // copies still to send
}

// dropSpacing is the time between two copies of a drop. The copies are
// spread rather than sent back to back, so that a burst of loss that took
// one is likely over by the next, but all go out before the history of
// the dropped member's last packets ends: those were sent at least
// DropAfter before the drop, so History-DropAfter of it is left (250 ms
// with the defaults, 62.5 ms between copies). A member that missed the
// first copy must still drain the dropped member then, or the others do
// not learn from its sessions how far it heard it (a tail only it holds
// would be delivered there and nowhere else). At most a SessionInterval
// (the group's own cadence), at least a TickInterval (copies go out once
// an interval). A DropAfter of History or more leaves nothing of the
// member's to recover at the drop: the copies then only need to come
// within the history, History/4 apart.
func (n *Node) dropSpacing() time.Duration {
	left := n.cfg.History - n.cfg.DropAfter
	if left <= 0 {
		left = n.cfg.History
	}
	return max(min(n.cfg.SessionInterval, left/(dropRepeats+1)), n.cfg.TickInterval)
}

// repeatDrops multicasts the copies of drops that are due, in ID order.
// Each copy is a fresh decision (signed, stamped now), so that members
// accept it by its time stamp as they did the first; a member that took
// the drop already takes a copy as nothing new (onDrop). Only the
// authority (the duty holder, while leased) sends them: a copy that falls
// due while this member may not decide is skipped. A drop whose ID is a
// member again, or no longer tombstoned, has no copies left to send.
func (n *Node) repeatDrops() {
	for _, id := range sortedIDs(n.dropCopies) {
		c := n.dropCopies[id]
		if n.now.Before(c.next) {
			continue
		}
		if _, dead := n.tombstones[id]; !dead || n.sources[id] != nil {
			delete(n.dropCopies, id)
			continue
		}
		if n.mayDecide() {
			n.dropSent[id] = n.now // redrop need not repeat it at once
			n.emit(n.decision(&Packet{Kind: KindDrop, Member: id}))
			n.metrics.DropsRepeated.Add(1)
		}
		// On the schedule of the decision (copies go out once an interval,
		// so spacing from each would add up the rounding), but never two
		// at once after a pause.
		if c.next = c.next.Add(n.dropSpacing()); !c.next.After(n.now) {
			c.next = n.now.Add(n.dropSpacing())
		}
		if c.left--; c.left == 0 {
			delete(n.dropCopies, id)
		}
	}
}

// redrop repeats a drop to a dropped member that still talks (it may have
// missed the first), at most once per JoinTimeout.
func (n *Node) redrop(id MemberID) {
	if !n.mayDecide() || n.now.Sub(n.dropSent[id]) < n.cfg.JoinTimeout {
		return
	}
	n.dropSent[id] = n.now
	n.emit(n.decision(&Packet{Kind: KindDrop, Member: id}))
}

func (n *Node) onDrop(id MemberID) {
	if id == n.id {
		// Dropped: start over as a newcomer.
		n.out.Events = append(n.out.Events, Event{Kind: EventDropped, Member: id})
		n.id = 0
		for _, s := range n.sources {
			n.removeSource(s)
		}
		for _, s := range n.draining {
			n.metrics.Abandoned.Add(uint64(len(s.pending)))
		}
		clear(n.draining)
		clear(n.cache)
		clear(n.dropCopies)
		n.fecRing = nil
		n.resetDuty()
		return
	}
	delete(n.duty.keys, id)
	if s := n.sources[id]; s != nil {
		n.retire(s)
		n.metrics.MembersDropped.Add(1)
		n.out.Events = append(n.out.Events, Event{Kind: EventMemberDropped, Member: id})
	}
	// A copy of a drop already taken (the authority repeats each drop)
	// changes nothing: the member was retired and reported at the first,
	// and its tombstone keeps that time rather than being extended.
	if _, dead := n.tombstones[id]; !dead && len(n.tombstones) < maxTombstones {
		n.tombstones[id] = n.now
	}
}

func (n *Node) emit(p *Packet) {
	p.Sender = n.id
	p.Time = n.now.UnixNano()
	signed := AuthoritySigned(p.Kind)
	if signed {
		p.Signature = make([]byte, SignatureSize) // the place the signature goes
	}
	b, err := p.Encode(nil)
	if err != nil {
		// Every packet the node builds is within bounds by construction.
		panic(fmt.Sprintf("crimp: encoding own %s packet: %v", p.Kind, err))
	}
	if signed {
		// Only the authority takes membership decisions, and Validate
		// made sure it has the key.
		copy(b[len(b)-SignatureSize:], ed25519.Sign(n.signingKey(), SignedPart(b)))
	}
	n.out.Packets = append(n.out.Packets, b)
}

func (n *Node) ready() Ready {
	r := n.out
	n.out = Ready{}
	next := n.epoch.Add(time.Duration(n.curSlot+1) * n.cfg.TickInterval)
	if len(n.timers) > 0 && n.timers[0].at.Before(next) {
		next = n.timers[0].at
	}
	if n.id != 0 && n.nextSess.Before(next) {
		next = n.nextSess
	}
	if n.joining && n.joinNext.Before(next) {
		next = n.joinNext
	}
	if c := n.duty.campaign; c != nil && c.next.Before(next) {
		next = c.next
	}
	r.NextTick = next
	return r
}

type timerKind uint8

const (
	timerRequest timerKind = iota + 1
	timerRTO
	timerRepair
)

type timerEntry struct {
	at   time.Time
	seq  uint64
	kind timerKind
	key  Key
	gen  uint32
}

func (n *Node) schedule(at time.Time, kind timerKind, k Key, gen uint32) {
	n.timerSeq++
	heap.Push(&n.timers, timerEntry{at: at, seq: n.timerSeq, kind: kind, key: k, gen: gen})
}

// fire runs a due timer unless it was superseded (generation changed) or
// its packet left the history.
func (n *Node) fire(e timerEntry) {
	if e.kind == timerRepair {
		st := n.cache[e.key]
		if st != nil && st.repairPending && st.repairGen == e.gen {
			d := n.cfg.DefaultDelay
			if s := n.tracked(e.key.Source); s != nil {
				d = n.delayTo(s)
			}
			n.sendRepair(e.key, st, d)
		}
		return
	}
	s := n.tracked(e.key.Source)
	if s == nil {
		return
	}
	rec := s.pending[e.key.Seq]
	if rec == nil || rec.gen != e.gen {
		return
	}
	switch {
	case e.kind == timerRequest && rec.state == recWaitRequest:
		n.sendRequest(s, e.key.Seq, rec)
	case e.kind == timerRTO && rec.state == recWaitRepair:
		n.metrics.RequestRetries.Add(1)
		n.startRecovery(s, e.key.Seq, rec)
	}
}

type timerHeap []timerEntry

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].at.Equal(h[j].at) {
		return h[i].seq < h[j].seq
	}
	return h[i].at.Before(h[j].at)
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(timerEntry)) }
func (h *timerHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
