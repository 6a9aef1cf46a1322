package regions

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// TestLockMachineRandom drives a coordinator and its replica with 10,000
// random steps — locks with random TTLs, releases with and without a
// write, read-writes, reads, from six players on three objects, and time
// passing with the expiry of locks — and checks after every step: the
// waits stay within their bounds, nothing waits for an object that is not
// locked, the replica holds what the coordinator holds, and no request is
// answered twice; at the end, once every lock has run out, every request
// has been answered exactly once.
func TestLockMachineRandom(t *testing.T) {
	w := waiters{}
	co, re := pair(t)
	rng := rand.New(rand.NewPCG(1, 2))
	players := make([]peer.ID, 6)
	for i := range players {
		players[i] = testPeer(byte(20 + i))
	}
	objects := []string{"a", "b", "c"}
	answered := map[int]int{}
	statuses := map[pb.Status]int{}
	submitted := 0
	now := t0
	step := func(eff effects) {
		all := deliver(t, co, re, eff)
		w.answer(all)
	}
	submit := func(from peer.ID, req *pb.Request) {
		n := submitted
		submitted++
		req.RequestId = reqID(0)
		copy(req.RequestId, fmt.Sprintf("%016d", n))
		step(w.submit(co, &pending{from: from, req: req}, func(r *pb.Reply) {
			answered[n]++
			statuses[r.Status]++
			if answered[n] > 1 {
				t.Fatalf("request %d (%v) answered twice", n, req.Op)
			}
		}, now))
	}
	check := func(i int) {
		t.Helper()
		w := &co.locks
		total := 0
		perPlayer := map[peer.ID]int{}
		for id, ps := range w.byObject {
			if len(ps) > maxWaitersPerObject {
				t.Fatalf("step %d: %d wait for %s", i, len(ps), id)
			}
			if o := co.objects[id]; o == nil || len(o.LockHolder) == 0 {
				t.Fatalf("step %d: %d wait for %s, which is not locked (%v)", i, len(ps), id, o)
			}
			for _, p := range ps {
				perPlayer[p.from]++
				if o := co.objects[id]; string(o.LockHolder) == string(p.from) {
					t.Fatalf("step %d: %s waits for its own lock on %s", i, p.from, id)
				}
			}
			total += len(ps)
		}
		if total > maxWaitersPerRegion || total != w.total {
			t.Fatalf("step %d: %d waiting (counted %d)", i, total, w.total)
		}
		for p, n := range perPlayer {
			if n > maxWaitersPerPlayer || w.byPlayer[p] != n {
				t.Fatalf("step %d: %s has %d waiting (counted %d)", i, p, n, w.byPlayer[p])
			}
		}
		if len(co.objects) != len(re.objects) {
			t.Fatalf("step %d: coordinator holds %d objects, replica %d", i, len(co.objects), len(re.objects))
		}
		for id, o := range co.objects {
			if !proto.Equal(o, re.objects[id]) {
				t.Fatalf("step %d: %s is %v at the coordinator, %v at the replica", i, id, o, re.objects[id])
			}
		}
	}
	for i := range 10_000 {
		from := players[rng.IntN(len(players))]
		id := objects[rng.IntN(len(objects))]
		switch k := rng.IntN(10); {
		case k < 3:
			submit(from, &pb.Request{Op: pb.Op_OP_LOCK, ObjectId: id, LockTtlMs: uint32(50 + rng.IntN(500))})
		case k < 5:
			submit(from, &pb.Request{Op: pb.Op_OP_RELEASE, ObjectId: id, Write: true, Value: fmt.Appendf(nil, "%d", i)})
		case k < 6:
			submit(from, &pb.Request{Op: pb.Op_OP_RELEASE, ObjectId: id})
		case k < 8:
			var v uint64
			if o := co.objects[id]; o != nil {
				v = o.Version
			}
			submit(from, &pb.Request{Op: pb.Op_OP_READ_WRITE, ObjectId: id, ReadVersion: v, Value: fmt.Appendf(nil, "rw%d", i)})
		case k < 9:
			submit(from, &pb.Request{Op: pb.Op_OP_GET})
		default:
			now = now.Add(time.Duration(rng.IntN(200)) * time.Millisecond)
			step(co.ExpireLocks(now))
		}
		check(i)
	}
	// Let every lock run out: the waiters get their turns.
	for round := 0; co.locks.total > 0 || co.hasLocks(); round++ {
		if round > 1000 {
			t.Fatalf("%d still wait after %d expiry rounds", co.locks.total, round)
		}
		now = now.Add(time.Second)
		step(co.ExpireLocks(now))
		check(-round)
	}
	for n := range submitted {
		if answered[n] != 1 {
			t.Fatalf("request %d answered %d times", n, answered[n])
		}
	}
	t.Logf("%d requests: %v", submitted, statuses)
	if statuses[pb.Status_STATUS_BUSY] == 0 {
		t.Error("no request met a bound: the test does not exercise them")
	}
}

// hasLocks reports whether any object is locked.
func (m *machine) hasLocks() bool {
	for _, o := range m.objects {
		if len(o.LockHolder) > 0 {
			return true
		}
	}
	return false
}

// TestLockWaitRetriedTakesOneSlot: a player whose lock waits sends it
// again, with the same request ID, after giving up on the answer: the
// retry takes the waiting request's place instead of a second slot, and
// only the retry is answered when the object is released.
func TestLockWaitRetriedTakesOneSlot(t *testing.T) {
	w := waiters{}
	co, re := pair(t)
	holder, waiter := testPeer(30), testPeer(31)
	var got []pb.Status
	run := func(from peer.ID, req *pb.Request, answered func(*pb.Reply)) {
		all := deliver(t, co, re, w.submit(co, &pending{from: from, req: req}, answered, t0))
		w.answer(all)
	}
	run(holder, &pb.Request{RequestId: reqID(1), Op: pb.Op_OP_LOCK, ObjectId: "x", LockTtlMs: 1000}, func(*pb.Reply) {})
	first, second := 0, 0
	lock := &pb.Request{RequestId: reqID(2), Op: pb.Op_OP_LOCK, ObjectId: "x", LockTtlMs: 1000}
	for i := range maxWaitersPerPlayer + 2 {
		run(waiter, proto.Clone(lock).(*pb.Request), func(r *pb.Reply) {
			if i == 0 {
				first++
			} else {
				second++
				got = append(got, r.Status)
			}
		})
		if co.locks.total != 1 || co.locks.byPlayer[waiter] != 1 {
			t.Fatalf("retry %d: %d wait, %d of them the player's", i, co.locks.total, co.locks.byPlayer[waiter])
		}
	}
	run(holder, &pb.Request{RequestId: reqID(3), Op: pb.Op_OP_RELEASE, ObjectId: "x"}, func(*pb.Reply) {})
	if first != 0 || second != 1 || got[0] != pb.Status_STATUS_OK || string(co.objects["x"].LockHolder) != string(waiter) {
		t.Fatalf("answers: first %d, retries %d %v; holder %q", first, second, got, co.objects["x"].LockHolder)
	}
}

// TestLockHoldBounded: while another player waits, the holder's renewals
// keep the time it took the lock and cannot carry it past the longest
// hold; at that point they are answered BUSY, and the lock's expiry gives
// the object to the waiter. With nobody waiting a lock renews freely.
func TestLockHoldBounded(t *testing.T) {
	w := waiters{}
	co, re := pair(t)
	co.maxHoldMs = 1000
	holder, waiter := testPeer(30), testPeer(31)
	status := func(from peer.ID, id byte, op pb.Op, at time.Time) pb.Status {
		var st pb.Status
		all := deliverAt(t, co, re, w.submit(co, &pending{from: from, req: &pb.Request{RequestId: reqID(id), Op: op, ObjectId: "x", LockTtlMs: 500}}, func(r *pb.Reply) { st = r.Status }, at), at)
		w.answer(all)
		return st
	}
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	for i, at := range []int{0, 400, 800, 1200, 1600} { // nobody waits: renewals past the bound
		if st := status(holder, byte(10+i), pb.Op_OP_LOCK, ms(at)); st != pb.Status_STATUS_OK {
			t.Fatalf("renewal at %d ms with nobody waiting: %v", at, st)
		}
	}
	if since := co.objects["x"].LockSinceMs; since != t0.UnixMilli() {
		t.Fatalf("lock taken at %d, recorded %d", t0.UnixMilli(), since)
	}
	if st := status(waiter, 20, pb.Op_OP_LOCK, ms(1700)); st != pb.Status_STATUS_UNSPECIFIED {
		t.Fatalf("the waiter's lock was answered %v, want it to wait", st)
	}
	// Held since 0 ms: the bound has passed.
	if st := status(holder, 21, pb.Op_OP_LOCK, ms(1800)); st != pb.Status_STATUS_BUSY {
		t.Fatalf("renewal past the bound while another waits: %v", st)
	}
	if exp := co.objects["x"].LockExpiresMs; exp != ms(2100).UnixMilli() {
		t.Fatalf("lock expires at %d, want the last renewal's %d", exp, ms(2100).UnixMilli())
	}
	all := deliverAt(t, co, re, co.ExpireLocks(ms(2100)), ms(2100))
	w.answer(all)
	if h := co.objects["x"].LockHolder; string(h) != string(waiter) || co.objects["x"].LockSinceMs != ms(2100).UnixMilli() {
		t.Fatalf("after the expiry the lock is %q's since %d", h, co.objects["x"].LockSinceMs)
	}
	// The new holder's renewal within the bound is capped at it.
	if st := status(holder, 22, pb.Op_OP_LOCK, ms(2200)); st != pb.Status_STATUS_UNSPECIFIED {
		t.Fatalf("the old holder's lock was answered %v, want it to wait", st)
	}
	if st := status(waiter, 23, pb.Op_OP_LOCK, ms(2500)); st != pb.Status_STATUS_OK || co.objects["x"].LockExpiresMs != ms(3000).UnixMilli() {
		t.Fatalf("renewal within the bound: %v, expires %d, want %d", st, co.objects["x"].LockExpiresMs, ms(3000).UnixMilli())
	}
	if st := status(waiter, 24, pb.Op_OP_LOCK, ms(2900)); st != pb.Status_STATUS_OK || co.objects["x"].LockExpiresMs != ms(3100).UnixMilli() {
		t.Fatalf("renewal within the bound: %v, expires %d, want %d", st, co.objects["x"].LockExpiresMs, ms(3100).UnixMilli())
	}
}

// deliverAt is deliver with the replica's acknowledgements arriving at at
// (the batches they let go are evaluated then).
func deliverAt(t *testing.T, co, re *machine, eff effects, at time.Time) effects {
	t.Helper()
	all := eff
	for eff.send != nil {
		ack, _ := re.Replicate(co.self, eff.send.msg, false)
		eff = co.ReplicaAck(re.self, ack, true, at)
		all.merge(eff)
	}
	return all
}

// TestAbandonedLockWaitsDropped: of three lock requests waiting for a
// locked object, one's requester stops listening at its deadline and one
// goes away (Abandon) before the object is released. When it is, neither
// gets the lock: the third does, and the gone ones' slots are free again.
func TestAbandonedLockWaitsDropped(t *testing.T) {
	w := waiters{}
	co, re := pair(t)
	holder, late, left, patient := testPeer(30), testPeer(31), testPeer(32), testPeer(33)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	got := map[peer.ID]pb.Status{}
	submit := func(p *pending, at time.Time) {
		from := p.from
		all := deliverAt(t, co, re, w.submit(co, p, func(r *pb.Reply) { got[from] = r.Status }, at), at)
		w.answer(all)
	}
	lock := func(id byte) *pb.Request {
		return &pb.Request{RequestId: reqID(id), Op: pb.Op_OP_LOCK, ObjectId: "x", LockTtlMs: 5000}
	}
	submit(&pending{from: holder, req: lock(1)}, ms(0))
	submit(&pending{from: late, req: lock(2), deadlineMs: ms(300).UnixMilli()}, ms(10))
	gone := &pending{from: left, req: lock(3), deadlineMs: ms(5000).UnixMilli()}
	submit(gone, ms(20))
	submit(&pending{from: patient, req: lock(4)}, ms(30))
	if n := co.locks.waiting("x", ms(40).UnixMilli()); n != 3 {
		t.Fatalf("%d requests wait, want 3", n)
	}
	co.Abandon(gone.from, gone.req.RequestId, ms(100))
	if n := co.locks.waiting("x", ms(400).UnixMilli()); n != 1 {
		t.Fatalf("%d requests wait after one left and one's deadline passed, want 1", n)
	}
	submit(&pending{from: holder, req: &pb.Request{RequestId: reqID(5), Op: pb.Op_OP_RELEASE, ObjectId: "x"}}, ms(500))
	if h := co.objects["x"].LockHolder; string(h) != string(patient) {
		t.Fatalf("after the release the lock is %q's, want the waiting player's", h)
	}
	if got[patient] != pb.Status_STATUS_OK || got[late] == pb.Status_STATUS_OK || got[left] == pb.Status_STATUS_OK {
		t.Fatalf("answers: waiting %v, past its deadline %v, gone %v", got[patient], got[late], got[left])
	}
	// A retry of a gone wait (same request ID) takes its place again.
	co.Abandon(gone.from, gone.req.RequestId, ms(600))
	submit(&pending{from: left, req: lock(3), deadlineMs: ms(9000).UnixMilli()}, ms(600))
	if n := co.locks.waiting("x", ms(600).UnixMilli()); n != 1 || co.locks.total != 1 {
		t.Fatalf("after a retry: %d live waits of %d, want 1 of 1", n, co.locks.total)
	}
}
