package regions

import (
	"github.com/libp2p/go-libp2p/core/peer"

	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// holder is a peer that answered what it holds of a region (this peer
// among them, for its own copy), as an acquisition ranks it.
type holder struct {
	p    peer.ID
	info *pb.InfoReply
	// With a lease service: what the copy's grant and assignment prove
	// (checkCopyClaim), and whether the holder holds the grant's lease
	// itself as coordinator (it can commit).
	copyRank
	leased bool
}

// fresher orders holders. With a lease service: newer lease, then the
// lease's holder coordinating under it; then, under one lease, the copy
// its holder committed itself, then a copy it assigned (the later
// assignment first), then the longer log. Without one: higher epoch, then
// longer log. Last, an active coordinator over a replica.
//
// Under one lease only its holder commits, so every copy under it is a
// prefix of that holder's history whatever the epochs it went through:
// seqs compare across epochs, and an epoch raised by a take-over that
// committed nothing (a false suspicion, a hand-on by a replica, a rebuild
// from caches, whose seq restarts) does not make a shorter copy fresher.
// A copy on a branch its holder's lease did not write (another lease's)
// is ordered by lease first, so a longer dead branch never wins. And a
// replica that was replaced cannot outrank the one that replaced it by
// claiming a longer copy: the later assignment wins.
func fresher(ha, hb holder) bool {
	// The lease service decides who commits: a copy under a newer lease
	// is fresher whatever the epochs, and of two under the same lease the
	// one whose holder holds it (and so could commit) is.
	if ha.lease != hb.lease {
		return ha.lease > hb.lease
	}
	if ha.leased != hb.leased {
		return ha.leased
	}
	a, b := ha.info, hb.info
	if ha.lease != 0 {
		if ha.own != hb.own {
			return ha.own
		}
		if ha.assigned != hb.assigned {
			return ha.assigned
		}
		if ha.assigned && (ha.assignEpoch != hb.assignEpoch || ha.serial != hb.serial) {
			if ha.assignEpoch != hb.assignEpoch {
				return ha.assignEpoch > hb.assignEpoch
			}
			return ha.serial > hb.serial
		}
		if a.Seq != b.Seq {
			return a.Seq > b.Seq
		}
	}
	if a.Epoch != b.Epoch {
		return a.Epoch > b.Epoch
	}
	if a.Seq != b.Seq {
		return a.Seq > b.Seq
	}
	return a.Role == pb.Role_ROLE_COORDINATOR && b.Role != pb.Role_ROLE_COORDINATOR
}
