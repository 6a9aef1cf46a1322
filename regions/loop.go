package regions

import (
	"time"
)

// The Service's loop: one goroutine per Service that owns the regions'
// work that is not an answer to a caller waiting on the network. It
// selects over the timer of the next check (a region's maintenance or
// the Service's own periodic work), the wakeups (nudges, deaths), the
// peers whose last connection closed or whose first opened (the liveness
// table is the loop's, liveness.go), the machine steps of inbound
// messages (onLoop), and the acknowledgements of this peer's own
// exchanges (a replication's answer, a replica's check of its copy, the
// answers to a running acquisition's asks and its deadline: acquire.go
// drive).
// Exchanges with peers still run on goroutines the Service owns, but
// they only talk: what comes back is fed to the machines here, one at a
// time. The regions' slots are the loop's alone; after each step it
// publishes their views (view.go) for readers off the loop.

// loopStep is a machine step an inbound message asks for, run on the loop;
// done closes once it ran.
type loopStep struct {
	f    func()
	done chan struct{}
}

// onLoop runs f on the Service's loop and waits for it; false if the
// Service closed first (f may not have run). f must not wait for the
// network or call onLoop itself.
func (s *Service) onLoop(f func()) bool {
	st := loopStep{f: f, done: make(chan struct{})}
	select {
	case s.steps <- st:
	case <-s.ctx.Done():
		return false
	}
	select {
	case <-st.done:
		return true
	case <-s.ctx.Done():
		// The loop may have stopped before it took the step; it closes
		// done for any step it ran.
		select {
		case <-st.done:
			return true
		default:
			return false
		}
	}
}

// feedLoop hands an acknowledgement to the loop (dropped once the
// Service closes).
func (s *Service) feedLoop(f func()) {
	select {
	case s.acks <- f:
	case <-s.ctx.Done():
	}
}

func (s *Service) loop() {
	defer s.wg.Done()
	period := s.cfg.MaintainEvery
	serviceAt := time.Now().Add(period)
	due := map[Coord]time.Time{} // each region's next check
	timer := time.NewTimer(period)
	defer timer.Stop()
	var ticks int
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-timer.C:
			now := time.Now()
			servicePeriod := !now.Before(serviceAt)
			held := s.heldRegions()
			for _, c := range held {
				at, armed := due[c]
				if (armed && !now.Before(at)) || (!armed && servicePeriod) {
					due[c] = s.maintainAt(c, wakeup{}, now)
				}
			}
			if len(due) > len(held) {
				// Regions let go of keep no timer.
				keep := make(map[Coord]bool, len(held))
				for _, c := range held {
					keep[c] = true
				}
				for c := range due {
					if !keep[c] {
						delete(due, c)
					}
				}
			}
			if servicePeriod {
				serviceAt = now.Add(period)
				s.servicePeriod(ticks)
				ticks++
			}
			next := serviceAt
			for _, at := range due {
				if at.Before(next) {
					next = at
				}
			}
			timer.Reset(max(0, next.Sub(time.Now())))
		case w := <-s.wake:
			s.maintain(w.c, w)
		case p := <-s.downed:
			s.peerDown(p)
		case p := <-s.revived:
			s.heardOnLoop(p)
		case st := <-s.steps:
			st.f()
			// Published before the caller goes on: what it asks next off
			// the loop (Role) sees its step.
			s.publishViews()
			close(st.done)
			continue
		case ack := <-s.acks:
			ack()
		}
		s.publishViews()
	}
}
