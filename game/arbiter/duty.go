package arbiter

import (
	"slices"

	pb "github.com/overworld-p2p/overworld/game/arbiter/arbiterpb"
)

// create makes this node a one-member game and its arbiter.
func (n *Node) create() {
	n.id = n.cfg.ID
	if n.id == 0 {
		n.id = 1
	}
	n.game = n.cfg.Game
	for n.game == 0 {
		n.game = n.rng.Uint64()
	}
	n.team = n.joinTeam
	if n.team == 0 || int(n.team) > n.cfg.Teams {
		n.team = 1
	}
	n.phase = PhaseMember
	n.log = newGrantLog(n.cfg.LogWindow)
	n.view = []member{{id: n.id, team: n.team, nonce: n.nonce}}
	n.stamp = Stamp{Epoch: nextEpoch(0, n.id)}
	n.heard[n.id] = n.now
	n.event(Event{Kind: EventJoined, Member: n.id, Team: n.team, Stamp: n.stamp})
	n.becomeHolder(ViaCreate, 0)
}

// takeOver opens a term of this node's own after the arbiter fell silent,
// in the next lap, so that every message of the silent arbiter's term is
// stale from then on. Once a majority confirmed it, the new arbiter also
// starts a new epoch (same members): whoever followed the silent arbiter —
// a minority side, a process that was stopped — can then only come back
// through CATCH_UP, which hands it this side's grant log, so a grant the
// silent arbiter made in its last lease that nobody here heard cannot
// survive. Epochs are named by their author, so two sides that each start
// one from the same epoch never give them one name.
func (n *Node) takeOver() {
	n.adoptTerm(Stamp{Epoch: n.stamp.Epoch, Lap: n.stamp.Lap + 1, TS: uint32(n.placeOf(n.id) * RangeSize)}, n.id)
	n.becomeHolder(ViaTakeover, n.log.last)
	n.duty.newEpoch = true
}

// sealTakeover moves a confirmed takeover to a new epoch.
func (n *Node) sealTakeover() {
	n.duty.newEpoch = false
	n.duty.sealed = n.stamp.Epoch
	// The silent arbiter may have granted in its last terms what nobody
	// here heard; its sequence numbers lie just above ours. Leave them room
	// (a quarter of the log, several terms' worth) so that ours do not reuse
	// one; should they still meet, the grant with the later stamp stands.
	last := n.log.last
	n.log.absent(last, last+n.log.window/4)
	next := Stamp{Epoch: nextEpoch(n.stamp.Epoch, n.id), Lap: n.stamp.Lap, TS: n.stamp.TS}
	n.send(&pb.Envelope{Body: &pb.Envelope_View{View: &pb.ViewChange{
		Reason: pb.ViewChange_TAKEOVER, View: viewWire(next.Epoch, n.view), Next: next.wire(),
		GrantSeq: last, SkipTo: n.log.last,
	}}})
	n.installView(n.view, next, n.id)
}

// becomeHolder starts this node's term at n.stamp. It PINGs at once (the
// paper's PING on first reaching its range); it serves once a majority
// answered and it holds every grant up to syncTarget.
func (n *Node) becomeHolder(via Via, syncTarget uint64) {
	n.holder = n.id
	n.duty = &duty{
		via:          via,
		pongSeq:      map[MemberID]uint64{},
		lastLeased:   n.now,
		syncTarget:   syncTarget,
		syncHave:     n.log.have,
		syncDeadline: n.now.Add(n.cfg.SyncTimeout),
		repairFrom:   noRepair,
	}
	n.metrics.Terms.Add(1)
	switch via {
	case ViaTakeover:
		n.metrics.Takeovers.Add(1)
	case ViaResume:
		n.metrics.Resumes.Add(1)
	}
	n.event(Event{Kind: EventDutyBegin, Stamp: n.stamp, Via: via, State: slices.Clone(n.dutyState)})
	n.ping()
}

// endDuty closes this node's term; successor serves next (0: unknown).
func (n *Node) endDuty(successor MemberID) {
	d := n.duty
	n.duty = nil
	if d.handoff != nil && d.handoff.to == successor {
		n.metrics.Handoffs.Add(1)
	}
	n.event(Event{Kind: EventDutyEnd, Member: successor, Stamp: n.stamp})
	if n.leaving {
		n.sendLeave()
	}
}

func (n *Node) ping() {
	d := n.duty
	d.pingSeq++
	d.pingSent[d.pingSeq%pingRing] = n.now
	d.nextPing = n.now.Add(n.cfg.Heartbeat)
	p := &pb.Ping{Seq: d.pingSeq, GrantSeq: n.log.last, GrantHave: n.log.have}
	if n.synced() {
		p.DigestFrom, _ = n.log.digestRange()
		p.Digest = n.log.digest(p.DigestFrom, n.log.have)
	}
	if d.repairFrom != noRepair && d.repairFrom < n.log.have {
		p.RepairFrom = d.repairFrom
		p.Repairs = n.log.after(d.repairFrom, n.log.have, MaxRepairs)
		p.RepairTo = n.log.have
		if len(p.Repairs) == MaxRepairs {
			p.RepairTo = p.Repairs[MaxRepairs-1].GetSeq()
		}
	}
	d.repairFrom = noRepair
	n.metrics.PingsSent.Add(1)
	n.send(&pb.Envelope{Body: &pb.Envelope_Ping{Ping: p}})
	d.pongSeq[n.id] = d.pingSeq
	n.updateLease()
}

// updateLease extends the lease to LeaseTimeout after the newest PING a
// majority of the view (this node included) has answered. Members answer
// only the arbiter of their own term and switch terms only when it handed
// over or fell silent for TakeoverTimeout > LeaseTimeout, so two leases
// never overlap.
func (n *Node) updateLease() {
	d := n.duty
	seqs := make([]uint64, 0, len(n.view))
	for _, m := range n.view {
		seqs = append(seqs, d.pongSeq[m.id])
	}
	slices.Sort(seqs)
	k := seqs[len(seqs)-n.majority()]
	if k == 0 || d.pingSeq-k >= pingRing {
		return
	}
	if until := d.pingSent[k%pingRing].Add(n.cfg.LeaseTimeout); until.After(d.leaseUntil) {
		d.leaseUntil = until
	}
	if n.leased() {
		d.lastLeased = n.now
	}
}

func (n *Node) leased() bool { return n.duty != nil && n.now.Before(n.duty.leaseUntil) }

func (n *Node) synced() bool {
	return n.log.have >= max(n.duty.syncTarget, n.log.last)
}

// serving reports whether this node may decide now: on duty, leased, with
// every grant its predecessors made, and not handing off.
func (n *Node) serving() bool {
	return n.duty != nil && n.duty.handoff == nil && !n.duty.newEpoch && n.leased() && n.synced() && !n.behind()
}

func (n *Node) dutyTimers() {
	d := n.duty
	if n.leased() {
		d.lastLeased = n.now
	}
	if n.now.Sub(d.lastLeased) >= n.cfg.TakeoverTimeout {
		n.abdicate()
		return
	}
	if d.handoff != nil {
		h := d.handoff
		switch {
		case !n.now.Before(h.deadline):
			// No ACK: treat the successor like a frozen member.
			n.metrics.HandoffSkips.Add(1)
			h.skipped = append(h.skipped, h.to)
			n.pickSuccessor()
		case !n.now.Before(h.retryAt):
			n.metrics.HandoffRetries.Add(1)
			n.sendHandoff()
		}
		return
	}
	if !n.now.Before(d.nextPing) {
		n.ping()
	}
	switch {
	case n.synced():
	case n.log.have > d.syncHave:
		// Still catching up: wait as long as grants keep coming.
		d.syncHave = n.log.have
		d.syncDeadline = n.now.Add(n.cfg.SyncTimeout)
	case !n.now.Before(d.syncDeadline):
		n.giveUpSync()
	}
}

// abdicate gives up a term that has had no lease for TakeoverTimeout: this
// side of a partition is a minority, or another member took over. The node
// then follows whoever holds the duty.
func (n *Node) abdicate() {
	n.metrics.Abdications.Add(1)
	n.duty = nil
	n.holder = 0
	n.forcedLost = true
	n.takeoverHold = n.now.Add(n.cfg.TakeoverTimeout)
	n.event(Event{Kind: EventDutyEnd, Stamp: n.stamp})
	n.requestView()
}

// giveUpSync: grants known to exist never arrived. They are given up, and
// the term moves to a new lap so that no resource they granted can be
// granted twice in one lap.
func (n *Node) giveUpSync() {
	target := max(n.duty.syncTarget, n.log.last)
	n.metrics.SyncGiveUps.Add(1)
	n.metrics.GrantsLost.Add(target - n.log.have)
	n.log.skipTo(target)
	unsealed := n.duty.newEpoch
	n.resume()
	n.duty.newEpoch = unsealed // a takeover still owes its new epoch
}

// resume opens a new term of this node's own in the next lap.
func (n *Node) resume() {
	n.metrics.Laps.Add(1)
	n.adoptTerm(Stamp{Epoch: n.stamp.Epoch, Lap: n.stamp.Lap + 1, TS: uint32(n.placeOf(n.id) * RangeSize)}, n.id)
	n.becomeHolder(ViaResume, n.log.last)
}

// serve decides what waits: departures, queued claims, then silent
// members to drop.
func (n *Node) serve() {
	if d := n.duty; d != nil && d.newEpoch && d.handoff == nil && n.leased() && n.synced() && !n.behind() {
		n.sealTakeover()
	}
	for n.serving() && len(n.duty.leaves) > 0 {
		id := n.duty.leaves[0]
		n.duty.leaves = n.duty.leaves[1:]
		if id != n.id && n.placeOf(id) >= 0 {
			n.removeMember(id, pb.ViewChange_LEFT)
		}
	}
	for n.serving() && len(n.duty.queue) > 0 {
		q := n.duty.queue[0]
		n.duty.queue = n.duty.queue[1:]
		if n.placeOf(q.from) >= 0 {
			n.decide(q.from, q.resource)
		}
	}
	if n.cfg.NeverDrop {
		return
	}
	for n.serving() {
		victim := MemberID(0)
		for _, m := range n.view {
			if m.id != n.id && n.now.Sub(n.heard[m.id]) >= n.cfg.DropAfter {
				victim = m.id
				break
			}
		}
		if victim == 0 {
			return
		}
		n.removeMember(victim, pb.ViewChange_DROPPED)
	}
}

// onClaim: a claim reaches the arbiter. Claims stamped in an earlier term
// or epoch are discarded (the paper refuses late pick-ups, §3.3); the
// claimant repeats its claim with the current stamp. A claim sent to the
// predecessor that handed over is still taken: it was made under the same
// grants, which came with the duty, and the predecessor no longer decides.
func (n *Node) onClaim(from MemberID, r ResourceID, st Stamp) {
	d := n.duty
	if d.sealed != 0 && st.Epoch == d.sealed && st.Lap == n.stamp.Lap && st.place() == n.stamp.place() {
		st.Epoch = n.stamp.Epoch // sent in this very term, just before it moved to a new epoch
	}
	switch {
	case st.Epoch < n.stamp.Epoch:
		n.metrics.ClaimsStale.Add(1)
		n.metrics.refuse(RefusedStaleEpoch)
		return
	case st.Epoch > n.stamp.Epoch || termCompare(st, n.stamp) > 0:
		return // the claimant knows a newer term than ours: not for us
	case termCompare(st, n.stamp) < 0 && !(d.via == ViaHandoff && termCompare(st, d.predecessor) == 0):
		n.metrics.ClaimsStale.Add(1)
		n.metrics.refuse(RefusedStaleTerm)
		return
	}
	if n.serving() {
		n.decide(from, r)
		return
	}
	if slices.Contains(d.queue, queuedClaim{from, r}) {
		return
	}
	if len(d.queue) >= n.cfg.MaxQueuedClaims {
		n.metrics.ClaimsDropped.Add(1)
		return
	}
	n.metrics.ClaimsQueued.Add(1)
	d.queue = append(d.queue, queuedClaim{from, r})
}

// decide grants r to the first claimant and denies it to later ones.
func (n *Node) decide(from MemberID, r ResourceID) {
	if g, ok := n.log.holderOf(r); ok {
		if g.to == from {
			// The claimant missed its GRANT: send it again (no new event;
			// the entry keeps the stamp it was made at, perhaps by an
			// earlier arbiter, and our stamp vouches for the copy).
			n.send(&pb.Envelope{Body: &pb.Envelope_Grant{Grant: &pb.Grant{Entry: g.wire()}}})
			if from == n.id {
				n.resolveClaim(r)
			}
			return
		}
		n.metrics.Denies.Add(1)
		if from == n.id {
			if n.resolveClaim(r) {
				n.event(Event{Kind: EventDeny, Resource: r, Member: g.to, Stamp: n.stamp})
			}
			return
		}
		n.send(&pb.Envelope{Body: &pb.Envelope_Deny{Deny: &pb.Deny{Resource: uint64(r), To: uint32(from), Holder: uint32(g.to)}}})
		return
	}
	n.stamp.TS++
	g := grant{seq: n.log.last + 1, stamp: n.stamp, resource: r, to: from}
	n.metrics.Grants.Add(1)
	n.send(&pb.Envelope{Body: &pb.Envelope_Grant{Grant: &pb.Grant{Entry: g.wire()}}})
	n.learn(g)
	n.afterEvent()
}

// afterEvent hands the duty on once the term's ten timestamps are used.
func (n *Node) afterEvent() {
	if n.stamp.TS%RangeSize == RangeSize-1 {
		n.startHandoff()
	}
}

// admit answers a JOIN (paper §3.7): GAME_FULL, or the requested team if it
// has room, else a team with room (forced), then OK_TO_JOIN with the new
// view. A retried JOIN of an admitted member gets its ADMIT again.
func (n *Node) admit(j *pb.Join) {
	for _, m := range n.view {
		if m.nonce == j.GetNonce() && (j.GetId() == 0 || MemberID(j.GetId()) == m.id) {
			n.send(&pb.Envelope{Body: &pb.Envelope_Admit{Admit: &pb.Admit{
				Nonce: m.nonce, Id: uint32(m.id), Team: uint32(m.team), View: viewWire(n.stamp.Epoch, n.view),
				Next: n.stamp.wire(), GrantSeq: n.log.last,
			}}})
			return
		}
	}
	want := MemberID(j.GetId())
	if want != 0 && n.placeOf(want) >= 0 {
		n.metrics.Fulls.Add(1)
		n.metrics.refuse(RefusedIDTaken)
		n.send(&pb.Envelope{Body: &pb.Envelope_Full{Full: &pb.Full{Nonce: j.GetNonce(), Reason: pb.Full_ID_TAKEN}}})
		return
	}
	if len(n.view) >= n.cfg.MaxMembers {
		n.metrics.Fulls.Add(1)
		n.send(&pb.Envelope{Body: &pb.Envelope_Full{Full: &pb.Full{Nonce: j.GetNonce(), Reason: pb.Full_GAME_FULL}}})
		return
	}
	if want == 0 {
		for want = 1; n.placeOf(want) >= 0; want++ {
		}
	}
	team, forced := n.assignTeam(Team(j.GetTeam()))
	n.stamp.TS++
	old := n.stamp
	// The newcomer takes the last place, so nobody's range moves.
	nv := append(slices.Clone(n.view), member{id: want, team: team, nonce: j.GetNonce()})
	next := Stamp{Epoch: nextEpoch(old.Epoch, n.id), Lap: old.Lap, TS: old.TS}
	n.sendAt(old, &pb.Envelope{Body: &pb.Envelope_Admit{Admit: &pb.Admit{
		Nonce: j.GetNonce(), Id: uint32(want), Team: uint32(team), Forced: forced,
		View: viewWire(next.Epoch, nv), Next: next.wire(), GrantSeq: n.log.last,
	}}})
	n.metrics.Admits.Add(1)
	n.installView(nv, next, n.id)
	n.event(Event{Kind: EventMemberJoined, Member: want, Team: team, Forced: forced, Stamp: next})
	n.afterEvent()
}

func (n *Node) assignTeam(want Team) (Team, bool) {
	count := make([]int, n.cfg.Teams+1)
	for _, m := range n.view {
		if int(m.team) <= n.cfg.Teams {
			count[m.team]++
		}
	}
	valid := want >= 1 && int(want) <= n.cfg.Teams
	if valid && count[want] < n.cfg.TeamSize {
		return want, false
	}
	best := Team(0)
	for t := 1; t <= n.cfg.Teams; t++ {
		if count[t] < n.cfg.TeamSize && (best == 0 || count[t] < count[best]) {
			best = Team(t)
		}
	}
	return best, valid
}

// removeMember takes id out of the view (its LEAVE, a drop or an expel).
// Places after it move down by one; this node's clock moves with its range.
func (n *Node) removeMember(id MemberID, reason pb.ViewChange_Reason) {
	n.stamp.TS++
	old := n.stamp
	offset := old.TS - uint32(n.placeOf(n.id)*RangeSize)
	newView := slices.DeleteFunc(slices.Clone(n.view), func(m member) bool { return m.id == id })
	me := slices.IndexFunc(newView, func(m member) bool { return m.id == n.id })
	next := Stamp{Epoch: nextEpoch(old.Epoch, n.id), Lap: old.Lap, TS: uint32(me*RangeSize) + offset}
	n.sendAt(old, &pb.Envelope{Body: &pb.Envelope_View{View: &pb.ViewChange{
		Reason: reason, Subject: uint32(id), View: viewWire(next.Epoch, newView), Next: next.wire(),
	}}})
	r := ReasonLeft
	if reason == pb.ViewChange_DROPPED {
		r = ReasonDropped
		n.metrics.Drops.Add(1)
	} else {
		n.metrics.Leaves.Add(1)
	}
	n.installView(newView, next, n.id)
	n.event(Event{Kind: EventMemberLeft, Member: id, Reason: r, Stamp: next})
	n.afterEvent()
}

// onLeave removes a member at its request, at once or as soon as this
// arbiter serves.
func (n *Node) onLeave(sender MemberID) {
	d := n.duty
	switch {
	case d == nil:
	case n.serving():
		n.removeMember(sender, pb.ViewChange_LEFT)
	case !slices.Contains(d.leaves, sender):
		d.leaves = append(d.leaves, sender) // bounded by the view
	}
}

// onViewRequest answers a member that fell behind (a newer epoch than its
// own, or it lost its arbiter) with the current view, marked with whether
// this arbiter holds a lease (see onCatchUp). One answer per heartbeat
// serves everyone.
func (n *Node) onViewRequest() {
	d := n.duty
	if d == nil || n.now.Before(d.catchUpNext) {
		return
	}
	d.catchUpNext = n.now.Add(n.cfg.Heartbeat)
	n.send(&pb.Envelope{Body: &pb.Envelope_View{View: &pb.ViewChange{
		Reason: pb.ViewChange_CATCH_UP, View: viewWire(n.stamp.Epoch, n.view), Next: n.stamp.wire(),
		GrantSeq: n.log.last, Leased: n.leased(),
	}}})
}

// startHandoff ends serving: the paper's SYNC to the next member. Claims
// still waiting go with it, so that the successor decides them first
// (first-come across terms); departures still waiting are asked again.
func (n *Node) startHandoff() {
	d := n.duty
	h := &handoff{}
	for _, q := range d.queue[:min(len(d.queue), MaxHandedClaims)] {
		h.queue = append(h.queue, &pb.QueuedClaim{Member: uint32(q.from), Resource: uint64(q.resource)})
	}
	d.handoff = h
	d.queue = nil
	d.leaves = nil
	n.pickSuccessor()
}

// pickSuccessor chooses the next member in place order that answered a
// recent PING and has not failed to ACK, and hands over to it; its term
// starts at 10·place, so the ts leaps 10 per skipped member, and past the
// last place the lap wraps. With nobody left, this node serves again in
// the next lap.
func (n *Node) pickSuccessor() {
	h := n.duty.handoff
	size := len(n.view)
	me := n.placeOf(n.id)
	for k := 1; k < size; k++ {
		q := (me + k) % size
		m := n.view[q]
		if slices.Contains(h.skipped, m.id) {
			continue
		}
		if !n.active(m.id) {
			n.metrics.InactiveSkips.Add(1)
			h.skipped = append(h.skipped, m.id)
			continue
		}
		if n.lagging(m.id) {
			// Back from a freeze or a partition, its grant log still
			// filling: it would serve only after catching up. Skip it this
			// lap, like an inactive member.
			n.metrics.LaggingSkips.Add(1)
			h.skipped = append(h.skipped, m.id)
			continue
		}
		next := Stamp{Epoch: n.stamp.Epoch, Lap: n.stamp.Lap, TS: uint32(q * RangeSize)}
		if q <= me {
			next.Lap++
		}
		h.to, h.next = m.id, next
		h.deadline = n.now.Add(n.cfg.HandoffTimeout)
		n.handedTo, n.handedNext = m.id, next
		n.sendHandoff()
		return
	}
	if n.leaving {
		// Nobody to take over: go anyway; the others take over when they
		// notice the silence.
		n.leaveGame(ReasonLeft)
		return
	}
	n.resume()
	n.takeClaims(h.queue) // decided first in the new term
}

// takeClaims queues claims handed over with the duty.
func (n *Node) takeClaims(qs []*pb.QueuedClaim) {
	for _, q := range qs {
		n.duty.queue = append(n.duty.queue, queuedClaim{from: MemberID(q.GetMember()), resource: ResourceID(q.GetResource())})
	}
}

func (n *Node) sendHandoff() {
	h := n.duty.handoff
	h.retryAt = n.now.Add(n.cfg.HandoffRetry)
	n.send(&pb.Envelope{Body: &pb.Envelope_Handoff{Handoff: &pb.Handoff{
		To: uint32(h.to), Next: h.next.wire(), GrantSeq: n.log.last, DutyState: n.dutyState, Queue: h.queue,
	}}})
}
