package regions

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// TestAdversarialReplicaLiesAboutItsCopy: the hostile peer is the
// coordinator's replica for real, with its grant, its assignment and its
// seals. When the coordinator crashes, it hands over a snapshot whose
// objects it made up, at the seq its seal covers. The content does not
// hash to the seal, so the hand-off is refused and counted, and the region
// is rebuilt from the members' caches: the honest values survive.
func TestAdversarialReplicaLiesAboutItsCopy(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		c := Coord{0, 1}
		cl, book, co, _ := leasedCluster(t, 4, c)
		var mu sync.Mutex
		var kept *pb.Replicate // the latest replication, with its seal
		h := cl.addHostile(t, cl.keyRanked(t, c, 4), func(_ peer.ID, m *pb.Message) *pb.Message {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case m.GetReplicate() != nil:
				r := m.GetReplicate()
				seq := r.GetSnapshot().GetSeq()
				if n := len(r.Entries); n > 0 {
					seq = r.Entries[n-1].Seq
				}
				kept = proto.Clone(r).(*pb.Replicate)
				return &pb.Message{Body: &pb.Message_ReplicateAck{ReplicateAck: &pb.ReplicateAck{Ok: true, Epoch: r.Epoch, Seq: seq}}}
			case m.GetInfo() != nil && kept != nil:
				return &pb.Message{Body: &pb.Message_InfoReply{InfoReply: &pb.InfoReply{
					Role: pb.Role_ROLE_REPLICA, Epoch: kept.Epoch, Seq: kept.Seal.GetSeq(), Coordinator: []byte(co.id()),
					Grant: kept.Grant, Assignment: kept.Assignment}}}
			case m.GetHandoff() != nil && kept != nil:
				snap := forgedSnapshot(kept.Epoch + 1)
				snap.Seq = kept.Seal.GetSeq()
				return &pb.Message{Body: &pb.Message_HandoffReply{HandoffReply: &pb.HandoffReply{
					Ok: true, Snapshot: snap, Grant: kept.Grant, Assignment: kept.Assignment, Seal: kept.Seal}}}
			}
			return nil
		})
		cl.settle(t, 30*time.Second)
		members := cl.subscribeAllBut(t, c, co)
		// The coordinator makes the hostile peer its replica (the honest one
		// retires) and commits through it. It must keep it until it crashes:
		// its maintenance would move the replica back to the closest honest
		// peer, so it knows the hostile peer and leaves the honest ones out
		// as replicas (as if each had left a replication unanswered).
		h.meet(t, cl, c)
		for _, m := range cl.live() {
			if m != co {
				co.svc.leaveOutAsReplica(m.id())
			}
		}
		sl := co.svc.existingSlot(c)
		co.svc.onLoop(func() {
			co.svc.feedLease(c, sl)
			eff := sl.m.SetReplica(h.id(), time.Now())
			co.svc.run(c, sl, eff)
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := co.cl.ReadWrite(ctx, c, "apple", 1, []byte("2")); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 10*time.Second, "the hostile replica to hold the write", func() bool {
			var held bool
			inspect(co.svc, func() { held = sl.m.replica == h.id() && sl.m.replicaSynced })
			return held
		})
		for _, m := range members {
			waitUntil(t, 10*time.Second, "members to cache the write and the old replica to retire", func() bool {
				_, _, signed := m.svc.cacheOf(c)
				return len(signed) == 1 && string(signed[0].Entry.Object.Value) == "2" && m.svc.Role(c) == RoleNone
			})
		}
		var still bool
		inspect(co.svc, func() { still = sl.m.replica == h.id() })
		if !still {
			t.Fatal("the coordinator moved its replica off the hostile peer before the crash")
		}
		mu.Lock()
		if kept == nil || kept.Seal == nil || kept.Assignment == nil || peer.ID(kept.Assignment.Holder) != h.id() {
			mu.Unlock()
			t.Fatalf("the hostile replica holds no seal and assignment of its own: %v", kept)
		}
		mu.Unlock()
		if got := appleAfterTakeover(t, cl, book, co, members[0], c); got != "2" {
			t.Fatalf("apple is %q after the take-over, want the honest 2", got)
		}
		if got := refusedBy(t, refusedHolderUnproven+"/"+refusedCopyUnsealed, members...); got < 1 {
			t.Fatalf("the lying hand-off's refusal was not counted (%v)", got)
		}
	})
}

// leaveOutAsReplica has s leave p out as replica for DeadFor, as when p
// leaves a replication unanswered, without counting a refusal.
func (s *Service) leaveOutAsReplica(p peer.ID) {
	s.onLoop(func() { s.live.exclude(p, time.Now()) })
}

// takeBackAsReplica ends leaveOutAsReplica for p.
func (s *Service) takeBackAsReplica(p peer.ID) {
	s.onLoop(func() { s.live.include(p) })
}
