package duty

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/overworld-p2p/overworld/game/arbiter"
	"github.com/overworld-p2p/overworld/node/crimp"
)

// Payload tags on the CRIMP group.
const (
	tagApp     byte = 1
	tagArbiter byte = 2
)

// AppPayload is an application payload as it travels in a CRIMP payload
// of the group: behind its tag.
func AppPayload(payload []byte) []byte { return append([]byte{tagApp}, payload...) }

// MaxPayload is the largest application payload Send takes: CRIMP's, less
// the tag.
const MaxPayload = crimp.MaxPayload - 1

// Config configures a Node.
type Config struct {
	// CRIMP is the group member's configuration; it must be in duty mode
	// (Key set), with Founder on the member that starts the group.
	CRIMP crimp.Config
	// Arbiter is the rotating arbiter's configuration; its ID is replaced
	// by the member's CRIMP ID once established. Its MaxMembers should not
	// exceed CRIMP's MaxGroup.
	Arbiter arbiter.Config
	// Team is the team the member asks for when it joins the game (0: any).
	Team arbiter.Team
	// Seed seeds both protocols' random draws.
	Seed int64
	// Announce, when set, makes the member announce the game on the LAN
	// discovery group while it holds the duty (Ready.Announcements), every
	// AnnounceInterval (default 1 s). Players, Holder and Epoch are filled
	// in.
	Announce         *Announcement
	AnnounceInterval time.Duration
}

// Validate checks cfg.
func (c Config) Validate() error {
	var errs []error
	if c.CRIMP.Key == nil {
		errs = append(errs, errors.New("CRIMP.Key is required: the duty moves only in CRIMP's duty mode"))
	}
	if c.Arbiter.ID != 0 {
		errs = append(errs, fmt.Errorf("Arbiter.ID %d: the arbiter takes the member's CRIMP ID", c.Arbiter.ID))
	}
	if c.CRIMP.MaxGroup != 0 && c.Arbiter.MaxMembers > c.CRIMP.MaxGroup {
		errs = append(errs, fmt.Errorf("Arbiter.MaxMembers %d over CRIMP.MaxGroup %d", c.Arbiter.MaxMembers, c.CRIMP.MaxGroup))
	}
	if a := c.Announce; a != nil {
		probe := *a
		probe.Players, probe.Capacity, probe.Holder, probe.Epoch = 1, 1, 1, 1
		if err := probe.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("Announce: %w", err))
		}
	}
	if c.AnnounceInterval < 0 {
		errs = append(errs, fmt.Errorf("AnnounceInterval %v is negative", c.AnnounceInterval))
	}
	return errors.Join(errs...)
}

// Event is a CRIMP membership event or an arbiter event; one of the two is
// set.
type Event struct {
	CRIMP   *crimp.Event
	Arbiter *arbiter.Event
}

// Ready is what one call produced: datagrams to multicast on the group,
// announcements for the discovery group, the application's deliveries
// (payloads without their tag), events, and when to tick next.
type Ready struct {
	Packets       [][]byte
	Announcements [][]byte
	Deliveries    []crimp.Delivery
	Events        []Event
	NextTick      time.Time
}

// Metrics counts what the reconciliation did.
type Metrics struct {
	HandOvers      atomic.Uint64 // CRIMP duty handed to the arbiter's holder
	HandOverWaits  atomic.Uint64 // hand-overs put off (no lease yet)
	Campaigns      atomic.Uint64 // campaigns started for the CRIMP duty
	Expels         atomic.Uint64 // arbiter members expelled after a CRIMP drop
	Rejoins        atomic.Uint64 // rejoins after this member was dropped
	BadPayloads    atomic.Uint64 // CRIMP payloads without a known tag
	ArbiterRefused atomic.Uint64 // arbiter messages its Step refused
	SendErrors     atomic.Uint64 // arbiter messages CRIMP would not send
}

// Node runs a CRIMP member in duty mode and a rotating arbiter over it and
// keeps the CRIMP authority with the arbiter on duty. Not safe for
// concurrent use.
type Node struct {
	cfg     Config
	crimp   *crimp.Node
	arb     *arbiter.Node // nil until the member is established
	rng     *rand.Rand
	metrics *Metrics
	out     Ready
	next    time.Time // the arbiter's next tick
	created bool      // the founder created the game

	announceAt time.Time
	leaving    bool // Leave was called: hand the duty on, never campaign
}

// New returns a Node; the founder creates the group and the game at its
// first call, the others must Join.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("duty config: %w", err)
	}
	rng := rand.New(rand.NewSource(cfg.Seed))
	c, err := crimp.New(cfg.CRIMP, rand.New(rand.NewSource(rng.Int63())))
	if err != nil {
		return nil, err
	}
	if cfg.AnnounceInterval == 0 {
		cfg.AnnounceInterval = time.Second
	}
	n := &Node{cfg: cfg, crimp: c, rng: rng, metrics: &Metrics{}}
	if cfg.CRIMP.Founder {
		if err := n.startArbiter(); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// CRIMP is the group member (for status, metrics and tests; do not call
// its inputs directly).
func (n *Node) CRIMP() *crimp.Node { return n.crimp }

// Arbiter is the arbiter node, nil before the member is established.
func (n *Node) Arbiter() *arbiter.Node { return n.arb }

// Metrics returns the reconciliation counters.
func (n *Node) Metrics() *Metrics { return n.metrics }

// ID is the member's CRIMP ID (0 before it is established).
func (n *Node) ID() crimp.MemberID { return n.crimp.ID() }

// Join asks the CRIMP group for a place; the game follows.
func (n *Node) Join(now time.Time) (Ready, error) {
	r, err := n.crimp.Join(now)
	if err != nil {
		return Ready{}, err
	}
	n.absorb(now, r)
	return n.ready(now), nil
}

// Step handles one datagram received from from.
func (n *Node) Step(now time.Time, from netip.AddrPort, b []byte) (Ready, error) {
	r, err := n.crimp.Step(now, from, b)
	n.absorb(now, r)
	return n.ready(now), err
}

// Tick runs both protocols' timers.
func (n *Node) Tick(now time.Time) Ready {
	n.absorb(now, n.crimp.Tick(now))
	if n.arb != nil && !now.Before(n.next) {
		n.absorbArbiter(now, n.arb.Tick(now))
	}
	return n.ready(now)
}

// Send multicasts an application payload.
func (n *Node) Send(now time.Time, payload []byte) (Ready, error) {
	if len(payload) > MaxPayload {
		return Ready{}, fmt.Errorf("duty send: %d bytes over %d", len(payload), MaxPayload)
	}
	r, err := n.crimp.Send(now, AppPayload(payload))
	if err != nil {
		return Ready{}, err
	}
	n.absorb(now, r)
	return n.ready(now), nil
}

// SendUnreliable multicasts an application payload once, unreliably.
func (n *Node) SendUnreliable(now time.Time, payload []byte) (Ready, error) {
	if len(payload) > MaxPayload {
		return Ready{}, fmt.Errorf("duty send unreliable: %d bytes over %d", len(payload), MaxPayload)
	}
	r, err := n.crimp.SendUnreliable(now, AppPayload(payload))
	if err != nil {
		return Ready{}, err
	}
	n.absorb(now, r)
	return n.ready(now), nil
}

// Claim asks the arbiter on duty for resource r (EventGrant or EventDeny
// answers it).
func (n *Node) Claim(now time.Time, r arbiter.ResourceID) (Ready, error) {
	if n.arb == nil {
		return Ready{}, arbiter.ErrNotMember
	}
	ar, err := n.arb.Claim(now, r)
	n.absorbArbiter(now, ar)
	return n.ready(now), err
}

// Leave takes the member out of the game before it stops: the arbiter
// hands its duty on and leaves (paper §3.4), and if this member holds the
// CRIMP duty it hands it to the arbiter's successor (or, without one, the
// member after it in ID order) at once, so that the others need not wait
// out its silence and vote.
func (n *Node) Leave(now time.Time) (Ready, error) {
	n.leaving = true
	var to crimp.MemberID
	if n.arb != nil {
		ar, err := n.arb.Leave(now)
		n.absorbArbiter(now, ar)
		if err == nil {
			to = crimp.MemberID(n.arb.Status().HandOver)
		}
	}
	me := n.crimp.ID()
	if holder, _ := n.crimp.Holder(); holder != me || me == 0 {
		return n.ready(now), nil
	}
	if to == 0 || to == me {
		// The next ID after ours, wrapping round (members ascend).
		var first, after crimp.MemberID
		for _, m := range n.crimp.AuthorityState().Members {
			if m.ID == me {
				continue
			}
			if first == 0 {
				first = m.ID
			}
			if m.ID > me && after == 0 {
				after = m.ID
			}
		}
		to = cmp.Or(after, first)
	}
	if to == 0 {
		return n.ready(now), nil // alone: nobody to hand to
	}
	r, err := n.crimp.HandOver(now, to)
	n.absorb(now, r)
	if err != nil {
		return n.ready(now), fmt.Errorf("duty leave: hand-over to %d: %w", to, err)
	}
	n.metrics.HandOvers.Add(1)
	return n.ready(now), nil
}

// absorb takes a CRIMP Ready: datagrams out, payloads to the application
// or the arbiter, events handled.
func (n *Node) absorb(now time.Time, r crimp.Ready) {
	n.out.Packets = append(n.out.Packets, r.Packets...)
	for _, e := range r.Events {
		n.out.Events = append(n.out.Events, Event{CRIMP: &e})
		n.onCRIMPEvent(now, e)
	}
	for _, d := range r.Deliveries {
		if len(d.Payload) == 0 {
			n.metrics.BadPayloads.Add(1)
			continue
		}
		tag := d.Payload[0]
		d.Payload = d.Payload[1:]
		switch tag {
		case tagApp:
			n.out.Deliveries = append(n.out.Deliveries, d)
		case tagArbiter:
			if n.arb == nil {
				continue // not in the game yet
			}
			ar, err := n.arb.Step(now, arbiter.MemberID(d.Source), d.Payload)
			if err != nil {
				n.metrics.ArbiterRefused.Add(1)
			}
			n.absorbArbiter(now, ar)
		default:
			n.metrics.BadPayloads.Add(1)
		}
	}
	if !r.NextTick.IsZero() && (n.out.NextTick.IsZero() || r.NextTick.Before(n.out.NextTick)) {
		n.out.NextTick = r.NextTick
	}
}

// absorbArbiter sends the arbiter's messages over CRIMP and passes its
// events on.
func (n *Node) absorbArbiter(now time.Time, r arbiter.Ready) {
	for _, m := range r.Messages {
		cr, err := n.crimp.Send(now, append([]byte{tagArbiter}, m...))
		if err != nil {
			n.metrics.SendErrors.Add(1)
			continue
		}
		n.absorb(now, cr)
	}
	for _, e := range r.Events {
		n.out.Events = append(n.out.Events, Event{Arbiter: &e})
	}
	if !r.NextTick.IsZero() {
		n.next = r.NextTick
	}
}

func (n *Node) onCRIMPEvent(now time.Time, e crimp.Event) {
	switch e.Kind {
	case crimp.EventJoined:
		if err := n.startArbiter(); err == nil {
			ar, err := n.arb.Join(now, n.cfg.Team)
			if err == nil {
				n.absorbArbiter(now, ar)
			}
		}
	case crimp.EventDropped:
		// Out of the group: out of the game too; join both afresh.
		n.arb = nil
		n.metrics.Rejoins.Add(1)
		if r, err := n.crimp.Join(now); err == nil {
			n.absorb(now, r)
		}
	case crimp.EventMemberDropped:
		if n.arb != nil && n.arb.OnDuty() {
			if ar, err := n.arb.Expel(now, arbiter.MemberID(e.Member)); err == nil {
				n.metrics.Expels.Add(1)
				n.absorbArbiter(now, ar)
			}
		}
	}
}

// startArbiter makes the arbiter node with the member's CRIMP ID; the
// founder creates the game.
func (n *Node) startArbiter() error {
	ac := n.cfg.Arbiter
	ac.ID = arbiter.MemberID(n.crimp.ID())
	a, err := arbiter.New(ac, rand.New(rand.NewSource(n.rng.Int63())))
	if err != nil {
		return fmt.Errorf("duty arbiter: %w", err)
	}
	n.arb = a
	n.next = time.Time{}
	return nil
}

// reconcile keeps the CRIMP duty with the arbiter on duty (see doc.go).
func (n *Node) reconcile(now time.Time) {
	if n.arb == nil {
		return
	}
	if n.cfg.CRIMP.Founder && !n.created {
		// The founder's game starts with the group.
		n.created = true
		if ar, err := n.arb.Create(now); err == nil {
			n.absorbArbiter(now, ar)
		}
	}
	holder, _ := n.crimp.Holder()
	me := n.crimp.ID()
	switch {
	case me == 0 || n.leaving:
	case holder == me && !n.arb.OnDuty():
		to := crimp.MemberID(n.arb.Holder())
		if to == 0 || to == me {
			return
		}
		r, err := n.crimp.HandOver(now, to)
		n.absorb(now, r)
		switch {
		case err == nil:
			n.metrics.HandOvers.Add(1)
		case errors.Is(err, crimp.ErrNoLease):
			n.metrics.HandOverWaits.Add(1)
		}
	case holder != me && n.arb.OnDuty():
		r, err := n.crimp.Campaign(now)
		n.absorb(now, r)
		if err == nil {
			n.metrics.Campaigns.Add(1)
		}
	}
}

// announce produces the holder's announcement when due.
func (n *Node) announce(now time.Time) {
	holder, epoch := n.crimp.Holder()
	if n.cfg.Announce == nil || holder == 0 || holder != n.crimp.ID() {
		n.announceAt = time.Time{} // announce at once when the duty comes
		return
	}
	if now.Before(n.announceAt) {
		return
	}
	n.announceAt = now.Add(n.cfg.AnnounceInterval)
	a := *n.cfg.Announce
	a.Players = len(n.crimp.AuthorityState().Members)
	a.Capacity = n.crimp.Config().MaxGroup
	if n.cfg.Arbiter.MaxMembers != 0 {
		a.Capacity = min(a.Capacity, n.cfg.Arbiter.MaxMembers)
	}
	a.Holder, a.Epoch = uint32(holder), epoch
	if b, err := a.Encode(); err == nil {
		n.out.Announcements = append(n.out.Announcements, b)
	}
}

// ready reconciles and hands out what was produced.
func (n *Node) ready(now time.Time) Ready {
	n.reconcile(now)
	n.announce(now)
	r := n.out
	n.out = Ready{}
	if n.arb != nil && !n.next.IsZero() && (r.NextTick.IsZero() || n.next.Before(r.NextTick)) {
		r.NextTick = n.next
	}
	if !n.announceAt.IsZero() && n.announceAt.After(now) && n.announceAt.Before(r.NextTick) {
		r.NextTick = n.announceAt
	}
	if r.NextTick.IsZero() || r.NextTick.Before(now) {
		r.NextTick = now
	}
	return r
}
