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
		for _, a := range all.answers {
			a.reply(a.r)
		}
	}
	submit := func(from peer.ID, req *pb.Request) {
		n := submitted
		submitted++
		req.RequestId = reqID(0)
		copy(req.RequestId, fmt.Sprintf("%016d", n))
		step(co.Submit(&pending{from: from, req: req, reply: func(r *pb.Reply) {
			answered[n]++
			statuses[r.Status]++
			if answered[n] > 1 {
				t.Fatalf("request %d (%v) answered twice", n, req.Op)
			}
		}}, now))
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
