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

// release ends region c's lease, as its expiry would after its holder
// crashed, so that the next coordinator can be granted it.
func (l *testLeases) release(c Coord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.holder, c)
}

// epochOf is m's epoch for region c.
func epochOf(m *member, c Coord) uint64 {
	sl := m.svc.existingSlot(c)
	var epoch uint64
	inspect(m.svc, func() { epoch = sl.m.epoch })
	return epoch
}

// appleAfterTakeover crashes the coordinator, lets the region's lease go
// and reads region c from reader until a coordinator answers; it returns
// apple's value.
func appleAfterTakeover(t *testing.T, cl *cluster, book *testLeases, co, reader *member, c Coord) string {
	t.Helper()
	cl.crash(t, co)
	book.release(c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := reader.cl.Get(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range st.Objects {
		if o.ID == "apple" {
			return string(o.Value)
		}
	}
	return ""
}

// meet connects h to every live member and waits until each counts it
// among the peers it places region c on.
func (h *hostile) meet(t *testing.T, cl *cluster, c Coord) {
	t.Helper()
	for _, m := range cl.live() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := h.n.Host().Connect(ctx, m.n.AddrInfo()); err != nil {
			t.Fatal(err)
		}
		cancel()
		waitUntil(t, 10*time.Second, "the hostile peer among a member's candidates", func() bool {
			return containsPeer(m.svc.placement(c), h.id())
		})
	}
}

// TestAdversarialReplicaClaim: after the coordinator crashes, its replica
// takes the region over and asks the peers around what they hold. A
// hostile peer claims to be the replica with a copy far ahead (a higher
// epoch and sequence number) under the coordinator's grant, replayed, and
// offers a forged snapshot. It has no assignment from the coordinator, so
// its copy is refused and counted; the honest copy survives.
func TestAdversarialReplicaClaim(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		c := Coord{1, 0}
		cl, book, co, re := leasedCluster(t, 4, c)
		grant := book.proof(c)
		epoch := epochOf(co, c)
		var reader *member
		for _, m := range cl.live() {
			if m != co && m != re {
				reader = m
			}
		}
		// Ranked last, so that the replica does not defer to it as closer.
		h := cl.addHostile(t, cl.keyRanked(t, c, 4), func(_ peer.ID, m *pb.Message) *pb.Message {
			switch {
			case m.GetInfo() != nil:
				return &pb.Message{Body: &pb.Message_InfoReply{InfoReply: &pb.InfoReply{
					Role: pb.Role_ROLE_REPLICA, Epoch: epoch + 5, Seq: 1000, Coordinator: []byte(co.id()), Grant: grant}}}
			case m.GetHandoff() != nil:
				return &pb.Message{Body: &pb.Message_HandoffReply{HandoffReply: &pb.HandoffReply{
					Ok: true, Snapshot: forgedSnapshot(epoch + 5), Grant: grant}}}
			}
			return nil
		})
		cl.settle(t, 30*time.Second)
		h.meet(t, cl, c)
		if got := appleAfterTakeover(t, cl, book, co, reader, c); got != "1" {
			t.Fatalf("apple is %q after the take-over, want the honest 1", got)
		}
		if got := refusedBy(t, refusedHolderUnproven+"/"+refusedAssignmentUnproven, re); got < 1 {
			t.Fatalf("the hostile copy's refusal was not counted (%v)", got)
		}
	})
}

// TestAdversarialReplayedAssignment: the hostile peer was once the
// coordinator's replica for real (the coordinator chose it while the
// honest replica looked gone) and kept the replication it received: the
// grant and the coordinator's signed assignment naming it. Replaced by
// the honest replica, it replays them after the coordinator crashes,
// claiming a copy far ahead. The honest replica's later assignment wins.
func TestAdversarialReplayedAssignment(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		c := Coord{0, 1}
		cl, book, co, re := leasedCluster(t, 4, c)
		var reader *member
		for _, m := range cl.live() {
			if m != co && m != re {
				reader = m
			}
		}
		var mu sync.Mutex
		var kept *pb.Replicate
		h := cl.addHostile(t, cl.keyRanked(t, c, 4), func(_ peer.ID, m *pb.Message) *pb.Message {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case m.GetReplicate() != nil:
				r := m.GetReplicate()
				if r.Snapshot != nil {
					kept = proto.Clone(r).(*pb.Replicate)
				}
				seq := r.GetSnapshot().GetSeq()
				if n := len(r.Entries); n > 0 {
					seq = r.Entries[n-1].Seq
				}
				return &pb.Message{Body: &pb.Message_ReplicateAck{ReplicateAck: &pb.ReplicateAck{Ok: true, Epoch: r.Epoch, Seq: seq}}}
			case m.GetInfo() != nil && kept != nil:
				return &pb.Message{Body: &pb.Message_InfoReply{InfoReply: &pb.InfoReply{
					Role: pb.Role_ROLE_REPLICA, Epoch: kept.Epoch, Seq: 1000, Coordinator: []byte(co.id()),
					Grant: kept.Grant, Assignment: kept.Assignment}}}
			case m.GetHandoff() != nil && kept != nil:
				snap := forgedSnapshot(kept.Epoch + 1)
				snap.Seq = 1000
				return &pb.Message{Body: &pb.Message_HandoffReply{HandoffReply: &pb.HandoffReply{
					Ok: true, Snapshot: snap, Grant: kept.Grant, Assignment: kept.Assignment}}}
			}
			return nil
		})
		cl.settle(t, 30*time.Second)
		h.meet(t, cl, c)
		// The coordinator picks the hostile peer as replica (as it would while
		// the honest one looked dead), then goes back to the honest one. Its
		// maintenance moves the replica to the placement-preferred peer: while
		// the hostile peer is to be the replica, the honest peers are left out
		// as replicas (as if each had left a replication unanswered).
		sl := co.svc.existingSlot(c)
		for _, next := range []peer.ID{h.id(), re.id()} {
			for _, m := range cl.live() {
				switch {
				case m == co:
				case next == h.id():
					co.svc.leaveOutAsReplica(m.id())
				default:
					co.svc.takeBackAsReplica(m.id())
				}
			}
			co.svc.onLoop(func() {
				co.svc.feedLease(c, sl)
				eff := sl.m.SetReplica(next, time.Now())
				co.svc.run(c, sl, eff)
			})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			if _, err := co.cl.Initialize(ctx, c, "pear", []byte(next.String()[:8])); err != nil {
				t.Fatal(err)
			}
			cancel()
			waitUntil(t, 10*time.Second, "the new replica to hold the writes", func() bool {
				var held bool
				inspect(co.svc, func() { held = sl.m.replica == next && sl.m.replicaSynced })
				return held
			})
		}
		mu.Lock()
		if kept == nil || kept.Assignment == nil || peer.ID(kept.Assignment.Holder) != h.id() {
			mu.Unlock()
			t.Fatalf("the hostile peer holds no assignment of its own to replay: %v", kept)
		}
		mu.Unlock()
		if got := appleAfterTakeover(t, cl, book, co, reader, c); got != "1" {
			t.Fatalf("apple is %q after the take-over, want the honest 1", got)
		}
	})
}

// TestAdversarialEmptyClaimAfterDoubleFailure: the coordinator and the
// replica fail together, so the region is rebuilt from its members'
// caches. A hostile member claims a copy with nothing committed (which
// needs no proof) in a far epoch, so that it is the freshest holder, and
// then hands over a forged snapshot. The hand-off is refused, and the
// region is rebuilt from the caches all the same.
func TestAdversarialEmptyClaimAfterDoubleFailure(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		c := Coord{1, 0}
		cl, _, co, re := leasedCluster(t, 6, c)
		h := cl.addHostile(t, cl.keyRanked(t, c, 6), func(_ peer.ID, m *pb.Message) *pb.Message {
			switch {
			case m.GetInfo() != nil:
				return &pb.Message{Body: &pb.Message_InfoReply{InfoReply: &pb.InfoReply{Role: pb.Role_ROLE_COORDINATOR, Epoch: 1000}}}
			case m.GetHandoff() != nil:
				return &pb.Message{Body: &pb.Message_HandoffReply{HandoffReply: &pb.HandoffReply{Ok: true, Snapshot: forgedSnapshot(1000)}}}
			}
			return nil
		})
		members := cl.subscribeAllBut(t, c, co, re)
		h.meet(t, cl, c)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		st := honestWriteThenDoubleFailure(t, ctx, co, re, members, c)
		if len(st.Objects) != 1 || st.Objects[0].ID != "apple" || string(st.Objects[0].Value) != "2" {
			t.Fatalf("rebuilt region holds %+v, want only apple = 2", st.Objects)
		}
		if got := refusedBy(t, refusedHolderUnproven+"/"+refusedProofMissing, cl.live()...); got < 1 {
			t.Fatalf("the forged hand-off's refusal was not counted (%v)", got)
		}
	})
}
