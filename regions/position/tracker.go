package position

import (
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Verdict is what a receiver does with an update.
type Verdict int

const (
	// Accept delivers the update.
	Accept Verdict = iota
	// Ignore drops it without blaming the sender: a duplicate or an update
	// overtaken in the network.
	Ignore
	// Reject drops it and penalises the peer that sent it.
	Reject
)

func (v Verdict) String() string {
	switch v {
	case Accept:
		return "accept"
	case Ignore:
		return "ignore"
	default:
		return "reject"
	}
}

// Reasons an update is not accepted; they label the metrics.
const (
	ReasonTooLarge    = "too_large"
	ReasonMalformed   = "malformed"
	ReasonForged      = "forged"
	ReasonWrongRegion = "wrong_region"
	ReasonOutOfWorld  = "out_of_world"
	ReasonTooFast     = "too_fast"
	ReasonTeleport    = "teleport"
	ReasonRelocation  = "relocation"
	ReasonReplay      = "replay"
	ReasonDuplicate   = "duplicate"
	ReasonReordered   = "reordered"
	ReasonFuture      = "from_future"
	// ReasonStale marks an update sent longer ago than MaxDelay by the
	// receiver's clock: dropped without blame (it may have been held up
	// in the network), and never credited as time walked.
	ReasonStale = "stale"
	// ReasonRateLimited marks a message over its author's rate on one
	// topic (AuthorLimiter): dropped without blame.
	ReasonRateLimited = "rate_limited"
)

// Limits are the checks a Tracker applies.
type Limits struct {
	Grid           Grid
	MaxSpeed       int32
	SpeedTolerance int32
	MaxClockSkew   time.Duration
	MaxDelay       time.Duration
	ReorderWindow  uint64
	// MinRelocationInterval is the least time, by the sender's clock,
	// between two relocations a receiver accepts from one player.
	MinRelocationInterval time.Duration
}

// Limits returns the config's checks.
func (c Config) Limits() Limits {
	return Limits{
		Grid:           c.Grid(),
		MaxSpeed:       c.MaxSpeed,
		SpeedTolerance: c.SpeedTolerance,
		MaxClockSkew:   c.MaxClockSkew,
		MaxDelay:       c.MaxDelay,
		ReorderWindow:  c.ReorderWindow,

		MinRelocationInterval: c.MinRelocationInterval,
	}
}

// TrackerStats count what a Tracker saw.
type TrackerStats struct {
	Accepted  uint64
	Lost      uint64 // sequence numbers skipped over by accepted updates
	Reordered uint64 // updates that arrived after a newer one
	Duplicate uint64
}

// Tracker keeps the newest update of every player it heard from and decides
// whether the next one is acceptable: a sequence number newer than the last
// and a move the speed limit allows in the time between the two updates'
// timestamps. It is not safe for concurrent use and has no clock: callers
// pass now.
//
// The timestamps are the sender's, which arrival bunching makes necessary
// (two updates sent 150 ms apart may arrive 1 ms apart), but the receiver
// only believes them within a window of its own clock: an update must have
// been sent within MaxDelay before its arrival and at most MaxClockSkew
// after it. A sender lying about time can therefore make two updates look
// at most MaxDelay+MaxClockSkew further apart than their arrivals, and the
// lie does not add up: whatever it claims, its position stays within that
// much walking of a path the speed limit allows by the receiver's clock.
type Tracker struct {
	lim     Limits
	players map[peer.ID]*lastSeen
	stats   TrackerStats
}

type lastSeen struct {
	seq         uint64
	pos         Vec
	sent        time.Time // the sender's timestamp
	at          time.Time // arrival
	relocations uint32    // the newest relocation count heard
	relocated   time.Time // sender's timestamp of the last relocation taken
}

// NewTracker returns an empty tracker.
func NewTracker(lim Limits) *Tracker {
	return &Tracker{lim: lim, players: map[peer.ID]*lastSeen{}}
}

// Observe checks an update of player that arrived at now and, if it is
// accepted, records it. The caller has already checked that the update's
// author is player.
func (t *Tracker) Observe(player peer.ID, u *Update, now time.Time) (Verdict, string) {
	if u.GetSeq() == 0 {
		return Reject, ReasonMalformed
	}
	pos := Vec{u.GetX(), u.GetY()}
	if !t.inWorld(pos) {
		return Reject, ReasonOutOfWorld
	}
	if t.lim.Grid.RegionOf(pos) != coordOf(u.GetRegionX(), u.GetRegionY()) {
		return Reject, ReasonWrongRegion
	}
	limit := int64(t.lim.MaxSpeed) + int64(t.lim.SpeedTolerance)
	if vx, vy := int64(u.GetVx()), int64(u.GetVy()); vx*vx+vy*vy > limit*limit {
		return Reject, ReasonTooFast
	}
	sent := time.UnixMicro(u.GetSentUnixMicro())
	if sent.After(now.Add(t.lim.MaxClockSkew)) {
		return Reject, ReasonFuture
	}
	if sent.Before(now.Add(-t.lim.MaxDelay)) {
		return Ignore, ReasonStale
	}
	last, known := t.players[player]
	if known {
		switch {
		case u.GetSeq() == last.seq:
			t.stats.Duplicate++
			return Ignore, ReasonDuplicate
		case u.GetSeq() < last.seq && last.seq-u.GetSeq() <= t.lim.ReorderWindow:
			t.stats.Reordered++
			return Ignore, ReasonReordered
		case u.GetSeq() < last.seq:
			return Reject, ReasonReplay
		}
		if u.GetRelocations() < last.relocations {
			return Reject, ReasonRelocation
		}
		if !t.reachable(last, pos, sent) {
			if reason := t.relocation(last, u, pos, sent); reason != "" {
				return Reject, reason
			}
			last.relocated = sent
		}
		t.stats.Lost += u.GetSeq() - last.seq - 1
	} else {
		if len(t.players) >= maxTracked {
			t.forgetOldest()
		}
		last = &lastSeen{}
		t.players[player] = last
	}
	last.seq, last.pos, last.sent, last.at = u.GetSeq(), pos, sent, now
	last.relocations = u.GetRelocations()
	t.stats.Accepted++
	return Accept, ""
}

// reachable reports whether a player last seen at from can be at to when it
// sent the new update: at most MaxSpeed for the time between the two
// timestamps, plus SpeedTolerance. The arithmetic saturates: a gap so long
// that the allowed distance spans the largest world allows any move.
func (t *Tracker) reachable(from *lastSeen, to Vec, sent time.Time) bool {
	return withinReach(from.pos, to, sent.Sub(from.sent), t.lim.MaxSpeed, t.lim.SpeedTolerance)
}

// withinReach reports whether a walk from a to b fits in dt at speed units
// per second plus tolerance units, without overflow for any dt.
func withinReach(a, b Vec, dt time.Duration, speed, tolerance int32) bool {
	dt = max(dt, 0)
	// Beyond maxReach any two points of a world are within reach; capping
	// there keeps allowed*allowed far below 2^63.
	const maxReach = 2 * maxWorldUnits
	allowed := int64(tolerance)
	if speed > 0 {
		us := dt.Microseconds()
		if us >= maxReach*1_000_000/int64(speed) {
			return true
		}
		allowed += int64(speed) * us / 1_000_000
	}
	allowed = min(allowed, maxReach)
	dx, dy := int64(b.X)-int64(a.X), int64(b.Y)-int64(a.Y)
	return dx*dx+dy*dy <= allowed*allowed
}

// relocation decides whether a move the speed limit does not allow is a
// relocation the game made (a respawn), returning "" if so. It must be
// announced by a higher relocation count, stay in the region the player
// was last seen in (a respawn does), and come at least
// MinRelocationInterval after the last one taken, so a cheater gains at
// most one short hop per interval and never leaves its region that way.
func (t *Tracker) relocation(last *lastSeen, u *Update, to Vec, sent time.Time) string {
	switch {
	case u.GetRelocations() == last.relocations:
		return ReasonTeleport
	case t.lim.Grid.RegionOf(to) != t.lim.Grid.RegionOf(last.pos):
		return ReasonTeleport
	case !last.relocated.IsZero() && sent.Sub(last.relocated) < t.lim.MinRelocationInterval:
		return ReasonRelocation
	}
	return ""
}

func (t *Tracker) inWorld(p Vec) bool {
	g := t.lim.Grid
	return p.X >= 0 && p.Y >= 0 &&
		int64(p.X) < int64(g.RegionUnits)*int64(g.Width) &&
		int64(p.Y) < int64(g.RegionUnits)*int64(g.Height)
}

// Forget drops players not heard from since before cutoff, so the tracker's
// memory follows the players around, not all players ever seen. A forgotten
// player's next update is accepted as a first one.
func (t *Tracker) Forget(cutoff time.Time) {
	for id, l := range t.players {
		if l.at.Before(cutoff) {
			delete(t.players, id)
		}
	}
}

// maxTracked bounds the players a Tracker remembers; a new one past it
// takes the place of the one heard from longest ago.
const maxTracked = 4096

func (t *Tracker) forgetOldest() {
	var victim peer.ID
	var at time.Time
	for id, l := range t.players {
		if victim == "" || l.at.Before(at) || (l.at.Equal(at) && id < victim) {
			victim, at = id, l.at
		}
	}
	delete(t.players, victim)
}

// Last returns the newest accepted sequence number of player.
func (t *Tracker) Last(player peer.ID) (uint64, bool) {
	l, ok := t.players[player]
	if !ok {
		return 0, false
	}
	return l.seq, true
}

// Stats returns the counters.
func (t *Tracker) Stats() TrackerStats { return t.stats }

// Len is the number of players tracked.
func (t *Tracker) Len() int { return len(t.players) }
