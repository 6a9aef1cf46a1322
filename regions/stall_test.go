package regions

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// TestAdversarialStalledReplica: the peer ranked second for a region, so
// made its replica, accepts replication streams and never answers them
// (it answers everything else, so it looks alive: probes and pings pass).
// The coordinator must replace it after the first replication it leaves
// unanswered, leave it out (counted as replica_excluded) even when it
// shows up alive again, and go on acknowledging writes held by an honest
// replica without sending it another message.
func TestAdversarialStalledReplica(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		c := Coord{0, 1}
		cl, _ := settledLeasedCluster(t, 4)
		co, re := cl.appleAtReplica(t, c)
		honest := re.id()
		stop := make(chan struct{})
		t.Cleanup(func() { close(stop) })
		var swallowed atomic.Int64
		h := cl.addHostile(t, cl.keyRanked(t, c, 1), func(_ peer.ID, m *pb.Message) *pb.Message {
			if m.GetReplicate() == nil {
				return nil
			}
			swallowed.Add(1)
			select { // hold the stream open, answer nothing
			case <-stop:
			case <-time.After(20 * time.Second):
			}
			return nil
		})
		h.meet(t, cl, c)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		sl := co.svc.existingSlot(c)
		replica := func() peer.ID {
			var r peer.ID
			inspect(co.svc, func() {
				if r = sl.m.replica; sl.m.hasWantReplica {
					r = sl.m.wantReplica
				}
			})
			return r
		}
		waitUntil(t, 10*time.Second, "the coordinator to pick the staller as replica", func() bool {
			co.svc.onLoop(func() { co.svc.maintain(c, wakeup{}) })
			return replica() == h.id()
		})
		start := time.Now()
		if _, err := co.cl.ReadWrite(ctx, c, "apple", 1, []byte("2")); err != nil {
			t.Fatal(err)
		}
		t.Logf("the write that met the staller took %s", time.Since(start))
		if swallowed.Load() == 0 {
			t.Fatal("the staller never received a replication")
		}
		if got := refusedBy(t, refusedReplicaExcluded, co); got < 1 {
			t.Fatalf("the staller's exclusion was not counted (%v)", got)
		}
		// The staller answers a probe: it looks alive again, and the periodic
		// placement check runs.
		if !co.svc.probe(h.id()) {
			t.Fatal("the staller did not answer a probe")
		}
		co.svc.onLoop(func() { co.svc.maintain(c, wakeup{}) })
		if r := replica(); r == h.id() {
			t.Fatal("the coordinator took the staller back as replica")
		}
		seen := swallowed.Load()
		for v := uint64(2); v <= 11; v++ {
			if _, err := co.cl.ReadWrite(ctx, c, "apple", v, []byte("x")); err != nil {
				t.Fatal(err)
			}
			co.svc.onLoop(func() { co.svc.maintain(c, wakeup{}) })
		}
		var got peer.ID
		var synced bool
		inspect(co.svc, func() { got, synced = sl.m.replica, sl.m.replicaSynced })
		if got != honest || !synced {
			t.Fatalf("replica %s (synced %v), want the honest %s", got.ShortString(), synced, honest.ShortString())
		}
		if n := swallowed.Load(); n != seen {
			t.Fatalf("the staller was sent %d more replications", n-seen)
		}
	})
}
