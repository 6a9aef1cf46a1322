package regions

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"sort"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// Locks as Mobihoc has them (paper 004, §3.1): a two-step write locks the
// object at the coordinator, the lock's answer carries the object's value,
// and the holder sends the new value with the release (OP_RELEASE with
// write), one commit through the replica; reads stay lock-free. A lock or
// write on an object another player has locked waits at the coordinator,
// in a FIFO per object, instead of being refused: when the lock is
// released or runs out, the object's waiters go back to the head of the
// region's queue in their order. The waits are bounded per object, per
// region and per player; past a bound the request is answered BUSY. A
// wait carries its request's deadline (when the transport stops waiting
// for the answer), moved earlier when its player goes away (Abandon): a
// wait past it is never carried out, so no lock goes to a player who no
// longer waits for it.
//
// A lock is a lease the machine expires at the time it is given (no clock
// inside): the service calls ExpireLocks every maintenance period, and an
// expiry is a committed entry like any other, so the replica and the
// region's members see the lock go. Locks live in the objects, so they
// ride in snapshots through hand-offs and fail-overs; waiters do not (a
// coordinator that steps down or hands over answers them with a redirect,
// and a crashed one's waiters retry by the client's own backoff).

// Bounds of the lock waits, and of the locks one player holds in a region
// (so that one player cannot make everyone else wait on every object).
const (
	maxWaitersPerObject = 8
	maxWaitersPerRegion = 64
	maxWaitersPerPlayer = 4
	maxLocksPerPlayer   = 4
)

// holdLimitMs is how long a lock others wait for may be kept by renewals.
func (m *machine) holdLimitMs() int64 {
	if m.maxHoldMs > 0 {
		return m.maxHoldMs
	}
	return MaxLockTTL
}

// locksHeld counts the locks p holds in the region at nowMs.
func (m *machine) locksHeld(p peer.ID, nowMs int64) int {
	n := 0
	for _, o := range m.objects {
		if o.LockExpiresMs > nowMs && bytes.Equal(o.LockHolder, []byte(p)) {
			n++
		}
	}
	return n
}

// lockWaits are the requests waiting for locked objects of a region.
type lockWaits struct {
	byObject map[string][]*pending
	total    int
	byPlayer map[peer.ID]int
}

func (w *lockWaits) init() {
	if w.byObject == nil {
		w.byObject, w.byPlayer = map[string][]*pending{}, map[peer.ID]int{}
	}
}

// waiting is how many requests whose requester still listens wait for
// object id at nowMs.
func (w *lockWaits) waiting(id string, nowMs int64) int {
	n := 0
	for _, p := range w.byObject[id] {
		if !p.gone(nowMs) {
			n++
		}
	}
	return n
}

// park adds p to its object's waiters, or reports false past a bound. A
// retry of a request that waits already (its player gave up waiting for
// the answer and sent it again) takes the waiting one's place, answer and
// all, rather than a second slot: retries alone would fill the player's.
// A wait whose requester went away keeps its place for such a retry until
// a bound needs the room (it is never carried out: formBatch drops it).
func (w *lockWaits) park(p *pending, nowMs int64) bool {
	w.init()
	id := p.req.ObjectId
	for i, q := range w.byObject[id] {
		if q.from == p.from && bytes.Equal(q.req.RequestId, p.req.RequestId) {
			w.byObject[id][i] = p
			return true
		}
	}
	full := func() bool {
		return len(w.byObject[id]) >= maxWaitersPerObject || w.total >= maxWaitersPerRegion || w.byPlayer[p.from] >= maxWaitersPerPlayer
	}
	if full() {
		w.prune(nowMs)
	}
	if full() {
		return false
	}
	w.byObject[id] = append(w.byObject[id], p)
	w.total++
	w.byPlayer[p.from]++
	return true
}

// prune forgets the waits whose requester went away by nowMs. Nobody
// listens for their answers.
func (w *lockWaits) prune(nowMs int64) {
	for id, ps := range w.byObject {
		kept := ps[:0]
		for _, p := range ps {
			if !p.gone(nowMs) {
				kept = append(kept, p)
				continue
			}
			w.total--
			if w.byPlayer[p.from]--; w.byPlayer[p.from] <= 0 {
				delete(w.byPlayer, p.from)
			}
		}
		if len(kept) == 0 {
			delete(w.byObject, id)
		} else {
			w.byObject[id] = kept
		}
	}
}

// abandon marks p as no longer listened for from nowMs.
func (p *pending) abandon(nowMs int64) {
	if p.deadlineMs == 0 || p.deadlineMs > nowMs {
		p.deadlineMs = nowMs
	}
}

// is reports whether p is player from's request id.
func (p *pending) is(from peer.ID, id []byte) bool {
	return !p.expiry && p.from == from && bytes.Equal(p.req.RequestId, id)
}

// Abandon reports that player from's requester of request id went away
// (its stream closed, or the transport stopped waiting for the answer) at
// now: the request is not carried out if it still waits for a lock or in
// the queue (every copy of it: a retry queued while the first waited).
func (m *machine) Abandon(from peer.ID, id []byte, now time.Time) {
	nowMs := now.UnixMilli()
	for _, ps := range m.locks.byObject {
		for _, q := range ps {
			if q.is(from, id) {
				q.abandon(nowMs)
			}
		}
	}
	for _, q := range m.queue {
		if q.is(from, id) {
			q.abandon(nowMs)
		}
	}
}

// take removes and returns object id's waiters, in order.
func (w *lockWaits) take(id string) []*pending {
	ps := w.byObject[id]
	delete(w.byObject, id)
	for _, p := range ps {
		w.total--
		if w.byPlayer[p.from]--; w.byPlayer[p.from] <= 0 {
			delete(w.byPlayer, p.from)
		}
	}
	return ps
}

// drain answers every waiter with r and forgets them.
func (w *lockWaits) drain(r *pb.Reply) []answer {
	ids := make([]string, 0, len(w.byObject))
	for id := range w.byObject {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []answer
	for _, id := range ids {
		for _, p := range w.take(id) {
			out = append(out, answerTo(p, proto.Clone(r).(*pb.Reply)))
		}
	}
	return out
}

// wake puts object id's waiters back at the head of the region's queue,
// in their order: the object is free (or changes hands) now.
func (m *machine) wake(id string) {
	ps := m.locks.take(id)
	if len(ps) == 0 {
		return
	}
	m.queue = append(ps, m.queue...)
}

// lockStep decides what locks make of request p on object cur (nil if
// absent) at nowMs, before the operation itself runs. decided means r and
// e are the outcome: r nil when p now waits for the lock.
func (m *machine) lockStep(p *pending, cur *pb.Object, nowMs int64, leaseID uint64) (r *pb.Reply, e *pb.Entry, decided bool) {
	req := p.req
	// A lock counts for waiting until its expiry commits (ExpireLocks), so
	// that the waiters keep their order; for a write with the release, only
	// until its time runs out.
	locked := cur != nil && len(cur.LockHolder) > 0
	byOther := locked && !bytes.Equal(cur.LockHolder, []byte(p.from))
	held := locked && cur.LockExpiresMs > nowMs
	current := func() *pb.Object {
		if cur == nil {
			return &pb.Object{Id: req.ObjectId}
		}
		return proto.Clone(cur).(*pb.Object)
	}
	switch {
	case p.expiry:
		if cur == nil || len(cur.LockHolder) == 0 || held {
			// Released or renewed meanwhile.
			return &pb.Reply{Status: pb.Status_STATUS_OK}, nil, true
		}
		next := current()
		next.LockHolder, next.LockExpiresMs, next.LockSinceMs = nil, 0, 0
		m.seq++
		e := &pb.Entry{Seq: m.seq, Object: next, LeaseId: leaseID,
			Done: &pb.Done{RequestId: req.RequestId, Status: pb.Status_STATUS_OK, Version: next.Version}}
		m.apply(e)
		m.wake(req.ObjectId)
		return &pb.Reply{Status: pb.Status_STATUS_OK}, e, true
	case req.Op == pb.Op_OP_RELEASE && req.Write && (!held || byOther):
		// The two-step write's lock ran out (or was never taken): the
		// value it was decided on may be stale.
		return &pb.Reply{Status: pb.Status_STATUS_CONFLICT, Object: current(), Epoch: m.epoch, Error: "the lock was not held"}, nil, true
	case req.Op == pb.Op_OP_RELEASE && byOther:
		// Only the holder releases; nobody waits to release.
		return &pb.Reply{Status: pb.Status_STATUS_LOCKED, Object: current(), Epoch: m.epoch}, nil, true
	case req.Op == pb.Op_OP_RELEASE:
		return nil, nil, false
	case byOther:
		if !m.locks.park(p, nowMs) {
			return &pb.Reply{Status: pb.Status_STATUS_BUSY, Object: current(), Epoch: m.epoch,
				Error: fmt.Sprintf("region %s: too many requests wait for locked objects", m.region)}, nil, true
		}
		return nil, nil, true
	case req.Op != pb.Op_OP_LOCK:
		return nil, nil, false
	case locked && m.locks.waiting(req.ObjectId, nowMs) > 0 && (!held || nowMs >= cur.LockSinceMs+m.holdLimitMs()):
		// The holder renews a lock others wait for after holding it the
		// longest a lock may be held, or after it ran out (before its
		// expiry committed): the waiters get the object first.
		return &pb.Reply{Status: pb.Status_STATUS_BUSY, Object: current(), Epoch: m.epoch,
			Error: fmt.Sprintf("region %s: others wait for %q, held the longest a lock may be", m.region, req.ObjectId)}, nil, true
	case !held && m.locksHeld(p.from, nowMs) >= maxLocksPerPlayer:
		return &pb.Reply{Status: pb.Status_STATUS_BUSY, Object: current(), Epoch: m.epoch,
			Error: fmt.Sprintf("region %s: a player holds at most %d locks", m.region, maxLocksPerPlayer)}, nil, true
	}
	return nil, nil, false
}

// ExpireLocks queues the expiry of every lock that has run out by now; the
// expiry commits like a release and wakes the object's waiters.
func (m *machine) ExpireLocks(now time.Time) effects {
	if m.role != pb.Role_ROLE_COORDINATOR || m.handoffTo != "" {
		return effects{}
	}
	nowMs := now.UnixMilli()
	queued := map[string]bool{}
	for _, p := range m.queue {
		if p.expiry {
			queued[p.req.ObjectId] = true
		}
	}
	var due []string
	for id, o := range m.objects {
		if len(o.LockHolder) > 0 && o.LockExpiresMs <= nowMs && !queued[id] {
			due = append(due, id)
		}
	}
	if len(due) == 0 {
		return effects{}
	}
	sort.Strings(due)
	for _, id := range due {
		at := m.objects[id].LockExpiresMs
		m.queue = append(m.queue, &pending{
			from: m.self, expiry: true,
			req: &pb.Request{RequestId: expiryID(id, at, m.seq), Op: pb.Op_OP_RELEASE, ObjectId: id},
		})
	}
	return m.pump(now)
}

// expiryID names the expiry of object id's lock that runs out at at,
// queued when the region's last commit was seq (a lock taken again can
// run out at the same time), in the shape of a request ID (the done log
// and the wire check it).
func expiryID(id string, at int64, seq uint64) []byte {
	sum := sha256.Sum256(fmt.Appendf(nil, "overworld/lock-expiry/%s/%d/%d", id, at, seq))
	return sum[:requestIDLen]
}

// expireLocks runs ExpireLocks on every region this peer coordinates.
func (s *Service) expireLocks() {
	for _, c := range s.heldRegions() {
		sl := s.slot(c)
		s.feedLease(c, sl)
		eff := sl.m.ExpireLocks(time.Now())
		s.run(c, sl, eff)
	}
}
