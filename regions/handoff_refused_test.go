package regions

import (
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// TestHandoffDoesNotWaitForABatchTheReplicaRefuses: a replica that answers
// the batch without acknowledging it (it finds the coordinator not placed)
// while a closer peer waits for the region gets the region handed over at
// once; the write is never answered OK by the old coordinator, its writer
// is sent to the new one, whose snapshot holds it, and its retry there is
// applied once.
func TestHandoffDoesNotWaitForABatchTheReplicaRefuses(t *testing.T) {
	w := waiters{}
	co, re := pair(t)
	var r replies
	first := w.submit(co, &pending{from: alice, req: rw(1, "food", 0, "1")}, r.to("a"), t0)
	if first.send == nil {
		t.Fatal("the batch was not sent to the replica")
	}
	if eff := co.Handoff(peerC, t0); eff.handoffReply != nil {
		t.Fatal("hand-off did not wait for the in-flight batch")
	}
	// The replica refuses the coordinator's claim (the Service answers an
	// empty ack, trust.go verifyCoordinator).
	all := co.ReplicaAck(re.self, &pb.ReplicateAck{Epoch: co.epoch}, true, t0)
	w.answer(all)
	if all.send != nil || all.publish != nil {
		t.Fatalf("the refused batch was sent again (%v) or published (%v)", all.send, all.publish)
	}
	hr := all.handoffReply
	if all.handoffFor != peerC || hr == nil || !hr.Ok || hr.Snapshot.Epoch != 2 || len(hr.Snapshot.Objects) != 1 {
		t.Fatalf("hand-off reply %v", hr)
	}
	if got := r.got["a"]; got == nil || got.Status != pb.Status_STATUS_REDIRECT || peer.ID(got.Redirect) != peerC {
		t.Fatalf("the unacknowledged write was answered %v", got)
	}
	if co.role != pb.Role_ROLE_REPLICA || co.coordinator != peerC || co.outstanding || len(co.inflight) != 0 {
		t.Fatal("old coordinator did not become the new one's replica")
	}
	// The writer retries at the new coordinator, which holds the write on
	// two copies (itself and the old coordinator): answered from its done
	// log, not applied again.
	nc := newTestMachine(peerC)
	nc.Install(hr.Snapshot, peerA, true, hr.Grant, nil, t0)
	seq := nc.seq
	eff := w.submit(nc, &pending{from: alice, req: rw(1, "food", 0, "1")}, r.to("a2"), t0)
	w.answer(eff)
	if got := r.got["a2"]; got == nil || got.Status != pb.Status_STATUS_OK || nc.seq != seq {
		t.Fatalf("retry at the new coordinator answered %v, seq %d -> %d", got, seq, nc.seq)
	}
}
