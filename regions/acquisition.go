package regions

import (
	"log/slog"
	"sort"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// acquisition is one running acquire or copy comparison of a region at
// this peer: a deterministic state machine with no network, clock, keys
// or goroutine of its own. The Service (acquire.go drive) arms the timer
// of the deadline Start returns, feeds it the answers of the peers it
// asked and the deadline when the timer fires, and carries out the
// effects each step returns: whom to ask next, whom to nudge, and what
// to install. What needs keys or this peer's view of placement
// reaches it through acqChecks, so a test scripts it with fakes.
//
// An acquisition asks the peers of its list what they hold (askInfo),
// refuses the copies that do not check out, and then, acquiring, steps
// back for a closer live holder. Otherwise it ranks the copies, this
// peer's own among them (fresher), and goes down the list: this peer's
// own copy is taken over; another peer's is asked for by hand-off,
// following its redirects up to handoffHops, passing over a holder whose
// hand-off does not check out. When no copy remains, an acquisition
// rebuilds the region from the members' caches; a comparison ends with
// its own copy (none fresher: kept) or with the copy it was handed.
type acquisition struct {
	kind   acqKind
	self   peer.ID
	region Coord
	lease  uint64 // compare: the lease the copies are compared under
	// timeout: how long after its start the acquisition's deadline falls.
	timeout time.Duration
	checks  acqChecks
	log     *slog.Logger

	phase   acqPhase
	result  acqResult
	expired bool // the deadline passed: nothing more is asked

	asked []peer.ID
	// spare are the next closest peers after the asked ones: each ask that
	// fails is replaced by the next of them, so that a peer whose closest
	// peers just crashed (and linger in its view) still hears from as many
	// live ones before it decides nobody holds the region.
	spare   []peer.ID
	waiting map[peer.ID]bool // asked in this phase, not answered yet
	infos   map[peer.ID]*pb.InfoReply
	holders []holder // the peers that answered, in asked order, proven
	copies  []holder // freshest first
	own     holder   // this peer's copy among copies (compare)
	next    int      // index in copies of the copy asked for
	src     peer.ID  // the peer asked for a hand-off
	hop     int      // redirects followed from copies[next]

	members []peer.ID
	caches  map[peer.ID][]*pb.SignedEntry
	// ownEntries: this peer's own cache, first of the answers merged.
	ownEntries []*pb.SignedEntry
}

// acqKind says what an acquisition is for.
type acqKind int

const (
	// acqTake: acquire, this peer believing itself the closest live one.
	acqTake acqKind = iota
	// acqCompare: compareCopies, this coordinator holding a lease its copy
	// was not compared under.
	acqCompare
)

type acqPhase int

const (
	phaseInfo    acqPhase = iota // waiting for the info replies
	phaseOwn                     // waiting for this peer's own copy
	phaseHandoff                 // waiting for a hand-off reply from src
	phaseMembers                 // waiting for the list of the region's members
	phaseCaches                  // waiting for the members' caches
	phaseDone
)

// acqResult is how an acquisition ended (acqRunning: it has not).
type acqResult int

const (
	acqRunning acqResult = iota
	// acqTookOver: this peer's own copy was the freshest (acqEffects.takeOver).
	acqTookOver
	// acqInstalled: a copy handed over (acqEffects.install).
	acqInstalled
	// acqRebuilt: rebuilt from the members' caches (acqEffects.rebuilt).
	acqRebuilt
	// acqKept: compare only; this peer's own copy is the freshest, or
	// holds what the freshest does.
	acqKept
	// acqSteppedBack: a closer live peer, a holder or the target of a
	// redirect, was nudged to take the region (acqEffects.nudge).
	acqSteppedBack
	// acqRefused: compare only; no fresher copy checked out.
	acqRefused
	// acqFailed: a hand-off failed or was refused without a redirect to
	// follow, or the deadline passed before the region could be rebuilt.
	acqFailed
)

// compared reports whether a comparison that ended with r leaves this
// coordinator with the freshest copy (machine.Compared's ok).
func (r acqResult) compared() bool { return r == acqKept || r == acqInstalled }

// acqChecks is what an acquisition asks of this peer's keys, lease service
// and view of the region's placement (serviceChecks in the Service).
type acqChecks interface {
	// closer reports whether a is closer than b to the region's key.
	closer(a, b peer.ID) bool
	// proveCopy checks p's claim to hold a copy with commits in it
	// (provenHolders): a reason, "" when it checks out.
	proveCopy(p peer.ID, info *pb.InfoReply) string
	// weigh fills h's copyRank and leased from its copy's grant and
	// assignment (this peer's own copy included).
	weigh(h *holder)
	// checkHandoff checks a handed-over copy from src: a reason, "" when it
	// checks out.
	checkHandoff(src peer.ID, hr *pb.HandoffReply) string
	// verifyEntry checks a signed entry a member kept: a reason, "" when it
	// checks out.
	verifyEntry(se *pb.SignedEntry) string
}

// acqInput is what happened, fed to Step.
type acqInput struct {
	kind acqInputKind
	from peer.ID
	// info: from's info reply (nil: it failed or answered something else);
	// with acqOwnCopy, this peer's own copy.
	info *pb.InfoReply
	// handoff: from's hand-off reply (nil: it answered something else);
	// err: the hand-off failed.
	handoff *pb.HandoffReply
	err     error
	// entries: from's cache (nil: it failed); with acqMembers, this peer's
	// own cache.
	entries []*pb.SignedEntry
	members []peer.ID // acqMembers: the members to ask for their caches
}

type acqInputKind int

const (
	acqInfoReply acqInputKind = iota
	acqOwnCopy
	acqHandoffReply
	acqMembers
	acqCacheReply
	acqDeadline
)

// The inputs, by name.
func infoReplied(p peer.ID, info *pb.InfoReply) acqInput {
	return acqInput{kind: acqInfoReply, from: p, info: info}
}
func ownCopy(info *pb.InfoReply) acqInput { return acqInput{kind: acqOwnCopy, info: info} }
func handoffReplied(p peer.ID, hr *pb.HandoffReply, err error) acqInput {
	return acqInput{kind: acqHandoffReply, from: p, handoff: hr, err: err}
}
func membersListed(members []peer.ID, own []*pb.SignedEntry) acqInput {
	return acqInput{kind: acqMembers, members: members, entries: own}
}
func cacheReplied(p peer.ID, entries []*pb.SignedEntry) acqInput {
	return acqInput{kind: acqCacheReply, from: p, entries: entries}
}
func deadlineReached() acqInput { return acqInput{kind: acqDeadline} }

// acqEffects is what a step asks the Service to do, in this order:
// count the refusals, nudge, take over or install, then ask; readOwn and
// listMembers it answers at once (ownCopy, membersListed).
type acqEffects struct {
	refusals []refusal
	// unprovenEntries counts cached entries a rebuild left out.
	unprovenEntries int
	nudge           peer.ID
	takeOver        bool
	install         *handedOver
	rebuilt         *rebuiltCopy
	askInfo         []peer.ID
	// askHandoff is asked for the region's state, with this peer's grant;
	// requests are forwarded to it while it answers (slot.source).
	askHandoff  peer.ID
	askCaches   []peer.ID
	readOwn     bool
	listMembers bool
	// deadline (Start only): arm a timer at this time and feed
	// deadlineReached when it fires.
	deadline time.Time
	done     acqResult
}

// refusal is a claim refused: the Service counts and logs it (refuse).
type refusal struct {
	from         peer.ID
	what, reason string
}

// handedOver is a copy to install as coordinator: from handed it over,
// committed under grant, assigned to this peer by assign (nil if none),
// sealed by seal.
type handedOver struct {
	from   peer.ID
	snap   *pb.Snapshot
	grant  []byte
	assign *pb.Assignment
	seal   *pb.Seal
}

// newAcquisition returns an acquisition of kind by self of region,
// asking asked what they hold; lease is the lease a comparison is for,
// timeout how long after its start it may wait for the network.
func newAcquisition(kind acqKind, self peer.ID, region Coord, asked []peer.ID, lease uint64, timeout time.Duration, checks acqChecks, log *slog.Logger) *acquisition {
	a := &acquisition{kind: kind, self: self, region: region, lease: lease, timeout: timeout, checks: checks, log: log}
	for _, p := range asked {
		if p != self && !containsPeer(a.asked, p) {
			a.asked = append(a.asked, p)
		}
	}
	return a
}

// Start asks the peers of the list what they hold. now is when the
// acquisition began: its deadline, timeout later, comes with the effects
// as the one timer to arm.
func (a *acquisition) Start(now time.Time) acqEffects {
	eff := a.start()
	eff.deadline = now.Add(a.timeout)
	return eff
}

func (a *acquisition) start() acqEffects {
	a.phase = phaseInfo
	a.infos = map[peer.ID]*pb.InfoReply{}
	if len(a.asked) == 0 {
		return a.infoDone()
	}
	a.waiting = map[peer.ID]bool{}
	for _, p := range a.asked {
		a.waiting[p] = true
	}
	return acqEffects{askInfo: append([]peer.ID(nil), a.asked...)}
}

// nextSpare takes the next spare peer not asked yet.
func (a *acquisition) nextSpare() (peer.ID, bool) {
	for len(a.spare) > 0 {
		p := a.spare[0]
		a.spare = a.spare[1:]
		if p != a.self && !containsPeer(a.asked, p) {
			return p, true
		}
	}
	return "", false
}

// Result is how the acquisition ended (acqRunning: it has not).
func (a *acquisition) Result() acqResult { return a.result }

// Step takes one input and returns what to do. An input the acquisition
// does not wait for (a late or repeated answer, from a peer not asked) is
// ignored. After acqDeadline it asks nobody: every step ends it or asks
// only for what the Service answers at once.
func (a *acquisition) Step(in acqInput) acqEffects {
	if a.phase == phaseDone {
		return acqEffects{}
	}
	if in.kind == acqDeadline {
		return a.deadline()
	}
	switch a.phase {
	case phaseInfo:
		if in.kind != acqInfoReply || !a.waiting[in.from] {
			return acqEffects{}
		}
		delete(a.waiting, in.from)
		if in.info != nil {
			a.infos[in.from] = in.info
		} else if next, ok := a.nextSpare(); ok {
			a.asked = append(a.asked, next)
			a.waiting[next] = true
			return acqEffects{askInfo: []peer.ID{next}}
		}
		if len(a.waiting) == 0 {
			return a.infoDone()
		}
	case phaseOwn:
		if in.kind == acqOwnCopy {
			return a.rank(in.info)
		}
	case phaseHandoff:
		if in.kind == acqHandoffReply && in.from == a.src {
			return a.handoffAnswered(in)
		}
	case phaseMembers:
		if in.kind == acqMembers {
			return a.membersListed(in.members, in.entries)
		}
	case phaseCaches:
		if in.kind != acqCacheReply || !a.waiting[in.from] {
			return acqEffects{}
		}
		delete(a.waiting, in.from)
		if in.entries != nil {
			a.caches[in.from] = in.entries
		}
		if len(a.waiting) == 0 {
			return a.merge()
		}
	}
	return acqEffects{}
}

// deadline ends what waits for the network: the info round goes on with
// the answers it has (this peer's own copy may still be taken over), a
// hand-off fails, and so does a rebuild.
func (a *acquisition) deadline() acqEffects {
	a.expired = true
	switch a.phase {
	case phaseInfo:
		a.waiting = nil
		return a.infoDone()
	case phaseHandoff:
		a.log.Info("state transfer failed", "region", a.region, "from", a.src, "err", "deadline reached")
		return a.finish(acqEffects{}, acqFailed)
	case phaseCaches:
		return a.finish(acqEffects{}, acqFailed)
	}
	return acqEffects{}
}

func (a *acquisition) finish(eff acqEffects, r acqResult) acqEffects {
	a.phase, a.result, eff.done = phaseDone, r, r
	return eff
}

// infoDone ends the info round: the copies that do not check out are
// refused (provenHolders), and an acquisition steps back for a closer
// live holder; else the own copy is asked for, to rank the copies.
func (a *acquisition) infoDone() acqEffects {
	var eff acqEffects
	a.holders = a.provenHolders(&eff)
	if a.kind == acqTake {
		for _, h := range a.holders {
			if a.checks.closer(h.p, a.self) && !h.info.SteppingAside {
				a.log.Debug("a closer peer is alive; not taking the region", "region", a.region, "closer", h.p)
				eff.nudge = h.p
				return a.finish(eff, acqSteppedBack)
			}
		}
	}
	a.phase = phaseOwn
	eff.readOwn = true
	return eff
}

// provenHolders lists the peers that answered, in asked order, with the
// copies that do not check out dropped (refusals in eff): with a lease
// service, a copy with commits in it must come with a grant of the
// region's lease not older than the newest known; without one, the peer
// offering it must be placed. So no peer can make this one take its
// made-up state over. A copy with nothing committed proves nothing and
// risks nothing. A dropped copy's holder still counts as a live peer.
func (a *acquisition) provenHolders(eff *acqEffects) []holder {
	var out []holder
	for _, p := range a.asked {
		info := a.infos[p]
		if info == nil {
			continue
		}
		h := holder{p: p, info: info}
		if info.Role != pb.Role_ROLE_NONE && (info.Seq > 0 || info.Epoch > 0) {
			if reason := a.checks.proveCopy(p, info); reason != "" {
				eff.refusals = append(eff.refusals, refusal{from: p, what: "holder's copy", reason: refusedHolderUnproven + "/" + reason})
				h.info = &pb.InfoReply{SteppingAside: info.SteppingAside}
			}
		}
		out = append(out, h)
	}
	return out
}

// rank lists the copies, freshest first: this peer's own (own) and the
// holders', and goes down the list.
func (a *acquisition) rank(own *pb.InfoReply) acqEffects {
	var copies []holder
	if own != nil && own.Role != pb.Role_ROLE_NONE {
		h := holder{p: a.self, info: own}
		a.checks.weigh(&h)
		copies = append(copies, h)
	}
	for _, h := range a.holders {
		if h.info.Role != pb.Role_ROLE_NONE {
			a.checks.weigh(&h)
			copies = append(copies, h)
		}
	}
	sort.SliceStable(copies, func(i, j int) bool { return fresher(copies[i], copies[j]) })
	a.copies = copies
	for _, h := range copies {
		if h.p == a.self {
			a.own = h
		}
	}
	if a.kind == acqTake {
		a.log.Debug("acquiring region", "region", a.region, "copies", len(copies), "holders", len(a.holders))
	}
	a.next = 0
	return a.tryCopy(acqEffects{})
}

// tryCopy takes the copy at a.next: this peer's own is taken over (or,
// comparing, kept, as is one holding what it holds); another peer's is
// asked for. With no copy left, an acquisition rebuilds the region.
func (a *acquisition) tryCopy(eff acqEffects) acqEffects {
	if a.next >= len(a.copies) {
		if a.kind == acqTake {
			return a.rebuild(eff)
		}
		return a.finish(eff, acqRefused)
	}
	best := a.copies[a.next]
	switch a.kind {
	case acqTake:
		if best.p == a.self {
			eff.takeOver = true
			return a.finish(eff, acqTookOver)
		}
	case acqCompare:
		// Under one lease only its holder commits, so a copy under the
		// same lease with as long a log holds the same (the copy this
		// peer was handed, and the old coordinator's own): no hand-on.
		own := a.own
		if best.p == a.self || (own.info != nil && best.lease != 0 && best.lease == own.lease && best.info.Seq == own.info.Seq) {
			return a.finish(eff, acqKept)
		}
		a.log.Info("a fresher copy of the region is held elsewhere; taking it over before committing under a new lease",
			"region", a.region, "holder", best.p, "lease", a.lease)
	}
	a.hop = 0
	return a.askHandoff(eff, best.p)
}

// askHandoff asks src for the region's state.
func (a *acquisition) askHandoff(eff acqEffects, src peer.ID) acqEffects {
	a.src = src
	if a.expired {
		a.log.Info("state transfer failed", "region", a.region, "from", src, "err", "deadline reached")
		return a.finish(eff, acqFailed)
	}
	a.phase = phaseHandoff
	eff.askHandoff = src
	return eff
}

// handoffAnswered takes src's hand-off reply: a copy that checks out is
// installed, one that does not is passed over for the next freshest (else
// one peer claiming a copy in a far epoch would keep the region from
// being taken over for good); a redirect is followed up to handoffHops,
// or, to a peer closer than this one, nudged.
func (a *acquisition) handoffAnswered(in acqInput) acqEffects {
	var eff acqEffects
	src := a.src
	if in.err != nil {
		a.log.Info("state transfer failed", "region", a.region, "from", src, "err", in.err)
		return a.finish(eff, acqFailed)
	}
	hr := in.handoff
	if hr == nil {
		return a.finish(eff, acqFailed)
	}
	if hr.Ok {
		if reason := a.checks.checkHandoff(src, hr); reason != "" {
			eff.refusals = append(eff.refusals, refusal{from: src, what: "hand-off", reason: refusedHolderUnproven + "/" + reason})
			a.next++
			return a.tryCopy(eff)
		}
		// The assignment is kept if it names this peer (src held the
		// grant and handed the region to it); one naming src proved
		// src's copy only.
		var assign *pb.Assignment
		if as := hr.Assignment; as != nil && peer.ID(as.Holder) == a.self {
			assign = as
		}
		eff.install = &handedOver{from: src, snap: hr.Snapshot, grant: hr.Grant, assign: assign, seal: hr.Seal}
		return a.finish(eff, acqInstalled)
	}
	next, err := peer.IDFromBytes(hr.Redirect)
	if err != nil || next == a.self || next == src {
		a.log.Debug("hand-off refused", "region", a.region, "from", src, "reason", hr.Error)
		return a.finish(eff, acqFailed)
	}
	if a.checks.closer(next, a.self) {
		eff.nudge = next
		return a.finish(eff, acqSteppedBack)
	}
	if a.hop++; a.hop >= handoffHops {
		return a.finish(eff, acqFailed)
	}
	return a.askHandoff(eff, next)
}

// rebuild asks for the region's members, to rebuild it from their caches.
func (a *acquisition) rebuild(eff acqEffects) acqEffects {
	if a.expired {
		return a.finish(eff, acqFailed)
	}
	a.phase = phaseMembers
	eff.listMembers = true
	return eff
}

// membersListed asks the members for their caches; own is this peer's.
func (a *acquisition) membersListed(members []peer.ID, own []*pb.SignedEntry) acqEffects {
	if a.expired {
		return a.finish(acqEffects{}, acqFailed)
	}
	a.ownEntries = own
	a.caches = map[peer.ID][]*pb.SignedEntry{}
	a.waiting = map[peer.ID]bool{}
	for _, p := range members {
		if p != a.self && !a.waiting[p] {
			a.members = append(a.members, p)
			a.waiting[p] = true
		}
	}
	if len(a.members) == 0 {
		return a.merge()
	}
	a.phase = phaseCaches
	return acqEffects{askCaches: append([]peer.ID(nil), a.members...)}
}
