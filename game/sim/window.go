package sim

import (
	"slices"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/overworld-p2p/overworld/regions/position"
)

// The measured window. Each player's counters are read when the window
// opens (or, for a player who joins later, start from zero at its join)
// and when it closes (or when the player leaves); per-player rates are
// over the time the player was online within the window, so players who
// come and go with churn count for the time they were there.

// snapshot is one player's counters at one moment.
type snapshot struct {
	wire  wireSnapshot
	stats position.Stats
	// workloadOut and workloadIn are the workload's stream bytes.
	workloadOut, workloadIn uint64
	// hostOut and hostIn are every stream's bytes (gossipsub, position,
	// workload, DHT, identify, the region service's own).
	hostOut, hostIn uint64
	// border: the player's region was a border region (see
	// run.onBorder) when the counters were read; borderSteps counts the
	// drive steps it was on one.
	border      bool
	borderSteps uint64
	// takeovers are the regions this player started coordinating, by how
	// it got their state; answers the region requests it answered, by
	// status (from the region service's metrics).
	takeovers, answers map[string]uint64
	// lostFollowing and dueFollowing: see follower.
	lostFollowing, dueFollowing uint64
	// play are a play bot's eats, pick-ups and fights by outcome (see
	// playActions).
	play map[string]uint64
}

// windowEntry is one player's part in the window.
type windowEntry struct {
	p           *player
	first, last *snapshot
	// seconds is how long the player was online within the window.
	seconds float64
	// role is the most a player did for regions in the window:
	// coordinator, replica or member.
	role string
}

// interior reports whether the player followed only regions inside the
// world throughout its part of the window: its region was no border
// region at either end nor at any drive step between. Play bots, whose
// walk the simulator does not see, count as border players.
func (e windowEntry) interior() bool {
	return e.p.walker != nil && !e.first.border && !e.last.border && e.last.borderSteps == e.first.borderSteps
}

// minOnlineSeconds is the least time online in the window for a player's
// rates to count: a player who joined a moment before the window closed
// has rates made of a handful of messages.
const minOnlineSeconds = 1.0

func (r *run) snapshotOf(p *player) *snapshot {
	s := &snapshot{wire: p.wire.snapshot(), stats: p.positionStats(),
		border: p.walker == nil || r.onBorder(p.currentRegion()), borderSteps: p.borderSteps.Load(),
		takeovers: map[string]uint64{}, answers: map[string]uint64{}, play: map[string]uint64{},
		lostFollowing: p.follow.lost.Load(), dueFollowing: p.follow.due.Load()}
	s.workloadOut, s.workloadIn = p.host.TrackedBytes()
	s.hostOut, s.hostIn = p.host.Bytes()
	if p.rsvc == nil {
		return s
	}
	families, err := p.reg.Gather()
	if err != nil {
		r.log.Debug("gather region metrics", "peer", p.id, "err", err)
	}
	for _, f := range families {
		switch f.GetName() {
		case "overworld_region_takeovers_total":
			addByLabel(s.takeovers, f.GetMetric(), "how")
		case "overworld_region_requests_total":
			addByLabel(s.answers, f.GetMetric(), "status")
		case "overworld_play_object_updates_total":
			addByLabels(s.play, f.GetMetric(), "", "action", "result")
		case "overworld_play_fights_total":
			addByLabels(s.play, f.GetMetric(), "fight as ", "role", "result")
		}
	}
	return s
}

// addByLabel adds each counter of ms to into under its label's value.
func addByLabel(into map[string]uint64, ms []*dto.Metric, label string) {
	for _, m := range ms {
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				into[l.GetValue()] += uint64(m.GetCounter().GetValue())
			}
		}
	}
}

// addByLabels adds each counter of ms to into under prefix, its first
// label's value, "/" and its second's.
func addByLabels(into map[string]uint64, ms []*dto.Metric, prefix, first, second string) {
	for _, m := range ms {
		var a, b string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case first:
				a = l.GetValue()
			case second:
				b = l.GetValue()
			}
		}
		into[prefix+a+"/"+b] += uint64(m.GetCounter().GetValue())
	}
}

// beginWindow reads every online player's counters. The counters are
// read outside r.mu: reading a region service's metrics takes its locks,
// and the population must not wait for them.
func (r *run) beginWindow() {
	r.mu.Lock()
	r.measuring = true
	r.windowStart = time.Now()
	live := slices.Clone(r.live)
	r.mu.Unlock()
	r.roles.beginWindow(live)
	if r.cfg.PlayBots {
		r.sampleRoles(live)
	}
	snaps := make([]*snapshot, len(live))
	for i, p := range live {
		snaps[i] = r.snapshotOf(p)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, p := range live {
		if p.first == nil && p.left.IsZero() {
			p.first = snaps[i]
		}
	}
}

// endWindow reads every online player's counters and returns each
// player's part in the window.
func (r *run) endWindow() []windowEntry {
	r.mu.Lock()
	r.measuring, r.ended = false, true
	end := time.Now()
	live := slices.Clone(r.live)
	r.mu.Unlock()
	if r.cfg.PlayBots {
		r.sampleRoles(live)
	}
	r.roles.endWindow()
	snaps := make([]*snapshot, len(live))
	for i, p := range live {
		snaps[i] = r.snapshotOf(p)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, p := range live {
		if p.last == nil {
			p.last = snaps[i]
		}
	}
	var out []windowEntry
	for _, p := range r.all {
		if p.first == nil || p.last == nil {
			continue
		}
		from, to := r.windowStart, end
		if p.joined.After(from) {
			from = p.joined
		}
		if !p.left.IsZero() && p.left.Before(to) {
			to = p.left
		}
		out = append(out, windowEntry{p: p, first: p.first, last: p.last, seconds: to.Sub(from).Seconds(), role: r.roles.windowRole(p)})
	}
	return out
}

// offNetwork records that p is off the network from now on and reads its
// counters for the window if the window is open.
func (r *run) offNetwork(p *player) {
	snap := r.snapshotOf(p)
	r.mu.Lock()
	defer r.mu.Unlock()
	p.left = time.Now()
	if p.first != nil && p.last == nil && !r.ended {
		p.last = snap
	}
}
