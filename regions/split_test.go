package regions

import (
	"context"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
)

// TestFalseSuspicionHeals: the replica wrongly finds the coordinator dead
// and takes the region over in a newer epoch, with the region's lease. The
// old coordinator, closest to the region and still answering, cannot
// commit and has nothing to replicate, so no replica ever tells it about
// the newer epoch. The new coordinator nudges it as the closer peer; the
// old one must then take the fresher state back by hand-off, after which
// requests commit again.
func TestFalseSuspicionHeals(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		cfg := testConfig(2, 2)
		cfg.DeadFor = 2 * time.Second // the false suspicion fades quickly
		book := newTestLeases(cfg.World)
		cl := newCluster(t, 0, time.Millisecond, cfg)
		cl.adjust = book.install
		for range 3 {
			cl.add(t, nil)
		}
		cl.settle(t, 30*time.Second)
		c := Coord{1, 0}
		old, replica := cl.truth(c)
		a, b := cl.byID(old), cl.byID(replica)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := a.cl.Initialize(ctx, c, "apple", []byte("1")); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 10*time.Second, "the replica to hold the object", func() bool {
			return b.svc.Role(c) == RoleReplica
		})

		// The lease passes to the replica (the old coordinator's ran out while
		// it could not reach the lease service), and the replica suspects the
		// old coordinator wrongly and takes over.
		book.grant(c, replica)
		b.svc.markDead(old)
		b.svc.onLoop(func() { b.svc.startAcquire(c) })
		waitUntil(t, 10*time.Second, "the replica to take the region over", func() bool {
			return b.svc.Role(c) == RoleCoordinator
		})
		if a.svc.Role(c) != RoleCoordinator {
			t.Fatalf("the old coordinator is %v; the test needs it still coordinating", a.svc.Role(c))
		}

		// A player's read-write goes to the closest peer, the old coordinator.
		// It must commit once the two sort themselves out.
		var third *member
		for _, m := range cl.live() {
			if m != a && m != b {
				third = m
			}
		}
		o, err := third.cl.ReadWrite(ctx, c, "apple", 1, []byte("2"))
		if err != nil {
			t.Fatalf("read-write after the false suspicion: %v", err)
		}
		if o.Version != 2 || string(o.Value) != "2" {
			t.Fatalf("object after the read-write: %+v", o)
		}
		waitUntil(t, 30*time.Second, "the closest peer to coordinate again", func() bool {
			return a.svc.Role(c) == RoleCoordinator && b.svc.Role(c) != RoleCoordinator
		})
	})
}
