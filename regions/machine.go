package regions

import (
	"bytes"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// machine is one region's replication and ordering logic at one peer: a
// deterministic state machine with no network, clock or goroutine of its
// own. The Service feeds it requests, replica acknowledgements, the
// current time and whether this peer holds the region's commit lease now
// (SetLease, before each step), and carries out the effects it returns.
// Effects are data, not callbacks (answers to send, a message to the
// replica, an event to publish, old replicas to retire): an answer names
// the request it answers (player and request ID) and a hand-off reply the
// peer it is for, and the Service hands them to whoever waits for them.
// So a test scripts a machine, lease changes included, without a transport
// or a gate. (The signed grant of the lease, LeaseProofs.Proof, is still
// asked for directly; CheckProof is a pure signature check.)
//
// As coordinator it keeps the region's FIFO queue and evaluates requests
// in order against the objects, a batch at a time. A batch's changes are
// applied at once but answered only when the replica acknowledges them, so
// every acknowledged update exists on two peers. As replica it applies what
// its coordinator sends, in sequence. Epochs order coordinators: each new
// coordinator of a region has a higher epoch than the one before, and a
// replica refuses a lower one, which stops a deposed coordinator.
type machine struct {
	self   peer.ID
	region Coord
	mapper func(Coord) []byte
	proofs LeaseProofs // nil without a lease service that signs
	log    *slog.Logger

	// leaseID and leaseOK are the commit gate's answer for the region as
	// the Service last gave it (SetLease): an input, like the time.
	leaseID uint64
	leaseOK bool

	role        pb.Role
	epoch       uint64
	seq         uint64
	objects     map[string]*pb.Object
	done        doneLog
	coordinator peer.ID // whom we replicate, as replica
	// oldReplicas, after this peer handed the region over (giveAway), are
	// the replicas it had as coordinator, which still hold their copies:
	// they are retired only once the coordinator the region went to shows
	// it installed it (confirmHandoff). Retired at once, they would leave
	// this peer's copy the only one until then, and a lost hand-off reply
	// followed by this peer's crash would lose every acknowledged update.
	oldReplicas []retirement
	// copyProof is the lease grant the copy was last committed (or, at a
	// replica, replicated) under: what shows a peer taking the region over
	// that the copy is real (InfoReply.grant, HandoffReply.grant).
	copyProof []byte
	// copyAssign is the assignment of the copy to this peer signed by the
	// peer copyProof names, when that is another peer (its coordinator, or
	// the coordinator that handed the region over): what shows the copy
	// this peer's to claim (trust.go checkCopyClaim).
	copyAssign *pb.Assignment
	// copySeal is the seal of the copy's content by the peer copyProof
	// names, when that is another peer: what shows a peer taking the copy
	// over that this peer did not change it (trust.go checkSeal). Kept
	// only while it matches the copy's seq.
	copySeal *pb.Seal

	// Coordinator side.
	replica       peer.ID // "" when alone
	replicaSynced bool
	// replicaHeld: the replica acknowledged a copy from this coordinator
	// (or came with the region, or held it before): it may hold the
	// region's only other copy, which a replica change must not drop
	// until the next replica holds one.
	replicaHeld bool
	outstanding bool   // a Replicate awaits the replica's ack
	outSeq      uint64 // seq covered by the outstanding message
	// alone: the transport found no replica candidate when last asked;
	// until then a batch waits for a replica instead of being
	// acknowledged with one copy.
	alone bool
	// wantReplica: a replica change asked for while a message was with
	// the replica, applied when that message resolves (under a steady
	// stream of writes one nearly always is).
	wantReplica    peer.ID
	hasWantReplica bool
	// strikes counts the replica's answers in a row that neither
	// acknowledged nor proved anything; at maxStrikes it is left out.
	strikes int
	// replaced is the replica that held the copy (replicaHeld) and was
	// changed for another (changeReplica) not synced yet: it keeps its
	// copy until the new replica acknowledges its snapshot
	// (retireReplaced), so that until then the region is on two peers,
	// and this peer's crash alone loses nothing. One peer at most: a
	// replica holds the copy only once it acknowledged one, which
	// retires the replaced one; replicas changed before acknowledging
	// anything hold nothing to keep, and drop what they got at their
	// next copy check.
	replaced peer.ID
	// unrecorded are objects to record again in the next batch under the
	// lease (recommit); one per object, bounded by the region's objects.
	unrecorded    []unrecorded
	inflight      []answer
	inflightEnts  []*pb.Entry
	inflightLease uint64
	queue         []*pending
	// handoffTo: a hand-off to this peer runs; its reply is owed to it
	// (effects.handoffReply) when it completes or fails.
	handoffTo peer.ID
	locks     lockWaits // requests waiting for locked objects (locks.go)
	// maxHoldMs bounds how long a lock others wait for is kept by
	// renewals (Config.MaxLockHold; 0: MaxLockTTL).
	maxHoldMs int64
	// verifiedLease is the lease under which this coordinator's copy is
	// known to hold every commit: it committed under it, or compared its
	// copy with the placed peers' after the lease was granted. A lease it
	// gains otherwise (after a take-over, a hand-off, a lapse, or as a
	// stray coordinator left over from a false suspicion whose copy went
	// stale while the real one committed) commits nothing until the
	// copies are compared (effects.compare, Compared): else a stale copy
	// would overwrite acknowledged updates. Only with a lease service that
	// signs (proofs).
	verifiedLease uint64
	comparing     bool // a comparison was asked for and has not ended
}

// pending is a queued request. Its answer goes to the requester the
// player and request ID name (answer): the Service keeps who waits for it.
type pending struct {
	from   peer.ID // the player: lock holder and lock checks
	req    *pb.Request
	expiry bool // a lock's expiry, queued by ExpireLocks: nobody waits for its answer
	// deadlineMs is when its requester stops listening for the answer
	// (Unix ms; 0: never), set by the transport from its own timeout and
	// moved earlier by Abandon when the requester goes away. A request
	// past it is not carried out: a lock nobody waits for any more would
	// block the others until its TTL.
	deadlineMs int64
}

// gone reports whether p's requester stopped listening by nowMs.
func (p *pending) gone(nowMs int64) bool { return p.deadlineMs != 0 && nowMs >= p.deadlineMs }

// answer is the reply r to the request id of player from.
type answer struct {
	id   []byte
	from peer.ID
	r    *pb.Reply
}

// answerTo is p's answer r.
func answerTo(p *pending, r *pb.Reply) answer { return answer{id: p.req.RequestId, from: p.from, r: r} }

type outbound struct {
	to  peer.ID
	msg *pb.Replicate
	// seq and hash: the state the replica holds once it applied msg, which
	// the transport seals (nil hash: no lease service, nothing sealed).
	seq  uint64
	hash []byte
}

type retirement struct {
	to    peer.ID
	epoch uint64
}

// effects is what a machine step asks the transport to do, in order:
// send answers, then the replica message, then publish, then retire.
type effects struct {
	answers []answer
	send    *outbound
	publish *pb.Event
	retire  []retirement
	// handoffReply answers the hand-off asked for by handoffFor.
	handoffFor   peer.ID
	handoffReply *pb.HandoffReply
	// needReplica: the machine is coordinator and has no replica; the
	// transport should call SetReplica with the best live candidate.
	needReplica bool
	// exclude: a replica that kept answering without acknowledging or
	// proving anything; the transport leaves it out as replica for a while.
	exclude peer.ID
	// singleCopy counts changes acknowledged with no replica holding them.
	singleCopy int
	// compare: the coordinator holds this lease but has not compared its
	// copy with the placed peers' under it; the transport compares (and
	// takes a fresher copy over), then calls Compared.
	compare uint64
}

func (e *effects) merge(o effects) {
	e.answers = append(e.answers, o.answers...)
	if o.send != nil {
		e.send = o.send
	}
	if o.publish != nil {
		if e.publish == nil {
			e.publish = o.publish
		} else {
			e.publish.Entries = append(e.publish.Entries, o.publish.Entries...)
		}
	}
	e.retire = append(e.retire, o.retire...)
	if o.handoffReply != nil {
		e.handoffFor, e.handoffReply = o.handoffFor, o.handoffReply
	}
	e.needReplica = e.needReplica || o.needReplica
	if o.exclude != "" {
		e.exclude = o.exclude
	}
	e.singleCopy += o.singleCopy
	if o.compare != 0 {
		e.compare = o.compare
	}
}

// maxStrikes is how many answers in a row a replica may give that neither
// acknowledge nor prove anything before it is left out: an honest replica
// needs one (it asks for a snapshot), a liar or a staller never stops.
const maxStrikes = 3

// maxBatch bounds the requests evaluated into one replica round trip.
const maxBatch = 64

func newMachine(self peer.ID, region Coord, proofs LeaseProofs, mapper func(Coord) []byte, log *slog.Logger) *machine {
	return &machine{
		self: self, region: region, proofs: proofs, mapper: mapper, log: log,
		objects: map[string]*pb.Object{},
		done:    newDoneLog(maxDone),
	}
}

// doneLog remembers the outcomes of the last committed requests, oldest
// forgotten first.
type doneLog struct {
	max   int
	order []string
	byID  map[string]*pb.Done
}

func newDoneLog(max int) doneLog { return doneLog{max: max, byID: map[string]*pb.Done{}} }

func (d *doneLog) add(rec *pb.Done) {
	k := string(rec.RequestId)
	if _, ok := d.byID[k]; ok {
		return
	}
	d.byID[k] = rec
	d.order = append(d.order, k)
	for len(d.order) > d.max {
		delete(d.byID, d.order[0])
		d.order = d.order[1:]
	}
}

func (d *doneLog) get(id []byte) *pb.Done { return d.byID[string(id)] }

func (d *doneLog) list() []*pb.Done {
	out := make([]*pb.Done, len(d.order))
	for i, k := range d.order {
		out[i] = d.byID[k]
	}
	return out
}

// snapshot is the region's whole state, objects sorted by ID.
func (m *machine) snapshot() *pb.Snapshot {
	s := &pb.Snapshot{Epoch: m.epoch, Seq: m.seq, Objects: m.sortedObjects()}
	for _, d := range m.done.list() {
		s.Done = append(s.Done, proto.Clone(d).(*pb.Done))
	}
	return s
}

func (m *machine) sortedObjects() []*pb.Object {
	ids := make([]string, 0, len(m.objects))
	for id := range m.objects {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := make([]*pb.Object, len(ids))
	for i, id := range ids {
		out[i] = proto.Clone(m.objects[id]).(*pb.Object)
	}
	return out
}

func (m *machine) load(s *pb.Snapshot) {
	m.epoch, m.seq = s.Epoch, s.Seq
	m.objects = make(map[string]*pb.Object, len(s.Objects))
	for _, o := range s.Objects {
		m.objects[o.Id] = proto.Clone(o).(*pb.Object)
	}
	m.done = newDoneLog(maxDone)
	for _, d := range s.Done {
		m.done.add(proto.Clone(d).(*pb.Done))
	}
}

func (m *machine) clear() {
	m.role = pb.Role_ROLE_NONE
	m.coordinator, m.replica = "", ""
	m.replicaSynced, m.replicaHeld, m.outstanding = false, false, false
	m.copyProof, m.copyAssign, m.alone, m.hasWantReplica, m.wantReplica, m.strikes = nil, nil, false, false, "", 0
	m.verifiedLease, m.comparing, m.copySeal = 0, false, nil
	m.oldReplicas, m.replaced, m.unrecorded = nil, "", nil
	m.objects = map[string]*pb.Object{}
	m.done = newDoneLog(maxDone)
	m.inflight, m.inflightEnts = nil, nil
	m.seq = 0
}

func (m *machine) info() *pb.InfoReply {
	r := &pb.InfoReply{Role: m.role, Epoch: m.epoch, Seq: m.seq}
	if m.role == pb.Role_ROLE_REPLICA {
		r.Coordinator = []byte(m.coordinator)
	}
	if m.role == pb.Role_ROLE_COORDINATOR {
		r.Replica = []byte(m.replica)
		if m.hasWantReplica {
			r.Replica = []byte(m.wantReplica)
		}
	}
	if m.role != pb.Role_ROLE_NONE {
		r.Grant, r.Assignment = m.proofOfCopy(), m.copyAssign
	}
	return r
}

// infoFor is info as answered to asker: a coordinator still counts a
// replica it is replacing (replaced) as its replica until the new one
// holds the copy, so that the old one, checking its copy meanwhile, keeps
// it (Checked) rather than leave this peer's the only one.
func (m *machine) infoFor(asker peer.ID) *pb.InfoReply {
	r := m.info()
	if m.role == pb.Role_ROLE_COORDINATOR && asker != "" && asker == m.replaced {
		r.Replica = []byte(asker)
	}
	return r
}

// currentProof is this peer's own grant of the region's lease valid now
// (nil without a signing lease service, or without the lease).
func (m *machine) currentProof() []byte {
	if m.proofs == nil {
		return nil
	}
	return m.proofs.Proof(m.region)
}

// proofOfCopy is what shows the copy real: the coordinator's own grant if
// it has one now and its copy is known complete under it, else the grant
// the copy was last committed under. A copy not yet compared under the
// lease it holds is not claimed as that lease's: it may be a stale one.
func (m *machine) proofOfCopy() []byte {
	if m.role == pb.Role_ROLE_COORDINATOR {
		if p := m.currentProof(); p != nil && (m.verifiedLease != 0 && m.leaseOf(p) == m.verifiedLease) {
			return p
		}
	}
	return m.copyProof
}

// leaseOf is the lease ID grant names (0 if it does not check out).
func (m *machine) leaseOf(grant []byte) uint64 {
	if m.proofs == nil {
		return 0
	}
	_, id, _, err := m.proofs.CheckProof(m.region, grant)
	if err != nil {
		return 0
	}
	return id
}

// SetLease gives the machine the commit gate's current answer for its
// region (CommitGate.Allowed): the lease this peer holds now, and whether
// it may commit under it. The Service calls it before each step.
func (m *machine) SetLease(id uint64, ok bool) { m.leaseID, m.leaseOK = id, ok }

// uncompared reports whether this coordinator holds a lease its copy has
// not been compared under (see verifiedLease); the first time it does, it
// asks the transport to compare (eff.compare).
func (m *machine) uncompared(eff *effects) bool {
	if m.proofs == nil || m.role != pb.Role_ROLE_COORDINATOR {
		return false
	}
	id, ok := m.leaseID, m.leaseOK
	if !ok || id == m.verifiedLease {
		return false
	}
	if !m.comparing {
		m.comparing = true
		eff.compare = id
	}
	return true
}

// Compared reports that the copies were compared under lease (asked for
// when it was held) and this coordinator holds the freshest (its own, or
// one it took over meanwhile); ok false: the comparison did not finish,
// and the next step asks again.
func (m *machine) Compared(lease uint64, ok bool, now time.Time) effects {
	if m.role != pb.Role_ROLE_COORDINATOR || !m.comparing {
		return effects{}
	}
	m.comparing = false
	if !ok {
		return effects{}
	}
	m.verifiedLease = lease
	return m.pump(now)
}

func redirectReply(to peer.ID) *pb.Reply {
	if to == "" {
		return &pb.Reply{Status: pb.Status_STATUS_RETRY, Error: "no coordinator known"}
	}
	return &pb.Reply{Status: pb.Status_STATUS_REDIRECT, Redirect: []byte(to)}
}

// Submit queues a request. Only a coordinator accepts; others redirect.
func (m *machine) Submit(p *pending, now time.Time) effects {
	switch m.role {
	case pb.Role_ROLE_COORDINATOR:
		if m.handoffTo != "" {
			return effects{answers: []answer{answerTo(p, redirectReply(m.handoffTo))}}
		}
		m.queue = append(m.queue, p)
		return m.pump(now)
	case pb.Role_ROLE_REPLICA:
		return effects{answers: []answer{answerTo(p, redirectReply(m.coordinator))}}
	default:
		return effects{answers: []answer{answerTo(p, redirectReply(""))}}
	}
}

// pump moves the queue forward as far as the replica allows.
func (m *machine) pump(now time.Time) (eff effects) {
	if m.role != pb.Role_ROLE_COORDINATOR {
		return eff
	}
	for !m.outstanding {
		if m.hasWantReplica {
			eff.merge(m.changeReplica())
		}
		if m.replica != "" && !m.replicaSynced {
			grant := m.currentProof()
			// A copy not compared under the lease is not sent under it: the
			// replica would take it over its own, which may be fresher.
			if (m.proofs == nil || grant != nil) && !m.uncompared(&eff) {
				m.outstanding, m.outSeq = true, m.seq
				eff.send = &outbound{to: m.replica, msg: &pb.Replicate{Epoch: m.epoch, Snapshot: m.snapshot(), Grant: grant}, seq: m.seq, hash: m.sealHash()}
				return eff
			}
			// A replica takes a snapshot only under a lease (the
			// maintenance tick pumps again when it comes). Meanwhile
			// reads are answered; writes are refused without a lease.
			if len(m.inflightEnts) > 0 {
				return eff
			}
		}
		if len(m.inflightEnts) > 0 {
			if m.replica == "" {
				if !m.alone {
					// Pick a replica before acknowledging with one copy.
					eff.needReplica = true
					return eff
				}
				eff.merge(m.commit())
				continue
			}
			grant := m.currentProof()
			if m.proofs != nil && grant == nil {
				return eff // the lease ended since the batch was formed; commit answers it
			}
			m.outstanding, m.outSeq = true, m.seq
			eff.send = &outbound{to: m.replica, msg: &pb.Replicate{Epoch: m.epoch, Entries: m.inflightEnts, Grant: grant}, seq: m.seq, hash: m.sealHash()}
			return eff
		}
		eff.answers = append(eff.answers, m.inflight...)
		m.inflight = nil
		if m.handoffTo != "" {
			eff.merge(m.giveAway())
			return eff
		}
		// Compared even with nothing queued: until then the copy is not
		// claimed as the lease's, and a closer peer would not take the
		// region over from this lease holder.
		if m.uncompared(&eff) || (len(m.queue) == 0 && !m.mayRecord()) {
			return eff
		}
		m.formBatch(now)
	}
	return eff
}

// mayRecord reports whether objects wait to be recorded again
// (unrecorded) and the lease to do it under is here.
func (m *machine) mayRecord() bool {
	return len(m.unrecorded) > 0 && m.leaseOK && (m.proofs == nil || m.leaseID == m.verifiedLease)
}

// formBatch evaluates the head of the queue in order.
func (m *machine) formBatch(now time.Time) {
	n := min(len(m.queue), maxBatch)
	batch := m.queue[:n]
	m.queue = append([]*pending(nil), m.queue[n:]...)
	nowMs := now.UnixMilli()
	leaseID, allowed := m.leaseID, m.leaseOK
	if allowed && m.proofs != nil && leaseID != m.verifiedLease {
		allowed = false // the lease changed since pump checked: retried later
	}
	m.inflightLease = leaseID
	if allowed {
		m.recordUnrecorded(leaseID)
	}
	for _, p := range batch {
		if p.gone(nowMs) {
			// Nobody listens for the answer: a lock or write woken from
			// its wait, or queued behind a long batch, is dropped, and
			// not answered (the requester's own timeout did; an answer
			// would go to a retry of it waiting meanwhile).
			continue
		}
		r, e := m.evaluate(p, now, leaseID, allowed)
		if r == nil {
			continue // waits for a lock (locks.go)
		}
		if !p.expiry {
			m.inflight = append(m.inflight, answerTo(p, r))
		}
		if e != nil {
			m.inflightEnts = append(m.inflightEnts, e)
		}
	}
}

func (m *machine) lockedByOther(o *pb.Object, who peer.ID, nowMs int64) bool {
	return o != nil && len(o.LockHolder) > 0 && o.LockExpiresMs > nowMs && !bytes.Equal(o.LockHolder, []byte(who))
}

// evaluate decides one request against the current objects and, for a
// change, applies it and returns the entry that records it.
func (m *machine) evaluate(p *pending, now time.Time, leaseID uint64, allowed bool) (*pb.Reply, *pb.Entry) {
	req := p.req
	if d := m.done.get(req.RequestId); d != nil {
		// A retry of a committed request: the same answer, applied once.
		return &pb.Reply{Status: d.Status, Epoch: m.epoch, Object: &pb.Object{
			Id: req.ObjectId, Version: d.Version, LockExpiresMs: d.LockExpiresMs,
			LockHolder: lockHolderFor(d, p.from),
		}}, m.recommit(req.ObjectId, d, leaseID, allowed)
	}
	if req.Op == pb.Op_OP_GET {
		r := &pb.Reply{Status: pb.Status_STATUS_OK, Objects: m.sortedObjects(), Epoch: m.epoch}
		if m.mapper != nil {
			if r.Map = m.mapper(m.region); len(r.Map) > MaxMapSize {
				m.log.Error("region map over the size limit; not served", "region", m.region, "bytes", len(r.Map), "limit", MaxMapSize)
				r.Map = nil
			}
		}
		return r, nil
	}
	if !allowed {
		return &pb.Reply{Status: pb.Status_STATUS_RETRY, Error: fmt.Sprintf("region %s: no commit lease", m.region)}, nil
	}
	nowMs := now.UnixMilli()
	cur := m.objects[req.ObjectId]
	current := func() *pb.Object {
		if cur == nil {
			return &pb.Object{Id: req.ObjectId}
		}
		return proto.Clone(cur).(*pb.Object)
	}
	if cur == nil && req.Op != pb.Op_OP_RELEASE && len(m.objects) >= MaxObjectsInRegion {
		return &pb.Reply{Status: pb.Status_STATUS_BAD_REQUEST, Error: fmt.Sprintf("region %s holds %d objects already", m.region, MaxObjectsInRegion)}, nil
	}
	if r, e, decided := m.lockStep(p, cur, nowMs, leaseID); decided {
		return r, e
	}
	next := current()
	switch req.Op {
	case pb.Op_OP_INITIALIZE:
		next.Value, next.Version = append([]byte(nil), req.Value...), next.Version+1
	case pb.Op_OP_READ_WRITE:
		if req.ReadVersion != next.Version {
			return &pb.Reply{Status: pb.Status_STATUS_CONFLICT, Object: next, Epoch: m.epoch}, nil
		}
		next.Value, next.Version = append([]byte(nil), req.Value...), next.Version+1
	case pb.Op_OP_LOCK:
		// A renewal keeps the time the lock was taken; while others wait
		// for the object it cannot carry the lock past the longest hold
		// (lockStep refuses it once that has passed).
		since, expires := nowMs, nowMs+int64(req.LockTtlMs)
		if cur != nil && bytes.Equal(cur.LockHolder, []byte(p.from)) && cur.LockExpiresMs > nowMs && cur.LockSinceMs > 0 {
			since = cur.LockSinceMs
		}
		if m.locks.waiting(req.ObjectId, nowMs) > 0 {
			expires = min(expires, since+m.holdLimitMs())
		}
		next.LockHolder, next.LockExpiresMs, next.LockSinceMs = []byte(p.from), expires, since
	case pb.Op_OP_RELEASE:
		if cur == nil || len(cur.LockHolder) == 0 || cur.LockExpiresMs <= nowMs {
			return &pb.Reply{Status: pb.Status_STATUS_OK, Object: current(), Epoch: m.epoch}, nil
		}
		next.LockHolder, next.LockExpiresMs, next.LockSinceMs = nil, 0, 0
		if req.Write {
			next.Value, next.Version = append([]byte(nil), req.Value...), next.Version+1
		}
		defer m.wake(req.ObjectId)
	}
	m.seq++
	done := &pb.Done{RequestId: req.RequestId, Status: pb.Status_STATUS_OK, Version: next.Version, LockExpiresMs: next.LockExpiresMs}
	entry := &pb.Entry{Seq: m.seq, Object: next, Done: done, LeaseId: leaseID}
	m.apply(entry)
	return &pb.Reply{Status: pb.Status_STATUS_OK, Object: proto.Clone(next).(*pb.Object), Epoch: m.epoch}, entry
}

// recommit records object id again, unchanged, for a retry of d, a
// committed request that changed it. The write may never have reached
// the members' caches: its batch was handed over unacknowledged
// (handOverUnacknowledged), its lease ended before the replica's
// acknowledgement (commit), or its coordinator crashed once the replica
// held it. A rebuild from the caches after a double failure would then
// lose a write its writer was told is done. The writer retries exactly in
// those cases; the entry replicates and is published as any other, so the
// answer to the retry comes once the object is on two copies and on its
// way to the members. Without the lease (a peer a region was just
// handed to answers from the copy before the lease moves) the retry is
// answered at once and the object recorded in the first batch under the
// lease (unrecorded).
func (m *machine) recommit(id string, d *pb.Done, leaseID uint64, allowed bool) *pb.Entry {
	if m.objects[id] == nil || d.Status != pb.Status_STATUS_OK {
		return nil
	}
	if !allowed {
		seen := slices.ContainsFunc(m.unrecorded, func(u unrecorded) bool { return u.id == id })
		if !seen && len(m.unrecorded) < MaxObjectsInRegion {
			m.unrecorded = append(m.unrecorded, unrecorded{id: id, done: d})
		}
		return nil
	}
	return m.record(id, d, leaseID)
}

// record appends an entry of object id as it stands, for request d.
func (m *machine) record(id string, d *pb.Done, leaseID uint64) *pb.Entry {
	m.seq++
	e := &pb.Entry{Seq: m.seq, Object: proto.Clone(m.objects[id]).(*pb.Object), Done: proto.Clone(d).(*pb.Done), LeaseId: leaseID}
	m.apply(e)
	return e
}

// recordUnrecorded starts the batch with the objects retries found
// committed while this peer had no lease (recommit), at most maxBatch of
// them (the rest go in the next batches): a batch's requests add at most
// as many, under the wire's bound on entries per message.
func (m *machine) recordUnrecorded(leaseID uint64) {
	n := min(len(m.unrecorded), maxBatch)
	for _, u := range m.unrecorded[:n] {
		if m.objects[u.id] != nil {
			m.inflightEnts = append(m.inflightEnts, m.record(u.id, u.done, leaseID))
		}
	}
	m.unrecorded = append([]unrecorded(nil), m.unrecorded[n:]...)
}

// unrecorded is an object a retry of done found committed while this
// peer had no lease to record it again under (recommit).
type unrecorded struct {
	id   string
	done *pb.Done
}

func lockHolderFor(d *pb.Done, from peer.ID) []byte {
	if d.LockExpiresMs != 0 {
		return []byte(from)
	}
	return nil
}

// sealHash is the hash of the state the coordinator's seal covers (nil
// without a lease service: nothing is sealed then).
func (m *machine) sealHash() []byte {
	if m.proofs == nil {
		return nil
	}
	ids := make([]string, 0, len(m.objects))
	for id := range m.objects {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	objs := make([]*pb.Object, len(ids))
	for i, id := range ids {
		objs[i] = m.objects[id]
	}
	return stateHash(m.seq, objs, m.done.list())
}

// keepSeal keeps a seal that covers the copy as it is now (seq), and
// forgets the one kept otherwise.
func (m *machine) keepSeal(s *pb.Seal) {
	if s != nil && s.Seq == m.seq {
		m.copySeal = s
	} else if m.copySeal != nil && m.copySeal.Seq != m.seq {
		m.copySeal = nil
	}
}

func (m *machine) apply(e *pb.Entry) {
	m.objects[e.Object.Id] = proto.Clone(e.Object).(*pb.Object)
	m.done.add(proto.Clone(e.Done).(*pb.Done))
	m.seq = e.Seq
}

// commit answers the in-flight batch and publishes its entries: the
// replica holds them now (or there is no replica to hold them).
//
// The replica's answer may come after the lease the batch was evaluated
// under has ended (a slow or cut link): then the batch is neither answered
// as done nor published, since another coordinator may be committing by
// now. Its entries stay applied here and at the replica, and in the log of
// done requests, so a player's retry learns the outcome from whoever holds
// the region next.
func (m *machine) commit() (eff effects) {
	eff.answers = m.inflight
	if len(m.inflightEnts) > 0 {
		grant := m.currentProof()
		if id, ok := m.leaseID, m.leaseOK; !ok || id != m.inflightLease || (m.proofs != nil && grant == nil) {
			m.log.Warn("lease ended before the replica acknowledged the batch; not confirming it",
				"region", m.region, "lease", m.inflightLease, "entries", len(m.inflightEnts))
			for i := range eff.answers {
				eff.answers[i].r = &pb.Reply{Status: pb.Status_STATUS_RETRY, Error: fmt.Sprintf("region %s: commit lease ended", m.region)}
			}
		} else {
			if grant != nil {
				m.copyProof = grant
			}
			eff.publish = &pb.Event{Epoch: m.epoch, LeaseId: m.inflightLease, Entries: m.inflightEnts, Grant: grant}
			if m.replica == "" {
				// Acknowledged with one copy: say so to the players and
				// the operator (the transport counts singleCopy).
				for i := range eff.answers {
					if r := eff.answers[i].r; r.Status == pb.Status_STATUS_OK && r.Object != nil {
						r.SingleCopy = true
					}
				}
				eff.singleCopy = len(m.inflightEnts)
			}
		}
	}
	m.inflight, m.inflightEnts = nil, nil
	return eff
}

// ReplicaAck handles the replica's answer to the outstanding message.
// proven says whether a stale answer's claim of a newer coordinator checked
// out (the transport verified its grant); an unproven one counts against
// the replica like any answer that acknowledges nothing.
func (m *machine) ReplicaAck(from peer.ID, a *pb.ReplicateAck, proven bool, now time.Time) effects {
	if m.role != pb.Role_ROLE_COORDINATOR || !m.outstanding || from != m.replica {
		return effects{}
	}
	m.outstanding = false
	switch {
	case a.Ok && a.Seq >= m.outSeq:
		m.replicaSynced, m.replicaHeld, m.strikes = true, true, 0
		eff := m.commit()
		eff.merge(m.retireReplaced())
		eff.merge(m.pump(now))
		return eff
	case a.Stale && proven && a.Epoch >= m.epoch:
		next := peer.ID("")
		if id, err := peer.IDFromBytes(a.Coordinator); err == nil {
			next = id
		}
		m.log.Warn("deposed: replica knows a newer coordinator", "region", m.region, "epoch", m.epoch, "their_epoch", a.Epoch, "coordinator", next)
		return m.stepDown(next)
	default:
		m.replicaSynced = false
		if m.handoffTo != "" {
			return m.handOverUnacknowledged()
		}
		if m.strikes++; m.strikes >= maxStrikes {
			m.log.Warn("replica answers without acknowledging anything; leaving it out", "region", m.region, "replica", from, "answers", m.strikes)
			eff := effects{exclude: from, retire: []retirement{{to: from, epoch: m.epoch}}}
			m.replica, m.replicaHeld, m.strikes, m.alone = "", false, 0, false
			eff.merge(m.pump(now))
			return eff
		}
		return m.pump(now)
	}
}

// ReplicaFailed reports that the replica could not be reached; next is the
// best live candidate to replace it ("" for none).
func (m *machine) ReplicaFailed(failed, next peer.ID, now time.Time) effects {
	if m.role != pb.Role_ROLE_COORDINATOR || failed != m.replica {
		return effects{}
	}
	m.outstanding = false
	m.replica, m.replicaSynced, m.replicaHeld = "", false, false
	return m.SetReplica(next, now)
}

// SetReplica makes p the replica ("" for none: no candidate is
// reachable); a new replica first gets a snapshot, and the old one is told
// to retire. While a message is with the replica the change waits until
// it resolves, and then happens before the next batch goes out.
func (m *machine) SetReplica(p peer.ID, now time.Time) (eff effects) {
	if m.role != pb.Role_ROLE_COORDINATOR || p == m.self {
		return m.pump(now)
	}
	if p == m.replica {
		m.hasWantReplica, m.wantReplica = false, ""
		if p == "" {
			m.alone = true
		}
		return m.pump(now)
	}
	m.wantReplica, m.hasWantReplica = p, true
	if m.outstanding {
		return eff
	}
	return m.pump(now)
}

// changeReplica applies the replica change asked for; no message is with
// the replica.
func (m *machine) changeReplica() (eff effects) {
	p := m.wantReplica
	m.wantReplica, m.hasWantReplica = "", false
	held := m.replicaHeld
	if m.replica != "" && m.replica != p && m.replicaHeld {
		// Held copies are kept one at a time: the one replaced before
		// is retired by the acknowledgement that made this one held.
		m.replaced = m.replica
	}
	if p != "" && p == m.replaced {
		// One that comes back as the replica gets a snapshot, not a
		// retirement, and still holds its copy meanwhile.
		m.replaced, held = "", true
	} else {
		held = false
	}
	if p == "" {
		// No replica to wait for: nobody else can hold the copy.
		m.log.Warn("coordinating without a replica", "region", m.region, "epoch", m.epoch)
		eff.merge(m.retireReplaced())
	}
	m.replica, m.replicaSynced, m.replicaHeld, m.strikes, m.alone = p, false, held, 0, p == ""
	return eff
}

// retireReplaced retires the replicas changed for the current one, which
// holds the copy now (or there is none); one asked for as the replica
// again (wantReplica) is not retired: it is about to get a snapshot.
func (m *machine) retireReplaced() (eff effects) {
	if p := m.replaced; p != "" && p != m.replica && !(m.hasWantReplica && p == m.wantReplica) {
		eff.retire = append(eff.retire, retirement{to: p, epoch: m.epoch})
	}
	m.replaced = ""
	return eff
}

// Kick moves the queue on after something outside the machine changed
// (a lease proof arrived).
func (m *machine) Kick(now time.Time) effects { return m.pump(now) }

// empty reports whether the machine holds nothing of the region: nothing
// ever committed, nothing waiting for the replica's acknowledgement.
func (m *machine) empty() bool {
	return m.seq == 0 && len(m.objects) == 0 && !m.outstanding && len(m.inflight) == 0
}

// stepDown ends this peer's coordination: everything not yet acknowledged
// is answered with a redirect, and the state is dropped.
func (m *machine) stepDown(to peer.ID) (eff effects) {
	for _, a := range m.inflight {
		a.r = redirectReply(to)
		eff.answers = append(eff.answers, a)
	}
	for _, p := range m.queue {
		if !p.expiry {
			eff.answers = append(eff.answers, answerTo(p, redirectReply(to)))
		}
	}
	eff.answers = append(eff.answers, m.locks.drain(redirectReply(to))...)
	if m.handoffTo != "" {
		eff.handoffFor, eff.handoffReply = m.handoffTo, &pb.HandoffReply{Redirect: []byte(to), Error: "deposed"}
	}
	m.queue, m.handoffTo = nil, ""
	m.clear()
	return eff
}

// Replicate applies a coordinator's message as replica and returns the ack.
// leaseWins says the sender replicates under a newer lease than the one
// this peer's copy was committed under (the transport checked both
// grants): then its snapshot is taken whatever the epochs, since the lease
// service decides who commits and this copy's lease has ended.
func (m *machine) Replicate(from peer.ID, r *pb.Replicate, leaseWins bool) (*pb.ReplicateAck, effects) {
	var eff effects
	stale := func() *pb.ReplicateAck {
		who := m.coordinator
		if m.role == pb.Role_ROLE_COORDINATOR {
			who = m.self
		}
		ack := &pb.ReplicateAck{Stale: true, Epoch: m.epoch, Coordinator: []byte(who), Grant: m.copyProof}
		if m.role == pb.Role_ROLE_COORDINATOR {
			ack.Grant = m.proofOfCopy()
		}
		return ack
	}
	if r.Snapshot != nil {
		if m.role == pb.Role_ROLE_COORDINATOR && m.epoch >= r.Epoch && !leaseWins {
			return stale(), eff
		}
		if m.role == pb.Role_ROLE_REPLICA && m.epoch > r.Epoch && !leaseWins {
			return stale(), eff
		}
		if m.role == pb.Role_ROLE_COORDINATOR {
			if leaseWins {
				// The sender holds the lease this copy's was overtaken
				// by: a second coordinator (a thin view at start, a false
				// suspicion) heals; it could not commit.
				m.log.Info("gave a region it held without a lease to the lease holder", "region", m.region, "epoch", m.epoch, "coordinator", from)
			} else {
				m.log.Warn("deposed by a newer coordinator's snapshot", "region", m.region, "epoch", m.epoch, "their_epoch", r.Epoch, "coordinator", from)
			}
			eff = m.stepDown(from)
		}
		eff.merge(m.confirmHandoff(from, r.Epoch))
		m.load(r.Snapshot)
		m.role, m.coordinator = pb.Role_ROLE_REPLICA, from
		if r.Grant != nil {
			m.copyProof, m.copyAssign = r.Grant, r.Assignment
		}
		m.copySeal = nil
		m.keepSeal(r.Seal)
		return &pb.ReplicateAck{Ok: true, Epoch: m.epoch, Seq: m.seq}, eff
	}
	if m.epoch > r.Epoch || (m.epoch == r.Epoch && m.role == pb.Role_ROLE_COORDINATOR) {
		return stale(), eff
	}
	if m.role != pb.Role_ROLE_REPLICA || m.epoch < r.Epoch || m.coordinator != from {
		return &pb.ReplicateAck{Epoch: m.epoch}, eff
	}
	// A gap is refused before anything is applied, so that the copy
	// stays one its coordinator sealed.
	next := m.seq + 1
	for _, e := range r.Entries {
		if e.Seq < next {
			continue // already applied: a resend after a lost ack
		}
		if e.Seq != next {
			return &pb.ReplicateAck{Epoch: m.epoch, Seq: m.seq}, eff
		}
		next++
	}
	for _, e := range r.Entries {
		if e.Seq > m.seq {
			m.apply(e)
		}
	}
	if r.Grant != nil {
		m.copyProof, m.copyAssign = r.Grant, r.Assignment
	}
	m.keepSeal(r.Seal)
	eff.merge(m.confirmHandoff(from, r.Epoch))
	return &pb.ReplicateAck{Ok: true, Epoch: m.epoch, Seq: m.seq}, eff
}

// TakeOver makes a replica whose coordinator is gone the coordinator, in a
// new epoch; the transport then gives it a replica.
func (m *machine) TakeOver(now time.Time) effects {
	if m.role != pb.Role_ROLE_REPLICA || m.epoch >= maxEpoch {
		return effects{}
	}
	m.log.Info("taking over region", "region", m.region, "old_coordinator", m.coordinator, "epoch", m.epoch+1, "objects", len(m.objects))
	m.role, m.coordinator = pb.Role_ROLE_COORDINATOR, ""
	m.epoch++
	m.replica, m.replicaSynced, m.replicaHeld, m.outstanding, m.alone = "", false, false, false, false
	m.verifiedLease = 0
	// The old replicas kept since a hand-off whose new coordinator is gone
	// are not retired: one placed as the replica again gets this peer's
	// snapshot, the others drop their copies at their next check
	// (Checked), this peer then coordinating with another replica.
	m.oldReplicas, m.replaced = nil, ""
	eff := m.pump(now)
	eff.needReplica = true
	return eff
}

// Install makes this peer coordinator with s, received in a hand-off or
// rebuilt from caches. replica already holds s when synced; grant is the
// lease grant s was committed under (nil if unknown), assign the
// assignment of s to this peer by the grant's holder (nil if none).
func (m *machine) Install(s *pb.Snapshot, replica peer.ID, synced bool, grant []byte, assign *pb.Assignment, now time.Time) effects {
	m.load(s)
	m.copyProof, m.copyAssign, m.copySeal = grant, assign, nil
	m.role, m.coordinator = pb.Role_ROLE_COORDINATOR, ""
	m.replica, m.replicaSynced, m.outstanding, m.alone = replica, synced && replica != "", false, false
	// A replica that came with the region may hold a copy of it.
	m.replicaHeld = replica != ""
	m.hasWantReplica, m.wantReplica, m.strikes = false, "", 0
	m.verifiedLease, m.oldReplicas, m.replaced, m.unrecorded = 0, nil, "", nil
	eff := m.pump(now)
	if replica == "" {
		eff.needReplica = true
	}
	return eff
}

// Handoff asks this coordinator to pass the region to a closer peer, to.
// It happens between batches: the snapshot holds everything acknowledged.
// The reply (effects.handoffReply) is for to.
func (m *machine) Handoff(to peer.ID, now time.Time) effects {
	switch {
	case m.role == pb.Role_ROLE_REPLICA:
		if m.epoch >= maxEpoch {
			return effects{handoffFor: to, handoffReply: &pb.HandoffReply{Error: "epoch at its bound"}}
		}
		// The coordinator is gone (the transport checked): pass our copy on.
		m.epoch++
		snap := m.snapshot()
		m.coordinator = to
		return effects{handoffFor: to, handoffReply: &pb.HandoffReply{Ok: true, Snapshot: snap, Grant: m.copyProof, Assignment: m.copyAssign, Seal: m.copySeal}}
	case m.role != pb.Role_ROLE_COORDINATOR:
		return effects{handoffFor: to, handoffReply: &pb.HandoffReply{Error: "no state for region"}}
	case m.handoffTo != "":
		return effects{handoffFor: to, handoffReply: &pb.HandoffReply{Error: "hand-off already running", Redirect: []byte(m.handoffTo)}}
	}
	m.handoffTo = to
	return m.pump(now)
}

// handOverUnacknowledged hands the region to the closer peer waiting for
// it (handoffTo) when the replica answered the outstanding message
// without acknowledging it. A replica that refuses this coordinator
// (not placed in its view, a lease it does not see) would refuse the next
// replica as well, and the hand-off would wait for every candidate to be
// tried and left out in turn while the region answers nobody. The
// batch's writes were never acknowledged: their writers are sent to the
// new coordinator, which gets them in the snapshot (with their request
// IDs, so a retry is applied once) and holds them on two copies, itself
// and this peer, before it answers the retry.
func (m *machine) handOverUnacknowledged() (eff effects) {
	m.log.Info("replica acknowledges nothing while a closer peer waits; handing the region over now", "region", m.region, "replica", m.replica, "to", m.handoffTo, "writes", len(m.inflight))
	for _, a := range m.inflight {
		a.r = redirectReply(m.handoffTo)
		eff.answers = append(eff.answers, a)
	}
	m.inflight, m.inflightEnts = nil, nil
	eff.merge(m.giveAway())
	return eff
}

// giveAway completes a hand-off: the new coordinator gets the state in a
// new epoch and this peer becomes its replica. The old replica keeps its
// copy until the new coordinator shows it installed the region
// (confirmHandoff): the reply may be lost, or its receiver crash, and this
// peer's copy must not be the only one meanwhile.
func (m *machine) giveAway() (eff effects) {
	to := m.handoffTo
	m.handoffTo = ""
	if m.epoch >= maxEpoch {
		eff.handoffFor, eff.handoffReply = to, &pb.HandoffReply{Error: "epoch at its bound"}
		return eff
	}
	grant := m.proofOfCopy()
	m.epoch++
	snap := m.snapshot()
	m.oldReplicas = nil
	for _, p := range []peer.ID{m.replaced, m.replica} {
		if p != "" && p != to {
			m.oldReplicas = append(m.oldReplicas, retirement{to: p, epoch: m.epoch})
		}
	}
	m.replaced = ""
	for _, p := range m.queue {
		if !p.expiry {
			eff.answers = append(eff.answers, answerTo(p, redirectReply(to)))
		}
	}
	eff.answers = append(eff.answers, m.locks.drain(redirectReply(to))...)
	m.queue = nil
	m.role, m.coordinator = pb.Role_ROLE_REPLICA, to
	m.replica, m.replicaSynced, m.replicaHeld, m.outstanding = "", false, false, false
	m.hasWantReplica, m.wantReplica, m.strikes, m.unrecorded = false, "", 0, nil
	m.verifiedLease, m.comparing = 0, false
	// The copy keeps the grant it was committed under until the new
	// coordinator replicates under its own: it is what proves the copy to
	// a peer that takes the region over meanwhile.
	m.copyProof = grant
	m.log.Info("handed region over", "region", m.region, "to", to, "epoch", m.epoch, "objects", len(m.objects))
	// The transport replaces the assignment with its own to the new
	// coordinator when grant is this peer's.
	eff.handoffFor, eff.handoffReply = to, &pb.HandoffReply{Ok: true, Snapshot: snap, Grant: grant, Assignment: m.copyAssign, Seal: m.copySeal}
	return eff
}

// confirmHandoff retires the old replica kept since this peer handed the
// region over (oldReplicas) once from, the coordinator this replica
// follows, shows in epoch that it holds the region in the hand-off's
// epoch or later: it replicates to this peer, retires it, or answers its
// check as coordinator. Only then does the old replica's copy go.
func (m *machine) confirmHandoff(from peer.ID, epoch uint64) (eff effects) {
	if len(m.oldReplicas) == 0 || m.role != pb.Role_ROLE_REPLICA || from != m.coordinator || epoch < m.oldReplicas[0].epoch {
		return eff
	}
	m.log.Debug("hand-off confirmed; retiring the old replicas", "region", m.region, "coordinator", from, "old_replicas", len(m.oldReplicas))
	eff.retire, m.oldReplicas = m.oldReplicas, nil
	return eff
}

// Checked takes the answer of coord, the coordinator this replica follows,
// to its check (Service.checkReplicaCopy). A coordinator in this copy's
// epoch or later confirms a hand-off this peer made (confirmHandoff); and
// if it replicates to another peer, the retirement of this copy never
// arrived, and the copy is dropped.
func (m *machine) Checked(coord peer.ID, info *pb.InfoReply) effects {
	if m.role != pb.Role_ROLE_REPLICA || coord != m.coordinator || info.Role != pb.Role_ROLE_COORDINATOR || info.Epoch < m.epoch {
		return effects{}
	}
	eff := m.confirmHandoff(coord, info.Epoch)
	if peer.ID(info.Replica) != m.self {
		m.log.Info("replica copy dropped: its coordinator replicates elsewhere", "region", m.region, "coordinator", coord, "epoch", m.epoch)
		m.clear()
	}
	return eff
}

// Retire drops a replica's copy when its coordinator no longer needs it;
// that coordinator holds the region, which confirms a hand-off this peer
// made.
func (m *machine) Retire(from peer.ID, epoch uint64) (eff effects) {
	if m.role == pb.Role_ROLE_REPLICA && from == m.coordinator && epoch >= m.epoch {
		m.log.Debug("replica retired", "region", m.region, "by", from, "epoch", epoch)
		eff = m.confirmHandoff(from, epoch)
		m.clear()
	}
	return eff
}
