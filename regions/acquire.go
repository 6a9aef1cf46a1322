package regions

import (
	"context"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

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

// beginAcquire starts acquire, on the loop; nudger, if set, is a peer
// that nudged this one about the region, and is asked what it holds
// besides the closest peers (it may hold a copy of the region far from
// where it belongs).
func (s *Service) beginAcquire(c Coord, asCoordinator bool, nudger peer.ID) {
	sl := s.slot(c)
	if sl.acquiring || (sl.m.role == pb.Role_ROLE_COORDINATOR && !asCoordinator) {
		return
	}
	sl.acquiring = true
	done := make(chan struct{})
	sl.acquired = done
	stateless := sl.m.role == pb.Role_ROLE_NONE
	s.spawn(func() { s.acquire(c, sl, nudger, stateless, done) })
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
// The decisions are the acquisition's (acquisition.go); drive carries
// them out. stateless says this peer held no copy when it began.
func (s *Service) acquire(c Coord, sl *slot, nudger peer.ID, stateless bool, done chan struct{}) {
	// The lookup counts against the acquisition's deadline, but takes at
	// most a request's time of it (lookupTimeout), so that the asks that
	// follow have the rest.
	begun := time.Now()
	if stateless {
		// Without a copy of the region this peer may be new and its view
		// thin: look the key up so that a closer coordinator is found.
		ctx, cancel := context.WithTimeout(s.ctx, s.lookupTimeout())
		if _, _, err := s.Locate(ctx, c); err != nil {
			s.log.Debug("lookup before acquiring failed", "region", c, "err", err)
		}
		cancel()
	}
	s.feedLoop(func() {
		a := newAcquisition(acqTake, s.h.ID(), c, s.askList(c, nudger), 0, s.acquireTimeout(), s.acqChecks(c), s.log)
		a.spare = s.spareAsks(c)
		s.drive(c, sl, a, begun, done, nil)
	})
}

// acquireTimeout is how long an acquisition or a comparison of copies
// may wait for the network: a few round trips.
func (s *Service) acquireTimeout() time.Duration { return 3 * s.cfg.RequestTimeout }

// lookupTimeout bounds the lookup before a stateless acquisition: a third
// of acquireTimeout. A DHT lookup on a busy network (a loaded machine
// running many peers, all joining at once) can take all the time it is
// given, and one given the acquisition's whole time left its asks none:
// the deadline, already passed, cancelled them as they began.
func (s *Service) lookupTimeout() time.Duration { return s.cfg.RequestTimeout }

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

// spareAsks are the peers an acquisition of region c asks in place of
// those of askList that fail to answer: the next acquireAsk closest.
func (s *Service) spareAsks(c Coord) []peer.ID {
	self := s.h.ID()
	var spare []peer.ID
	skipped := 0
	for _, p := range s.placement(c) {
		if p == self {
			continue
		}
		if skipped < acquireAsk {
			skipped++
			continue
		}
		if len(spare) == acquireAsk {
			break
		}
		spare = append(spare, p)
	}
	return spare
}

// compareCopies runs when this coordinator of region c holds a lease its
// copy was not compared under (machine.verifiedLease): it asks the peers
// acquire asks what they hold and, if a copy that checks out is fresher
// than its own, takes it over by hand-off, as acquire does. Only then
// does it commit under the lease. The lease was held before the peers
// were asked, so no copy can have grown since under another. It runs on
// the Service's loop.
func (s *Service) compareCopies(c Coord, sl *slot, lease uint64) {
	due := time.Since(sl.lastCompare) > 2*s.cfg.MaintainEvery
	if sl.acquiring || sl.m.role != pb.Role_ROLE_COORDINATOR || !due {
		// The next step of the machine asks again (an acquisition
		// running compares copies itself, or a failed comparison is
		// retried no more than every other maintenance period).
		s.feedLease(c, sl)
		eff := sl.m.Compared(lease, false, time.Now())
		s.run(c, sl, eff)
		return
	}
	sl.lastCompare = time.Now()
	sl.acquiring = true
	done := make(chan struct{})
	sl.acquired = done
	a := newAcquisition(acqCompare, s.h.ID(), c, s.askList(c, ""), lease, s.acquireTimeout(), s.acqChecks(c), s.log)
	a.spare = s.spareAsks(c)
	s.drive(c, sl, a, time.Now(), done, func(r acqResult) {
		s.feedLease(c, sl)
		eff := sl.m.Compared(lease, r.compared(), time.Now())
		s.run(c, sl, eff)
	})
}

// driven is an acquisition the Service's loop drives (slot.driven).
type driven struct {
	a *acquisition
	// ctx is the asks': it ends at the deadline or when the acquisition
	// does.
	ctx    context.Context
	cancel context.CancelFunc
	timer  *time.Timer // the deadline's
	// done is slot.acquired, closed at the end; ended, if set, is told the
	// result then.
	done  chan struct{}
	ended func(acqResult)
}

// drive starts acquisition a of region c, begun at begun, on the
// Service's loop, which then drives it to its end: each step's effects
// are carried out there, peers are asked on goroutines the Service owns
// that feed their answers back to the loop, and the deadline Start
// returns is a timer that feeds the deadline to the loop when it fires.
// At the end done closes and ended (if set) is told the result. Requests
// that reach this peer meanwhile wait for the acquisition (slot.acquired,
// set by the caller as done), or are forwarded to the peer asked for a
// hand-off while it answers.
func (s *Service) drive(c Coord, sl *slot, a *acquisition, begun time.Time, done chan struct{}, ended func(acqResult)) {
	ctx, cancel := context.WithCancel(s.ctx)
	d := &driven{a: a, ctx: ctx, cancel: cancel, done: done, ended: ended}
	sl.driven = d
	eff := a.Start(begun)
	d.timer = time.AfterFunc(time.Until(eff.deadline), func() {
		s.feedLoop(func() {
			// The asks still running are cancelled, fail and are fed too.
			d.cancel()
			s.stepDriven(c, sl, d, deadlineReached())
		})
	})
	s.advance(c, sl, d, eff)
}

// stepDriven feeds in to d, on the loop, unless d ended.
func (s *Service) stepDriven(c Coord, sl *slot, d *driven, in acqInput) {
	if sl.driven != d {
		return // an answer that comes after the end is dropped
	}
	if in.kind == acqHandoffReply {
		sl.source = ""
	}
	s.advance(c, sl, d, d.a.Step(in))
}

// advance carries out eff, a step of d, and the steps that follow from
// answers it gives at once; at the end (after the nudge a step back
// sends) it ends d.
func (s *Service) advance(c Coord, sl *slot, d *driven, eff acqEffects) {
	for {
		in, now := s.carryOut(c, sl, d, eff)
		if eff.done != acqRunning {
			result := eff.done
			if p := eff.nudge; p != "" {
				s.spawn(func() {
					s.nudge(p, c)
					s.feedLoop(func() { s.endDriven(c, sl, d, result) })
				})
				return
			}
			s.endDriven(c, sl, d, result)
			return
		}
		if !now {
			return
		}
		eff = d.a.Step(in)
	}
}

// endDriven ends d with result r.
func (s *Service) endDriven(c Coord, sl *slot, d *driven, r acqResult) {
	if sl.driven != d {
		return
	}
	sl.driven = nil
	d.timer.Stop()
	d.cancel()
	sl.acquiring, sl.source = false, ""
	close(d.done)
	if d.ended != nil {
		d.ended(r)
	}
}

// carryOut does what an acquisition's step asks, on the loop. An answer
// it can give at once (this peer's own copy) it returns, to be fed next;
// the peers' answers and the region's members come through the loop.
func (s *Service) carryOut(c Coord, sl *slot, d *driven, eff acqEffects) (acqInput, bool) {
	for _, r := range eff.refusals {
		s.refuse(c, r.from, r.what, r.reason)
	}
	if eff.unprovenEntries > 0 {
		s.metrics.refused.WithLabelValues(refusedCacheUnproven).Add(float64(eff.unprovenEntries))
	}
	if eff.takeOver {
		s.takeOverOwnCopy(c, sl)
	}
	if eff.install != nil {
		s.installHandedOver(c, sl, eff.install)
	}
	if eff.rebuilt != nil {
		s.installRebuilt(c, sl, eff.rebuilt)
	}
	feed := func(in acqInput) { s.feedLoop(func() { s.stepDriven(c, sl, d, in) }) }
	ctx := d.ctx
	for _, p := range eff.askInfo {
		s.spawn(func() {
			reply, err := s.call(ctx, p, c, &pb.Message{Body: &pb.Message_Info{Info: &pb.Info{}}})
			if err != nil {
				// An ask the acquisition cancelled (its deadline passed,
				// or the service closed) says nothing about p: only one
				// that failed on its own (RequestTimeout, a refused
				// dial, a reset) leaves p out of placement. Else the
				// closest peers, the region's coordinator and replica,
				// asked as the deadline passed would be taken for dead
				// and the next acquisition, not asking them, would
				// rebuild the region from the caches while they live.
				if ctx.Err() == nil {
					s.markDead(p)
				}
				feed(infoReplied(p, nil))
				return
			}
			feed(infoReplied(p, reply.GetInfoReply()))
		})
	}
	if src := eff.askHandoff; src != "" {
		sl.source = src
		ask := &pb.Handoff{}
		if s.cfg.Proofs != nil {
			ask.Grant = s.cfg.Proofs.Proof(c)
		}
		s.spawn(func() {
			reply, err := s.call(ctx, src, c, &pb.Message{Body: &pb.Message_Handoff{Handoff: ask}})
			feed(handoffReplied(src, reply.GetHandoffReply(), err))
		})
	}
	for _, p := range eff.askCaches {
		s.spawn(func() {
			reply, err := s.call(ctx, p, c, &pb.Message{Body: &pb.Message_CacheQuery{CacheQuery: &pb.CacheQuery{}}})
			var entries []*pb.SignedEntry // nil: no answer, as an empty one
			if err == nil {
				entries = reply.GetCacheReply().GetEntries()
			}
			feed(cacheReplied(p, entries))
		})
	}
	switch {
	case eff.readOwn:
		own := sl.m.info()
		return ownCopy(own), true
	case eff.listMembers:
		// Asking gossipsub for the topic's peers can take a while on a
		// busy peer: not on the loop.
		s.spawn(func() { feed(s.members(c)) })
	}
	return acqInput{}, false
}

// members lists the region's members to rebuild it from, with this
// peer's own cache: the peers subscribed to the region's event topic
// (gossipsub knows the subscriptions of every peer it is connected to).
func (s *Service) members(c Coord) acqInput {
	var peers []peer.ID
	for _, p := range s.topicPeers(c) {
		if p != s.h.ID() && s.alive(p) && len(peers) < rebuildAsk {
			peers = append(peers, p)
		}
	}
	_, _, own := s.cacheOf(c)
	return membersListed(peers, own)
}

// takeOverOwnCopy makes this peer coordinator of its own copy of region c.
func (s *Service) takeOverOwnCopy(c Coord, sl *slot) {
	promoted := sl.m.role == pb.Role_ROLE_REPLICA
	s.feedLeaseTaking(c, sl)
	eff := sl.m.TakeOver(time.Now())
	if promoted {
		s.metrics.takeovers.WithLabelValues(takeoverOwnCopy).Inc()
	}
	s.run(c, sl, eff)
}

// installHandedOver makes this peer coordinator of the copy h.from handed
// over (checked by checkHandoff).
func (s *Service) installHandedOver(c Coord, sl *slot, h *handedOver) {
	s.feedLeaseTaking(c, sl)
	eff := sl.m.Install(h.snap, h.from, true, h.grant, h.assign, time.Now())
	sl.m.keepSeal(h.seal) // checked with the snapshot if it was needed
	s.log.Info("took region over", "region", c, "from", h.from, "epoch", h.snap.Epoch, "objects", len(h.snap.Objects))
	s.metrics.takeovers.WithLabelValues(takeoverTransfer).Inc()
	s.run(c, sl, eff)
}

// installRebuilt makes this peer coordinator of region c rebuilt from the
// members' caches (or created), unless someone handed it the state
// meanwhile.
func (s *Service) installRebuilt(c Coord, sl *slot, r *rebuiltCopy) {
	if sl.m.role != pb.Role_ROLE_NONE {
		return // someone handed us the state meanwhile
	}
	s.feedLeaseTaking(c, sl)
	eff := sl.m.Install(r.snap, "", false, r.grant, nil, time.Now())
	if r.created {
		s.log.Info("region created", "region", c, "asked", r.asked)
		s.metrics.takeovers.WithLabelValues(takeoverCreated).Inc()
	} else {
		s.metrics.takeovers.WithLabelValues(takeoverRebuilt).Inc()
		s.log.Warn("region rebuilt from members' caches after losing coordinator and replica; updates newer than the cached versions may be lost",
			"region", c, "epoch", r.snap.Epoch, "objects", r.objects, "caches", r.caches, "members_asked", r.members)
	}
	s.run(c, sl, eff)
}

// acqChecks is region c's acqChecks at this peer: its keys, lease service
// and view.
func (s *Service) acqChecks(c Coord) acqChecks { return serviceChecks{s: s, c: c} }

type serviceChecks struct {
	s *Service
	c Coord
}

func (k serviceChecks) closer(a, b peer.ID) bool { return k.s.closer(k.c, a, b) }
func (k serviceChecks) weigh(h *holder)          { k.s.weigh(k.c, h) }
func (k serviceChecks) checkHandoff(src peer.ID, hr *pb.HandoffReply) string {
	return k.s.checkHandoff(k.c, src, hr)
}
func (k serviceChecks) verifyEntry(se *pb.SignedEntry) string { return k.s.verifySignedEntry(k.c, se) }

// proveCopy: with a lease service, the grant, with the assignment of its
// holder when it names another peer, is the proof of a copy with
// commits in it; placement is not asked of a copy, which may sit where a
// thin view put it. Without one, the peer offering the copy must be
// placed.
func (k serviceChecks) proveCopy(p peer.ID, info *pb.InfoReply) string {
	if k.s.cfg.Proofs == nil {
		if !k.s.placed(k.c, p) {
			return refusedNotPlaced
		}
		return ""
	}
	if info.Seq > 0 {
		_, reason := k.s.checkCopyClaim(k.c, p, info.Grant, info.Assignment)
		return reason
	}
	return ""
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
// the grant of the region's lease it showed (nil if none). The loop
// decides (handoffOnLoop); a replica's probe of the coordinator it knows
// runs on this goroutine and hands its answer to the loop, and the wait
// for the machine's reply (its batch in flight) is this goroutine's too.
func (s *Service) serveHandoff(from peer.ID, c Coord, grant []byte) *pb.HandoffReply {
	self := s.h.ID()
	// A peer with no state for c has nothing to hand over; looking the
	// slot up instead of making one keeps askers from making this peer
	// hold a slot for every region of the world.
	sl := s.existingSlot(c)
	if sl == nil {
		return &pb.HandoffReply{Error: "no state for region"}
	}
	var next handoffNext
	if !s.onLoop(func() { next = s.handoffOnLoop(c, sl, from, grant) }) {
		return &pb.HandoffReply{Error: "shutting down"}
	}
	if next.probe != "" {
		first := next
		answered := s.ping(first.probe)
		if !s.onLoop(func() { next = s.handoffProbedOnLoop(c, sl, from, first, answered) }) {
			return &pb.HandoffReply{Error: "shutting down"}
		}
	}
	if next.reply != nil {
		return next.reply
	}
	ch := next.wait
	timer := time.NewTimer(s.cfg.RequestTimeout)
	defer timer.Stop()
	// The loop's table forgets a caller that stops waiting (once the
	// Service closed, nobody answers it any more).
	unwait := func() {
		s.onLoop(func() {
			if sl.handoffs[from] == ch {
				delete(sl.handoffs, from)
			}
		})
	}
	select {
	case r := <-ch:
		if r.Ok && s.cfg.Proofs != nil {
			// Handing over a copy committed under this peer's own lease:
			// the new coordinator gets this peer's assignment of it.
			if who, lease, _, err := s.cfg.Proofs.CheckProof(c, r.Grant); err == nil && who == self {
				s.onLoop(func() { r.Assignment = s.assignOnLoop(c, sl, r.Snapshot.Epoch, lease, from) })
				r.Seal = s.seal(c, r.Snapshot.Epoch, lease, r.Snapshot.Seq, snapshotHash(r.Snapshot))
			}
		}
		return r
	case <-timer.C:
		unwait()
		return &pb.HandoffReply{Error: "hand-off still waiting for the replica"}
	case <-s.ctx.Done():
		return &pb.HandoffReply{Error: "shutting down"}
	}
}

// handoffNext is what serving a hand-off does next, as the loop decided:
// answer reply now; or probe the coordinator this replica knows, then
// ask the loop again (role and coordinator are what the loop saw); or
// wait for the machine's reply on wait.
type handoffNext struct {
	reply *pb.HandoffReply
	probe peer.ID
	role  pb.Role
	coord peer.ID
	wait  chan *pb.HandoffReply
}

// handoffOnLoop decides, on the loop, how this peer answers from's ask to
// hand region c over. A coordinator refuses a peer that is not closer
// (unless it lacks the lease that peer shows, or steps aside). A replica
// first makes sure its coordinator is gone, unless the asker is that
// coordinator: one it believes alive is probed (handoffProbedOnLoop
// takes the answer); then it refuses a peer that is not closer and
// takes the region over itself.
func (s *Service) handoffOnLoop(c Coord, sl *slot, from peer.ID, grant []byte) handoffNext {
	self := s.h.ID()
	role, coord := sl.m.role, sl.m.coordinator
	leaseless := s.cfg.Proofs != nil && sl.m.currentProof() == nil
	switch role {
	case pb.Role_ROLE_COORDINATOR:
		// A coordinator without the lease cannot commit: it hands the
		// region to the peer that shows the lease, closer or not, which
		// may need this copy before it commits (compareCopies); placement
		// brings the region back to the closest peer afterwards.
		if !s.closer(c, from, self) && s.eligible(c) && !(leaseless && len(grant) > 0 && s.leaseHolder(c, from, grant)) {
			return handoffNext{reply: &pb.HandoffReply{Error: "this peer is closer to the region", Redirect: []byte(self)}}
		}
	case pb.Role_ROLE_REPLICA:
		if coord != from && s.alive(coord) {
			return handoffNext{probe: coord, role: role, coord: coord}
		}
		if r := s.replicaCloserOnLoop(c, from); r != nil {
			return handoffNext{reply: r}
		}
	default:
		return handoffNext{reply: &pb.HandoffReply{Error: "no state for region"}}
	}
	return s.startHandoffOnLoop(c, sl, from, role, coord)
}

// handoffProbedOnLoop goes on with first, a replica's decision to probe
// its coordinator, once the probe answered or not.
func (s *Service) handoffProbedOnLoop(c Coord, sl *slot, from peer.ID, first handoffNext, answered bool) handoffNext {
	if answered {
		return handoffNext{reply: &pb.HandoffReply{Error: "the coordinator is alive", Redirect: []byte(first.coord)}}
	}
	s.markDeadOnLoop(first.coord)
	if r := s.replicaCloserOnLoop(c, from); r != nil {
		return handoffNext{reply: r}
	}
	return s.startHandoffOnLoop(c, sl, from, first.role, first.coord)
}

// replicaCloserOnLoop is a replica's refusal of a hand-off to from when
// this peer is closer to region c: it takes the region over itself. Nil
// when from is closer.
func (s *Service) replicaCloserOnLoop(c Coord, from peer.ID) *pb.HandoffReply {
	self := s.h.ID()
	if s.closer(c, from, self) {
		return nil
	}
	s.startAcquire(c)
	return &pb.HandoffReply{Error: "this peer is closer to the region", Redirect: []byte(self)}
}

// startHandoffOnLoop hands region c's machine from's ask, if the machine
// still has the role and coordinator the decision saw: the machine's
// reply comes on the returned wait once its batch in flight committed.
func (s *Service) startHandoffOnLoop(c Coord, sl *slot, from peer.ID, role pb.Role, coord peer.ID) handoffNext {
	if sl.m.role != role || sl.m.coordinator != coord {
		return handoffNext{reply: &pb.HandoffReply{Error: "role changed; ask again"}}
	}
	if sl.handoffs[from] != nil {
		// The same peer asks again while its first hand-off runs: that
		// one keeps the reply (as the machine would say).
		return handoffNext{reply: &pb.HandoffReply{Error: "hand-off already running", Redirect: []byte(from)}}
	}
	if sl.handoffs == nil {
		sl.handoffs = map[peer.ID]chan *pb.HandoffReply{}
	}
	ch := make(chan *pb.HandoffReply, 1)
	sl.handoffs[from] = ch
	s.feedLease(c, sl)
	eff := sl.m.Handoff(from, time.Now())
	s.run(c, sl, eff)
	return handoffNext{wait: ch}
}

// leaseHolder reports whether grant proves from the holder of region c's
// current lease (placed, naming it, live, not older than the newest known).
func (s *Service) leaseHolder(c Coord, from peer.ID, grant []byte) bool {
	_, reason := s.verifyCoordinator(c, from, grant)
	return reason == ""
}
