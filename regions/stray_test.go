package regions

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// TestStrayCoordinatorComparesBeforeCommitting: the coordinator leaves its
// replica R out and replicates to Q; R's retirement is lost and R, taking
// its old copy over on a false suspicion, stays a second coordinator
// without a lease (it can commit nothing). The coordinator commits more
// with Q, then crashes, and its lease runs out. R, now the closest peer,
// is granted a fresh lease: before its first commit under it, it must
// compare its copy with the placed peers' and take Q's, so that every
// write the coordinator acknowledged survives.
func TestStrayCoordinatorComparesBeforeCommitting(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		c := Coord{1, 1}
		cl, book, co, re := leasedCluster(t, 5, c)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		q := strayReplica(t, ctx, cl, co, re, c)
		rsl := re.svc.existingSlot(c)
		// The coordinator crashes and its lease runs out: R gets the next one
		// at its next maintenance tick (run here at once).
		cl.crash(t, co)
		book.release(c)
		re.svc.onLoop(func() {
			re.svc.feedLease(c, rsl)
			eff := rsl.m.Kick(time.Now())
			re.svc.run(c, rsl, eff)
		})
		// A player keeps writing; each write that succeeds builds on the last.
		var reader *member
		for _, m := range cl.live() {
			if m != re && m.id() != q {
				reader = m
			}
		}
		o, err := reader.cl.ReadWrite(ctx, c, "apple", 3, []byte("4"))
		if err != nil {
			t.Fatalf("the write after the take-over (apple at version 3 acknowledged): %v", err)
		}
		if o.Version != 4 {
			t.Fatalf("apple after the write: %+v", o)
		}
		st, err := reader.cl.Get(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if a := findObject(st.Objects, "apple"); a == nil || a.Version != 4 || string(a.Value) != "4" {
			t.Fatalf("apple is %+v, want version 4 = \"4\"", a)
		}
	})
}

// TestLeaseHolderAwayFromTheClosestHeals: a thin view at start made two
// peers create a region: X, which got the region's lease although it is
// not the closest, and Y, the closest, which cannot commit without it.
// Nothing was committed, and X has no replica and nothing queued. X,
// comparing copies under its new lease all the same, finds none fresher
// and claims its copy as the lease's; Y, nudged, takes the region over
// from X, and a player's write commits.
func TestLeaseHolderAwayFromTheClosestHeals(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		c := Coord{1, 0}
		cl, book := settledLeasedCluster(t, 4)
		yID, xID := cl.truth(c)
		x, y := cl.byID(xID), cl.byID(yID)
		var player *member
		for _, m := range cl.live() {
			if m != x && m != y {
				player = m
			}
		}
		// The lease is held elsewhere while both create the region, and comes
		// to X afterwards, as a lease service's grant does.
		book.grant(c, testPeer(99))
		for _, m := range []*member{x, y} {
			sl := m.svc.slot(c)
			m.svc.onLoop(func() {
				m.svc.feedLeaseTaking(c, sl)
				eff := sl.m.Install(&pb.Snapshot{Epoch: 1}, "", false, nil, nil, time.Now())
				m.svc.run(c, sl, eff)
			})
		}
		// X found no replica then (it is alone, with nothing queued).
		xsl := x.svc.existingSlot(c)
		x.svc.onLoop(func() {
			x.svc.feedLease(c, xsl)
			eff := xsl.m.SetReplica("", time.Now())
			x.svc.run(c, xsl, eff)
		})
		book.grant(c, xID)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := player.cl.Initialize(ctx, c, "apple", []byte("1")); err != nil {
			t.Fatalf("write with the lease away from the closest peer: %v", err)
		}
	})
}

// TestLeaseHolderTakesTheFresherCopyFromACloserPeer: Y, the closest
// peer, committed apple under its lease, then lost the lease (it could not
// renew in time) to X, a farther peer that coordinates the region with an
// empty copy (its view was thin). X may not commit before it holds the
// freshest copy, Y's; Y, closer, would not hand the region to a farther
// peer, but does to the one that shows the region's current lease when it
// holds none itself. Apple survives and a player's write commits.
func TestLeaseHolderTakesTheFresherCopyFromACloserPeer(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		c := Coord{1, 0}
		cl, book, y, _ := leasedCluster(t, 4, c)
		var x, player *member
		for _, m := range cl.live() {
			if m == y || m.svc.Role(c) == RoleReplica {
				continue
			}
			if x == nil {
				x = m
			} else {
				player = m
			}
		}
		book.grant(c, testPeer(99)) // Y's lease lapses
		sl := x.svc.slot(c)
		x.svc.onLoop(func() {
			x.svc.feedLeaseTaking(c, sl)
			eff := sl.m.Install(&pb.Snapshot{Epoch: 1}, "", false, nil, nil, time.Now())
			x.svc.run(c, sl, eff)
		})
		book.grant(c, x.id())
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := player.cl.ReadWrite(ctx, c, "apple", 1, []byte("2")); err != nil {
			t.Fatalf("write after the lease moved to a farther peer: %v", err)
		}
	})
}

// strayReplica sets up the stray-replica case both lineage tests play: the
// coordinator co leaves its replica re out and replicates to another peer
// Q; re's retirement is lost and re, suspecting co falsely, takes its old
// copy over in a higher epoch without a lease; co then acknowledges two
// more writes of "apple" (to version 3) that only Q holds. It returns Q.
func strayReplica(t *testing.T, ctx context.Context, cl *cluster, co, re *member, c Coord) peer.ID {
	t.Helper()
	// re's copy as it was when the coordinator left it out.
	rsl := re.svc.existingSlot(c)
	var saved *pb.Snapshot
	var proof []byte
	var assign *pb.Assignment
	inspect(re.svc, func() { saved, proof, assign = rsl.m.snapshot(), rsl.m.copyProof, rsl.m.copyAssign })
	if assign == nil {
		t.Fatal("the replica holds no assignment")
	}
	co.svc.onLoop(func() { co.svc.excludeOnLoop(c, re.id(), "test") })
	csl := co.svc.existingSlot(c)
	var q peer.ID
	waitUntil(t, 10*time.Second, "the coordinator to replicate elsewhere", func() bool {
		var synced bool
		inspect(co.svc, func() { q, synced = csl.m.replica, csl.m.replicaSynced })
		return q != "" && q != re.id() && synced
	})
	// re's retirement was lost and it took its old copy over.
	re.svc.onLoop(func() {
		rsl.m.load(saved)
		rsl.m.role, rsl.m.coordinator, rsl.m.copyProof, rsl.m.copyAssign = pb.Role_ROLE_REPLICA, co.id(), proof, assign
		re.svc.feedLeaseTaking(c, rsl)
		eff := rsl.m.TakeOver(time.Now())
		re.svc.run(c, rsl, eff)
	})
	// Acknowledged writes re never saw.
	for v := uint64(1); v <= 2; v++ {
		if _, err := co.cl.ReadWrite(ctx, c, "apple", v, []byte(fmt.Sprint(v+1))); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, 10*time.Second, "Q to hold the writes", func() bool {
		return strings.Contains(stateOf(cl.byID(q), c), "version:3")
	})
	if re.svc.Role(c) != RoleCoordinator || !strings.Contains(stateOf(re, c), "version:1") {
		t.Fatalf("re does not hold its stale copy as coordinator: %s", stateOf(re, c))
	}
	return q
}
