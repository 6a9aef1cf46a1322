package regions

import (
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// TestEventFromUnplacedLeaseHolderIgnored: in a settled cluster of ten, the
// peer farthest from a region is placed by nobody (nine are closer). An
// event it publishes is refused either way; with a current grant of the
// region naming it (the lease service found it entitled, as it does for an
// early coordinator whose view was thin), the verdict is Ignore, so the
// honest peers that forwarded the event keep their gossipsub score; with
// another peer's grant, or none, it is Reject.
func TestEventFromUnplacedLeaseHolderIgnored(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		c := Coord{1, 1}
		cfg := testConfig(2, 2)
		book := newTestLeases(cfg.World)
		cl := newCluster(t, 0, time.Millisecond, cfg)
		cl.adjust = book.install
		for range 10 {
			cl.add(t, nil)
		}
		cl.settle(t, 30*time.Second)
		var ids []peer.ID
		for _, m := range cl.live() {
			ids = append(ids, m.id())
		}
		order := cl.hashes.sortByDistance(Key(cfg.World, c), ids)
		closest, farthest := cl.byID(order[0]), order[len(order)-1]
		waitUntil(t, 10*time.Second, "the closest peer to place nobody beyond the first eight", func() bool {
			return !closest.svc.placed(c, farthest)
		})
		event := func(grant []byte) *pb.Event {
			return &pb.Event{World: cfg.World, X: int32(c.X), Y: int32(c.Y), Epoch: 1, LeaseId: 1, Grant: grant}
		}
		book.grant(c, order[1])
		othersGrant := book.proof(c)
		book.grant(c, farthest)
		ownGrant := book.proof(c)
		for _, tc := range []struct {
			name  string
			grant []byte
			want  pubsub.ValidationResult
		}{
			{"its own current grant", ownGrant, pubsub.ValidationIgnore},
			{"another peer's grant", othersGrant, pubsub.ValidationReject},
			{"no grant", nil, pubsub.ValidationReject},
		} {
			before := refusedBy(t, refusedNotPlaced, closest)
			if got := closest.svc.checkEvent(c, farthest, event(tc.grant)); got != tc.want {
				t.Errorf("%s: verdict %v, want %v", tc.name, got, tc.want)
			}
			if refusedBy(t, refusedNotPlaced, closest) != before+1 {
				t.Errorf("%s: the refusal was not counted as %s", tc.name, refusedNotPlaced)
			}
		}
	})
}
