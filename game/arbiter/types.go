package arbiter

import (
	"fmt"
	"time"
)

// MemberID names a member of a game; 0 means "none yet".
type MemberID uint32

// Team is a team number, 1..Config.Teams; 0 means "no preference".
type Team uint32

// ResourceID names a contested resource (a health pack, a food item). The
// game chooses it; a respawned item should get a new ID.
type ResourceID uint64

// Stamp is the logical clock of paper §3.3 with the membership epoch and
// the lap added: ts runs 0 .. 10·N-1 within a lap (N members), the member
// at place p serves ts 10p .. 10p+9, and where the paper resets ts to 0 the
// lap counts up instead. Stamps of one epoch compare as (lap, ts).
//
// An epoch names one view and who made it: the number of changes so far in
// the high 32 bits and the member that made the last one (the arbiter on
// duty) in the low 32. Two arbiters on two sides of a partition that each
// start an epoch from the same one so give them different names, and the
// histories never mix under one (epoch, lap).
type Stamp struct {
	Epoch uint64
	Lap   uint64
	TS    uint32
}

// nextEpoch names the epoch that author makes after e.
func nextEpoch(e uint64, author MemberID) uint64 { return (e>>32+1)<<32 | uint64(author) }

// epochString renders an epoch as count.author.
func epochString(e uint64) string { return fmt.Sprintf("%d.%d", e>>32, uint32(e)) }

func (s Stamp) String() string { return fmt.Sprintf("e%s/l%d/t%d", epochString(s.Epoch), s.Lap, s.TS) }

// place is the place in the view of the member serving s.
func (s Stamp) place() int { return int(s.TS / RangeSize) }

// termCompare orders the terms (lap, place) of two stamps of one epoch.
func termCompare(a, b Stamp) int {
	switch {
	case a.Lap < b.Lap:
		return -1
	case a.Lap > b.Lap:
		return 1
	case a.place() < b.place():
		return -1
	case a.place() > b.place():
		return 1
	}
	return 0
}

// Member is one entry of the view.
type Member struct {
	ID   MemberID
	Team Team
}

// Phase is where a node stands in a game.
type Phase uint8

// Phases.
const (
	PhaseIdle    Phase = iota // not in a game (new, refused, left or dropped)
	PhaseJoining              // JOIN sent, waiting for the arbiter
	PhaseMember               // in the view
)

func (p Phase) String() string {
	return [...]string{"idle", "joining", "member"}[min(int(p), 2)]
}

// Via says how a node came to be on duty.
type Via uint8

// Ways to the duty.
const (
	ViaCreate   Via = iota + 1 // created the game
	ViaHandoff                 // the previous arbiter's HANDOFF
	ViaTakeover                // the arbiter fell silent
	ViaResume                  // no active successor, or lost grants: a new term of its own
)

func (v Via) String() string {
	return [...]string{"none", "create", "handoff", "takeover", "resume"}[min(int(v), 4)]
}

// EventKind is the type of an Event.
type EventKind uint8

// Events a node reports.
const (
	// EventJoined: this node was admitted (Member, Team, Forced).
	EventJoined EventKind = iota + 1
	// EventRefused: the arbiter refused this node's JOIN (Reason).
	EventRefused
	// EventMemberJoined: another member was admitted (Member, Team, Forced).
	EventMemberJoined
	// EventMemberLeft: a member left or was dropped (Member, Reason).
	EventMemberLeft
	// EventLeft: this node is out of the game (Reason: left or dropped).
	EventLeft
	// EventDutyBegin: this node is now the arbiter (Stamp, Via, State: the
	// duty state handed over, or the newest this node saw).
	EventDutyBegin
	// EventDutyEnd: this node's term is over (Member: the successor, 0 if
	// none is known yet).
	EventDutyEnd
	// EventGrant: a resource was granted (Resource to Member at Stamp);
	// every member reports every grant once.
	EventGrant
	// EventDeny: this node's claim was denied (Resource; Member holds it).
	EventDeny
	// EventChat: a chat line (Member said Text, to its team if Team != 0).
	EventChat
)

func (k EventKind) String() string {
	names := [...]string{"invalid", "joined", "refused", "member-joined", "member-left", "left",
		"duty-begin", "duty-end", "grant", "deny", "chat"}
	if int(k) >= len(names) {
		return "invalid"
	}
	return names[k]
}

// Reason qualifies refusals and departures.
type Reason uint8

// Reasons.
const (
	ReasonNone     Reason = iota
	ReasonFull            // GAME_FULL
	ReasonIDTaken         // the ID asked for belongs to another member
	ReasonLeft            // left of its own accord
	ReasonDropped         // dropped by the arbiter (silent for DropAfter, or expelled)
	ReasonTimedOut        // this node gave up waiting for its LEAVE to be applied
)

func (r Reason) String() string {
	return [...]string{"none", "full", "id-taken", "left", "dropped", "timed-out"}[min(int(r), 5)]
}

// Event reports something the application or driver must act on.
type Event struct {
	Kind     EventKind
	Member   MemberID
	Team     Team
	Forced   bool
	Reason   Reason
	Resource ResourceID
	Stamp    Stamp
	Via      Via
	Text     string
	State    []byte
}

// Ready is what one call into the Node produced: messages to multicast to
// the group (in order), events, and the time by which Tick must be called.
// NextTick is never more than a Heartbeat away, so that a node can tell a
// suspended process (a gap of SuspendAfter) from a quiet one.
type Ready struct {
	Messages [][]byte
	Events   []Event
	NextTick time.Time
}

// Status is a snapshot of a node, for drivers, tests and logs.
type Status struct {
	ID       MemberID
	Game     uint64
	Phase    Phase
	Team     Team
	Stamp    Stamp
	Holder   MemberID // who this node believes is on duty (0: unknown)
	OnDuty   bool     // this node is the arbiter
	Leased   bool     // ... and a majority confirmed it recently
	Serving  bool     // ... and it may grant now (leased, grants synced, not handing off)
	HandOver MemberID // the successor this node is handing off to, if any
	View     []Member
	GrantSeq uint64 // newest grant known
	GrantHas uint64 // every grant up to this one is known
}

// Stats sizes a node's state; memory is bounded by these.
type Stats struct {
	View, Heard, Log, Queued, OwnClaims int
}
