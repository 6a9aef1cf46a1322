package regions

import (
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// TestHandoffDoesNotWaitForABatchTheReplicaRefuses: a replica that answers
// the batch without acknowledging it (it finds the coordinator not placed)
// while a closer peer waits for the region gets the region handed over at
// once; the write is never answered OK by the old coordinator, its writer
// is sent to the new one, whose snapshot holds it, and its retry there is
// applied once and published to the members.
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
	// two copies (itself and the old coordinator): not applied again, but
	// recorded again unchanged (the members never got it: the old
	// coordinator did not publish the batch), and answered once the
	// replica holds that record, with the publication of it.
	nc := newTestMachine(peerC)
	nc.Install(hr.Snapshot, peerA, true, hr.Grant, nil, t0)
	seq, before := nc.seq, proto.Clone(nc.objects["food"]).(*pb.Object)
	eff := w.submit(nc, &pending{from: alice, req: rw(1, "food", 0, "1")}, r.to("a2"), t0)
	w.answer(eff)
	if r.got["a2"] != nil {
		t.Fatalf("retry answered %v before the replica held its record", r.got["a2"])
	}
	if eff.send == nil || eff.send.to != peerA || len(eff.send.msg.Entries) != 1 || !proto.Equal(eff.send.msg.Entries[0].Object, before) {
		t.Fatalf("the retry's object was not recorded again unchanged: %+v", eff.send)
	}
	ack, _ := co.Replicate(peerC, eff.send.msg, false)
	eff = nc.ReplicaAck(peerA, ack, true, t0)
	w.answer(eff)
	if got := r.got["a2"]; got == nil || got.Status != pb.Status_STATUS_OK || got.Object.Version != before.Version || nc.seq != seq+1 {
		t.Fatalf("retry at the new coordinator answered %v, seq %d -> %d", got, seq, nc.seq)
	}
	if !proto.Equal(nc.objects["food"], before) {
		t.Fatalf("the retry changed the object: %v, was %v", nc.objects["food"], before)
	}
	if eff.publish == nil || len(eff.publish.Entries) != 1 || !proto.Equal(eff.publish.Entries[0].Object, before) {
		t.Fatalf("the write was not published to the members: %+v", eff.publish)
	}
}
