package regions

import (
	"reflect"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// TestDecideMaintenance checks one region's maintenance decision alone:
// the facts in, the effects out, no network or clock. self is this peer;
// near is closer to the region than self, far1 and far2 farther.
func TestDecideMaintenance(t *testing.T) {
	var (
		self, near, far1, far2 = testPeer(40), testPeer(41), testPeer(42), testPeer(43)
		period                 = 200 * time.Millisecond
		now                    = time.Unix(1_000_000, 0)
		next                   = now.Add(period)
		selfFirst              = []peer.ID{self, far1, far2}
		nearFirst              = []peer.ID{near, self, far1}
	)
	tick := func(role pb.Role, order []peer.ID, set func(*maintenanceTick)) maintenanceTick {
		t := maintenanceTick{now: now, period: period, self: self, role: role, order: order, eligible: true, leased: true}
		if set != nil {
			set(&t)
		}
		return t
	}
	coordinating := func(replica peer.ID) func(*maintenanceTick) {
		return func(t *maintenanceTick) { t.coordinator, t.replica = self, replica }
	}
	replicating := func(coord peer.ID, more func(*maintenanceTick)) func(*maintenanceTick) {
		return func(t *maintenanceTick) {
			t.coordinator, t.replica = coord, self
			t.lastCheck = now.Add(-period) // checked lately
			if more != nil {
				more(t)
			}
		}
	}
	tests := []struct {
		name string
		in   maintenanceTick
		want maintenanceEffects
	}{
		{
			name: "coordinator, closer live peer, never nudged: nudge it",
			in:   tick(pb.Role_ROLE_COORDINATOR, nearFirst, coordinating(far1)),
			want: maintenanceEffects{nudge: near, kick: true, next: next},
		},
		{
			name: "coordinator, closer live peer nudged one period ago: not again",
			in: tick(pb.Role_ROLE_COORDINATOR, nearFirst, func(t *maintenanceTick) {
				coordinating(far1)(t)
				t.lastNudge = now.Add(-period)
			}),
			want: maintenanceEffects{kick: true, next: next},
		},
		{
			name: "coordinator, closer live peer nudged exactly the nudge period ago: not yet",
			in: tick(pb.Role_ROLE_COORDINATOR, nearFirst, func(t *maintenanceTick) {
				coordinating(far1)(t)
				t.lastNudge = now.Add(-nudgeEvery * period)
			}),
			want: maintenanceEffects{kick: true, next: next},
		},
		{
			name: "coordinator, closer live peer nudged longer than the nudge period ago: again",
			in: tick(pb.Role_ROLE_COORDINATOR, nearFirst, func(t *maintenanceTick) {
				coordinating(far1)(t)
				t.lastNudge = now.Add(-nudgeEvery*period - time.Millisecond)
			}),
			want: maintenanceEffects{nudge: near, kick: true, next: next},
		},
		{
			name: "coordinator of an empty region another peer coordinates, no lease: step down",
			in: tick(pb.Role_ROLE_COORDINATOR, nearFirst, func(t *maintenanceTick) {
				coordinating(far1)(t)
				t.empty, t.leased = true, false
			}),
			want: maintenanceEffects{stepDownTo: near, next: next},
		},
		{
			name: "coordinator of an empty region under its lease: hands it off, no step down",
			in: tick(pb.Role_ROLE_COORDINATOR, nearFirst, func(t *maintenanceTick) {
				coordinating(far1)(t)
				t.empty = true
			}),
			want: maintenanceEffects{nudge: near, kick: true, next: next},
		},
		{
			name: "coordinator of a region with commits, no lease: no step down",
			in: tick(pb.Role_ROLE_COORDINATOR, nearFirst, func(t *maintenanceTick) {
				coordinating(far1)(t)
				t.leased = false
			}),
			want: maintenanceEffects{nudge: near, kick: true, next: next},
		},
		{
			name: "coordinator, closest, replica as placement says: only the queue",
			in:   tick(pb.Role_ROLE_COORDINATOR, selfFirst, coordinating(far1)),
			want: maintenanceEffects{kick: true, next: next},
		},
		{
			name: "coordinator, closest, replica excluded: another",
			in: tick(pb.Role_ROLE_COORDINATOR, selfFirst, func(t *maintenanceTick) {
				coordinating(far1)(t)
				t.excluded = map[peer.ID]bool{far1: true}
			}),
			want: maintenanceEffects{setReplica: true, replica: far2, next: next},
		},
		{
			name: "coordinator, closest, replica dead (out of the live order): another",
			in:   tick(pb.Role_ROLE_COORDINATOR, []peer.ID{self, far2}, coordinating(far1)),
			want: maintenanceEffects{setReplica: true, replica: far2, next: next},
		},
		{
			name: "coordinator, closest, replica no longer the closest: the closest",
			in:   tick(pb.Role_ROLE_COORDINATOR, selfFirst, coordinating(far2)),
			want: maintenanceEffects{setReplica: true, replica: far1, next: next},
		},
		{
			name: "coordinator, alone and every other peer excluded: no replica",
			in: tick(pb.Role_ROLE_COORDINATOR, selfFirst, func(t *maintenanceTick) {
				coordinating(far1)(t)
				t.excluded = map[peer.ID]bool{far1: true, far2: true}
			}),
			want: maintenanceEffects{setReplica: true, replica: "", next: next},
		},
		{
			name: "coordinator, closest, nudged: acquire as coordinator, asking the nudger",
			in: tick(pb.Role_ROLE_COORDINATOR, selfFirst, func(t *maintenanceTick) {
				coordinating(far1)(t)
				t.nudged, t.nudger = true, far2
			}),
			want: maintenanceEffects{acquire: true, asCoordinator: true, nudger: far2, next: next},
		},
		{
			name: "replica whose coordinator is dead: acquire",
			in: tick(pb.Role_ROLE_REPLICA, []peer.ID{self, far1}, replicating(near, func(t *maintenanceTick) {
				t.coordinatorDead = true
			})),
			want: maintenanceEffects{acquire: true, next: next},
		},
		{
			name: "replica nudged by its coordinator: acquire, asking it",
			in: tick(pb.Role_ROLE_REPLICA, nearFirst, replicating(near, func(t *maintenanceTick) {
				t.nudged, t.nudger = true, near
			})),
			want: maintenanceEffects{acquire: true, nudger: near, next: next},
		},
		{
			name: "replica nudged while stepping aside: stays",
			in: tick(pb.Role_ROLE_REPLICA, nearFirst, replicating(near, func(t *maintenanceTick) {
				t.nudged, t.nudger, t.eligible = true, near, false
			})),
			want: maintenanceEffects{next: next},
		},
		{
			name: "replica, coordinator alive, not checked for long: check the copy with it",
			in: tick(pb.Role_ROLE_REPLICA, nearFirst, replicating(near, func(t *maintenanceTick) {
				t.lastCheck = time.Time{}
			})),
			want: maintenanceEffects{checkWith: near, next: next},
		},
		{
			name: "replica, coordinator alive, checked lately: nothing to do",
			in:   tick(pb.Role_ROLE_REPLICA, nearFirst, replicating(near, nil)),
			want: maintenanceEffects{next: next},
		},
		{
			name: "no role, not nudged: nothing to do",
			in:   tick(pb.Role_ROLE_NONE, selfFirst, nil),
			want: maintenanceEffects{next: next},
		},
		{
			name: "no role, nudged, closest: acquire",
			in: tick(pb.Role_ROLE_NONE, selfFirst, func(t *maintenanceTick) {
				t.nudged, t.nudger = true, near
			}),
			want: maintenanceEffects{acquire: true, nudger: near, next: next},
		},
		{
			name: "no role, nudged, a closer peer: nothing to do",
			in: tick(pb.Role_ROLE_NONE, nearFirst, func(t *maintenanceTick) {
				t.nudged, t.nudger = true, near
			}),
			want: maintenanceEffects{next: next},
		},
		{
			name: "acquiring: the acquisition decides; nothing to do",
			in: tick(pb.Role_ROLE_REPLICA, nearFirst, replicating(near, func(t *maintenanceTick) {
				t.acquiring, t.coordinatorDead = true, true
			})),
			want: maintenanceEffects{next: next},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := decideMaintenance(tc.in); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("decideMaintenance:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestMaintenanceNudgesOncePerPeriod runs the decision over many ticks the
// way the Service does (recording each nudge): a coordinator that keeps
// seeing a closer live peer nudges it once per nudge period, never more.
func TestMaintenanceNudgesOncePerPeriod(t *testing.T) {
	self, near := testPeer(40), testPeer(41)
	period := 200 * time.Millisecond
	at := time.Unix(1_000_000, 0)
	var lastNudge time.Time
	var nudges []int
	const ticks = 4 * (nudgeEvery + 1)
	for i := range ticks {
		eff := decideMaintenance(maintenanceTick{
			now: at, period: period, self: self, role: pb.Role_ROLE_COORDINATOR,
			coordinator: self, order: []peer.ID{near, self}, eligible: true, leased: true, lastNudge: lastNudge,
		})
		if eff.nudge != "" {
			if eff.nudge != near {
				t.Fatalf("tick %d nudged %s, want the closer peer", i, eff.nudge)
			}
			nudges = append(nudges, i)
			lastNudge = at
		}
		if want := at.Add(period); !eff.next.Equal(want) {
			t.Fatalf("tick %d armed the next check at %s, want %s", i, eff.next, want)
		}
		at = eff.next
	}
	want := []int{0, nudgeEvery + 1, 2 * (nudgeEvery + 1), 3 * (nudgeEvery + 1)}
	if !reflect.DeepEqual(nudges, want) {
		t.Fatalf("nudged at ticks %v, want %v", nudges, want)
	}
}
