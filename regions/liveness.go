package regions

import (
	"sort"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// What this peer believes about other peers' liveness: the peers it found
// unreachable (left out of placement), the replicas it leaves out for
// answering without acknowledging, and when it last probed a suspect a
// request named. The table is deterministic: the time is an argument of
// every method, nothing here touches the network, a clock or a lock. The
// Service's loop owns it (loop.go): connection notifications, probe
// results and signs of life are fed to the loop, which updates the table
// and publishes the dead peers as an immutable deadView for placement
// questions asked off the loop.

// maxDead bounds each per-peer liveness table (dead, excluded, probed):
// a flood of peer IDs evicts the oldest entries, never grows the tables.
const maxDead = 1024

// liveness is the liveness table; the zero value is not usable (newLiveness).
type liveness struct {
	// deadFor is how long a death or an exclusion holds without news
	// (Config.DeadFor); probeEvery is how often a request may make this
	// peer probe one suspect (Config.ProbeTimeout).
	deadFor    time.Duration
	probeEvery time.Duration

	dead     peerTimes // when each peer was found unreachable
	excluded peerTimes // when each replica was left out
	probed   peerTimes // when each suspect was last probed for a request
}

func newLiveness(deadFor, probeEvery time.Duration, limit int) *liveness {
	return &liveness{
		deadFor: deadFor, probeEvery: probeEvery,
		dead:     newPeerTimes(limit),
		excluded: newPeerTimes(limit),
		probed:   newPeerTimes(limit),
	}
}

// markDead records that p was found unreachable at now; first says p was
// not already dead (so the caller logs it once).
func (l *liveness) markDead(p peer.ID, now time.Time) (first bool) {
	first = l.alive(p, now)
	l.dead.put(p, now)
	return first
}

// heard records a sign of life from p: it is no longer dead. It reports
// whether the table changed.
func (l *liveness) heard(p peer.ID) bool { return l.dead.drop(p) }

// alive reports whether p is not dead at now: never found unreachable,
// heard from since, or found so longer than deadFor ago.
func (l *liveness) alive(p peer.ID, now time.Time) bool {
	at, ok := l.dead.get(p)
	return !ok || now.Sub(at) > l.deadFor
}

// exclude leaves p out as replica from now for deadFor.
func (l *liveness) exclude(p peer.ID, now time.Time) { l.excluded.put(p, now) }

// include takes p back as a replica before deadFor passes.
func (l *liveness) include(p peer.ID) { l.excluded.drop(p) }

// isExcluded reports whether p is left out as replica at now.
func (l *liveness) isExcluded(p peer.ID, now time.Time) bool {
	at, ok := l.excluded.get(p)
	return ok && now.Sub(at) <= l.deadFor
}

// excludedAmong are the peers of order but self left out as replicas at
// now (nil if none).
func (l *liveness) excludedAmong(order []peer.ID, self peer.ID, now time.Time) map[peer.ID]bool {
	var out map[peer.ID]bool
	for _, p := range order {
		if p != self && l.isExcluded(p, now) {
			if out == nil {
				out = map[peer.ID]bool{}
			}
			out[p] = true
		}
	}
	return out
}

// probeDue reports whether a request may make this peer probe p at now,
// and if so records the probe: at most one per probeEvery, so requests
// cannot make this peer probe one peer over and over.
func (l *liveness) probeDue(p peer.ID, now time.Time) bool {
	if at, ok := l.probed.get(p); ok && now.Sub(at) < l.probeEvery {
		return false
	}
	l.probed.put(p, now)
	return true
}

// recheck lists up to n dead peers that connected says are still
// connected, the longest dead first (ties by ID): on an overloaded peer a
// probe can time out although its target lives, and such a peer is probed
// again rather than left out for the whole deadFor. A failed probe marks
// it dead anew, which moves it to the back.
func (l *liveness) recheck(now time.Time, n int, connected func(peer.ID) bool) []peer.ID {
	var out []peer.ID
	for _, p := range l.dead.oldestFirst() {
		if len(out) == n {
			break
		}
		if !l.alive(p, now) && connected(p) {
			out = append(out, p)
		}
	}
	return out
}

// prune forgets what no longer counts at now: deaths and exclusions older
// than deadFor, probes older than probeEvery. It reports whether the dead
// peers changed.
func (l *liveness) prune(now time.Time) (deadChanged bool) {
	deadChanged = l.dead.dropOlder(now.Add(-l.deadFor))
	l.excluded.dropOlder(now.Add(-l.deadFor))
	l.probed.dropOlder(now.Add(-l.probeEvery))
	return deadChanged
}

// view is the dead peers as they stand, for readers off the loop.
func (l *liveness) view() *deadView {
	v := &deadView{deadFor: l.deadFor, at: make(map[peer.ID]time.Time, len(l.dead.at))}
	for p, t := range l.dead.at {
		v.at[p] = t
	}
	return v
}

// deadView is an immutable copy of a liveness table's dead peers, which
// the loop publishes after each change: placement questions asked on
// other goroutines (a player's client, trust checks of inbound messages)
// read it without a lock.
type deadView struct {
	deadFor time.Duration
	at      map[peer.ID]time.Time
}

// alive is liveness.alive on the copy.
func (v *deadView) alive(p peer.ID, now time.Time) bool {
	at, ok := v.at[p]
	return !ok || now.Sub(at) > v.deadFor
}

// peerTimes is a time per peer, bounded: a new peer evicts the oldest
// entry (ties: the smallest ID) once limit are held.
type peerTimes struct {
	limit int
	at    map[peer.ID]time.Time
}

func newPeerTimes(limit int) peerTimes {
	return peerTimes{limit: max(1, limit), at: map[peer.ID]time.Time{}}
}

func (pt *peerTimes) get(p peer.ID) (time.Time, bool) {
	t, ok := pt.at[p]
	return t, ok
}

// put sets p's time to t, evicting the oldest entry first if p is new and
// the table full.
func (pt *peerTimes) put(p peer.ID, t time.Time) {
	if _, ok := pt.at[p]; !ok && len(pt.at) >= pt.limit {
		var oldest peer.ID
		var oldestAt time.Time
		first := true
		for q, qt := range pt.at {
			if first || qt.Before(oldestAt) || (qt.Equal(oldestAt) && q < oldest) {
				oldest, oldestAt, first = q, qt, false
			}
		}
		delete(pt.at, oldest)
	}
	pt.at[p] = t
}

// drop forgets p; it reports whether p was there.
func (pt *peerTimes) drop(p peer.ID) bool {
	_, ok := pt.at[p]
	delete(pt.at, p)
	return ok
}

// dropOlder forgets the entries before cut; it reports whether any was.
func (pt *peerTimes) dropOlder(cut time.Time) bool {
	changed := false
	for p, t := range pt.at {
		if t.Before(cut) {
			delete(pt.at, p)
			changed = true
		}
	}
	return changed
}

// oldestFirst lists the peers by time, oldest first (ties by ID).
func (pt *peerTimes) oldestFirst() []peer.ID {
	out := make([]peer.ID, 0, len(pt.at))
	for p := range pt.at {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		ti, tj := pt.at[out[i]], pt.at[out[j]]
		if !ti.Equal(tj) {
			return ti.Before(tj)
		}
		return out[i] < out[j]
	})
	return out
}
