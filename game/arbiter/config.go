package arbiter

import (
	"errors"
	"fmt"
	"time"
)

// Config holds every tunable of an arbiter node. Zero fields take the
// values of DefaultConfig when passed through New; Validate rejects
// contradictions and names the values involved.
type Config struct {
	// ID is the member ID this node asks for when it joins (a driver may use
	// its CRIMP or peer ID); 0 lets the arbiter on duty choose one. Create
	// uses it too (1 when 0).
	ID MemberID
	// Game restricts Join to one game (0: the first game that answers).
	Game uint64

	// MaxMembers is the game's capacity: the arbiter answers GAME_FULL
	// beyond it (paper §3.7). At most MaxMembersLimit.
	MaxMembers int
	// Teams is the number of teams (paper: the team chosen on the start
	// screen); TeamSize the room on each, default ⌈MaxMembers/Teams⌉.
	Teams, TeamSize int

	// Heartbeat is how often the arbiter on duty sends PING (the paper PINGs
	// once, when a term starts; we repeat it so that PONGs renew the lease
	// and keep the active set fresh). Nodes also ask to be ticked at least
	// this often.
	Heartbeat time.Duration
	// LeaseTimeout: the arbiter may grant, admit or drop only until
	// LeaseTimeout after sending a PING that a majority of the view
	// answered. A partition side without a majority grants nothing.
	LeaseTimeout time.Duration
	// TakeoverTimeout is how long members wait on a silent arbiter before
	// the next member in place order takes the duty over (the paper has no
	// answer for an arbiter that crashes mid-range). Must exceed
	// LeaseTimeout, so the old arbiter's lease is over before anyone takes
	// over. Also how long an arbiter without a lease keeps the duty before
	// it abdicates.
	TakeoverTimeout time.Duration
	// TakeoverStagger delays the k-th member after the silent arbiter by
	// (k-1)·TakeoverStagger, so that one candidate usually wins alone.
	TakeoverStagger time.Duration
	// ActiveWindow: a member counts as active (paper §3.4, the PING check)
	// if a PONG of it was heard this recently; inactive members are skipped
	// at hand-off.
	ActiveWindow time.Duration
	// HandoffRetry is how often an unacknowledged HANDOFF is sent again;
	// after HandoffTimeout without ACK the successor is skipped like a
	// frozen member.
	HandoffRetry, HandoffTimeout time.Duration
	// SyncTimeout bounds how long a new arbiter waits, without progress,
	// for grants it knows exist but has not seen; then it gives them up and
	// opens a new lap, so that a lost grant can never be repeated in the lap
	// it was made in.
	SyncTimeout time.Duration
	// ClaimRetry: an unanswered CLAIM is sent again this often (the paper:
	// "the player will just resend it").
	ClaimRetry time.Duration
	// JoinRetry: a JOIN is sent again this often until answered.
	JoinRetry time.Duration
	// StartQuiet: a joiner that heard no game for this long and hears an
	// younger joiner creates the game itself (paper §3.5).
	StartQuiet time.Duration
	// LeaveRetry, LeaveTimeout: a LEAVE is repeated until the view without
	// the leaver arrives, at most LeaveTimeout.
	LeaveRetry, LeaveTimeout time.Duration
	// DropAfter: the arbiter on duty drops a member it has not heard for
	// this long. NeverDrop turns dropping off (frozen members are then only
	// skipped, as in the paper).
	DropAfter time.Duration
	NeverDrop bool
	// SuspendAfter: a gap this long between two calls means the process
	// was suspended; the node then distrusts its view of who is on duty,
	// asks for the current one and postpones any takeover.
	SuspendAfter time.Duration

	// LogWindow is how many recent grants every member remembers; a claim
	// of a resource granted earlier than that is decided afresh. Resource
	// IDs should therefore not be reused (give a respawned item a new ID).
	LogWindow int
	// MaxQueuedClaims bounds the claims the arbiter holds while it waits
	// for its lease; MaxOwnClaims bounds this node's unanswered claims.
	MaxQueuedClaims, MaxOwnClaims int
}

// Hard limits that keep every message within one CRIMP payload.
const (
	// RangeSize is the paper's MAX_SERVER_TRANS: the timestamps one member
	// serves per lap.
	RangeSize = 10
	// MaxMembersLimit bounds MaxMembers and every view on the wire.
	MaxMembersLimit = 32
	// MaxMessageBytes is the largest encoded message (CRIMP's MaxPayload).
	MaxMessageBytes = 1200
	// MaxDutyState bounds the duty state carried by a HANDOFF.
	MaxDutyState = 512
	// MaxChatBytes bounds a chat line.
	MaxChatBytes = 200
	// MaxRepairs bounds the grants one PING or PONG carries.
	MaxRepairs = 8
	// MaxHandedClaims bounds the undecided claims a HANDOFF carries.
	MaxHandedClaims = 32
)

// DefaultConfig returns the defaults: 8 players in 2 teams of 4, a 100 ms
// heartbeat, a 400 ms lease and a 1 s takeover.
func DefaultConfig() Config {
	return Config{
		MaxMembers:      8,
		Teams:           2,
		TeamSize:        4,
		Heartbeat:       100 * time.Millisecond,
		LeaseTimeout:    400 * time.Millisecond,
		TakeoverTimeout: time.Second,
		TakeoverStagger: 300 * time.Millisecond,
		ActiveWindow:    400 * time.Millisecond,
		HandoffRetry:    50 * time.Millisecond,
		HandoffTimeout:  250 * time.Millisecond,
		SyncTimeout:     time.Second,
		ClaimRetry:      150 * time.Millisecond,
		JoinRetry:       250 * time.Millisecond,
		StartQuiet:      time.Second,
		LeaveRetry:      150 * time.Millisecond,
		LeaveTimeout:    2 * time.Second,
		DropAfter:       10 * time.Second,
		SuspendAfter:    400 * time.Millisecond,
		LogWindow:       256,
		MaxQueuedClaims: 64,
		MaxOwnClaims:    16,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	setInt := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	setDur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	setInt(&c.MaxMembers, d.MaxMembers)
	setInt(&c.Teams, d.Teams)
	if c.TeamSize == 0 && c.Teams > 0 {
		c.TeamSize = (c.MaxMembers + c.Teams - 1) / c.Teams
	}
	setDur(&c.Heartbeat, d.Heartbeat)
	setDur(&c.LeaseTimeout, d.LeaseTimeout)
	setDur(&c.TakeoverTimeout, d.TakeoverTimeout)
	setDur(&c.TakeoverStagger, d.TakeoverStagger)
	setDur(&c.ActiveWindow, d.ActiveWindow)
	setDur(&c.HandoffRetry, d.HandoffRetry)
	setDur(&c.HandoffTimeout, d.HandoffTimeout)
	setDur(&c.SyncTimeout, d.SyncTimeout)
	setDur(&c.ClaimRetry, d.ClaimRetry)
	setDur(&c.JoinRetry, d.JoinRetry)
	setDur(&c.StartQuiet, d.StartQuiet)
	setDur(&c.LeaveRetry, d.LeaveRetry)
	setDur(&c.LeaveTimeout, d.LeaveTimeout)
	setDur(&c.DropAfter, d.DropAfter)
	setDur(&c.SuspendAfter, d.SuspendAfter)
	setInt(&c.LogWindow, d.LogWindow)
	setInt(&c.MaxQueuedClaims, d.MaxQueuedClaims)
	setInt(&c.MaxOwnClaims, d.MaxOwnClaims)
	return c
}

// Validate reports every inconsistency in c (after defaults).
func (c Config) Validate() error {
	var errs []error
	if c.MaxMembers < 1 || c.MaxMembers > MaxMembersLimit {
		errs = append(errs, fmt.Errorf("MaxMembers %d outside [1, %d]", c.MaxMembers, MaxMembersLimit))
	}
	if c.Teams < 1 || c.Teams > c.MaxMembers {
		errs = append(errs, fmt.Errorf("Teams %d outside [1, MaxMembers %d]", c.Teams, c.MaxMembers))
	} else if c.TeamSize < 1 || c.TeamSize*c.Teams < c.MaxMembers {
		errs = append(errs, fmt.Errorf("TeamSize %d × Teams %d leaves no room for MaxMembers %d", c.TeamSize, c.Teams, c.MaxMembers))
	}
	positive := []struct {
		name string
		v    time.Duration
	}{
		{"Heartbeat", c.Heartbeat}, {"LeaseTimeout", c.LeaseTimeout}, {"TakeoverTimeout", c.TakeoverTimeout},
		{"TakeoverStagger", c.TakeoverStagger}, {"ActiveWindow", c.ActiveWindow}, {"HandoffRetry", c.HandoffRetry},
		{"HandoffTimeout", c.HandoffTimeout}, {"SyncTimeout", c.SyncTimeout}, {"ClaimRetry", c.ClaimRetry},
		{"JoinRetry", c.JoinRetry}, {"StartQuiet", c.StartQuiet}, {"LeaveRetry", c.LeaveRetry},
		{"LeaveTimeout", c.LeaveTimeout}, {"DropAfter", c.DropAfter}, {"SuspendAfter", c.SuspendAfter},
	}
	for _, p := range positive {
		if p.v <= 0 {
			errs = append(errs, fmt.Errorf("%s %v is not positive", p.name, p.v))
		}
	}
	if c.LeaseTimeout <= c.Heartbeat {
		errs = append(errs, fmt.Errorf("LeaseTimeout %v must exceed Heartbeat %v, or the lease lapses between PINGs", c.LeaseTimeout, c.Heartbeat))
	}
	if c.TakeoverTimeout < c.LeaseTimeout+c.Heartbeat {
		errs = append(errs, fmt.Errorf("TakeoverTimeout %v must be at least LeaseTimeout %v + Heartbeat %v, or a takeover can overlap a live lease",
			c.TakeoverTimeout, c.LeaseTimeout, c.Heartbeat))
	}
	if c.SuspendAfter < c.LeaseTimeout {
		errs = append(errs, fmt.Errorf("SuspendAfter %v below LeaseTimeout %v", c.SuspendAfter, c.LeaseTimeout))
	}
	if c.ActiveWindow < c.Heartbeat {
		errs = append(errs, fmt.Errorf("ActiveWindow %v below Heartbeat %v marks live members inactive", c.ActiveWindow, c.Heartbeat))
	}
	if c.HandoffTimeout < c.HandoffRetry {
		errs = append(errs, fmt.Errorf("HandoffTimeout %v below HandoffRetry %v", c.HandoffTimeout, c.HandoffRetry))
	}
	if !c.NeverDrop && c.DropAfter < c.TakeoverTimeout {
		errs = append(errs, fmt.Errorf("DropAfter %v below TakeoverTimeout %v", c.DropAfter, c.TakeoverTimeout))
	}
	if c.LogWindow < RangeSize || c.LogWindow > 1<<16 {
		errs = append(errs, fmt.Errorf("LogWindow %d outside [%d, %d]", c.LogWindow, RangeSize, 1<<16))
	}
	if c.MaxQueuedClaims < 1 || c.MaxQueuedClaims > 4096 {
		errs = append(errs, fmt.Errorf("MaxQueuedClaims %d outside [1, 4096]", c.MaxQueuedClaims))
	}
	if c.MaxOwnClaims < 1 || c.MaxOwnClaims > 256 {
		errs = append(errs, fmt.Errorf("MaxOwnClaims %d outside [1, 256]", c.MaxOwnClaims))
	}
	return errors.Join(errs...)
}
