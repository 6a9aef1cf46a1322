package regions

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/regions/memnet"
	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// TestRequestDecidedOnTheLoop: the loop's step for a player's request
// reads the region's role and decides. The coordinator's machine takes it
// and answers once the replica acknowledged; the replica redirects to its
// coordinator, probes it first when the player names it a suspect (once
// per ProbeTimeout), and takes the region over when the probe fails; a
// refused replication is told the epoch the replica's machine holds.
func TestRequestDecidedOnTheLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := loopTestRegion
		net := memnet.New()
		// Ten peers: the farthest is not placed (placedWithin).
		svcs := loopTestServices(t, net, placedWithin+2)
		co, re, far := svcs[0], svcs[1], svcs[len(svcs)-1]
		coID, playerID := co.h.ID(), svcs[2].h.ID()
		synctest.Wait()

		// co coordinates; it picks the closest other peer, re, as replica.
		csl := co.slot(c)
		co.onLoop(func() {
			co.feedLeaseTaking(c, csl)
			eff := csl.m.Install(&pb.Snapshot{Epoch: 1}, "", false, nil, nil, time.Now())
			co.run(c, csl, eff)
		})
		synctest.Wait()
		if got := re.Role(c); got != RoleReplica {
			t.Fatalf("re's role = %v, want replica", got)
		}

		request := func(suspects ...peer.ID) *pb.Request {
			req := &pb.Request{RequestId: newRequestID(), Op: pb.Op_OP_INITIALIZE, ObjectId: "pear", Value: []byte("ripe")}
			for _, p := range suspects {
				req.Suspects = append(req.Suspects, []byte(p))
			}
			return req
		}
		want := func(step string, r *pb.Reply, status pb.Status, to peer.ID) {
			t.Helper()
			if r.Status != status || (to != "" && peer.ID(r.Redirect) != to) {
				t.Fatalf("%s: reply %v, want %v %s", step, r, status, to)
			}
		}

		want("at the coordinator", co.serveRequest(playerID, c, request(), nil), pb.Status_STATUS_OK, "")
		want("at the replica", re.serveRequest(playerID, c, request(), nil), pb.Status_STATUS_REDIRECT, coID)
		want("coordinator suspected, alive", re.serveRequest(playerID, c, request(coID), nil), pb.Status_STATUS_REDIRECT, coID)

		var epoch uint64
		rsl := re.existingSlot(c)
		re.onLoop(func() {
			epoch = rsl.m.epoch
		})
		ack := re.serveReplicate(far.h.ID(), c, &pb.Replicate{Epoch: epoch + 5, Snapshot: &pb.Snapshot{Epoch: epoch + 5}})
		if ack.Ok || ack.Epoch != epoch {
			t.Fatalf("replication from a peer not placed: ack %v, want a refusal naming epoch %d", ack, epoch)
		}

		net.CrashLingering(coID)
		co.Close()
		want("coordinator suspected again within ProbeTimeout", re.serveRequest(playerID, c, request(coID), nil), pb.Status_STATUS_REDIRECT, coID)
		if !aliveOnLoop(re, coID) {
			t.Fatal("the coordinator was probed twice within ProbeTimeout")
		}
		time.Sleep(re.cfg.ProbeTimeout)
		r := re.serveRequest(playerID, c, request(coID), nil)
		want("coordinator gone", r, pb.Status_STATUS_RETRY, "")
		if r.Error != "replica taking over" {
			t.Fatalf("coordinator gone: reply %v, want the replica taking over", r)
		}
		if aliveOnLoop(re, coID) || re.alive(coID) {
			t.Fatal("the coordinator failed the probe but is alive in the replica's table or view")
		}
	})
}
