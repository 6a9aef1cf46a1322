package regions

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/regions/memnet"
	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// loopTestRegion is the region the loop tests play in.
var loopTestRegion = Coord{X: 1, Y: 1}

// loopTestServices starts n Services on net and returns them ordered by
// distance to loopTestRegion, the closest first. Their maintenance waits
// an hour, so that only the test moves their regions.
func loopTestServices(t *testing.T, net *memnet.Network, n int) []*Service {
	t.Helper()
	cfg := Config{World: "loop", Width: 2, Height: 2, RequestTimeout: time.Second,
		ProbeTimeout: 500 * time.Millisecond, MaintainEvery: time.Hour, DeadFor: time.Minute}
	byID := map[peer.ID]*Service{}
	var ids []peer.ID
	for _, svc := range memnetServices(t, net, cfg, n, 300) {
		byID[svc.h.ID()] = svc
		ids = append(ids, svc.h.ID())
	}
	var out []*Service
	for _, id := range byID[ids[0]].hashes.sortByDistance(byID[ids[0]].key(loopTestRegion), ids) {
		out = append(out, byID[id])
	}
	return out
}

// makeReplica makes s a replica of loopTestRegion under coordinator coord,
// on s's loop.
func makeReplica(s *Service, coord peer.ID) {
	sl := s.slot(loopTestRegion)
	s.onLoop(func() {
		sl.m.role, sl.m.coordinator, sl.m.epoch = pb.Role_ROLE_REPLICA, coord, 1
	})
}

// aliveOnLoop is whether p is alive in s's liveness table, asked on s's loop.
func aliveOnLoop(s *Service, p peer.ID) bool {
	var alive bool
	s.onLoop(func() { alive = s.live.alive(p, time.Now()) })
	return alive
}

// TestReplicaAnswersHandoffOnTheLoop: a replica asked to hand its region
// over probes the coordinator it knows; one that answers keeps the region
// (the asker is sent to it), one that does not is dead in the replica's
// table, and the replica then either takes the region itself (it is
// closer than the asker) or hands its copy over in a new epoch.
func TestReplicaAnswersHandoffOnTheLoop(t *testing.T) {
	c := loopTestRegion
	t.Run("closer replica", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			net := memnet.New()
			svcs := loopTestServices(t, net, 3)
			re, co, asker := svcs[0], svcs[1], svcs[2]
			coID, askerID := co.h.ID(), asker.h.ID()
			synctest.Wait()
			makeReplica(re, coID)

			r := re.serveHandoff(askerID, c, nil)
			if r.Ok || r.Error != "the coordinator is alive" || peer.ID(r.Redirect) != coID {
				t.Fatalf("coordinator alive: reply %v, want a redirect to it", r)
			}
			if !aliveOnLoop(re, coID) {
				t.Fatal("the coordinator answered the probe but is dead in the replica's table")
			}

			net.CrashLingering(coID)
			co.Close()
			r = re.serveHandoff(askerID, c, nil)
			if r.Ok || r.Error != "this peer is closer to the region" || peer.ID(r.Redirect) != re.h.ID() {
				t.Fatalf("coordinator gone: reply %v, want the replica's refusal as the closer peer", r)
			}
			if aliveOnLoop(re, coID) || re.alive(coID) {
				t.Fatal("the coordinator failed the probe but is alive in the replica's table or view")
			}
		})
	})
	t.Run("farther replica", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			net := memnet.New()
			svcs := loopTestServices(t, net, 3)
			asker, co, re := svcs[0], svcs[1], svcs[2]
			coID, askerID := co.h.ID(), asker.h.ID()
			synctest.Wait()
			makeReplica(re, coID)

			net.CrashLingering(coID)
			co.Close()
			r := re.serveHandoff(askerID, c, nil)
			if !r.Ok || r.Snapshot == nil || r.Snapshot.Epoch != 2 {
				t.Fatalf("coordinator gone: reply %v, want the replica's copy in epoch 2", r)
			}
			if aliveOnLoop(re, coID) {
				t.Fatal("the coordinator failed the probe but is alive in the replica's table")
			}
			var coord peer.ID
			sl := re.existingSlot(c)
			re.onLoop(func() {
				coord = sl.m.coordinator
			})
			if coord != askerID {
				t.Fatalf("replica's coordinator after the hand-off = %s, want the asker %s", coord, askerID)
			}

			// The asker itself is not probed: a coordinator asking its
			// own replica is alive.
			r = re.serveHandoff(askerID, c, nil)
			if !r.Ok || r.Snapshot.Epoch != 3 {
				t.Fatalf("asked by its coordinator: reply %v, want the copy in epoch 3", r)
			}
		})
	})
}

// TestAdversarialHandoffAsksMakeNoState: a peer that asks another, over
// the network, to hand over every region of a 16x16 world gets "no state
// for region" for each and leaves the other holding no more region slots
// than before (each ask used to leave an empty slot behind, which every
// later step of the loop walks).
func TestAdversarialHandoffAsksMakeNoState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{World: "asks", Width: 16, Height: 16, RequestTimeout: time.Second,
			ProbeTimeout: 500 * time.Millisecond, MaintainEvery: time.Hour, DeadFor: time.Minute}
		svcs := memnetServices(t, memnet.New(), cfg, 2, 400)
		victim, attacker := svcs[0], svcs[1]
		synctest.Wait()
		held := len(victim.heldRegions())
		for x := range cfg.Width {
			for y := range cfg.Height {
				c := Coord{X: x, Y: y}
				reply, err := attacker.call(t.Context(), victim.h.ID(), c,
					&pb.Message{Body: &pb.Message_Handoff{Handoff: &pb.Handoff{}}})
				if err != nil {
					t.Fatalf("hand-off ask for %s: %v", c, err)
				}
				if r := reply.GetHandoffReply(); r == nil || r.Error != "no state for region" {
					t.Fatalf("hand-off ask for %s answered %v", c, reply)
				}
			}
		}
		if now := len(victim.heldRegions()); now != held {
			t.Fatalf("the victim holds %d region slots after %d asks, %d before", now, cfg.Width*cfg.Height, held)
		}
	})
}
