package regions

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// TestFresher orders pairs of copies as acquire does, each both ways:
// the first must be fresher, the second not.
func TestFresher(t *testing.T) {
	const L = 7 // a lease ID
	copyAt := func(role pb.Role, epoch, seq uint64, r copyRank, leased bool) holder {
		return holder{info: &pb.InfoReply{Role: role, Epoch: epoch, Seq: seq}, copyRank: r, leased: leased}
	}
	coord, replica := pb.Role_ROLE_COORDINATOR, pb.Role_ROLE_REPLICA
	own := copyRank{lease: L, own: true}
	assigned := func(epoch, serial uint64) copyRank {
		return copyRank{lease: L, assigned: true, assignEpoch: epoch, serial: serial}
	}
	unproven := copyRank{lease: L}
	for _, tc := range []struct {
		name         string
		fresh, stale holder
	}{
		{"a newer lease wins whatever the epochs and seqs",
			copyAt(replica, 3, 2, copyRank{lease: L + 1, assigned: true, assignEpoch: 3, serial: 1}, false),
			copyAt(coord, 9, 50, own, true)},
		{"two take-overs at one epoch: the branch committed under the newer lease beats a longer one under the old",
			copyAt(replica, 4, 3, copyRank{lease: L + 1, assigned: true, assignEpoch: 4, serial: 1}, false),
			copyAt(coord, 4, 9, own, false)},
		{"the lease holder coordinating under it beats a longer copy",
			copyAt(coord, 3, 10, own, true), copyAt(replica, 3, 12, assigned(3, 2), false)},
		{"the holder's own copy beats one it assigned, at a higher epoch",
			copyAt(replica, 4, 10, own, false), copyAt(coord, 5, 10, assigned(4, 3), false)},
		{"a replica assigned later beats a replaced one claiming a longer copy",
			copyAt(replica, 3, 10, assigned(3, 5), false), copyAt(replica, 3, 1000, assigned(3, 4), false)},
		{"an assignment of a later epoch beats a higher serial of an earlier one",
			copyAt(replica, 4, 10, assigned(4, 1), false), copyAt(replica, 3, 10, assigned(3, 9), false)},
		{"the current replica beats a stale replica that took over at a higher epoch after a false suspicion",
			copyAt(replica, 3, 20, assigned(3, 2), false), copyAt(coord, 4, 12, assigned(3, 1), false)},
		{"a proven copy beats a rebuild from caches at a higher epoch",
			copyAt(replica, 3, 20, assigned(3, 2), false), copyAt(coord, 9, 0, unproven, false)},
		{"under one lease a longer log wins over a higher epoch that committed nothing",
			copyAt(coord, 3, 20, unproven, false), copyAt(coord, 4, 12, unproven, false)},
		{"under one lease, equal logs: the higher epoch",
			copyAt(replica, 4, 12, unproven, false), copyAt(coord, 3, 12, unproven, false)},
		{"without a lease service the higher epoch wins",
			copyAt(replica, 4, 2, copyRank{}, false), copyAt(coord, 3, 20, copyRank{}, false)},
		{"without a lease service, one epoch: the longer log",
			copyAt(replica, 3, 21, copyRank{}, false), copyAt(coord, 3, 20, copyRank{}, false)},
		{"all else equal, the coordinator",
			copyAt(coord, 3, 20, copyRank{}, false), copyAt(replica, 3, 20, copyRank{}, false)},
	} {
		if !fresher(tc.fresh, tc.stale) {
			t.Errorf("%s: the first copy is not fresher", tc.name)
		}
		if fresher(tc.stale, tc.fresh) {
			t.Errorf("%s: the second copy is fresher", tc.name)
		}
	}
}

// TestStaleTakeoverLosesToTheLaterReplica plays the lineage case against
// real peers. The coordinator leaves its replica R out and replicates to
// Q; R's retirement is lost and R, suspecting the coordinator falsely,
// takes its old copy over in a higher epoch, without a lease (it cannot
// commit). The coordinator commits more with Q, then crashes. Q defers to
// R (closer), and R, comparing copies, must take Q's over, longer under
// the same lease and assigned later, rather than keep its own for its
// higher epoch.
func TestStaleTakeoverLosesToTheLaterReplica(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		c := Coord{1, 1}
		cl, _, co, re := leasedCluster(t, 5, c)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		strayReplica(t, ctx, cl, co, re, c)
		cl.crash(t, co)
		// The lease stays with the crashed coordinator (it has not expired):
		// nobody commits, and the copies are compared as they are.
		waitUntil(t, 20*time.Second, "R to coordinate Q's copy", func() bool {
			return re.svc.Role(c) == RoleCoordinator && strings.Contains(stateOf(re, c), "version:3")
		})
	})
}
