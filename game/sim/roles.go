package sim

import (
	"sync"
	"time"

	"github.com/overworld-p2p/overworld/regions"
)

// roleLog follows who coordinates which region, from what each region
// service tells its OnRoleChange (within a maintenance period of the
// change), and names the cause of every change of coordinator:
//
//   - "leave (handoff)" / "leave (crash)": the previous coordinator left;
//   - "join (closer newcomer)": the new coordinator joined after the
//     previous one took the region, so placement ranks it first now;
//   - "other": neither (a false suspicion, views of placement that
//     disagree for a while).
//
// A region's first coordinator is no change. It also keeps, per player,
// the most it did for regions within the measured window (coordinator,
// replica or member) for the bandwidth by role.
type roleLog struct {
	mu        sync.Mutex
	measuring bool
	last      map[regions.Coord]*player // the last peer that took the region
	since     map[regions.Coord]time.Time
	held      map[*player]map[regions.Coord]regions.Role
	joinedAt  map[*player]time.Time
	leaving   map[*player]LeaveMode
	inWindow  map[*player]regions.Role
	changes   map[string]uint64 // within the window, by cause
	firsts    uint64
}

func newRoleLog() *roleLog {
	return &roleLog{
		last: map[regions.Coord]*player{}, since: map[regions.Coord]time.Time{},
		held: map[*player]map[regions.Coord]regions.Role{}, joinedAt: map[*player]time.Time{},
		leaving: map[*player]LeaveMode{}, inWindow: map[*player]regions.Role{}, changes: map[string]uint64{},
	}
}

func (l *roleLog) joined(p *player) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.joinedAt[p] = time.Now()
}

// left records that p is leaving (from the start of a hand-off, or its
// crash).
func (l *roleLog) left(p *player, how LeaveMode) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leaving[p] = how
}

// stopped forgets p's roles once its region service is closed.
func (l *roleLog) stopped(p *player) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.held, p)
}

// rank orders roles by how much they ask of a peer.
func rank(r regions.Role) int {
	switch r {
	case regions.RoleCoordinator:
		return 2
	case regions.RoleReplica:
		return 1
	}
	return 0
}

// changed is p's region service's OnRoleChange.
func (l *roleLog) changed(p *player, c regions.Coord, role regions.Role) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, gone := l.leaving[p]; gone && role == regions.RoleCoordinator {
		// A leaving peer that still coordinates is not taking over.
		return
	}
	h := l.held[p]
	if h == nil {
		h = map[regions.Coord]regions.Role{}
		l.held[p] = h
	}
	if role == regions.RoleNone {
		delete(h, c)
	} else {
		h[c] = role
	}
	if l.measuring && rank(role) > rank(l.inWindow[p]) {
		l.inWindow[p] = role
	}
	if role != regions.RoleCoordinator {
		return
	}
	prev, prevSince := l.last[c], l.since[c]
	if prev == p {
		return
	}
	l.last[c], l.since[c] = p, now
	if prev == nil {
		l.firsts++
		return
	}
	cause := "other"
	if how, gone := l.leaving[prev]; gone {
		cause = "leave (" + string(how) + ")"
	} else if l.joinedAt[p].After(prevSince) {
		cause = "join (closer newcomer)"
	}
	if l.measuring {
		l.changes[cause]++
	}
}

// sample records that p holds role for some region now, as seen by
// asking its region service (play bots, whose region service tells no
// role changes).
func (l *roleLog) sample(p *player, role regions.Role) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if rank(role) > rank(l.inWindow[p]) {
		l.inWindow[p] = role
	}
}

// beginWindow starts the window: each online player's roles now count.
func (l *roleLog) beginWindow(online []*player) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.measuring = true
	for _, p := range online {
		for _, role := range l.held[p] {
			if rank(role) > rank(l.inWindow[p]) {
				l.inWindow[p] = role
			}
		}
	}
}

func (l *roleLog) endWindow() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.measuring = false
}

// windowRole is the most p did for regions within the window.
func (l *roleLog) windowRole(p *player) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.inWindow[p] {
	case regions.RoleCoordinator:
		return "coordinator"
	case regions.RoleReplica:
		return "replica"
	}
	return "member"
}

// changesInWindow are the coordinator changes within the window by cause.
func (l *roleLog) changesInWindow() map[string]uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]uint64, len(l.changes))
	for k, v := range l.changes {
		out[k] = v
	}
	return out
}
