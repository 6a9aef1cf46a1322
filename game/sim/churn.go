package sim

import (
	"container/heap"
	"context"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/overworld-p2p/overworld/regions"
)

// Churn as in SimMud's network-dynamics experiment: every player stays
// online for a session drawn from an exponential distribution (seeded per
// player; memoryless, so the players online at the start draw theirs the
// same way, and at a constant population joins and departures are the
// Poisson process SimMud drew), then leaves, and a new player joins in its
// place at once. Coordinators leave like anyone else.
//
// A player leaves in one of two ways:
//
//   - handoff: the operator's directory drops it, its region service turns
//     ineligible (regions.Eligibility), ranks itself last and hands every
//     region it coordinates to the next peer; once it coordinates nothing
//     (at most handoffWait) it closes its services and node.
//   - close: the directory drops it and it closes its services and node at
//     once, as a player's peer does when it quits.
//   - crash: it vanishes at once: the directory drops it, its links are cut
//     and its connections closed (as when a process dies and its machine
//     resets the connections), and nothing it does reaches anyone again.
//
// For every region a leaving player coordinated, the time until another
// peer coordinates it is measured (watchNext), by polling the roles of the
// peers placement ranks first for the region every nextPoll.

// LeaveMode is how a player leaves when its session ends.
type LeaveMode string

const (
	// LeaveHandoff: the player's region service steps aside and hands its
	// regions on before the player closes.
	LeaveHandoff LeaveMode = "handoff"
	// LeaveClose: the player closes its services at once, as a player's
	// peer does when it quits (play bots leave so, or crash).
	LeaveClose LeaveMode = "close"
	// LeaveCrash: the player vanishes.
	LeaveCrash LeaveMode = "crash"
)

const (
	// handoffWait bounds how long a leaving player waits for its regions
	// to be handed on before it closes anyway.
	handoffWait = 10 * time.Second
	// nextPoll is the resolution of the time to the next coordinator.
	nextPoll = 20 * time.Millisecond
	// nextWait bounds the watch for a region's next coordinator.
	nextWait = 30 * time.Second
)

// churnCounts are the churn's events; guarded by run.mu.
type churnCounts struct {
	joins, leaves int // within the window
	// next are the times to the next coordinator of regions whose
	// coordinator left within the window, in ms; pending those with no
	// coordinator within nextWait (or by the end of the run).
	next    []float64
	pending int
}

// session draws player idx's session length.
func (r *run) session(idx int) time.Duration {
	rng := rand.New(rand.NewPCG(r.cfg.Seed^0x5e55, uint64(idx)))
	return time.Duration(rng.ExpFloat64() * float64(r.cfg.SessionMean))
}

// departure is when a player's session ends.
type departure struct {
	at time.Time
	p  *player
}

type departures []departure

func (d departures) Len() int { return len(d) }
func (d departures) Less(i, j int) bool {
	return d[i].at.Before(d[j].at) || (d[i].at.Equal(d[j].at) && d[i].p.idx < d[j].p.idx)
}
func (d departures) Swap(i, j int) { d[i], d[j] = d[j], d[i] }
func (d *departures) Push(x any)   { *d = append(*d, x.(departure)) }
func (d *departures) Pop() any {
	old := *d
	x := old[len(old)-1]
	*d = old[:len(old)-1]
	return x
}

// churnLoop ends sessions as they come due and puts a new player in
// each leaver's place, until ctx ends.
func (r *run) churnLoop(ctx context.Context) {
	var due departures
	for _, p := range r.online() {
		heap.Push(&due, departure{at: p.joined.Add(r.session(p.idx)), p: p})
	}
	for due.Len() > 0 {
		next := heap.Pop(&due).(departure)
		t := time.NewTimer(time.Until(next.at))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		r.bg.Go(func() { r.leave(next.p) })
		p, err := r.newcomer(ctx)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("a new player could not join", "err", err)
			}
			continue
		}
		heap.Push(&due, departure{at: p.joined.Add(r.session(p.idx)), p: p})
	}
}

// newcomer builds the next player and starts it.
func (r *run) newcomer(ctx context.Context) (*player, error) {
	r.mu.Lock()
	idx := r.next
	r.next++
	r.mu.Unlock()
	p, err := r.newPlayer(ctx, idx, r.startRegion(idx))
	if err != nil {
		return nil, err
	}
	r.join(p)
	r.mu.Lock()
	if r.measuring {
		r.churn.joins++
	}
	r.mu.Unlock()
	r.start(p)
	return p, nil
}

// leave ends p's session as r.cfg.Leave says.
func (r *run) leave(p *player) {
	began := time.Now()
	var coordinated []regions.Coord
	if p.rsvc != nil {
		for _, c := range r.grid.Neighbourhood(regions.Coord{}, max(r.grid.Width, r.grid.Height)) {
			if p.rsvc.Role(c) == regions.RoleCoordinator {
				coordinated = append(coordinated, c)
			}
		}
	}
	r.roles.left(p, r.cfg.Leave)
	r.mu.Lock()
	r.setOnline(p, false)
	counted := r.measuring
	if counted {
		r.churn.leaves++
	}
	r.mu.Unlock()
	for _, c := range coordinated {
		r.bg.Go(func() { r.watchNext(c, p, began, counted) })
	}
	switch r.cfg.Leave {
	case LeaveCrash:
		// Nothing it sent is delivered after this: no new links, its
		// streams reset (and with them what is in flight), its
		// connections closed.
		r.net.Crash(p.id)
		r.offNetwork(p)
		r.stopPlayer(p)
	case LeaveClose:
		r.offNetwork(p)
		r.stopPlayer(p)
		r.net.Remove(p.id)
	default:
		p.gate.leaving.Store(true)
		if p.rsvc != nil {
			r.awaitHandoff(p)
		}
		r.offNetwork(p)
		r.stopPlayer(p)
		r.net.Remove(p.id)
	}
	r.roles.stopped(p)
}

// awaitHandoff waits until p coordinates no region, at most handoffWait.
func (r *run) awaitHandoff(p *player) {
	deadline := time.Now().Add(handoffWait)
	all := r.grid.Neighbourhood(regions.Coord{}, max(r.grid.Width, r.grid.Height))
	for time.Now().Before(deadline) {
		if !slices.ContainsFunc(all, func(c regions.Coord) bool { return p.rsvc.Role(c) == regions.RoleCoordinator }) {
			return
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-r.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// watchNext measures how long after leaver began to leave another peer
// coordinates region c. It polls the peers placement ranks first for c
// and, every tenth poll, every online peer (the next coordinator by the
// region services' views need not be among the first by placement).
func (r *run) watchNext(c regions.Coord, leaver *player, began time.Time, counted bool) {
	record := func(ms float64, ok bool) {
		if !counted {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if ok {
			r.churn.next = append(r.churn.next, ms)
		} else {
			r.churn.pending++
		}
	}
	t := time.NewTicker(nextPoll)
	defer t.Stop()
	for i := 0; ; i++ {
		candidates := r.place.order(c)
		if i%10 == 9 {
			candidates = r.directory()
		}
		for _, id := range candidates {
			if q := r.player(id); q != nil && q != leaver && q.rsvc != nil && q.rsvc.Role(c) == regions.RoleCoordinator {
				record(float64(time.Since(began).Microseconds())/1000, true)
				return
			}
		}
		if time.Since(began) > nextWait {
			record(0, false)
			return
		}
		select {
		case <-r.ctx.Done():
			record(0, false)
			return
		case <-t.C:
		}
	}
}

// Churn is what the churn did in the measured window.
type Churn struct {
	SessionMeanSeconds float64 `json:"session_mean_s"`
	Leave              string  `json:"leave"`
	Joins              int     `json:"joins"`
	Leaves             int     `json:"leaves"`
	// NextCoordinatorMS is, for each region whose coordinator left in the
	// window, the time from the start of its leave to another peer
	// coordinating the region; NextCoordinatorPending counts those with
	// none within 30 s or by the end of the run.
	NextCoordinatorMS      Dist `json:"next_coordinator_ms"`
	NextCoordinatorPending int  `json:"next_coordinator_pending"`
}

// churnReport sums the churn up, once the watches have ended.
func (r *run) churnReport() *Churn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &Churn{
		SessionMeanSeconds: r.cfg.SessionMean.Seconds(), Leave: string(r.cfg.Leave),
		Joins: r.churn.joins, Leaves: r.churn.leaves,
		NextCoordinatorMS: summarise(r.churn.next), NextCoordinatorPending: r.churn.pending,
	}
}
