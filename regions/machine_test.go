package regions

import (
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

var (
	peerA = testPeer(1)
	peerB = testPeer(2)
	peerC = testPeer(3)
	alice = testPeer(4)
	bob   = testPeer(5)
	t0    = time.Unix(1_700_000_000, 0)
)

// testPeer is a fixed, valid peer ID.
func testPeer(n byte) peer.ID {
	seed := make([]byte, ed25519.SeedSize)
	seed[0] = n
	key, err := crypto.UnmarshalEd25519PrivateKey(ed25519.NewKeyFromSeed(seed))
	if err != nil {
		panic(err)
	}
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		panic(err)
	}
	return id
}

func newTestMachine(self peer.ID) *machine {
	m := newMachine(self, Coord{1, 2}, nil, nil, slog.New(slog.DiscardHandler))
	m.SetLease(AllowAll.Allowed(m.region))
	return m
}

// waiters stands in for the Service's table of waiting callers (slot.wait)
// in machine tests: what the answer to each request (player, request ID)
// does. A request submitted again replaces the earlier waiter; unlike in
// the Service, the earlier one is not told, and a waiter stays after its
// answer, so that a second answer to one request shows.
type waiters map[waitKey]func(*pb.Reply)

// submit submits p to m; f gets its answer (w.answer).
func (w waiters) submit(m *machine, p *pending, f func(*pb.Reply), now time.Time) effects {
	w[waitKey{p.from, string(p.req.RequestId)}] = f
	return m.Submit(p, now)
}

// answer hands eff's answers to their waiters.
func (w waiters) answer(eff effects) {
	for _, a := range eff.answers {
		if f := w[waitKey{a.from, string(a.id)}]; f != nil {
			f(a.r)
		}
	}
}

// replies collects the answers a machine gives.
type replies struct{ got map[string]*pb.Reply }

func (r *replies) to(name string) func(*pb.Reply) {
	if r.got == nil {
		r.got = map[string]*pb.Reply{}
	}
	return func(rep *pb.Reply) { r.got[name] = rep }
}

func reqID(n byte) []byte {
	id := make([]byte, requestIDLen)
	id[0] = n
	return id
}

func rw(n byte, obj string, read uint64, val string) *pb.Request {
	return &pb.Request{RequestId: reqID(n), Op: pb.Op_OP_READ_WRITE, ObjectId: obj, ReadVersion: read, Value: []byte(val)}
}

// pair is a coordinator with a replica, wired by hand.
func pair(t *testing.T) (co, re *machine) {
	co, re = newTestMachine(peerA), newTestMachine(peerB)
	co.role, co.epoch = pb.Role_ROLE_COORDINATOR, 1
	eff := co.SetReplica(peerB, t0)
	deliver(t, co, re, eff)
	return co, re
}

// deliver carries a coordinator's replica message to re and the ack back,
// until nothing is outstanding; it returns the effects seen on the way.
func deliver(t *testing.T, co, re *machine, eff effects) effects {
	t.Helper()
	all := eff
	for eff.send != nil {
		if eff.send.to != re.self {
			t.Fatalf("replica message to %s, want %s", eff.send.to, re.self)
		}
		if err := validateReplicate(eff.send.msg); err != nil {
			t.Fatalf("machine produced an invalid message: %v", err)
		}
		ack, _ := re.Replicate(co.self, eff.send.msg, false)
		eff = co.ReplicaAck(re.self, ack, true, t0)
		all.merge(eff)
	}
	return all
}

func TestAcknowledgedOnlyAfterReplicaHoldsIt(t *testing.T) {
	w := waiters{}
	co, re := pair(t)
	var r replies
	eff := w.submit(co, &pending{from: alice, req: rw(1, "food", 0, "10")}, r.to("first"), t0)
	w.answer(eff)
	if r.got["first"] != nil {
		t.Fatal("answered before the replica acknowledged")
	}
	if eff.send == nil || len(eff.send.msg.Entries) != 1 {
		t.Fatalf("want one entry sent to the replica, got %+v", eff.send)
	}
	all := deliver(t, co, re, eff)
	w.answer(all)
	got := r.got["first"]
	if got == nil || got.Status != pb.Status_STATUS_OK || got.Object.Version != 1 {
		t.Fatalf("reply %v", got)
	}
	if all.publish == nil || len(all.publish.Entries) != 1 {
		t.Fatal("commit not published")
	}
	if re.objects["food"] == nil || string(re.objects["food"].Value) != "10" {
		t.Fatal("replica does not hold the update")
	}
}

func TestConflictCarriesCurrentValue(t *testing.T) {
	w := waiters{}
	co, re := pair(t)
	var r replies
	deliver(t, co, re, w.submit(co, &pending{from: alice, req: rw(1, "food", 0, "10")}, r.to("a"), t0))
	eff := w.submit(co, &pending{from: bob, req: rw(2, "food", 0, "99")}, r.to("b"), t0)
	if eff.send != nil {
		t.Fatal("a rejection was sent to the replica")
	}
	w.answer(eff)
	got := r.got["b"]
	if got.Status != pb.Status_STATUS_CONFLICT || got.Object.Version != 1 || string(got.Object.Value) != "10" {
		t.Fatalf("conflict reply %v", got)
	}
}

func TestRetryIsAppliedOnce(t *testing.T) {
	w := waiters{}
	co, re := pair(t)
	var r replies
	deliver(t, co, re, w.submit(co, &pending{from: alice, req: rw(7, "food", 0, "1")}, r.to("a"), t0))
	all := deliver(t, co, re, w.submit(co, &pending{from: alice, req: rw(7, "food", 0, "1")}, r.to("retry"), t0))
	w.answer(all)
	if got := r.got["retry"]; got.Status != pb.Status_STATUS_OK || got.Object.Version != 1 {
		t.Fatalf("retry answered %v, want the first answer", got)
	}
	// Applied once: the object is at version 1 on both copies; the retry
	// records it again unchanged (recommit), one entry more.
	if co.objects["food"].Version != 1 || re.objects["food"].Version != 1 || string(re.objects["food"].Value) != "1" {
		t.Fatalf("after a retry: coordinator %v, replica %v, want version 1", co.objects["food"], re.objects["food"])
	}
	if co.seq != 2 || re.seq != 2 {
		t.Fatalf("seq %d/%d after a retry, want 2 (the write and its record)", co.seq, re.seq)
	}
	// The replica remembers it too: after a take-over the retry is still
	// recognised.
	re.TakeOver(t0)
	r2 := replies{}
	eff := re.SetReplica("", t0)
	eff.merge(w.submit(re, &pending{from: alice, req: rw(7, "food", 0, "1")}, r2.to("again"), t0))
	w.answer(eff)
	if got := r2.got["again"]; got == nil || got.Status != pb.Status_STATUS_OK || got.Object.Version != 1 {
		t.Fatalf("retry after take-over answered %v", got)
	}
}

// TestLocks plays paper 004's two-step write on the machine: a lock's
// answer carries the value, the holder writes with the release (one
// commit, on the replica too), a write or lock on the locked object waits
// instead of being refused and goes through when the lock is released or
// runs out (an expiry is a commit too), and only the holder releases.
func TestLocks(t *testing.T) {
	w := waiters{}
	co, re := pair(t)
	var r replies
	submit := func(from peer.ID, req *pb.Request, name string, now time.Time) {
		all := deliver(t, co, re, w.submit(co, &pending{from: from, req: req}, r.to(name), now))
		w.answer(all)
	}
	run := func(from peer.ID, req *pb.Request, name string, now time.Time) *pb.Reply {
		submit(from, req, name, now)
		return r.got[name]
	}
	if got := run(alice, rw(1, "door", 0, "shut"), "init", t0); got.Status != pb.Status_STATUS_OK {
		t.Fatalf("init: %v", got)
	}
	lock := &pb.Request{RequestId: reqID(2), Op: pb.Op_OP_LOCK, ObjectId: "door", LockTtlMs: 1000}
	if got := run(alice, lock, "lock", t0); got.Status != pb.Status_STATUS_OK || string(got.Object.Value) != "shut" {
		t.Fatalf("lock: %v", got)
	}
	// Bob's write waits; a read does not.
	submit(bob, rw(3, "door", 1, "ajar"), "bob", t0.Add(100*time.Millisecond))
	if got := r.got["bob"]; got != nil {
		t.Fatalf("bob's write under alice's lock was answered: %v", got)
	}
	if got := run(bob, &pb.Request{RequestId: reqID(4), Op: pb.Op_OP_GET}, "get", t0.Add(100*time.Millisecond)); got.Status != pb.Status_STATUS_OK {
		t.Fatalf("read under a lock: %v", got)
	}
	if got := run(bob, &pb.Request{RequestId: reqID(5), Op: pb.Op_OP_RELEASE, ObjectId: "door"}, "steal", t0.Add(100*time.Millisecond)); got.Status != pb.Status_STATUS_LOCKED {
		t.Fatalf("release of someone else's lock: %v", got)
	}
	// Alice writes with the release: one commit; bob's write then runs
	// against the new version and conflicts (it read version 1).
	release := &pb.Request{RequestId: reqID(6), Op: pb.Op_OP_RELEASE, ObjectId: "door", Write: true, Value: []byte("open")}
	if got := run(alice, release, "release", t0.Add(200*time.Millisecond)); got.Status != pb.Status_STATUS_OK || got.Object.Version != 2 {
		t.Fatalf("release with a write: %v", got)
	}
	if o := re.objects["door"]; string(o.Value) != "open" || len(o.LockHolder) != 0 {
		t.Fatalf("replica holds %v after the release", o)
	}
	submit(alice, &pb.Request{RequestId: reqID(7), Op: pb.Op_OP_GET}, "pump", t0.Add(200*time.Millisecond))
	if got := r.got["bob"]; got == nil || got.Status != pb.Status_STATUS_CONFLICT || got.Object.Version != 2 {
		t.Fatalf("bob's waiting write after the release: %v", got)
	}
	// Alice locks again and vanishes; bob's lock waits for the expiry.
	submit(alice, &pb.Request{RequestId: reqID(8), Op: pb.Op_OP_LOCK, ObjectId: "door", LockTtlMs: 1000}, "lock2", t0.Add(time.Second))
	submit(bob, &pb.Request{RequestId: reqID(9), Op: pb.Op_OP_LOCK, ObjectId: "door", LockTtlMs: 1000}, "bobLock", t0.Add(1100*time.Millisecond))
	if r.got["bobLock"] != nil {
		t.Fatal("bob's lock was answered while alice held it")
	}
	all := deliver(t, co, re, co.ExpireLocks(t0.Add(2*time.Second)))
	w.answer(all)
	all = deliver(t, co, re, co.pump(t0.Add(2*time.Second)))
	w.answer(all)
	if got := r.got["bobLock"]; got == nil || got.Status != pb.Status_STATUS_OK || string(got.Object.LockHolder) != string(bob) {
		t.Fatalf("bob's lock after alice's ran out: %v", got)
	}
	if o := re.objects["door"]; string(o.LockHolder) != string(bob) {
		t.Fatalf("replica's lock holder %v", o)
	}
	// A write with the release after the lock ran out is refused.
	late := &pb.Request{RequestId: reqID(10), Op: pb.Op_OP_RELEASE, ObjectId: "door", Write: true, Value: []byte("x")}
	if got := run(alice, late, "late", t0.Add(2*time.Second)); got.Status != pb.Status_STATUS_LOCKED && got.Status != pb.Status_STATUS_CONFLICT {
		t.Fatalf("release-write without the lock: %v", got)
	}
}

func TestDeposedCoordinatorStopsCommitting(t *testing.T) {
	w := waiters{}
	co, re := pair(t)
	// The replica took over (it thought co dead) and is now in epoch 2.
	re.TakeOver(t0)
	re.SetReplica(peerC, t0)
	var r replies
	eff := w.submit(co, &pending{from: alice, req: rw(1, "food", 0, "1")}, r.to("a"), t0)
	ack, _ := re.Replicate(co.self, eff.send.msg, false)
	if ack.Ok || !ack.Stale || ack.Epoch != 2 {
		t.Fatalf("replica accepted an old epoch: %v", ack)
	}
	eff = co.ReplicaAck(re.self, ack, true, t0)
	w.answer(eff)
	if got := r.got["a"]; got.Status != pb.Status_STATUS_REDIRECT || peer.ID(got.Redirect) != peerB {
		t.Fatalf("deposed coordinator answered %v", got)
	}
	if co.role != pb.Role_ROLE_NONE || len(co.objects) != 0 {
		t.Fatal("deposed coordinator kept its state")
	}
}

func TestHandoffWaitsForTheBatchAndRetiresTheOldReplica(t *testing.T) {
	w := waiters{}
	co, re := pair(t)
	var r replies
	first := w.submit(co, &pending{from: alice, req: rw(1, "food", 0, "1")}, r.to("a"), t0)
	eff := co.Handoff(peerC, t0)
	if eff.handoffReply != nil {
		t.Fatal("hand-off did not wait for the in-flight batch")
	}
	// Requests arriving meanwhile go to the new coordinator.
	later := w.submit(co, &pending{from: bob, req: rw(2, "food", 1, "2")}, r.to("b"), t0)
	if later.send != nil || len(later.answers) != 1 {
		t.Fatal("a request arriving during the hand-off was not redirected")
	}
	w.answer(later)
	all := deliver(t, co, re, first)
	w.answer(all)
	hr := all.handoffReply
	if all.handoffFor != peerC || hr == nil || !hr.Ok || hr.Snapshot.Epoch != 2 || len(hr.Snapshot.Objects) != 1 {
		t.Fatalf("hand-off reply %v", hr)
	}
	if r.got["a"].Status != pb.Status_STATUS_OK || r.got["b"].Status != pb.Status_STATUS_REDIRECT || peer.ID(r.got["b"].Redirect) != peerC {
		t.Fatalf("answers %v / %v", r.got["a"], r.got["b"])
	}
	// The old replica keeps its copy until the new coordinator shows it
	// installed the region: the reply may never reach it.
	if len(all.retire) != 0 {
		t.Fatalf("old replica retired with the hand-off reply: %+v", all.retire)
	}
	if co.role != pb.Role_ROLE_REPLICA || co.coordinator != peerC {
		t.Fatal("old coordinator did not become the new one's replica")
	}
	// The new coordinator continues with the old one as replica; its
	// first replication confirms the hand-off, and the old replica retires.
	nc := newTestMachine(peerC)
	nc.Install(hr.Snapshot, peerA, true, hr.Grant, nil, t0)
	eff = w.submit(nc, &pending{from: bob, req: rw(3, "food", 1, "2")}, r.to("c"), t0)
	if eff.send == nil {
		t.Fatal("the new coordinator replicated nothing")
	}
	ack, confirmed := co.Replicate(nc.self, eff.send.msg, false)
	if len(confirmed.retire) != 1 || confirmed.retire[0] != (retirement{to: peerB, epoch: 2}) {
		t.Fatalf("old replica not retired once the new coordinator replicated: %+v", confirmed.retire)
	}
	all = nc.ReplicaAck(co.self, ack, true, t0)
	w.answer(all)
	if r.got["c"].Status != pb.Status_STATUS_OK || co.objects["food"].Version != 2 {
		t.Fatalf("after hand-off: %v", r.got["c"])
	}
	re.Retire(peerA, 2)
	if re.role != pb.Role_ROLE_NONE {
		t.Fatal("retired replica kept its role")
	}
}

func TestReplicaFailureResyncsTheNextOne(t *testing.T) {
	w := waiters{}
	co, _ := pair(t)
	var r replies
	eff := w.submit(co, &pending{from: alice, req: rw(1, "food", 0, "1")}, r.to("a"), t0)
	if eff.send == nil {
		t.Fatal("nothing sent")
	}
	// The replica is gone; peer C replaces it and gets a snapshot that
	// includes the unacknowledged batch.
	next := newTestMachine(peerC)
	eff = co.ReplicaFailed(peerB, peerC, t0)
	if eff.send == nil || eff.send.msg.Snapshot == nil || len(eff.send.msg.Snapshot.Objects) != 1 {
		t.Fatalf("new replica not sent a full snapshot: %+v", eff.send)
	}
	if len(eff.answers) != 0 {
		t.Fatal("answered before the new replica held the update")
	}
	all := deliver(t, co, next, eff)
	w.answer(all)
	if r.got["a"] == nil || r.got["a"].Status != pb.Status_STATUS_OK {
		t.Fatalf("reply %v", r.got["a"])
	}
}

func TestReplicaRefusesGapsAndStrangers(t *testing.T) {
	re := newTestMachine(peerB)
	snap := &pb.Snapshot{Epoch: 3, Seq: 5}
	if ack, _ := re.Replicate(peerA, &pb.Replicate{Epoch: 3, Snapshot: snap}, false); !ack.Ok {
		t.Fatal(ack)
	}
	entry := func(seq uint64) *pb.Entry {
		return &pb.Entry{Seq: seq, Object: &pb.Object{Id: "x", Version: seq}, Done: &pb.Done{RequestId: reqID(byte(seq))}}
	}
	if ack, _ := re.Replicate(peerA, &pb.Replicate{Epoch: 3, Entries: []*pb.Entry{entry(7)}}, false); ack.Ok {
		t.Fatal("accepted a gap")
	}
	if ack, _ := re.Replicate(peerC, &pb.Replicate{Epoch: 3, Entries: []*pb.Entry{entry(6)}}, false); ack.Ok {
		t.Fatal("accepted entries from a peer that is not its coordinator")
	}
	if ack, _ := re.Replicate(peerA, &pb.Replicate{Epoch: 2, Entries: []*pb.Entry{entry(6)}}, false); ack.Ok || !ack.Stale {
		t.Fatal("accepted an older epoch")
	}
	if ack, _ := re.Replicate(peerA, &pb.Replicate{Epoch: 3, Entries: []*pb.Entry{entry(6)}}, false); !ack.Ok || ack.Seq != 6 {
		t.Fatalf("refused the next entry: %v", ack)
	}
	if ack, _ := re.Replicate(peerA, &pb.Replicate{Epoch: 3, Entries: []*pb.Entry{entry(6)}}, false); !ack.Ok || ack.Seq != 6 {
		t.Fatalf("a resend was not acknowledged: %v", ack)
	}
	if fmt.Sprint(re.objects["x"].Version) != "6" {
		t.Fatal("entry not applied")
	}
}

func TestCommitGate(t *testing.T) {
	w := waiters{}
	co, re := pair(t)
	co.SetLease(0, false)
	var r replies
	eff := w.submit(co, &pending{from: alice, req: rw(1, "food", 0, "1")}, r.to("a"), t0)
	w.answer(eff)
	if eff.send != nil || r.got["a"].Status != pb.Status_STATUS_RETRY {
		t.Fatalf("committed without a lease: %v", r.got["a"])
	}
	co.SetLease(42, true)
	all := deliver(t, co, re, w.submit(co, &pending{from: alice, req: rw(2, "food", 0, "1")}, r.to("b"), t0))
	if all.publish == nil || all.publish.LeaseId != 42 || all.publish.Entries[0].LeaseId != 42 {
		t.Fatalf("lease ID not recorded: %+v", all.publish)
	}
}

// TestAnswersAreData: answers name the player and request they are for,
// a request whose requester is gone (Abandon, by player and request ID,
// every queued copy of it) is neither carried out nor answered, and a
// lock's expiry commits without an answer.
func TestAnswersAreData(t *testing.T) {
	co, re := pair(t)
	// Alice's lock holds the batch behind it at the replica: her write
	// and its retry queue up meanwhile.
	lock := &pb.Request{RequestId: reqID(1), Op: pb.Op_OP_LOCK, ObjectId: "door", LockTtlMs: 1000}
	first := co.Submit(&pending{from: alice, req: lock}, t0)
	if first.send == nil {
		t.Fatal("lock not sent to the replica")
	}
	write := rw(2, "food", 0, "1")
	co.Submit(&pending{from: alice, req: write}, t0)
	co.Submit(&pending{from: alice, req: write}, t0)
	co.Abandon(bob, write.RequestId, t0) // another player's ID: no effect
	all := deliver(t, co, re, first)
	want := [][]byte{lock.RequestId, write.RequestId, write.RequestId} // the retry from the done log
	if len(all.answers) != len(want) {
		t.Fatalf("%d answers, want the lock's, the write's and its retry's", len(all.answers))
	}
	for i, a := range all.answers {
		if a.from != alice || string(a.id) != string(want[i]) || a.r.Status != pb.Status_STATUS_OK || (i > 0 && a.r.Object.Version != 1) {
			t.Fatalf("answer %d: %x from %s: %v", i, a.id, a.from, a.r)
		}
	}

	// Both copies of a request abandoned while queued behind a batch.
	held := co.Submit(&pending{from: bob, req: rw(3, "food", 1, "2")}, t0)
	gone := rw(4, "food", 2, "3")
	co.Submit(&pending{from: alice, req: gone}, t0)
	co.Submit(&pending{from: alice, req: gone}, t0)
	co.Abandon(alice, gone.RequestId, t0)
	all = deliver(t, co, re, held)
	all.merge(co.Kick(t0))
	if len(all.answers) != 1 || all.answers[0].from != bob {
		t.Fatalf("answers %+v, want only bob's", all.answers)
	}
	if co.objects["food"].Version != 2 {
		t.Fatalf("abandoned write carried out: version %d", co.objects["food"].Version)
	}

	// The lock runs out: its expiry commits, and nobody is answered.
	all = deliver(t, co, re, co.ExpireLocks(t0.Add(2*time.Second)))
	if len(all.answers) != 0 || all.publish == nil || len(co.objects["door"].LockHolder) != 0 {
		t.Fatalf("expiry: answers %+v, published %v, holder %q", all.answers, all.publish, co.objects["door"].LockHolder)
	}
}

// TestRetryReplacesWaiter: at the Service, a retry of a request still
// waited for takes the earlier caller's place, and the earlier caller is
// told to retry; only the waiter in place abandons the request.
func TestRetryReplacesWaiter(t *testing.T) {
	var sl slot
	k := waitKey{alice, string(reqID(1))}
	first, retry := make(chan *pb.Reply, 1), make(chan *pb.Reply, 1)
	sl.wait(k, first)
	sl.wait(k, retry)
	select {
	case r := <-first:
		if r.Status != pb.Status_STATUS_RETRY {
			t.Fatalf("replaced caller got %v", r)
		}
	default:
		t.Fatal("replaced caller not answered")
	}
	if sl.unwait(k, first) {
		t.Fatal("the replaced caller still counted as waiting")
	}
	if !sl.unwait(k, retry) || len(sl.waiters) != 0 {
		t.Fatalf("retry not the waiter; %d left", len(sl.waiters))
	}
}

// TestHandoffOldReplicaRetiresOnlyOnceConfirmed: after a hand-off to C,
// the old coordinator A keeps its old replica B until C shows, in the
// hand-off's epoch or later, that it holds the region: its check answered
// by C as coordinator, or C retiring A. Answers that show nothing of the
// kind (C holding nothing, an older epoch, another peer) retire nobody,
// and a take-over after C died forgets the pending retirement.
func TestHandoffOldReplicaRetiresOnlyOnceConfirmed(t *testing.T) {
	handedOver := func(t *testing.T) *machine {
		t.Helper()
		co, _ := pair(t)
		eff := co.Handoff(peerC, t0)
		if eff.handoffReply == nil || !eff.handoffReply.Ok || len(eff.retire) != 0 {
			t.Fatalf("hand-off: %+v", eff)
		}
		return co
	}
	old := retirement{to: peerB, epoch: 2}
	coordinating := func(epoch uint64, replica peer.ID) *pb.InfoReply {
		return &pb.InfoReply{Role: pb.Role_ROLE_COORDINATOR, Epoch: epoch, Replica: []byte(replica)}
	}

	t.Run("check", func(t *testing.T) {
		co := handedOver(t)
		for _, c := range []struct {
			from peer.ID
			info *pb.InfoReply
		}{
			{peerC, &pb.InfoReply{}},        // C has not installed it
			{peerC, coordinating(1, peerA)}, // an older epoch
			{peerB, coordinating(2, peerA)}, // not the coordinator A follows
			{peerC, &pb.InfoReply{Role: pb.Role_ROLE_REPLICA, Epoch: 2}},
		} {
			if eff := co.Checked(c.from, c.info); len(eff.retire) != 0 || co.role != pb.Role_ROLE_REPLICA {
				t.Fatalf("check answered by %v %v retired %+v (role %v)", c.from, c.info, eff.retire, co.role)
			}
		}
		eff := co.Checked(peerC, coordinating(2, peerA))
		if len(eff.retire) != 1 || eff.retire[0] != old || co.role != pb.Role_ROLE_REPLICA {
			t.Fatalf("confirmed by the check: retired %+v, role %v", eff.retire, co.role)
		}
		if eff := co.Checked(peerC, coordinating(2, peerA)); len(eff.retire) != 0 {
			t.Fatalf("retired twice: %+v", eff.retire)
		}
	})
	t.Run("check elsewhere", func(t *testing.T) {
		// C coordinates with another replica: A's copy is dropped, and
		// B retired, C holding the region.
		co := handedOver(t)
		eff := co.Checked(peerC, coordinating(2, bob))
		if len(eff.retire) != 1 || eff.retire[0] != old || co.role != pb.Role_ROLE_NONE {
			t.Fatalf("retired %+v, role %v", eff.retire, co.role)
		}
	})
	t.Run("retired", func(t *testing.T) {
		co := handedOver(t)
		if eff := co.Retire(peerB, 2); len(eff.retire) != 0 || co.role != pb.Role_ROLE_REPLICA {
			t.Fatalf("a retirement from another peer: %+v, role %v", eff.retire, co.role)
		}
		eff := co.Retire(peerC, 2)
		if len(eff.retire) != 1 || eff.retire[0] != old || co.role != pb.Role_ROLE_NONE {
			t.Fatalf("retired by C: retired %+v, role %v", eff.retire, co.role)
		}
	})
	t.Run("take-over", func(t *testing.T) {
		co := handedOver(t)
		co.TakeOver(t0)
		if co.role != pb.Role_ROLE_COORDINATOR || len(co.oldReplicas) != 0 {
			t.Fatalf("after the take-over: role %v, pending %+v", co.role, co.oldReplicas)
		}
	})
}

// TestReplicaChangeRetiresTheOldOnceTheNewHoldsTheCopy: a coordinator that
// changes its replica from B to C keeps B, and names B as its replica to
// B, until C acknowledges its snapshot; only then is B retired. A replica
// asked for again before that is not retired.
func TestReplicaChangeRetiresTheOldOnceTheNewHoldsTheCopy(t *testing.T) {
	co, _ := pair(t)
	eff := co.SetReplica(peerC, t0)
	if len(eff.retire) != 0 || eff.send == nil || eff.send.to != peerC || eff.send.msg.Snapshot == nil {
		t.Fatalf("replica change: %+v", eff)
	}
	if got := peer.ID(co.infoFor(peerB).Replica); got != peerB {
		t.Fatalf("B is told the replica is %v while C has no copy", got)
	}
	if got := peer.ID(co.infoFor(bob).Replica); got != peerC {
		t.Fatalf("others are told the replica is %v, want C", got)
	}
	nc := newTestMachine(peerC)
	ack, _ := nc.Replicate(peerA, eff.send.msg, false)
	eff = co.ReplicaAck(peerC, ack, true, t0)
	if len(eff.retire) != 1 || eff.retire[0] != (retirement{to: peerB, epoch: 1}) {
		t.Fatalf("B not retired once C acknowledged: %+v", eff.retire)
	}
	if got := peer.ID(co.infoFor(peerB).Replica); got != peerC {
		t.Fatalf("B is told the replica is %v after C synced", got)
	}

	// B, then C again, then B asked for while C's snapshot is out: B
	// gets a snapshot, never a retirement.
	co, _ = pair(t)
	eff = co.SetReplica(peerC, t0)
	if more := co.SetReplica(peerB, t0); len(more.retire) != 0 {
		t.Fatalf("retired while a snapshot is out: %+v", more.retire)
	}
	ack, _ = newTestMachine(peerC).Replicate(peerA, eff.send.msg, false)
	eff = co.ReplicaAck(peerC, ack, true, t0)
	for _, r := range eff.retire {
		if r.to == peerB {
			t.Fatalf("B retired although it is the replica again: %+v", eff.retire)
		}
	}
	if eff.send == nil || eff.send.to != peerB || eff.send.msg.Snapshot == nil {
		t.Fatalf("B got no snapshot: %+v", eff.send)
	}
}

// TestReplicaChangesKeepOneHeldCopy changes the replica again and again
// to peers that never acknowledge the snapshot (a hostile or misplaced
// peer refuses each): the machine keeps only the replica that held the
// copy, B, counted as the replica in B's copy checks throughout, and
// retires B alone once a replica acknowledges.
func TestReplicaChangesKeepOneHeldCopy(t *testing.T) {
	co, _ := pair(t)
	eff := co.SetReplica(peer.ID("refuser-0"), t0)
	for i := 1; i <= 200; i++ {
		next := peer.ID(fmt.Sprintf("refuser-%d", i))
		if i == 200 {
			next = peerC
		}
		if more := co.SetReplica(next, t0); len(more.retire) != 0 {
			t.Fatalf("change %d retired %+v while no replica holds the copy", i, more.retire)
		}
		if eff.send == nil {
			t.Fatalf("change %d: no snapshot out", i)
		}
		eff = co.ReplicaAck(eff.send.to, &pb.ReplicateAck{}, true, t0)
		if len(eff.retire) != 0 {
			t.Fatalf("change %d retired %+v while no replica holds the copy", i, eff.retire)
		}
		if co.replaced != peerB {
			t.Fatalf("change %d: kept %q as the replaced copy, want B", i, co.replaced)
		}
		if got := peer.ID(co.infoFor(peerB).Replica); got != peerB {
			t.Fatalf("change %d: B is told the replica is %v while nobody else holds the copy", i, got)
		}
	}
	if eff.send == nil || eff.send.to != peerC {
		t.Fatalf("C got no snapshot: %+v", eff.send)
	}
	ack, _ := newTestMachine(peerC).Replicate(peerA, eff.send.msg, false)
	eff = co.ReplicaAck(peerC, ack, true, t0)
	if len(eff.retire) != 1 || eff.retire[0] != (retirement{to: peerB, epoch: 1}) {
		t.Fatalf("retired %+v once C acknowledged, want B alone", eff.retire)
	}
}

// TestRetryWithoutLeaseIsRecordedUnderTheNext: a retry of a committed
// write that finds no lease (a peer handed the region answers from the
// copy before the lease moves) is answered at once, and the object goes
// in the first batch once the lease is here, unchanged, to the replica
// and the members.
func TestRetryWithoutLeaseIsRecordedUnderTheNext(t *testing.T) {
	w := waiters{}
	co, re := pair(t)
	var r replies
	w.answer(deliver(t, co, re, w.submit(co, &pending{from: alice, req: rw(1, "food", 0, "1")}, r.to("a"), t0)))
	if got := r.got["a"]; got == nil || got.Status != pb.Status_STATUS_OK {
		t.Fatalf("write answered %v", got)
	}
	before, seq := proto.Clone(co.objects["food"]).(*pb.Object), co.seq

	co.SetLease(0, false)
	eff := w.submit(co, &pending{from: alice, req: rw(1, "food", 0, "1")}, r.to("retry"), t0)
	w.answer(eff)
	if got := r.got["retry"]; got == nil || got.Status != pb.Status_STATUS_OK || got.Object.Version != before.Version {
		t.Fatalf("retry without the lease answered %v", got)
	}
	if eff.send != nil || co.seq != seq {
		t.Fatalf("recorded without the lease: %+v, seq %d -> %d", eff.send, seq, co.seq)
	}

	co.SetLease(AllowAll.Allowed(co.region))
	all := deliver(t, co, re, co.Kick(t0))
	if all.publish == nil || len(all.publish.Entries) != 1 || !proto.Equal(all.publish.Entries[0].Object, before) {
		t.Fatalf("the object was not recorded under the lease: %+v", all.publish)
	}
	if co.seq != seq+1 || re.seq != seq+1 || !proto.Equal(re.objects["food"], before) || len(co.unrecorded) != 0 {
		t.Fatalf("after the record: coordinator seq %d, replica seq %d %v, %d left", co.seq, re.seq, re.objects["food"], len(co.unrecorded))
	}
}
