package regions

import (
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// Maintenance checks this peer's role in a region against its view of the
// live peers, once per maintenance period and when a nudge or a death
// wakes it. What it decides is a pure function of what the Service knows
// at that moment (maintenanceTick): no network, clock or lock. The
// Service (maintain.go) gathers the facts, carries out the effects and
// arms the next check.

// How many maintenance periods pass between two nudges of the same closer
// peer, and between a replica's checks that its coordinator still
// replicates to it.
const (
	nudgeEvery        = 4
	replicaCheckEvery = 6
)

// maintenanceTick is what decideMaintenance looks at for one region.
type maintenanceTick struct {
	now    time.Time
	period time.Duration // Config.MaintainEvery
	self   peer.ID

	// This peer's part in the region: its role (ROLE_NONE also when it
	// holds no slot), the coordinator and replica it knows, and whether an
	// acquisition of the region runs.
	role        pb.Role
	coordinator peer.ID
	replica     peer.ID
	acquiring   bool

	// order is the live peers by distance to the region's key, this peer
	// included (ranked last when it steps aside, see Service.placement).
	order []peer.ID
	// Liveness facts: the coordinator this peer replicates for was found
	// unreachable; excluded are the peers left out as replicas.
	coordinatorDead bool
	excluded        map[peer.ID]bool

	// nudged: a nudge or a death woke the check, not the period; nudger
	// is the peer that nudged ("" after a death).
	nudged bool
	nudger peer.ID
	// eligible: this peer's gate lets it coordinate the region. leased:
	// the gate lets it commit now; empty: it coordinates nothing (nothing
	// ever committed, nothing in flight). Both matter only to a
	// coordinator that sees a closer peer, and the Service asks the gate
	// only then (a gate may act on being asked).
	eligible bool
	leased   bool
	empty    bool

	// When this peer last nudged a closer peer about the region, and last
	// checked its replica copy with the coordinator (zero: never).
	lastNudge time.Time
	lastCheck time.Time
}

// maintenanceEffects is what a check decides, as data.
type maintenanceEffects struct {
	// acquire: begin taking the region over, asking nudger too;
	// asCoordinator: while coordinating it (a nudger holds it too).
	acquire       bool
	asCoordinator bool
	nudger        peer.ID
	// stepDownTo: drop this empty coordination; p coordinates.
	stepDownTo peer.ID
	// nudge: tell this closer peer to take the region (and record now as
	// the last nudge).
	nudge peer.ID
	// setReplica: replicate to replica from now on ("" to none).
	setReplica bool
	replica    peer.ID
	// kick: move the coordinator's queue on (a lease may have come).
	kick bool
	// checkWith: ask this coordinator whether it still replicates to this
	// peer (and record now as the last check).
	checkWith peer.ID
	// next: when to check the region again, unless woken before.
	next time.Time
}

// decideMaintenance is one check of a region: the effects t calls for.
func decideMaintenance(t maintenanceTick) (eff maintenanceEffects) {
	eff.next = t.now.Add(t.period)
	if t.acquiring {
		return eff
	}
	closest := t.self
	if len(t.order) > 0 {
		closest = t.order[0]
	}
	take := func(asCoordinator bool) maintenanceEffects {
		eff.acquire, eff.asCoordinator, eff.nudger = true, asCoordinator, t.nudger
		return eff
	}
	switch t.role {
	case pb.Role_ROLE_COORDINATOR:
		if closest != t.self {
			// A peer whose view was thin when the region was first asked
			// for created it empty while another peer coordinates it under
			// the lease: nothing to hand over, and it would otherwise stay
			// a second coordinator that keeps asking for the lease.
			if !t.leased && t.empty {
				eff.stepDownTo = closest
				return eff
			}
			// A closer peer should take over (hand-off). The queue moves
			// on meanwhile, and a lease that came since gets this peer's
			// copy compared under it: until then its copy is not claimed
			// as the lease's, and the closer peer, nudged, would not take
			// it over from the lease holder.
			if t.now.Sub(t.lastNudge) > nudgeEvery*t.period {
				eff.nudge = closest
			}
			eff.kick = true
			return eff
		}
		if t.nudged {
			// Nudged to take a region it already coordinates: the nudger
			// holds the region too, in a newer epoch if a false suspicion
			// made it take over while this peer, unable to commit (the
			// lease went with it), had nothing to replicate and so never
			// heard of the newer epoch. The acquisition compares the
			// copies and takes the fresher one back by hand-off.
			return take(true)
		}
		// The replica follows placement (the machine applies a change
		// between two messages to the replica, so a steady stream of
		// writes does not keep an old one), and the queue moves on if it
		// waited for this peer's lease proof.
		if want := replicaIn(t.order, t.self, t.excluded); want != t.replica {
			eff.setReplica, eff.replica = true, want
		} else {
			eff.kick = true
		}
		return eff
	case pb.Role_ROLE_REPLICA:
		// A nudge from the coordinator (which sees this peer closer, or
		// steps aside) asks the replica to take the region over, unless
		// this peer steps aside itself; the acquisition defers to a closer
		// holder that does not step aside.
		if t.coordinatorDead || (t.nudged && t.eligible) {
			return take(false)
		}
		// Now and then a replica checks that its coordinator still
		// replicates to it: a retirement can be lost, and an old copy
		// kept would be taken over, stale, if the coordinator died.
		if t.now.Sub(t.lastCheck) > replicaCheckEvery*t.period {
			eff.checkWith = t.coordinator
		}
		return eff
	default:
		// A nudge asks this peer to take the region if it is the closest.
		if t.nudged && closest == t.self {
			return take(false)
		}
		return eff
	}
}

// replicaIn is the replica order calls for: the closest peer but self
// that is not excluded ("" if none).
func replicaIn(order []peer.ID, self peer.ID, excluded map[peer.ID]bool) peer.ID {
	for _, p := range order {
		if p != self && !excluded[p] {
			return p
		}
	}
	return ""
}
