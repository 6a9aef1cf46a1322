package regions

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// How many of the next-closest peers an acquiring peer asks what they hold,
// and how many members it asks for their caches after a double failure.
const (
	acquireAsk  = 5
	rebuildAsk  = 64
	handoffHops = 3
)

// startAcquire begins taking region c over unless that already runs or
// this peer coordinates it.
func (s *Service) startAcquire(c Coord) { s.beginAcquire(c, false, "") }

// beginAcquire starts acquire; nudger, if set, is a peer that nudged this
// one about the region, and is asked what it holds besides the closest
// peers (it may hold a copy of the region far from where it belongs).
func (s *Service) beginAcquire(c Coord, asCoordinator bool, nudger peer.ID) {
	sl := s.slot(c)
	sl.mu.Lock()
	if sl.acquiring || (sl.m.role == pb.Role_ROLE_COORDINATOR && !asCoordinator) {
		sl.mu.Unlock()
		return
	}
	sl.acquiring = true
	done := make(chan struct{})
	sl.acquired = done
	sl.mu.Unlock()
	s.spawn(func() {
		s.acquire(c, sl, nudger)
		sl.mu.Lock()
		sl.acquiring, sl.source = false, ""
		sl.mu.Unlock()
		close(done)
	})
}

type holder struct {
	p    peer.ID
	info *pb.InfoReply
	// With a lease service: what the copy's grant and assignment prove
	// (checkCopyClaim), and whether the holder holds the grant's lease
	// itself as coordinator (it can commit).
	copyRank
	leased bool
}

// weigh fills h's lease fields from its copy's grant and assignment; a
// claim that does not check out leaves them zero (the rank of a copy
// with nothing proven). provenHolders has refused such a copy if it has
// commits in it.
func (s *Service) weigh(c Coord, h *holder) {
	if s.cfg.Proofs == nil || h.info == nil || len(h.info.Grant) == 0 {
		return
	}
	if h.p == s.h.ID() {
		// This peer's own copy: its assignment came from its coordinator
		// (checked as that peer's claim then); only the grant is read.
		who, id, _, err := s.cfg.Proofs.CheckProof(c, h.info.Grant)
		if err != nil {
			return
		}
		h.copyRank = copyRank{lease: id, own: who == h.p}
		if a := h.info.Assignment; !h.own && a != nil && peer.ID(a.Holder) == h.p && a.LeaseId == id {
			h.assigned, h.assignEpoch, h.serial = true, a.Epoch, a.Serial
		}
		h.leased = h.own && h.info.Role == pb.Role_ROLE_COORDINATOR
		return
	}
	r, reason := s.checkCopyClaim(c, h.p, h.info.Grant, h.info.Assignment)
	if reason != "" {
		return
	}
	h.copyRank = r
	h.leased = r.own && h.info.Role == pb.Role_ROLE_COORDINATOR
}

// acquire makes this peer coordinator of c, believing itself the closest
// live peer. It asks the next closest peers what they hold; then, in order
// of preference: a closer live peer exists (step back and nudge it); the
// freshest holder of the state is this peer's own replica copy (take
// over); another peer holds it (hand-off from that peer); nobody holds it
// (rebuild from the members' caches: a double failure, or a new region).
func (s *Service) acquire(c Coord, sl *slot, nudger peer.ID) {
	ctx, cancel := context.WithTimeout(s.ctx, 3*s.cfg.RequestTimeout)
	defer cancel()
	self := s.h.ID()
	sl.mu.Lock()
	stateless := sl.m.role == pb.Role_ROLE_NONE
	sl.mu.Unlock()
	if stateless {
		// Without a copy of the region this peer may be new and its view
		// thin: look the key up so that a closer coordinator is found.
		if _, _, err := s.Locate(ctx, c); err != nil {
			s.log.Debug("lookup before acquiring failed", "region", c, "err", err)
		}
	}
	asked := s.askList(c, nudger)
	holders := s.provenHolders(c, s.askInfo(ctx, c, asked))
	for _, h := range holders {
		if s.closer(c, h.p, self) && !h.info.SteppingAside {
			s.log.Debug("a closer peer is alive; not taking the region", "region", c, "closer", h.p)
			s.nudge(h.p, c)
			return
		}
	}
	copies := s.rankCopies(c, sl, holders)
	s.log.Debug("acquiring region", "region", c, "copies", len(copies), "holders", len(holders))
	// A holder whose hand-off does not check out (it claimed a copy it
	// cannot prove) is passed over for the next freshest copy: else one
	// peer claiming a copy in a far epoch would keep the region from being
	// taken over for good.
	for _, best := range copies {
		if best.p == self {
			sl.mu.Lock()
			promoted := sl.m.role == pb.Role_ROLE_REPLICA
			s.feedLeaseTaking(c, sl)
			eff := sl.m.TakeOver(time.Now())
			sl.mu.Unlock()
			if promoted {
				s.metrics.takeovers.WithLabelValues(takeoverOwnCopy).Inc()
			}
			s.run(c, sl, eff)
			return
		}
		if _, refused := s.handoffFrom(ctx, c, sl, best.p); !refused {
			return
		}
	}
	s.rebuild(ctx, c, sl, asked)
}

// askList is whom acquiring or comparing copies of region c asks what
// they hold: the next closest peers, the nudger, and the coordinators
// whose entries this peer's cache holds.
func (s *Service) askList(c Coord, nudger peer.ID) []peer.ID {
	self := s.h.ID()
	var asked []peer.ID
	for _, p := range s.placement(c) {
		if p != self && len(asked) < acquireAsk {
			asked = append(asked, p)
		}
	}
	if nudger != "" && nudger != self && !containsPeer(asked, nudger) {
		asked = append(asked, nudger)
	}
	// The coordinators whose entries this peer's cache holds are asked
	// too: one of them may still hold the region where a thin view put
	// it, and a rebuild while it lives would make a second copy.
	_, _, cachedEntries := s.cacheOf(c)
	for _, se := range cachedEntries {
		if p, err := peer.IDFromBytes(se.Author); err == nil && p != self && !containsPeer(asked, p) && s.alive(p) && len(asked) < acquireAsk+4 {
			asked = append(asked, p)
		}
	}
	return asked
}

// rankCopies lists the copies of region c, freshest first: this peer's
// own and the holders'.
func (s *Service) rankCopies(c Coord, sl *slot, holders []holder) []holder {
	self := s.h.ID()
	sl.mu.Lock()
	own := sl.m.info()
	sl.mu.Unlock()
	// The copies, freshest first: this peer's own and the holders'.
	var copies []holder
	if own.Role != pb.Role_ROLE_NONE {
		h := holder{p: self, info: own}
		s.weigh(c, &h)
		copies = append(copies, h)
	}
	for _, h := range holders {
		if h.info.Role != pb.Role_ROLE_NONE {
			s.weigh(c, &h)
			copies = append(copies, h)
		}
	}
	sort.SliceStable(copies, func(i, j int) bool { return fresher(copies[i], copies[j]) })
	return copies
}

// compareCopies runs when this coordinator of region c holds a lease its
// copy was not compared under (machine.verifiedLease): it asks the peers
// acquire asks what they hold and, if a copy that checks out is fresher
// than its own, takes it over by hand-off, as acquire does. Only then
// does it commit under the lease. The lease was held before the peers
// were asked, so no copy can have grown since under another.
func (s *Service) compareCopies(c Coord, sl *slot, lease uint64) {
	self := s.h.ID()
	sl.mu.Lock()
	due := time.Since(sl.lastCompare) > 2*s.cfg.MaintainEvery
	if sl.acquiring || sl.m.role != pb.Role_ROLE_COORDINATOR || !due {
		// The next step of the machine asks again (an acquisition
		// running compares copies itself, or a failed comparison is
		// retried no more than every other maintenance period).
		s.feedLease(c, sl)
		eff := sl.m.Compared(lease, false, time.Now())
		sl.mu.Unlock()
		s.run(c, sl, eff)
		return
	}
	sl.lastCompare = time.Now()
	sl.acquiring = true
	done := make(chan struct{})
	sl.acquired = done
	sl.mu.Unlock()
	ok := func() bool {
		ctx, cancel := context.WithTimeout(s.ctx, 3*s.cfg.RequestTimeout)
		defer cancel()
		holders := s.provenHolders(c, s.askInfo(ctx, c, s.askList(c, "")))
		copies := s.rankCopies(c, sl, holders)
		var own holder
		for _, h := range copies {
			if h.p == self {
				own = h
			}
		}
		for _, best := range copies {
			// Under one lease only its holder commits, so a copy under the
			// same lease with as long a log holds the same (the copy this
			// peer was handed, and the old coordinator's own): no hand-on.
			if best.p == self || (own.info != nil && best.lease != 0 && best.lease == own.lease && best.info.Seq == own.info.Seq) {
				return true
			}
			s.log.Info("a fresher copy of the region is held elsewhere; taking it over before committing under a new lease",
				"region", c, "holder", best.p, "lease", lease)
			installed, refused := s.handoffFrom(ctx, c, sl, best.p)
			if installed {
				return true
			}
			if !refused {
				return false
			}
		}
		return false
	}()
	sl.mu.Lock()
	sl.acquiring, sl.source = false, ""
	s.feedLease(c, sl)
	eff := sl.m.Compared(lease, ok, time.Now())
	sl.mu.Unlock()
	close(done)
	s.run(c, sl, eff)
}

// provenHolders drops the holders whose copy does not check out: with a
// lease service, a copy with commits in it must come with a grant of the
// region's lease not older than the newest known; without one, the peer
// offering it must be placed. So no peer can make this one take its
// made-up state over. A copy with nothing committed proves nothing and
// risks nothing.
func (s *Service) provenHolders(c Coord, holders []holder) []holder {
	out := holders[:0]
	for _, h := range holders {
		if h.info.Role != pb.Role_ROLE_NONE && (h.info.Seq > 0 || h.info.Epoch > 0) {
			reason := ""
			if s.cfg.Proofs == nil {
				if !s.placed(c, h.p) {
					reason = refusedNotPlaced
				}
			} else if h.info.Seq > 0 {
				// The grant, with the assignment of its holder when it
				// names another peer, is the proof; placement is not asked
				// of a copy, which may sit where a thin view put it.
				_, reason = s.checkCopyClaim(c, h.p, h.info.Grant, h.info.Assignment)
			}
			if reason != "" {
				s.refuse(c, h.p, "holder's copy", refusedHolderUnproven+"/"+reason)
				h.info = &pb.InfoReply{SteppingAside: h.info.SteppingAside}
			}
		}
		out = append(out, h)
	}
	return out
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

func (s *Service) askInfo(ctx context.Context, c Coord, peers []peer.ID) []holder {
	var mu sync.Mutex
	var wg sync.WaitGroup
	var out []holder
	for _, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reply, err := s.call(ctx, p, c, &pb.Message{Body: &pb.Message_Info{Info: &pb.Info{}}})
			if err != nil {
				s.markDead(p)
				return
			}
			if info := reply.GetInfoReply(); info != nil {
				mu.Lock()
				out = append(out, holder{p: p, info: info})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// Deterministic order for the decisions that follow.
	sorted := make([]holder, 0, len(out))
	for _, p := range peers {
		for _, h := range out {
			if h.p == p {
				sorted = append(sorted, h)
			}
		}
	}
	return sorted
}

// handoffFrom asks src for the region's state. While the transfer runs,
// requests that reach this peer are forwarded to src (serveRequest). It
// reports whether this peer installed the state, and whether the state
// handed over was refused (it did not check out).
func (s *Service) handoffFrom(ctx context.Context, c Coord, sl *slot, src peer.ID) (installed, refused bool) {
	self := s.h.ID()
	for hop := 0; hop < handoffHops && src != ""; hop++ {
		sl.mu.Lock()
		sl.source = src
		sl.mu.Unlock()
		ask := &pb.Handoff{}
		if s.cfg.Proofs != nil {
			ask.Grant = s.cfg.Proofs.Proof(c)
		}
		reply, err := s.call(ctx, src, c, &pb.Message{Body: &pb.Message_Handoff{Handoff: ask}})
		sl.mu.Lock()
		sl.source = ""
		sl.mu.Unlock()
		if err != nil {
			s.log.Info("state transfer failed", "region", c, "from", src, "err", err)
			return
		}
		hr := reply.GetHandoffReply()
		if hr == nil {
			return
		}
		if hr.Ok {
			if reason := s.checkHandoff(c, src, hr); reason != "" {
				s.refuse(c, src, "hand-off", refusedHolderUnproven+"/"+reason)
				return false, true
			}
			// The assignment is kept if it names this peer (src held the
			// grant and handed the region to it); one naming src proved
			// src's copy only.
			var assign *pb.Assignment
			if a := hr.Assignment; a != nil && peer.ID(a.Holder) == self {
				assign = a
			}
			sl.mu.Lock()
			s.feedLeaseTaking(c, sl)
			eff := sl.m.Install(hr.Snapshot, src, true, hr.Grant, assign, time.Now())
			sl.m.keepSeal(hr.Seal) // checked with the snapshot if it was needed
			sl.mu.Unlock()
			s.log.Info("took region over", "region", c, "from", src, "epoch", hr.Snapshot.Epoch, "objects", len(hr.Snapshot.Objects))
			s.metrics.takeovers.WithLabelValues(takeoverTransfer).Inc()
			s.run(c, sl, eff)
			return true, false
		}
		next, err := peer.IDFromBytes(hr.Redirect)
		if err != nil || next == self || next == src {
			s.log.Debug("hand-off refused", "region", c, "from", src, "reason", hr.Error)
			return
		}
		if s.closer(c, next, self) {
			s.nudge(next, c)
			return
		}
		src = next
	}
	return false, false
}

// checkHandoff checks a handed-over snapshot as provenHolders checks
// copies; it returns a refusal reason, "" when it checks out.
func (s *Service) checkHandoff(c Coord, src peer.ID, hr *pb.HandoffReply) string {
	if s.cfg.Proofs == nil {
		if !s.placed(c, src) {
			return refusedNotPlaced
		}
		return ""
	}
	if hr.Snapshot.Seq == 0 && len(hr.Snapshot.Objects) == 0 {
		return ""
	}
	rank, reason := s.checkCopyClaim(c, src, hr.Grant, hr.Assignment)
	if reason != "" || rank.own {
		return reason
	}
	// A copy the grant's holder assigned: its content must be what that
	// holder sealed, or the peer handing it over changed it.
	return s.checkSeal(c, hr.Grant, hr.Snapshot, hr.Seal)
}

// serveHandoff answers a peer that wants to take region c over; grant is
// the grant of the region's lease it showed (nil if none).
func (s *Service) serveHandoff(from peer.ID, c Coord, grant []byte) *pb.HandoffReply {
	self := s.h.ID()
	sl := s.slot(c)
	sl.mu.Lock()
	role, coord := sl.m.role, sl.m.coordinator
	leaseless := s.cfg.Proofs != nil && sl.m.currentProof() == nil
	sl.mu.Unlock()
	switch role {
	case pb.Role_ROLE_COORDINATOR:
		// A coordinator without the lease cannot commit: it hands the
		// region to the peer that shows the lease, closer or not, which
		// may need this copy before it commits (compareCopies); placement
		// brings the region back to the closest peer afterwards.
		if !s.closer(c, from, self) && s.eligible(c) && !(leaseless && len(grant) > 0 && s.leaseHolder(c, from, grant)) {
			return &pb.HandoffReply{Error: "this peer is closer to the region", Redirect: []byte(self)}
		}
	case pb.Role_ROLE_REPLICA:
		if coord != from && s.alive(coord) && s.probe(coord) {
			return &pb.HandoffReply{Error: "the coordinator is alive", Redirect: []byte(coord)}
		}
		if !s.closer(c, from, self) {
			s.startAcquire(c)
			return &pb.HandoffReply{Error: "this peer is closer to the region", Redirect: []byte(self)}
		}
	default:
		return &pb.HandoffReply{Error: "no state for region"}
	}
	sl.mu.Lock()
	if sl.m.role != role || sl.m.coordinator != coord {
		sl.mu.Unlock()
		return &pb.HandoffReply{Error: "role changed; ask again"}
	}
	if sl.handoffs[from] != nil {
		// The same peer asks again while its first hand-off runs: that
		// one keeps the reply (as the machine would say).
		sl.mu.Unlock()
		return &pb.HandoffReply{Error: "hand-off already running", Redirect: []byte(from)}
	}
	if sl.handoffs == nil {
		sl.handoffs = map[peer.ID]chan *pb.HandoffReply{}
	}
	ch := make(chan *pb.HandoffReply, 1)
	sl.handoffs[from] = ch
	s.feedLease(c, sl)
	eff := sl.m.Handoff(from, time.Now())
	sl.mu.Unlock()
	s.run(c, sl, eff)
	timer := time.NewTimer(s.cfg.RequestTimeout)
	defer timer.Stop()
	unwait := func() {
		sl.mu.Lock()
		if sl.handoffs[from] == ch {
			delete(sl.handoffs, from)
		}
		sl.mu.Unlock()
	}
	select {
	case r := <-ch:
		if r.Ok && s.cfg.Proofs != nil {
			// Handing over a copy committed under this peer's own lease:
			// the new coordinator gets this peer's assignment of it.
			if who, lease, _, err := s.cfg.Proofs.CheckProof(c, r.Grant); err == nil && who == self {
				r.Assignment = s.assign(c, sl, r.Snapshot.Epoch, lease, from)
				r.Seal = s.seal(c, r.Snapshot.Epoch, lease, r.Snapshot.Seq, snapshotHash(r.Snapshot))
			}
		}
		return r
	case <-timer.C:
		unwait()
		return &pb.HandoffReply{Error: "hand-off still waiting for the replica"}
	case <-s.ctx.Done():
		unwait()
		return &pb.HandoffReply{Error: "shutting down"}
	}
}

// leaseHolder reports whether grant proves from the holder of region c's
// current lease (placed, naming it, live, not older than the newest known).
func (s *Service) leaseHolder(c Coord, from peer.ID, grant []byte) bool {
	_, reason := s.verifyCoordinator(c, from, grant)
	return reason == ""
}

// rebuild recreates region c from the members' caches: the highest version
// of each object wins. Updates acknowledged after the newest version any
// member saw are lost, and the log says so.
func (s *Service) rebuild(ctx context.Context, c Coord, sl *slot, asked []peer.ID) {
	// The members are the peers subscribed to the region's event topic;
	// gossipsub knows the subscriptions of every peer it is connected to.
	var peers []peer.ID
	for _, p := range s.topicPeers(c) {
		if p != s.h.ID() && s.alive(p) && len(peers) < rebuildAsk {
			peers = append(peers, p)
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	_, _, own := s.cacheOf(c)
	answers := [][]*pb.SignedEntry{own}
	for _, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reply, err := s.call(ctx, p, c, &pb.Message{Body: &pb.Message_CacheQuery{CacheQuery: &pb.CacheQuery{}}})
			if err != nil {
				return
			}
			if cr := reply.GetCacheReply(); cr != nil {
				mu.Lock()
				answers = append(answers, cr.Entries)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	// Only entries signed by a coordinator with a grant that checks out
	// count (trust.go): a member cannot make up objects or epochs. Each
	// distinct signature is checked once; members mostly hold the same.
	verdicts := map[string]bool{}
	merged := map[string]*pb.SignedEntry{}
	var maxEpoch uint64
	sources := 0
	for _, a := range answers {
		used := false
		for _, se := range a {
			ok, seen := verdicts[string(se.Signature)]
			if !seen {
				reason := s.verifySignedEntry(c, se)
				if ok = reason == ""; !ok {
					s.metrics.refused.WithLabelValues(refusedCacheUnproven).Inc()
				}
				verdicts[string(se.Signature)] = ok
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
	sl.mu.Lock()
	if sl.m.role != pb.Role_ROLE_NONE {
		sl.mu.Unlock()
		return // someone handed us the state meanwhile
	}
	s.feedLeaseTaking(c, sl)
	eff := sl.m.Install(snap, "", false, grant, nil, time.Now())
	sl.mu.Unlock()
	if maxEpoch == 0 && len(merged) == 0 {
		s.log.Info("region created", "region", c, "asked", len(asked))
		s.metrics.takeovers.WithLabelValues(takeoverCreated).Inc()
	} else {
		s.metrics.takeovers.WithLabelValues(takeoverRebuilt).Inc()
		s.log.Warn("region rebuilt from members' caches after losing coordinator and replica; updates newer than the cached versions may be lost",
			"region", c, "epoch", snap.Epoch, "objects", len(merged), "caches", sources, "members_asked", len(peers))
	}
	s.run(c, sl, eff)
}
