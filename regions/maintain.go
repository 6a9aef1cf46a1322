package regions

import (
	"context"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// The Service's side of maintenance: each region's check, woken by the
// Service's loop (loop.go) when its timer is due or a nudge or a death
// asks, gathers the facts decideMaintenance (maintenance.go) looks at and
// carries out what it decides.

// wakeup asks maintain to look at region c now (nudged: not on the
// periodic check); nudger is the peer that nudged this one about it (""
// after a death).
type wakeup struct {
	c      Coord
	nudged bool
	nudger peer.ID
}

// recheckTicks is how many maintenance periods pass between re-probes of
// peers marked dead that are still connected: on an overloaded peer a
// probe can time out although its target lives, and such a peer must not
// stay out of placement for the whole DeadFor.
const recheckTicks = 4

// lonelyRefreshTicks is how many maintenance periods a peer that knows
// fewer than two other region peers waits between routing table refreshes.
const lonelyRefreshTicks = 10

// servicePeriod is the Service's own work of one maintenance period;
// ticks counts the periods before it.
func (s *Service) servicePeriod(ticks int) {
	s.expireLocks()
	s.reportRoles()
	if s.live.prune(time.Now()) {
		s.publishDead()
	}
	if ticks%recheckTicks == 0 {
		s.recheckDead()
	}
	// A peer that knows almost no region peers may have joined before
	// the others registered with the bootstrap node; the DHT's own
	// refresh is minutes away.
	if (ticks+1)%lonelyRefreshTicks == 0 && len(s.candidates()) < 3 {
		s.tr.RefreshRoutingTable()
	}
}

// reportRoles tells OnRoleChange about roles that changed since the last
// report.
func (s *Service) reportRoles() {
	if s.cfg.OnRoleChange == nil {
		return
	}
	for _, c := range s.heldRegions() {
		r := roleOf(s.slot(c).m.role) // the machine's: on the loop
		if s.reported[c] != r {
			s.reported[c] = r
			s.cfg.OnRoleChange(c, r)
		}
	}
}

// recheckDead probes again, each on a goroutine, up to 8 peers marked
// dead that are still connected: a probe that answers brings the peer
// back (call reports the sign of life), one that fails marks it anew.
func (s *Service) recheckDead() {
	for _, p := range s.live.recheck(time.Now(), 8, s.tr.Connected) {
		s.spawn(func() { s.probe(p) })
	}
}

// peerDown reacts to the last connection to p closing: if p coordinates or
// replicates a region this peer holds, check it and fail over at once.
func (s *Service) peerDown(p peer.ID) {
	var affected []Coord
	for _, c := range s.heldRegions() {
		sl := s.slot(c)
		if sl.m.coordinator == p || sl.m.replica == p {
			affected = append(affected, c)
		}
	}
	if len(affected) == 0 {
		return
	}
	s.spawn(func() {
		if s.probe(p) {
			return
		}
		for _, c := range affected {
			select {
			case s.wake <- wakeup{c: c, nudged: true}:
			default:
			}
		}
	})
}

// maintain checks this peer's role for region c against its view of the
// live peers now; it returns when to check again.
func (s *Service) maintain(c Coord, w wakeup) time.Time { return s.maintainAt(c, w, time.Now()) }

// maintainAt is maintain at time now.
func (s *Service) maintainAt(c Coord, w wakeup, now time.Time) time.Time {
	t, sl := s.maintenanceFacts(c, w, now)
	eff := decideMaintenance(t)
	s.carryOutMaintenance(c, sl, t, eff)
	return eff.next
}

// maintenanceFacts gathers what decideMaintenance looks at for region c,
// and returns c's slot (nil if this peer has none).
func (s *Service) maintenanceFacts(c Coord, w wakeup, now time.Time) (maintenanceTick, *slot) {
	self := s.h.ID()
	t := maintenanceTick{
		now: now, period: s.cfg.MaintainEvery, self: self,
		nudged: w.nudged, nudger: w.nudger,
	}
	// Nothing held: only a nudge matters (a slot is made only if this
	// peer then takes the region).
	sl := s.existingSlot(c)
	if sl != nil {
		t.role, t.coordinator, t.replica, t.acquiring = sl.m.role, sl.m.coordinator, sl.m.replica, sl.acquiring
		t.empty = sl.m.empty()
		t.lastNudge, t.lastCheck = sl.lastNudge, sl.lastCheck
	}
	if t.acquiring {
		return t, sl // the acquisition decides; nothing else is asked
	}
	t.order = s.placement(c)
	t.excluded = s.live.excludedAmong(t.order, self, now)
	t.eligible = s.eligible(c)
	switch t.role {
	case pb.Role_ROLE_COORDINATOR:
		if len(t.order) > 0 && t.order[0] != self {
			_, t.leased = s.cfg.Gate.Allowed(c)
		}
	case pb.Role_ROLE_REPLICA:
		t.coordinatorDead = !s.live.alive(t.coordinator, now)
	}
	return t, sl
}

// carryOutMaintenance does what one check of region c decided; t is what
// it looked at.
func (s *Service) carryOutMaintenance(c Coord, sl *slot, t maintenanceTick, eff maintenanceEffects) {
	if eff.acquire {
		if eff.asCoordinator {
			s.log.Debug("nudged while coordinating; comparing copies", "region", c)
		}
		s.beginAcquire(c, eff.asCoordinator, eff.nudger)
		return
	}
	if sl == nil {
		return
	}
	if eff.stepDownTo != "" {
		s.stepDownEmpty(c, sl, eff.stepDownTo)
		return
	}
	if eff.nudge != "" {
		sl.lastNudge = t.now
		target := eff.nudge
		s.log.Debug("a closer peer should coordinate; nudging it", "region", c, "closer", target)
		s.spawn(func() { s.nudge(target, c) })
	}
	if eff.setReplica || eff.kick {
		s.feedLease(c, sl)
		var more effects
		if eff.setReplica {
			more = sl.m.SetReplica(eff.replica, t.now)
		} else {
			more = sl.m.Kick(t.now)
		}
		s.run(c, sl, more)
	}
	if q := eff.checkWith; q != "" {
		sl.lastCheck = t.now
		s.spawn(func() { s.checkReplicaCopy(c, sl, q) })
	}
}

// checkReplicaCopy asks coordinator coord whether it still replicates
// region c to this peer; the machine drops a copy it no longer does, and
// retires the replica it kept since it handed the region to coord once
// coord shows it installed it (machine.Checked).
func (s *Service) checkReplicaCopy(c Coord, sl *slot, coord peer.ID) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.RequestTimeout)
	defer cancel()
	reply, err := s.call(ctx, coord, c, &pb.Message{Body: &pb.Message_Info{Info: &pb.Info{}}})
	if err != nil || reply.GetInfoReply() == nil {
		return
	}
	s.feedLoop(func() {
		eff := sl.m.Checked(coord, reply.GetInfoReply())
		s.run(c, sl, eff)
	})
}

// stepDownEmpty ends this peer's coordination of region c in favour of
// closer, as decideMaintenance decided, if the machine still coordinates
// nothing (a request may have come since the decision).
func (s *Service) stepDownEmpty(c Coord, sl *slot, closer peer.ID) {
	if sl.m.role != pb.Role_ROLE_COORDINATOR || !sl.m.empty() {
		return
	}
	eff := sl.m.stepDown(closer)
	s.log.Debug("stepping down from an empty region another peer coordinates", "region", c, "closer", closer)
	s.run(c, sl, eff)
}

func (s *Service) nudge(p peer.ID, c Coord) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.RequestTimeout)
	defer cancel()
	if _, err := s.call(ctx, p, c, &pb.Message{Body: &pb.Message_Nudge{Nudge: &pb.Nudge{}}}); err != nil {
		s.markDead(p)
	}
}
