package arbiter_test

import (
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/game/arbiter"
	pb "github.com/overworld-p2p/overworld/game/arbiter/arbiterpb"
)

var (
	propertySeeds = flag.Int("arbiter.seeds", 60, "seeds the property test runs (each a simulated game of about 30 s)")
	traceSeed     = flag.Int64("arbiter.trace", 0, "log every message and event of this property seed")
)

// TestProperties runs games on simNet under loss, delay, jitter,
// partitions, one-way cuts and frozen players, one per seed, and checks the
// protocol's promises (see checker). Runs are deterministic per seed.
func TestProperties(t *testing.T) {
	seeds := *propertySeeds
	if testing.Short() {
		seeds = 10
	}
	var total propertyStats
	for seed := int64(1); seed <= int64(seeds); seed++ {
		st := runProperty(t, seed)
		total.add(st)
	}
	slices.Sort(total.converge)
	q := func(f float64) time.Duration { return total.converge[int(f*float64(len(total.converge)-1))] }
	t.Logf("%d seeds: %d messages, %d grants (%d superseded later, %d of them after healing; %d sync give-ups, %d log resets), "+
		"%d game-pace claims answered within %d hand-offs (busy network: %d), %d clean laps checked, %d partitions, %d freezes, "+
		"%d one-way cuts, %d takeovers; convergence after healing p50 %v p90 %v max %v; %d app-level grant beliefs diverged",
		seeds, total.messages, total.grants, total.superseded, total.supersededCalm, total.syncGiveUps, total.logResets,
		total.claimsChecked, total.maxHandoffsToAnswer, total.maxHandoffsBusy, total.lapsChecked, total.partitions, total.freezes,
		total.cuts, total.takeovers, q(0.5), q(0.9), total.maxConverge, total.appDiverged)
	if total.claimsChecked == 0 || total.lapsChecked == 0 || total.partitions == 0 || total.freezes == 0 || total.takeovers == 0 {
		t.Fatalf("the runs did not exercise the protocol: %+v", total)
	}
}

// TestPropertyDeterministic: one seed twice gives the same message trace.
func TestPropertyDeterministic(t *testing.T) {
	a := runProperty(t, 7)
	b := runProperty(t, 7)
	if a.traceHash != b.traceHash || a.messages != b.messages {
		t.Fatalf("seed 7 ran differently: %x (%d messages) vs %x (%d)", a.traceHash, a.messages, b.traceHash, b.messages)
	}
}

type propertyStats struct {
	messages, grants, claimsChecked, maxHandoffsToAnswer                 int
	lapsChecked, partitions, freezes, cuts, takeovers, superseded        int
	appDiverged, maxHandoffsBusy, syncGiveUps, logResets, supersededCalm int
	maxConverge                                                          time.Duration
	converge                                                             []time.Duration
	traceHash                                                            uint64
}

func (s *propertyStats) add(o propertyStats) {
	s.messages += o.messages
	s.grants += o.grants
	s.claimsChecked += o.claimsChecked
	s.maxHandoffsToAnswer = max(s.maxHandoffsToAnswer, o.maxHandoffsToAnswer)
	s.lapsChecked += o.lapsChecked
	s.partitions += o.partitions
	s.freezes += o.freezes
	s.cuts += o.cuts
	s.takeovers += o.takeovers
	s.superseded += o.superseded
	s.appDiverged += o.appDiverged
	s.maxHandoffsBusy = max(s.maxHandoffsBusy, o.maxHandoffsBusy)
	s.syncGiveUps += o.syncGiveUps
	s.supersededCalm += o.supersededCalm
	s.logResets += o.logResets
	s.maxConverge = max(s.maxConverge, o.maxConverge)
	s.converge = append(s.converge, o.converge...)
}

// Phases of a property run (simulated time from the start).
const (
	phaseSetup    = 2 * time.Second  // create, joins; no loss
	phaseClean    = 12 * time.Second // delay and jitter, no loss; a minority may be frozen throughout
	phaseChaos    = 20 * time.Second // loss, partitions, one-way cuts, freezes
	calmFor       = 4 * time.Second  // after the members found each other again: loss on
	settleFor     = 4 * time.Second  // then no loss: everyone converges
	cleanLapsFrom = phaseSetup + time.Second
	maxFlight     = 100 * time.Millisecond // above any delay + jitter drawn below
)

type grantKey struct {
	seq   uint64
	stamp arbiter.Stamp
}

type claimKey struct {
	who arbiter.MemberID
	r   arbiter.ResourceID
}

type pendingClaim struct {
	at       time.Time
	handoffs int // hand-offs since it was made
	kind     claimKind
}

// claimKind says what is checked of a claim.
type claimKind uint8

const (
	claimEventually claimKind = iota // answered by the end
	claimBusy                        // clean but busy network: hand-offs to the answer measured
	claimGamePace                    // calm network at a game's pace: answered within three hand-offs
)

// checker watches every message sent and every event reported.
type checker struct {
	t    *testing.T
	seed int64
	net  *simNet
	st   propertyStats
	hash uint64

	lastGrant    arbiter.Stamp                  // the last grant sent
	lastTerm     [3]uint64                      // its term (epoch, lap, place)
	closedTerms  map[[3]uint64]bool             // terms another term's grants followed
	grantsSeen   map[grantKey]bool              // grants sent, to tell copies for a claimant that missed one
	perLap       map[[3]uint64]arbiter.MemberID // (resource, epoch, lap) → who got it
	firstHolder  map[arbiter.ResourceID]arbiter.MemberID
	dutyTS       map[[3]uint64]map[uint32]bool // (epoch, lap, sender) → ts used in duty messages
	lapHasChange map[[2]uint64]bool            // (epoch, lap) with a term begun other than by hand-off
	claims       map[claimKey]*pendingClaim
	frozenSince  map[arbiter.MemberID]time.Time
	holderOf     map[arbiter.MemberID]arbiter.MemberID
	calm         bool                                                         // the network healed and the members found each other
	lapSeen      map[[2]uint64][2]time.Time                                   // (epoch, lap) → first and last duty message
	frozenClean  map[arbiter.MemberID]bool                                    // frozen through the clean phase
	standing     map[arbiter.MemberID]map[arbiter.ResourceID]arbiter.MemberID // the last grant each node reported
}

func runProperty(t *testing.T, seed int64) propertyStats {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	net := newSimNet(seed)
	size := 3 + rng.Intn(4) // 3..6 players
	net.base = link{delay: time.Duration(1+rng.Intn(15)) * time.Millisecond, jitter: time.Duration(rng.Intn(20)) * time.Millisecond}
	cfg := arbiter.Config{MaxMembers: 8, DropAfter: time.Minute}
	c := &checker{
		t: t, seed: seed, net: net, hash: fnv.New64a().Sum64(),
		perLap: map[[3]uint64]arbiter.MemberID{}, grantsSeen: map[grantKey]bool{}, closedTerms: map[[3]uint64]bool{},
		firstHolder: map[arbiter.ResourceID]arbiter.MemberID{}, dutyTS: map[[3]uint64]map[uint32]bool{},
		lapHasChange: map[[2]uint64]bool{}, claims: map[claimKey]*pendingClaim{},
		frozenSince: map[arbiter.MemberID]time.Time{}, standing: map[arbiter.MemberID]map[arbiter.ResourceID]arbiter.MemberID{},
		holderOf: map[arbiter.MemberID]arbiter.MemberID{}, lapSeen: map[[2]uint64][2]time.Time{},
		frozenClean: map[arbiter.MemberID]bool{},
	}
	net.onSend = c.onSend
	net.onReady = c.onReady
	for i := 1; i <= size; i++ {
		net.add(arbiter.MemberID(i), cfg)
	}
	start := net.now
	at := func(d time.Duration) time.Time { return start.Add(d) }
	api := func(n *simNode, r arbiter.Ready, err error) {
		if err == nil {
			net.apply(n, r, "api")
		}
	}
	first := net.nodes[0]
	r, err := first.node.Create(net.now)
	api(first, r, err)
	for _, n := range net.nodes[1:] {
		r, err := n.node.Join(net.now, 0)
		api(n, r, err)
	}
	net.run(at(phaseSetup))
	for _, n := range net.nodes {
		if n.node.Status().Phase != arbiter.PhaseMember {
			t.Fatalf("seed %d: node %d did not join: %+v", seed, n.id, n.node.Status())
		}
	}

	// Clean phase: a minority may stay frozen all along; the others must
	// each serve exactly their ten timestamps in every lap.
	var frozenClean []*simNode
	if rng.Intn(2) == 0 {
		for _, i := range rng.Perm(size)[:rng.Intn((size-1)/2+1)] {
			frozenClean = append(frozenClean, net.nodes[i])
		}
	}
	for _, n := range frozenClean {
		c.freeze(n)
		c.frozenClean[n.id] = true
	}
	resource := arbiter.ResourceID(1000)
	// claimTick makes a claim attempt every gap..2·gap until until.
	claimTick := func(until time.Time, kind claimKind, gap time.Duration) {
		for net.now.Before(until) {
			net.run(net.now.Add(gap + time.Duration(rng.Int63n(int64(gap)))))
			n := net.nodes[rng.Intn(size)]
			if n.frozen || n.node.Status().Phase != arbiter.PhaseMember {
				continue
			}
			// A few items at a time, so several players contend for each.
			if rng.Intn(2) == 0 {
				resource++
			}
			r := resource - arbiter.ResourceID(rng.Intn(3))
			k := claimKey{n.id, r}
			if _, dup := c.claims[k]; dup || c.standing[n.id][r] != 0 {
				continue
			}
			rd, err := n.node.Claim(net.now, r)
			if err != nil {
				continue
			}
			c.claims[k] = &pendingClaim{at: net.now, kind: kind}
			net.apply(n, rd, "claim")
		}
	}
	claimTick(at(phaseClean), claimBusy, 15*time.Millisecond) // many grants: laps go by fast
	for _, n := range frozenClean {
		c.thaw(n)
	}
	for _, p := range c.claims {
		p.kind = claimEventually // chaos begins: answered eventually, checked at the end
	}

	// Chaos: loss on every link, then a random mix of partitions, one-way
	// cuts and freezes, each for a while.
	loss := []float64{0.02, 0.05, 0.1, 0.15}[rng.Intn(4)]
	net.base.loss = loss
	for net.now.Before(at(phaseChaos)) {
		end := net.now.Add(time.Duration(800+rng.Intn(1500)) * time.Millisecond)
		var undo func()
		switch rng.Intn(4) {
		case 0: // partition into two sides
			perm := rng.Perm(size)
			cutAt := 1 + rng.Intn(size-1)
			var a, b []arbiter.MemberID
			for i, p := range perm {
				if i < cutAt {
					a = append(a, net.nodes[p].id)
				} else {
					b = append(b, net.nodes[p].id)
				}
			}
			net.partition(a, b)
			c.st.partitions++
			undo = net.heal
		case 1: // one-way cuts
			var cut [][2]arbiter.MemberID
			for range 1 + rng.Intn(3) {
				a, b := net.nodes[rng.Intn(size)].id, net.nodes[rng.Intn(size)].id
				if a != b {
					net.cut(a, b, true)
					cut = append(cut, [2]arbiter.MemberID{a, b})
				}
			}
			c.st.cuts += len(cut)
			undo = func() {
				for _, p := range cut {
					net.cut(p[0], p[1], false)
				}
			}
		case 2: // freeze someone, often the arbiter
			n := net.nodes[rng.Intn(size)]
			for _, m := range net.nodes {
				if m.node.OnDuty() && rng.Intn(2) == 0 {
					n = m
				}
			}
			if !n.frozen {
				c.freeze(n)
				undo = func() { c.thaw(n) }
			}
		case 3: // just loss
		}
		claimTick(end, claimEventually, 15*time.Millisecond)
		if undo != nil {
			undo()
		}
	}

	// Calm: healed, thawed, lossy. Claims made now must be answered within
	// three hand-offs.
	net.heal()
	for _, n := range net.nodes {
		if n.frozen {
			c.thaw(n)
		}
	}
	// The members find each other again: one epoch, one arbiter, serving.
	healed := net.now
	for !c.converged() {
		if net.now.Sub(healed) > 10*time.Second {
			c.fail("no convergence 10 s after the network healed")
		}
		net.run(net.now.Add(50 * time.Millisecond))
	}
	c.st.maxConverge = max(c.st.maxConverge, net.now.Sub(healed))
	c.st.converge = append(c.st.converge, net.now.Sub(healed))
	c.calm = true
	for _, p := range c.claims {
		p.kind = claimEventually // made before the calm: answered eventually, checked below
	}
	// A game's pace: a claim attempt every 50-100 ms in the whole group.
	claimTick(net.now.Add(calmFor), claimGamePace, 50*time.Millisecond)
	net.base.loss = 0
	net.run(net.now.Add(settleFor))
	c.finish()
	return c.st
}

// converged reports whether every member is in one epoch and follows one
// arbiter, which serves.
func (c *checker) converged() bool {
	ref := c.net.nodes[0].node.Status()
	for _, n := range c.net.nodes {
		st := n.node.Status()
		if st.Phase != arbiter.PhaseMember || st.Stamp.Epoch != ref.Stamp.Epoch || st.Holder == 0 || st.Holder != ref.Holder {
			return false
		}
		if st.Holder == n.id && !st.Serving {
			return false
		}
	}
	return true
}

func (c *checker) freeze(n *simNode) {
	n.frozen = true
	c.frozenSince[n.id] = c.net.now
	c.st.freezes++
}

func (c *checker) thaw(n *simNode) {
	n.frozen = false
	delete(c.frozenSince, n.id)
}

func (c *checker) fail(format string, args ...any) {
	c.t.Helper()
	c.t.Fatalf("seed %d at %v: %s", c.seed, c.net.now.Sub(simStart), fmt.Sprintf(format, args...))
}

func (c *checker) onSend(from *simNode, b []byte) {
	c.st.messages++
	h := fnv.New64a()
	fmt.Fprintf(h, "%x %d %d", c.hash, from.id, c.net.now.UnixNano())
	h.Write(b)
	c.hash = h.Sum64()
	c.st.traceHash = c.hash
	env, err := arbiter.Decode(b)
	if err != nil {
		c.fail("node %d sent an undecodable message: %v", from.id, err)
	}
	if from.frozen {
		c.fail("frozen node %d sent %s", from.id, arbiter.FormatMessage(b))
	}
	if c.seed == *traceSeed {
		c.t.Logf("%v %d->* %s", c.net.now.Sub(simStart), from.id, arbiter.FormatMessage(b))
	}
	st := stampOfPB(env.GetStamp())
	sender := arbiter.MemberID(env.GetSender())
	switch body := env.Body.(type) {
	case *pb.Envelope_Grant:
		e := body.Grant.GetEntry()
		key := grantKey{e.GetSeq(), stampOfPB(e.GetStamp())}
		if key.stamp != st || c.grantsSeen[key] {
			return // a copy of an earlier grant for a claimant that missed it
		}
		c.grantsSeen[key] = true
		c.st.grants++
		// Terms grant one after the other: once a term granted after
		// another, the other never grants again. Two arbiters granting at
		// once would interleave.
		term := [3]uint64{st.Epoch, st.Lap, uint64(st.TS / arbiter.RangeSize)}
		if c.closedTerms[term] {
			c.fail("grant %s by %d in a term that another term's grants followed", st, sender)
		}
		if c.st.grants > 1 && term != c.lastTerm {
			c.closedTerms[c.lastTerm] = true
		}
		c.lastTerm = term
		if c.st.grants > 1 && st.Epoch == c.lastGrant.Epoch && !stampLessT(c.lastGrant, st) {
			c.fail("grant %s by %d not stamped above the previous grant %s of its epoch", st, sender, c.lastGrant)
		}
		c.lastGrant = st
		r, to := arbiter.ResourceID(e.GetResource()), arbiter.MemberID(e.GetTo())
		lk := [3]uint64{uint64(r), st.Epoch, st.Lap}
		if prev, ok := c.perLap[lk]; ok {
			c.fail("resource %d granted twice in epoch %d lap %d: to %d and to %d", r, st.Epoch, st.Lap, prev, to)
		}
		c.perLap[lk] = to
		if prev, ok := c.firstHolder[r]; ok && prev != to {
			// A later lap or epoch re-granted an item whose grant it never
			// learnt: one made in a minority's last lease (see
			// partition-lease.txt) or given up after SyncTimeout.
			c.st.superseded++
			if c.calm {
				c.st.supersededCalm++
			}
		} else {
			c.firstHolder[r] = to
		}
		c.duty(sender, st)
	case *pb.Envelope_Ping, *pb.Envelope_Ack, *pb.Envelope_Handoff, *pb.Envelope_Admit:
		c.duty(sender, st)
	case *pb.Envelope_View:
		if body.View.GetReason() != pb.ViewChange_CATCH_UP {
			c.duty(sender, st)
		}
		if body.View.GetReason() == pb.ViewChange_TAKEOVER {
			// A sealed takeover: the new epoch's first lap began mid-term.
			next := stampOfPB(body.View.GetNext())
			c.lapHasChange[[2]uint64{next.Epoch, next.Lap}] = true
		}
	}
}

// duty records a duty message's stamp and checks that no frozen member's
// range is ever used.
func (c *checker) duty(sender arbiter.MemberID, st arbiter.Stamp) {
	k := [3]uint64{st.Epoch, st.Lap, uint64(sender)}
	if c.dutyTS[k] == nil {
		c.dutyTS[k] = map[uint32]bool{}
	}
	c.dutyTS[k][st.TS] = true
	lk := [2]uint64{st.Epoch, st.Lap}
	seen, ok := c.lapSeen[lk]
	if !ok {
		seen[0] = c.net.now
	}
	seen[1] = c.net.now
	c.lapSeen[lk] = seen
}

func (c *checker) onReady(n *simNode, r arbiter.Ready, cause string) {
	for _, ev := range r.Events {
		if c.seed == *traceSeed {
			c.t.Logf("%v %d ! %s", c.net.now.Sub(simStart), n.id, formatEvent(ev))
		}
		switch ev.Kind {
		case arbiter.EventDutyBegin:
			for id := range c.frozenSince {
				if id == n.id {
					c.fail("frozen node %d began a term", id)
				}
			}
			if ev.Via != arbiter.ViaHandoff && ev.Via != arbiter.ViaCreate {
				c.lapHasChange[[2]uint64{ev.Stamp.Epoch, ev.Stamp.Lap}] = true
				if ev.Stamp.Lap > 0 {
					c.lapHasChange[[2]uint64{ev.Stamp.Epoch, ev.Stamp.Lap - 1}] = true
				}
				if ev.Via == arbiter.ViaTakeover {
					c.st.takeovers++
				}
			}
			if ev.Via == arbiter.ViaHandoff {
				for _, p := range c.claims {
					p.handoffs++
				}
			}
		case arbiter.EventMemberJoined, arbiter.EventMemberLeft:
			c.lapHasChange[[2]uint64{ev.Stamp.Epoch, ev.Stamp.Lap}] = true
		case arbiter.EventGrant:
			if c.standing[n.id] == nil {
				c.standing[n.id] = map[arbiter.ResourceID]arbiter.MemberID{}
			}
			c.standing[n.id][ev.Resource] = ev.Member
			if ev.Member == n.id {
				c.answered(claimKey{n.id, ev.Resource})
			}
		case arbiter.EventDeny:
			c.answered(claimKey{n.id, ev.Resource})
		}
	}
	// A frozen member never serves: nobody starts following it.
	if h := n.node.Holder(); h != c.holderOf[n.id] {
		c.holderOf[n.id] = h
		// (Messages it sent before it froze may still be in flight.)
		if since, frozen := c.frozenSince[h]; frozen && h != n.id && c.net.now.Sub(since) > maxFlight {
			c.fail("node %d now follows member %d, frozen since %v", n.id, h, since.Sub(simStart))
		}
	}
}

func (c *checker) answered(k claimKey) {
	p, ok := c.claims[k]
	if !ok {
		return
	}
	delete(c.claims, k)
	switch p.kind {
	case claimEventually:
		return
	case claimBusy:
		c.st.maxHandoffsBusy = max(c.st.maxHandoffsBusy, p.handoffs)
		return
	}
	c.st.claimsChecked++
	c.st.maxHandoffsToAnswer = max(c.st.maxHandoffsToAnswer, p.handoffs)
	if p.handoffs > 3 {
		c.fail("claim of %d by %d made at %v answered only after %d hand-offs", k.r, k.who, p.at.Sub(simStart), p.handoffs)
	}
}

// finish checks what must hold at the end: every claim answered, every
// member in the same epoch and term with the same grants, and in every
// clean lap each active member served exactly its ten timestamps.
func (c *checker) finish() {
	net := c.net
	for k, p := range c.claims {
		c.fail("claim of %d by %d made at %v never answered", k.r, k.who, p.at.Sub(simStart))
	}
	ref := net.nodes[0].node.Status()
	for _, n := range net.nodes {
		c.st.syncGiveUps += int(n.node.Metrics().SyncGiveUps.Load())
		c.st.logResets += int(n.node.Metrics().LogResets.Load())
		st := n.node.Status()
		if st.Phase != arbiter.PhaseMember || st.Stamp.Epoch != ref.Stamp.Epoch || st.Holder != ref.Holder {
			c.fail("no convergence: node %d at %s holder %d, node %d at %s holder %d",
				n.id, st.Stamp, st.Holder, net.nodes[0].id, ref.Stamp, ref.Holder)
		}
		// The grant logs agree on every resource they both remember.
		mine := map[arbiter.ResourceID]arbiter.Grant{}
		for _, g := range n.node.Grants() {
			mine[g.Resource] = g
		}
		for _, m := range net.nodes {
			for _, g := range m.node.Grants() {
				if h, ok := mine[g.Resource]; ok && h != g {
					c.fail("node %d has resource %d granted %+v, node %d %+v", n.id, g.Resource, h, m.id, g)
				}
			}
		}
		// What each node told its application stands agrees too, except
		// for grants a minority arbiter made in its last lease that left
		// the logs before the node came back (counted).
		for r, to := range c.standing[n.id] {
			g, ok := mine[r]
			if ok && g.Member != to {
				c.fail("node %d reported resource %d with %d, its log says %d", n.id, r, to, g.Member)
			}
			for _, m := range net.nodes {
				if other, ok := c.standing[m.id][r]; ok && other != to && m.id > n.id {
					c.st.appDiverged++
				}
			}
		}
	}
	// Laps of the clean phase (no loss; a minority frozen throughout):
	// every lap completed (a later lap exists in its epoch) without a term
	// begun other than by hand-off and without a membership change. The
	// members that served are exactly the ones not frozen, each its ten
	// timestamps.
	start := simStart
	laps := map[[2]uint64]map[arbiter.MemberID][]uint32{}
	for k, tss := range c.dutyTS {
		lk := [2]uint64{k[0], k[1]}
		seen := c.lapSeen[lk]
		if c.lapHasChange[lk] || !c.laterLap(k[0], k[1]) ||
			seen[0].Before(start.Add(cleanLapsFrom)) || !seen[1].Before(start.Add(phaseClean)) {
			continue
		}
		if laps[lk] == nil {
			laps[lk] = map[arbiter.MemberID][]uint32{}
		}
		for ts := range tss {
			laps[lk][arbiter.MemberID(k[2])] = append(laps[lk][arbiter.MemberID(k[2])], ts)
		}
	}
	for lk, served := range laps {
		for place, m := range ref.View {
			got := served[m.ID]
			slices.Sort(got)
			var want []uint32
			if !c.frozenClean[m.ID] {
				for ts := uint32(place * arbiter.RangeSize); ts < uint32((place+1)*arbiter.RangeSize); ts++ {
					want = append(want, ts)
				}
			}
			if !slices.Equal(got, want) {
				c.fail("member %d (place %d, frozen %t) in epoch %d lap %d served ts %v, want %v",
					m.ID, place, c.frozenClean[m.ID], lk[0], lk[1], got, want)
			}
		}
		c.st.lapsChecked++
	}
}

func (c *checker) laterLap(epoch, lap uint64) bool {
	for k := range c.dutyTS {
		if k[0] == epoch && k[1] > lap {
			return true
		}
	}
	return false
}

func stampOfPB(s *pb.Stamp) arbiter.Stamp {
	return arbiter.Stamp{Epoch: s.GetEpoch(), Lap: s.GetLap(), TS: s.GetTs()}
}

func stampLessT(a, b arbiter.Stamp) bool {
	if a.Epoch != b.Epoch {
		return a.Epoch < b.Epoch
	}
	if a.Lap != b.Lap {
		return a.Lap < b.Lap
	}
	return a.TS < b.TS
}
