package arbiter

import (
	"slices"

	pb "github.com/overworld-p2p/overworld/game/arbiter/arbiterpb"
)

// handle dispatches one decoded message. Every refusal is counted; nothing
// refused changes state.
func (n *Node) handle(env *pb.Envelope) {
	sender := MemberID(env.GetSender())
	switch b := env.Body.(type) {
	case *pb.Envelope_Join:
		n.onJoin(env, b.Join)
		return
	case *pb.Envelope_Admit:
		n.onAdmit(env, b.Admit)
		return
	case *pb.Envelope_Full:
		n.onFull(env, b.Full)
		return
	}
	if n.phase == PhaseJoining && (n.cfg.Game == 0 || env.GetGame() == n.cfg.Game) {
		n.gameHeard = n.now // a game is running; the start rule must not fire
	}
	if n.phase != PhaseMember || sender == n.id {
		return
	}
	if env.GetGame() != n.game {
		n.metrics.refuse(RefusedWrongGame)
		return
	}
	st := stampOf(env.GetStamp())
	if v, ok := env.Body.(*pb.Envelope_View); ok && v.View.GetReason() == pb.ViewChange_CATCH_UP {
		// The sender may have joined in an epoch this node missed.
		n.onCatchUp(sender, st, v.View)
		return
	}
	if n.placeOf(sender) < 0 {
		n.metrics.refuse(RefusedUnknownMember)
		return
	}
	_, asking := env.Body.(*pb.Envelope_ViewRequest)
	if !asking && st.Epoch == n.stamp.Epoch && (st.TS >= n.lapLen() || st.Lap > n.stamp.Lap+1 && !n.holderLost()) {
		// The paper's clock cannot leap beyond the next lap: a forgery,
		// unless this node has lost the duty and is catching up. (A member
		// asking for the view may be lost itself, ahead after failed
		// takeovers: its request carries no authority.)
		n.metrics.refuse(RefusedFutureStamp)
		return
	}
	if st.Epoch>>32 > n.stamp.Epoch>>32 && isDuty(env) {
		// An arbiter serves an epoch with more changes than ours: a
		// majority moved on without us.
		n.seenEpoch = max(n.seenEpoch, st.Epoch)
		n.seenEpochAt = n.now
		n.requestView()
	}
	n.heard[sender] = n.now
	n.metrics.MessagesHandled.Add(1)
	switch b := env.Body.(type) {
	case *pb.Envelope_Leave:
		n.onLeave(sender)
	case *pb.Envelope_ViewRequest:
		n.onViewRequest()
	case *pb.Envelope_Pong:
		n.onPong(sender, st, b.Pong)
	case *pb.Envelope_Claim:
		if n.duty != nil {
			n.onClaim(sender, ResourceID(b.Claim.GetResource()), st)
		}
	case *pb.Envelope_Chat:
		n.onChat(sender, st, b.Chat)
	default:
		// Duty messages: only the member serving the stamp may send them.
		if !n.acceptDuty(sender, st) {
			return
		}
		switch b := env.Body.(type) {
		case *pb.Envelope_View:
			n.onViewChange(sender, st, b.View)
		case *pb.Envelope_Handoff:
			n.onHandoff(sender, b.Handoff)
		case *pb.Envelope_Ping:
			n.onPing(sender, b.Ping)
		case *pb.Envelope_Grant:
			// A new grant is stamped with the event it is; a copy for a
			// claimant that missed it keeps its own, older stamp.
			g := grantOf(b.Grant.GetEntry())
			if stampLess(st, g.stamp) {
				n.metrics.refuse(RefusedInconsistent)
				return
			}
			n.learn(g)
		case *pb.Envelope_Deny:
			if MemberID(b.Deny.GetTo()) == n.id && n.resolveClaim(ResourceID(b.Deny.GetResource())) {
				n.event(Event{Kind: EventDeny, Resource: ResourceID(b.Deny.GetResource()), Member: MemberID(b.Deny.GetHolder()), Stamp: st})
			}
		}
		// An ACK needs nothing more: accepting its stamp ended the hand-off.
	}
}

// isDuty reports whether env is a message only the arbiter sends.
func isDuty(env *pb.Envelope) bool {
	switch env.Body.(type) {
	case *pb.Envelope_Ping, *pb.Envelope_Grant, *pb.Envelope_Deny, *pb.Envelope_Handoff, *pb.Envelope_Ack, *pb.Envelope_View:
		return true
	}
	return false
}

// acceptDuty checks a duty message's stamp — the sender must serve it (the
// paper's serverID check, by placement) and it must not be older than this
// node's term — and adopts it: a higher ts of the same term, or a new term
// if it was handed over, the old arbiter is silent, or the sender simply
// moves on to its own next term.
func (n *Node) acceptDuty(sender MemberID, st Stamp) bool {
	switch {
	case st.Epoch < n.stamp.Epoch:
		n.metrics.refuse(RefusedStaleEpoch)
		return false
	case st.Epoch > n.stamp.Epoch:
		n.requestView() // we missed a membership change
		return false
	case n.behind():
		return false // our epoch is left behind: catch up first
	case n.owner(st.TS) != sender:
		n.metrics.refuse(RefusedForgedServer)
		return false
	}
	switch termCompare(st, n.stamp) {
	case -1:
		n.metrics.refuse(RefusedStaleTerm)
		return false
	case 0:
		if st.TS > n.stamp.TS {
			n.stamp.TS = st.TS
		}
		n.holder = sender
		n.holderHeard = n.now
		n.forcedLost = false
		return true
	}
	justified := n.holderLost() ||
		(sender == n.holder && n.duty == nil) ||
		(sender == n.handedTo && termCompare(st, n.handedNext) >= 0)
	if !justified {
		n.metrics.refuse(RefusedOutOfTurn)
		return false
	}
	n.adoptTerm(st, sender)
	return true
}

// adoptTerm makes st, served by owner, this node's current term.
func (n *Node) adoptTerm(st Stamp, owner MemberID) {
	if owner != n.holder || termCompare(st, n.stamp) != 0 {
		// Claims sent to the old arbiter may have died with its term:
		// send them to the new one at once.
		for i := range n.claims {
			n.claims[i].retryAt = n.now
		}
	}
	n.stamp = st
	n.holder = owner
	n.holderHeard = n.now
	n.forcedLost = false
	n.handedTo = 0
	if n.duty != nil && owner != n.id {
		n.endDuty(owner)
	}
}

func (n *Node) onJoin(env *pb.Envelope, j *pb.Join) {
	switch n.phase {
	case PhaseJoining:
		if j.GetNonce() == n.nonce || (n.cfg.Game != 0 && env.GetGame() != 0 && env.GetGame() != n.cfg.Game) {
			return
		}
		// The start rule (§3.5): two joiners and no game; the one that has
		// waited longer creates it (ties: the lower nonce) and admits the
		// other.
		mine := uint64(n.now.Sub(n.joinSince).Milliseconds())
		quiet := n.now.Sub(n.gameHeard) >= n.cfg.StartQuiet
		if quiet && (mine > j.GetWaitedMs() || mine == j.GetWaitedMs() && n.nonce < j.GetNonce()) {
			n.create()
			n.admit(j)
		}
	case PhaseMember:
		// Only the arbiter answers a JOIN; the others ignore it (§3.4).
		if n.duty == nil || (env.GetGame() != 0 && env.GetGame() != n.game) || !n.serving() {
			return
		}
		n.admit(j)
	}
}

func (n *Node) onAdmit(env *pb.Envelope, a *pb.Admit) {
	sender := MemberID(env.GetSender())
	st := stampOf(env.GetStamp())
	nv := viewOf(a.GetView())
	next := stampOf(a.GetNext())
	if n.phase == PhaseJoining {
		if a.GetNonce() != n.nonce {
			if n.cfg.Game == 0 || env.GetGame() == n.cfg.Game {
				n.gameHeard = n.now
			}
			return
		}
		if n.cfg.Game != 0 && env.GetGame() != n.cfg.Game {
			n.metrics.refuse(RefusedWrongGame)
			return
		}
		// A joiner cannot check the arbiter against a view it does not
		// have yet; it checks that the answer is consistent in itself.
		me := slices.IndexFunc(nv, func(m member) bool { return m.id == MemberID(a.GetId()) })
		if me < 0 || nv[me].nonce != n.nonce || nv[me].team != Team(a.GetTeam()) ||
			next.Epoch != a.GetView().GetEpoch() || !ownsIn(nv, next, sender) {
			n.metrics.refuse(RefusedInconsistent)
			return
		}
		n.phase = PhaseMember
		n.id = MemberID(a.GetId())
		n.game = env.GetGame()
		n.log = newGrantLog(n.cfg.LogWindow)
		n.log.startAt(a.GetGrantSeq())
		n.installView(nv, next, sender)
		n.event(Event{Kind: EventJoined, Member: n.id, Team: n.team, Forced: a.GetForced(), Stamp: next})
		return
	}
	if n.phase != PhaseMember || env.GetGame() != n.game || sender == n.id {
		return
	}
	if n.placeOf(sender) < 0 {
		n.metrics.refuse(RefusedUnknownMember)
		return
	}
	if a.GetView().GetEpoch() <= n.stamp.Epoch {
		return // a retried JOIN answered again: nothing new
	}
	if !n.acceptDuty(sender, st) {
		return
	}
	newcomer := member{id: MemberID(a.GetId()), team: Team(a.GetTeam()), nonce: a.GetNonce()}
	if !n.followsView(a.GetView(), next, sender, append(slices.Clone(n.view), newcomer)) {
		return
	}
	n.installView(nv, next, sender)
	n.event(Event{Kind: EventMemberJoined, Member: newcomer.id, Team: newcomer.team, Forced: a.GetForced(), Stamp: next})
}

func (n *Node) onFull(env *pb.Envelope, f *pb.Full) {
	if n.phase != PhaseJoining || f.GetNonce() != n.nonce {
		return
	}
	r := ReasonFull
	if f.GetReason() == pb.Full_ID_TAKEN {
		r = ReasonIDTaken
	}
	n.phase = PhaseIdle
	n.event(Event{Kind: EventRefused, Reason: r})
}

// onViewChange applies a member's removal made by the arbiter (the
// envelope's stamp, already accepted, is in the old epoch).
func (n *Node) onViewChange(sender MemberID, st Stamp, v *pb.ViewChange) {
	e := v.GetView().GetEpoch()
	if e <= n.stamp.Epoch {
		return
	}
	if e != nextEpoch(n.stamp.Epoch, sender) {
		n.requestView() // a change we cannot apply to our view: ask for the view
		return
	}
	subject := MemberID(v.GetSubject())
	if v.GetReason() == pb.ViewChange_TAKEOVER {
		// Same members, new epoch: the sender, which took over, serves on.
		if n.followsView(v.GetView(), stampOf(v.GetNext()), sender, n.view) {
			n.installView(viewOf(v.GetView()), stampOf(v.GetNext()), sender)
			if to := v.GetSkipTo(); to <= v.GetGrantSeq()+n.log.window {
				n.log.absent(v.GetGrantSeq(), to)
			}
		}
		return
	}
	want := slices.DeleteFunc(slices.Clone(n.view), func(m member) bool { return m.id == subject })
	if len(want) == len(n.view) {
		n.metrics.refuse(RefusedInconsistent)
		return
	}
	if !n.followsView(v.GetView(), stampOf(v.GetNext()), sender, want) {
		return
	}
	reason := ReasonLeft
	if v.GetReason() == pb.ViewChange_DROPPED {
		reason = ReasonDropped
	}
	if subject == n.id {
		if n.leaving {
			reason = ReasonLeft
		}
		n.leaveGame(reason)
		return
	}
	n.installView(viewOf(v.GetView()), stampOf(v.GetNext()), sender)
	n.event(Event{Kind: EventMemberLeft, Member: subject, Reason: reason, Stamp: n.stamp})
}

// onCatchUp installs the current view an arbiter sent to members that fell
// behind. The sender must serve the stamp in that view. A node that follows
// a live arbiter takes it only from a leased arbiter of a newer epoch; a
// node that lost its arbiter (silent for TakeoverTimeout, so its last PONG
// promises nothing any more) also from one without a lease if the epoch is
// newer — otherwise members that missed epochs and an arbiter waiting for
// their PONGs would wait for each other forever — and of its own epoch
// only from a leased one, so it follows the term that really serves.
func (n *Node) onCatchUp(sender MemberID, st Stamp, v *pb.ViewChange) {
	e := v.GetView().GetEpoch()
	lost := n.holderLost() || n.behind() && e >= n.seenEpoch
	switch {
	case e > n.stamp.Epoch && !(lost || v.GetLeased()):
		return
	case e == n.stamp.Epoch && !(lost && v.GetLeased()):
		return
	case e < n.stamp.Epoch && !(lost && v.GetLeased()):
		// An older epoch's arbiter: unless ours is gone and that one holds
		// a lease (our epoch's side of a partition died out), stale.
		n.metrics.refuse(RefusedStaleEpoch)
		return
	}
	nv := viewOf(v.GetView())
	if st.Epoch != e || stampOf(v.GetNext()) != st || !ownsIn(nv, st, sender) {
		n.metrics.refuse(RefusedInconsistent)
		return
	}
	if slices.IndexFunc(nv, func(m member) bool { return m.id == n.id }) < 0 {
		n.leaveGame(ReasonDropped)
		return
	}
	old := n.view
	if e != n.stamp.Epoch {
		// We missed an epoch, or were on another history's: after a
		// takeover our grants may not be the group's. Take the arbiter's
		// log; repairs fill it.
		n.restartLog(v.GetGrantSeq())
	}
	n.installView(nv, st, sender)
	for _, m := range nv {
		if !slices.ContainsFunc(old, func(o member) bool { return o.id == m.id }) {
			n.event(Event{Kind: EventMemberJoined, Member: m.id, Team: m.team, Stamp: st})
		}
	}
	for _, o := range old {
		if !slices.ContainsFunc(nv, func(m member) bool { return m.id == o.id }) {
			n.event(Event{Kind: EventMemberLeft, Member: o.id, Reason: ReasonDropped, Stamp: st})
		}
	}
}

// followsView checks that a view change names the view this node expects
// (want, in place order) at the next epoch, and that its sender serves next.
func (n *Node) followsView(v *pb.View, next Stamp, sender MemberID, want []member) bool {
	nv := viewOf(v)
	if v.GetEpoch() != nextEpoch(n.stamp.Epoch, sender) || next.Epoch != v.GetEpoch() || len(nv) != len(want) || !ownsIn(nv, next, sender) {
		n.metrics.refuse(RefusedInconsistent)
		return false
	}
	for i := range nv {
		if nv[i].id != want[i].id || nv[i].team != want[i].team {
			n.metrics.refuse(RefusedInconsistent)
			return false
		}
	}
	return true
}

// installView makes nv (epoch st.Epoch) the view, served by holder at st.
func (n *Node) installView(nv []member, st Stamp, holder MemberID) {
	n.view = nv
	if p := n.placeOf(n.id); p >= 0 {
		n.team = nv[p].team
	}
	for id := range n.heard {
		if n.placeOf(id) < 0 {
			delete(n.heard, id)
		}
	}
	for id := range n.ponged {
		if n.placeOf(id) < 0 {
			delete(n.ponged, id)
		}
	}
	for _, m := range nv {
		if _, ok := n.heard[m.id]; !ok {
			n.heard[m.id] = n.now
		}
	}
	n.adoptTerm(st, holder)
}

func (n *Node) onHandoff(sender MemberID, h *pb.Handoff) {
	to := MemberID(h.GetTo())
	next := stampOf(h.GetNext())
	n.handedTo, n.handedNext = to, next
	n.dutyState = slices.Clone(h.GetDutyState())
	if to != n.id {
		return
	}
	if n.duty != nil && termCompare(next, n.stamp) == 0 {
		// The ACK was lost; the hand-off is repeated.
		n.sendAt(n.stamp, &pb.Envelope{Body: &pb.Envelope_Ack{Ack: &pb.Ack{From: uint32(sender)}}})
		return
	}
	if next.Epoch != n.stamp.Epoch || next.TS%RangeSize != 0 || n.owner(next.TS) != n.id ||
		termCompare(next, n.stamp) <= 0 || next.Lap > n.stamp.Lap+1 {
		n.metrics.refuse(RefusedInconsistent)
		return
	}
	if next.Lap > n.stamp.Lap {
		n.metrics.Laps.Add(1)
	}
	prev := n.stamp
	n.adoptTerm(next, n.id)
	n.sendAt(next, &pb.Envelope{Body: &pb.Envelope_Ack{Ack: &pb.Ack{From: uint32(sender)}}})
	n.becomeHolder(ViaHandoff, n.boundedSeq(h.GetGrantSeq()))
	n.duty.predecessor = prev
	n.takeClaims(h.GetQueue())
}

func (n *Node) onPing(sender MemberID, p *pb.Ping) {
	for _, e := range p.GetRepairs() {
		n.learn(grantOf(e))
	}
	if from, to := p.GetRepairFrom(), p.GetRepairTo(); from <= n.log.have && to > n.log.have && to <= p.GetGrantHave() {
		n.log.skipTo(min(to, n.boundedSeq(to))) // the arbiter has nothing else in (from, to]
	}
	if have, from := p.GetGrantHave(), p.GetDigestFrom(); p.GetDigest() != 0 && have <= n.log.have &&
		from < have && from+1 >= n.log.floor() && n.log.digest(from, have) != p.GetDigest() {
		// Our grants differ from the arbiter's: we followed an arbiter
		// whose last grants did not survive. Take the arbiter's log.
		n.metrics.LogResets.Add(1)
		n.restartLog(p.GetGrantSeq())
	}
	// Members carry different slices of what the arbiter lacks, so that a
	// far-behind arbiter catches up several slices per heartbeat; each
	// slice is complete up to what this member knows completely.
	pong := &pb.Pong{To: uint32(sender), Seq: p.GetSeq(), GrantSeq: n.log.last, GrantHave: n.log.have}
	if from := p.GetGrantHave(); from < n.log.have {
		// The slice turns with each PING, so that a member that alone
		// holds what the arbiter lacks still carries all of it in turn.
		slice := (uint64(n.placeOf(n.id)) + p.GetSeq()) % carrySlices
		if f := from + slice*MaxRepairs; f < n.log.have {
			from = f
		}
		pong.CarryFrom = from
		pong.Grants = n.log.after(from, n.log.have, MaxRepairs) // only what it knows completely
		pong.CarryTo = n.log.have
		if len(pong.Grants) == MaxRepairs {
			pong.CarryTo = pong.Grants[MaxRepairs-1].GetSeq()
		}
	}
	n.send(&pb.Envelope{Body: &pb.Envelope_Pong{Pong: pong}})
}

func (n *Node) onPong(sender MemberID, st Stamp, p *pb.Pong) {
	n.ponged[sender] = pongSeen{at: n.now, have: p.GetGrantHave()}
	to := MemberID(p.GetTo())
	if n.duty == nil && sender == n.holder && to != sender && st.Epoch == n.stamp.Epoch &&
		termCompare(st, n.stamp) > 0 && n.owner(st.TS) == to {
		// Our arbiter answers the PING of a later term's arbiter: it handed
		// over, even if we missed the HANDOFF and the ACK.
		n.adoptTerm(st, to)
	}
	d := n.duty
	if d == nil || MemberID(p.GetTo()) != n.id || st.Epoch != n.stamp.Epoch || termCompare(st, n.stamp) != 0 || p.GetSeq() > d.pingSeq {
		return // an answer to another arbiter, or to an earlier term
	}
	if p.GetSeq() > d.pongSeq[sender] {
		d.pongSeq[sender] = p.GetSeq()
	}
	prev := p.GetCarryFrom()
	for _, e := range p.GetGrants() {
		g := grantOf(e)
		if g.seq > n.boundedSeq(g.seq) {
			break // a member cannot know grants a whole window ahead of the arbiter
		}
		n.learn(g)
		if kept := n.log.entries[g.seq]; kept.stamp != g.stamp && g.seq-1 < d.repairFrom {
			d.repairFrom = g.seq - 1 // the sender holds a grant our term overrode: repair it
		}
		if g.seq > prev+1 && g.seq <= p.GetCarryTo() {
			n.log.absent(prev, g.seq-1)
		}
		prev = max(prev, g.seq)
	}
	if to := p.GetCarryTo(); to > prev && to <= n.boundedSeq(to) {
		n.log.absent(prev, to)
	}
	if s := n.boundedSeq(p.GetGrantSeq()); s > d.syncTarget {
		d.syncTarget = s
	}
	if h := p.GetGrantHave(); h < n.log.last && h < d.repairFrom {
		d.repairFrom = h
	}
	n.updateLease()
}

func (n *Node) onChat(sender MemberID, st Stamp, c *pb.Chat) {
	switch {
	case st.Epoch < n.stamp.Epoch:
		n.metrics.refuse(RefusedStaleEpoch)
		return
	case st.Epoch > n.stamp.Epoch:
		n.requestView()
		return
	case termCompare(st, n.stamp) < 0:
		// Sent before the duty moved on (paper §3.3: older messages are
		// discarded).
		n.metrics.refuse(RefusedStaleTerm)
		return
	}
	var team Team
	if c.GetTeam() {
		team = n.teamOf(sender)
		if team != n.team {
			return
		}
	}
	n.metrics.ChatsDelivered.Add(1)
	n.event(Event{Kind: EventChat, Member: sender, Team: team, Text: c.GetText(), Stamp: st})
}

// restartLog drops this node's grant log for the arbiter's, whose newest
// grant is last; repairs fill it. Grants already reported are not reported
// again.
func (n *Node) restartLog(last uint64) {
	n.log = newGrantLog(n.cfg.LogWindow)
	n.log.startAt(last)
}

// learn records a grant heard live, repaired or carried by a PONG, and
// reports the grant of its resource that stands if that changed: a grant
// the log already held, or one an earlier grant of the same resource
// overrides, is not reported; after a log was dropped for the arbiter's, a
// grant reported before may be reported again, or replaced by the one that
// survived.
func (n *Node) learn(g grant) {
	isNew, conflict := n.log.add(g)
	if conflict {
		n.metrics.GrantConflicts.Add(1)
	}
	if !isNew {
		return
	}
	n.metrics.GrantsLearned.Add(1)
	if g.to == n.id {
		n.resolveClaim(g.resource)
	}
	standing, _ := n.log.holderOf(g.resource)
	if n.reported[g.resource] == standing {
		return
	}
	if len(n.reported) >= 4*int(n.log.window) {
		// Bound the table: keep what the log still remembers.
		for r := range n.reported {
			if _, ok := n.log.byResource[r]; !ok {
				delete(n.reported, r)
			}
		}
	}
	n.reported[g.resource] = standing
	n.event(Event{Kind: EventGrant, Resource: standing.resource, Member: standing.to, Stamp: standing.stamp})
}

// carrySlices: members answer a PING with one of this many slices of the
// grants the arbiter lacks, by place and PING.
const carrySlices = 4

// boundedSeq limits how far a peer's report can move a grant target: one
// window past what this node knows.
func (n *Node) boundedSeq(s uint64) uint64 {
	if lim := n.log.last + n.log.window; s > lim {
		return lim
	}
	return s
}

func viewOf(v *pb.View) []member {
	out := make([]member, len(v.GetMembers()))
	for i, m := range v.GetMembers() {
		out[i] = member{id: MemberID(m.GetId()), team: Team(m.GetTeam()), nonce: m.GetNonce()}
	}
	return out
}

func viewWire(epoch uint64, v []member) *pb.View {
	out := &pb.View{Epoch: epoch}
	for _, m := range v {
		out.Members = append(out.Members, &pb.Member{Id: uint32(m.id), Team: uint32(m.team), Nonce: m.nonce})
	}
	return out
}

// ownsIn reports whether sender serves st in view v.
func ownsIn(v []member, st Stamp, sender MemberID) bool {
	p := st.place()
	return p < len(v) && v[p].id == sender
}
