package regions

import (
	"sort"

	"google.golang.org/protobuf/proto"

	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// rebuiltCopy is a copy rebuilt from caches, to install as coordinator,
// and what the log line about it says.
type rebuiltCopy struct {
	snap *pb.Snapshot
	// grant: the newest grant its objects were committed under.
	grant []byte
	// created: nothing was cached, a new region is born empty.
	created bool
	// objects merged, from caches answers (this peer's own counted), of
	// members asked; asked: the peers asked what they hold before.
	objects, caches, members, asked int
}

// merge rebuilds the region from the caches: the highest version of each
// object wins. Updates acknowledged after the newest version any member
// saw are lost, and the log line the Service writes says so.
func (a *acquisition) merge() acqEffects {
	var eff acqEffects
	// This peer's cache first, then the members' in the order listed.
	answers := [][]*pb.SignedEntry{a.ownEntries}
	for _, p := range a.members {
		if e, ok := a.caches[p]; ok {
			answers = append(answers, e)
		}
	}
	// Only entries signed by a coordinator with a grant that checks out
	// count (trust.go): a member cannot make up objects or epochs. Each
	// distinct signature is checked once; members mostly hold the same.
	// The verdict is reused only for the very entry it was given for: a
	// member could put a real signature on an entry it made up (another
	// value, a far epoch), which must be checked on its own.
	type verdict struct {
		se *pb.SignedEntry
		ok bool
	}
	verdicts := map[string]verdict{}
	merged := map[string]*pb.SignedEntry{}
	var maxEpoch uint64
	sources := 0
	for _, answer := range answers {
		used := false
		for _, se := range answer {
			v, seen := verdicts[string(se.Signature)]
			ok := v.ok
			if !seen || (v.se != se && !proto.Equal(v.se, se)) {
				if ok = a.checks.verifyEntry(se) == ""; !ok {
					eff.unprovenEntries++
				}
				if !seen {
					verdicts[string(se.Signature)] = verdict{se: se, ok: ok}
				}
			}
			if !ok {
				continue
			}
			used = true
			maxEpoch = max(maxEpoch, se.Epoch)
			if cur := merged[se.Entry.Object.Id]; cur == nil || newerEntry(se, cur) {
				merged[se.Entry.Object.Id] = se
			}
		}
		if used {
			sources++
		}
	}
	ids := make([]string, 0, len(merged))
	for id := range merged {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	if len(ids) > MaxObjectsInRegion {
		ids = ids[:MaxObjectsInRegion]
	}
	snap := &pb.Snapshot{Epoch: maxEpoch + 1} // verified entries bound maxEpoch far below wrapping
	for _, id := range ids {
		o := proto.Clone(merged[id].Entry.Object).(*pb.Object)
		o.LockHolder, o.LockExpiresMs, o.LockSinceMs = nil, 0, 0
		snap.Objects = append(snap.Objects, o)
	}
	// The copy is proven by the newest grant its objects were committed
	// under, for whoever takes it over before this peer commits.
	var grant []byte
	var newest uint64
	for _, id := range ids {
		if se := merged[id]; se.Grant != nil && se.Entry.LeaseId >= newest {
			grant, newest = se.Grant, se.Entry.LeaseId
		}
	}
	eff.rebuilt = &rebuiltCopy{
		snap: snap, grant: grant, created: maxEpoch == 0 && len(merged) == 0,
		objects: len(merged), caches: sources, members: len(a.members), asked: len(a.asked),
	}
	return a.finish(eff, acqRebuilt)
}
