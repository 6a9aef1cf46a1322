package regions

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// Who may claim a role in a region. Every peer may be hostile, so a message
// that claims the coordinator's role (replication, a deposal, a copy offered
// while a region is taken over, a hand-off, an event) is taken only from a
// peer this peer can verify:
//
//   - placed: it ranks among the placedWithin peers closest to the region
//     in this peer's view, itself counted whether known or not (views
//     differ a little; a far peer is never a coordinator);
//   - with a lease service (Config.Proofs): it shows a grant of the
//     region's lease signed by the lease service that names it (or, for a
//     copy, the coordinator the copy came from), not older than the newest
//     grant this peer knows for the region, and, for live messages, not
//     expired beyond proofSkew. Lease IDs are fencing tokens, so a grant
//     newer than a coordinator's own proves the coordinator deposed.
//
// Entries a coordinator publishes are signed with its libp2p key
// (entryDigest), so members keep each with its proof and a rebuild after a
// double failure takes only entries whose signature and grant check out.
// A forwarded request's player is believed only with the player's own
// signature over the request (requestDigest). A coordinator seals what its
// replica holds after each message (sealDigest over stateHash), so a copy
// a replica hands over is believed only with the content its coordinator
// sealed (checkSeal).
const (
	// placedWithin matches the lease service's default LeaseCandidates.
	placedWithin = 8
	// proofSkew allows for clock differences between the lease service
	// and this peer when a live message's proof is checked for expiry.
	proofSkew = 30 * time.Second
	// maxEpoch and maxVersion bound epochs and object versions on the
	// wire: far beyond what a region reaches (one take-over or commit a
	// millisecond for 8,900 years), far from wrapping when incremented.
	maxEpoch   = 1 << 48
	maxVersion = 1 << 48
	// maxLeaseBook bounds the newest-lease table (regions this peer heard
	// of with a valid grant).
	maxLeaseBook = 4096
)

// Refusal reasons, the label of overworld_region_refused_total.
const (
	refusedNotPlaced        = "not_placed"
	refusedProofMissing     = "proof_missing"
	refusedProofInvalid     = "proof_invalid"
	refusedProofHolder      = "proof_wrong_holder"
	refusedProofStale       = "proof_stale"
	refusedProofExpired     = "proof_expired"
	refusedDeposalUnproven  = "deposal_unproven"
	refusedHolderUnproven   = "holder_unproven"
	refusedCacheUnproven    = "cache_unproven"
	refusedOriginUnproven   = "origin_unproven"
	refusedReplicaExcluded  = "replica_excluded"
	refusedEventForged      = "event_forged"
	refusedBounds           = "out_of_bounds"
	refusedSuspectNotPlaced = "suspect_not_placed"
	// A copy offered as a replica's (or a hand-off's) without the
	// assignment its grant's holder signed for the peer offering it.
	refusedAssignmentUnproven = "assignment_unproven"
	// A replica's copy handed over whose content is not what its
	// coordinator sealed (or with no seal by it).
	refusedCopyUnsealed = "copy_unsealed"
)

// newestLeases remembers the newest lease ID seen with a valid grant for each
// region: a grant older than that is refused.
type newestLeases struct {
	mu sync.Mutex
	m  map[Coord]uint64
}

// see records id and reports whether it is not older than the newest known.
func (b *newestLeases) see(c Coord, id uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[Coord]uint64{}
	}
	cur, ok := b.m[c]
	if id < cur {
		return false
	}
	if !ok && len(b.m) >= maxLeaseBook {
		for k := range b.m { // only valid grants get here: evict any one
			delete(b.m, k)
			break
		}
	}
	b.m[c] = id
	return true
}

// claim is a verified role claim.
type claim struct {
	holder  peer.ID // whom the grant names ("" without a lease service)
	leaseID uint64
}

// placed reports whether p ranks within placedWithin of region c in this
// peer's view (p counted whether known or not).
func (s *Service) placed(c Coord, p peer.ID) bool {
	key := s.key(c)
	rank := 0
	for _, q := range s.candidates() {
		if q != p && s.hashes.closer(key, q, p) {
			if rank++; rank >= placedWithin {
				return false
			}
		}
	}
	return true
}

// checkProof verifies a grant of region c's lease. holders lists whom it
// may name (empty: anyone); live demands it has not ended (beyond
// proofSkew). It returns the claim or a refusal reason. Without a lease
// service there is nothing to check: the zero claim and "".
func (s *Service) checkProof(c Coord, proof []byte, live bool, holders ...peer.ID) (claim, string) {
	lp := s.cfg.Proofs
	if lp == nil {
		return claim{}, ""
	}
	if len(proof) == 0 {
		return claim{}, refusedProofMissing
	}
	holder, id, expires, err := lp.CheckProof(c, proof)
	if err != nil {
		return claim{}, refusedProofInvalid
	}
	if len(holders) > 0 && !containsPeer(holders, holder) {
		return claim{}, refusedProofHolder
	}
	if live && time.Now().After(expires.Add(proofSkew)) {
		return claim{}, refusedProofExpired
	}
	if !s.leases.see(c, id) {
		return claim{}, refusedProofStale
	}
	return claim{holder: holder, leaseID: id}, ""
}

// verifyCoordinator checks a live claim by p to coordinate region c.
func (s *Service) verifyCoordinator(c Coord, p peer.ID, proof []byte) (claim, string) {
	if !s.placed(c, p) {
		return claim{}, refusedNotPlaced
	}
	return s.checkProof(c, proof, true, p)
}

// refuse counts a refused claim and logs it (refusalLevel), at most once
// per refusalLogEvery for each reason; the next line logged for a reason
// says how many were left out. The metric counts every refusal.
func (s *Service) refuse(c Coord, from peer.ID, what, reason string) {
	s.metrics.refused.WithLabelValues(reason).Inc()
	ok, skipped := s.refusalLog.allow(reason, time.Now())
	if !ok {
		return
	}
	args := []any{"region", c, "from", from, "what", what, "reason", reason}
	if skipped > 0 {
		args = append(args, "not_logged_since", skipped)
	}
	s.log.Log(context.Background(), refusalLevel(reason), "refused a claim that does not check out", args...)
}

// refusalLevel is the level a refusal with reason is logged at. An honest
// peer in a changing network causes some: a view that differs (not
// placed), a grant that lapsed or was overtaken, a copy it cannot prove
// yet (one rebuilt from caches, or taken over by a replica without an
// assignment), a replica too busy to answer; those are Info. Warn is for
// what only a forger or a broken peer sends: a bad signature, a grant
// naming another peer, a value out of bounds, a forged event or origin.
func refusalLevel(reason string) slog.Level {
	if sub, ok := strings.CutPrefix(reason, refusedHolderUnproven+"/"); ok {
		reason = sub
	}
	switch reason {
	case refusedNotPlaced, refusedProofMissing, refusedProofStale, refusedProofExpired,
		refusedDeposalUnproven, refusedReplicaExcluded, refusedAssignmentUnproven, refusedHolderUnproven:
		return slog.LevelInfo
	}
	return slog.LevelWarn
}

// refusalLogEvery is how often a refusal is logged per reason at most:
// a thin view or a hand-off can make an honest peer's every event refused
// for a while, and a hostile peer's flood must not flood the log.
const refusalLogEvery = 10 * time.Second

// refusalLimiter rate-limits refusal logs per reason (a fixed, small set).
type refusalLimiter struct {
	mu sync.Mutex
	by map[string]*refusalLogged
}

type refusalLogged struct {
	last    time.Time
	skipped int
}

// allow reports whether a refusal with reason may be logged at now, and
// how many were not logged since the last that was.
func (l *refusalLimiter) allow(reason string, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.by == nil {
		l.by = map[string]*refusalLogged{}
	}
	r := l.by[reason]
	if r == nil {
		r = &refusalLogged{}
		l.by[reason] = r
	} else if now.Sub(r.last) < refusalLogEvery {
		r.skipped++
		return false, 0
	}
	skipped := r.skipped
	r.last, r.skipped = now, 0
	return true, skipped
}

// --- signatures with libp2p keys ---------------------------------------------

const (
	entrySigDomain      = "overworld/region/entry/1:"
	requestSigDomain    = "overworld/region/request/1:"
	assignmentSigDomain = "overworld/region/assignment/1:"
	sealSigDomain       = "overworld/region/seal/1:"
	stateHashDomain     = "overworld/region/state/1:"
)

func appendField(b []byte, f []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(f)))
	return append(b, f...)
}

// regionDigest starts a digest: the signature's domain, then the world
// and region it is about, so a signature never serves another purpose,
// world or region.
func regionDigest(domain, world string, c Coord) []byte {
	b := []byte(domain)
	b = appendField(b, []byte(world))
	b = binary.BigEndian.AppendUint32(b, uint32(c.X))
	return binary.BigEndian.AppendUint32(b, uint32(c.Y))
}

// entryDigest is what a coordinator signs for each entry it publishes: the
// region, the epoch and every field of the entry, length-prefixed.
func entryDigest(world string, c Coord, epoch uint64, e *pb.Entry) []byte {
	b := regionDigest(entrySigDomain, world, c)
	b = binary.BigEndian.AppendUint64(b, epoch)
	b = binary.BigEndian.AppendUint64(b, e.Seq)
	b = binary.BigEndian.AppendUint64(b, e.LeaseId)
	o := e.GetObject()
	b = appendField(b, []byte(o.GetId()))
	b = appendField(b, o.GetValue())
	b = binary.BigEndian.AppendUint64(b, o.GetVersion())
	b = appendField(b, o.GetLockHolder())
	b = binary.BigEndian.AppendUint64(b, uint64(o.GetLockExpiresMs()))
	b = binary.BigEndian.AppendUint64(b, uint64(o.GetLockSinceMs()))
	d := e.GetDone()
	b = appendField(b, d.GetRequestId())
	b = binary.BigEndian.AppendUint32(b, uint32(d.GetStatus()))
	b = binary.BigEndian.AppendUint64(b, d.GetVersion())
	return binary.BigEndian.AppendUint64(b, uint64(d.GetLockExpiresMs()))
}

// requestDigest is what a player signs for each request: the region and
// every field that decides what the request does (not the routing fields
// forwarded, origin and suspects).
func requestDigest(world string, c Coord, r *pb.Request) []byte {
	b := regionDigest(requestSigDomain, world, c)
	b = appendField(b, r.RequestId)
	b = binary.BigEndian.AppendUint32(b, uint32(r.Op))
	b = appendField(b, []byte(r.ObjectId))
	b = appendField(b, r.Value)
	b = binary.BigEndian.AppendUint64(b, r.ReadVersion)
	b = binary.BigEndian.AppendUint32(b, r.LockTtlMs)
	if r.Write {
		// A release that writes: the value it carries is the player's.
		b = append(b, 1)
	}
	return b
}

// assignmentDigest is what a coordinator signs when it makes a peer its
// replica (or hands the region to it): the region, the epoch, the lease,
// the peer and the assignment's serial.
func assignmentDigest(world string, c Coord, a *pb.Assignment) []byte {
	b := regionDigest(assignmentSigDomain, world, c)
	b = binary.BigEndian.AppendUint64(b, a.Epoch)
	b = binary.BigEndian.AppendUint64(b, a.LeaseId)
	b = appendField(b, a.Holder)
	return binary.BigEndian.AppendUint64(b, a.Serial)
}

// sealDigest is what a coordinator signs when it seals its state: the
// region, the epoch, the lease, the seq and the state's hash.
func sealDigest(world string, c Coord, s *pb.Seal) []byte {
	b := regionDigest(sealSigDomain, world, c)
	b = binary.BigEndian.AppendUint64(b, s.Epoch)
	b = binary.BigEndian.AppendUint64(b, s.LeaseId)
	b = binary.BigEndian.AppendUint64(b, s.Seq)
	return appendField(b, s.StateHash)
}

// stateHash is the SHA-256 of a region's state at seq: every field of
// each object, in the order given (sorted by ID, as snapshots have
// them), then each remembered outcome in the done log's order. The epoch
// is left out: a hand-off raises it without changing the state.
func stateHash(seq uint64, objects []*pb.Object, done []*pb.Done) []byte {
	h := sha256.New()
	var b []byte
	b = append(b, stateHashDomain...)
	b = binary.BigEndian.AppendUint64(b, seq)
	b = binary.BigEndian.AppendUint64(b, uint64(len(objects)))
	for _, o := range objects {
		b = appendField(b, []byte(o.GetId()))
		b = appendField(b, o.GetValue())
		b = binary.BigEndian.AppendUint64(b, o.GetVersion())
		b = appendField(b, o.GetLockHolder())
		b = binary.BigEndian.AppendUint64(b, uint64(o.GetLockExpiresMs()))
		b = binary.BigEndian.AppendUint64(b, uint64(o.GetLockSinceMs()))
		h.Write(b)
		b = b[:0]
	}
	b = binary.BigEndian.AppendUint64(b, uint64(len(done)))
	for _, d := range done {
		b = appendField(b, d.GetRequestId())
		b = binary.BigEndian.AppendUint32(b, uint32(d.GetStatus()))
		b = binary.BigEndian.AppendUint64(b, d.GetVersion())
		b = binary.BigEndian.AppendUint64(b, uint64(d.GetLockExpiresMs()))
		h.Write(b)
		b = b[:0]
	}
	h.Write(b)
	return h.Sum(nil)
}

// snapshotHash is stateHash of a snapshot as it stands.
func snapshotHash(s *pb.Snapshot) []byte { return stateHash(s.GetSeq(), s.GetObjects(), s.GetDone()) }

// grantLease is the lease ID of grant, a grant of region c's lease; false
// without a lease service, or a grant that does not check out.
func (s *Service) grantLease(c Coord, grant []byte) (uint64, bool) {
	if s.cfg.Proofs == nil || len(grant) == 0 {
		return 0, false
	}
	_, lease, _, err := s.cfg.Proofs.CheckProof(c, grant)
	return lease, err == nil
}

// seal returns this peer's signed seal of region c's state at seq (hash)
// in epoch under lease (this peer's own, see grantLease).
func (s *Service) seal(c Coord, epoch, lease, seq uint64, hash []byte) *pb.Seal {
	sl := &pb.Seal{Epoch: epoch, LeaseId: lease, Seq: seq, StateHash: hash}
	if sl.Signature = s.sign(sealDigest(s.cfg.World, c, sl)); sl.Signature == nil {
		return nil
	}
	return sl
}

// checkSeal checks that snapshot snap, a copy proven by grant (checked
// already) that another peer hands over, is what grant's holder sealed:
// signed by it under grant's lease, at the snapshot's seq, with the
// snapshot's hash. It returns a refusal reason, "" when it checks out.
func (s *Service) checkSeal(c Coord, grant []byte, snap *pb.Snapshot, seal *pb.Seal) string {
	holder, lease, _, err := s.cfg.Proofs.CheckProof(c, grant)
	if err != nil {
		return refusedProofInvalid
	}
	if seal == nil || seal.LeaseId != lease || seal.Seq != snap.Seq ||
		!bytes.Equal(seal.StateHash, snapshotHash(snap)) ||
		!s.verifySig(holder, sealDigest(s.cfg.World, c, seal), seal.Signature) {
		return refusedCopyUnsealed
	}
	return ""
}

// assign returns this peer's signed assignment of region c's copy to
// holder in epoch under lease (this peer's own, see grantLease). The
// same assignment is reused while epoch, lease and holder stay; a new one
// gets the slot's next serial (so it runs on the loop, which owns the
// slot; a new assignment is rare, signed there). Nil if this peer cannot
// sign.
func (s *Service) assignOnLoop(c Coord, sl *slot, epoch, lease uint64, holder peer.ID) *pb.Assignment {
	if a := sl.assigned; a != nil && a.Epoch == epoch && a.LeaseId == lease && peer.ID(a.Holder) == holder {
		return a
	}
	sl.serial++
	a := &pb.Assignment{Epoch: epoch, LeaseId: lease, Holder: []byte(holder), Serial: sl.serial}
	if a.Signature = s.sign(assignmentDigest(s.cfg.World, c, a)); a.Signature == nil {
		return nil
	}
	sl.assigned = a
	return a
}

// copyRank is what a verified claim to hold a copy of a region says about
// it, for fresher: the lease it was committed under, and how its holder
// came by it: it holds the grant itself (own: it committed the copy), or
// the grant's holder assigned it the copy (assignEpoch, serial: later
// assignments are fresher), or neither is shown.
type copyRank struct {
	lease       uint64
	own         bool
	assigned    bool
	assignEpoch uint64
	serial      uint64
}

// checkCopyClaim verifies p's claim to hold a copy of region c proven by
// grant: the grant must check out as checkProofCopy has it, and name p,
// or come with an assignment to p signed by the peer it names under the
// same lease (replaying another peer's grant, or an assignment to another
// peer, proves nothing). It returns the rank, or a refusal reason.
func (s *Service) checkCopyClaim(c Coord, p peer.ID, grant []byte, a *pb.Assignment) (copyRank, string) {
	cl, reason := s.checkProofCopy(c, grant)
	if reason != "" || s.cfg.Proofs == nil {
		return copyRank{}, reason
	}
	r := copyRank{lease: cl.leaseID}
	if cl.holder == p {
		r.own = true
		return r, ""
	}
	if a == nil || peer.ID(a.Holder) != p || a.LeaseId != cl.leaseID ||
		!s.verifySig(cl.holder, assignmentDigest(s.cfg.World, c, a), a.Signature) {
		return copyRank{}, refusedAssignmentUnproven
	}
	r.assigned, r.assignEpoch, r.serial = true, a.Epoch, a.Serial
	return r, ""
}

// sign signs data with this peer's libp2p key (nil if it has none).
func (s *Service) sign(data []byte) []byte {
	key := s.tr.PrivKey()
	if key == nil {
		return nil
	}
	sig, err := key.Sign(data)
	if err != nil {
		s.log.Warn("signing failed", "err", err)
		return nil
	}
	return sig
}

// verifySig checks sig over data by p's libp2p key: inlined in its ID
// (Ed25519), or as the peerstore learned it.
func (s *Service) verifySig(p peer.ID, data, sig []byte) bool {
	if len(sig) == 0 || len(sig) > maxSignatureLen {
		return false
	}
	var pub crypto.PubKey
	if k, err := p.ExtractPublicKey(); err == nil {
		pub = k
	} else if pub = s.tr.PubKey(p); pub == nil {
		return false
	}
	ok, err := pub.Verify(data, sig)
	return err == nil && ok
}

const maxSignatureLen = 1024 // RSA-4096 signs in 512 bytes; Ed25519 in 64

// verifyOrigin checks a forwarded request's player signature.
func (s *Service) verifyOrigin(c Coord, req *pb.Request) (peer.ID, bool) {
	origin, err := peer.IDFromBytes(req.Origin)
	if err != nil {
		return "", false
	}
	return origin, s.verifySig(origin, requestDigest(s.cfg.World, c, req), req.OriginSignature)
}

// verifySignedEntry checks an entry a member kept: its signature by its
// author, the author's grant (lease service in use) or placement (none),
// and its bounds. It returns a reason, "" when it checks out.
func (s *Service) verifySignedEntry(c Coord, se *pb.SignedEntry) string {
	if se == nil || se.Entry == nil || se.Entry.Object == nil || se.Epoch == 0 || se.Epoch > maxEpoch ||
		se.Entry.Object.Version > maxVersion {
		return refusedBounds
	}
	author, err := peer.IDFromBytes(se.Author)
	if err != nil {
		return refusedEventForged
	}
	if !s.verifySig(author, entryDigest(s.cfg.World, c, se.Epoch, se.Entry), se.Signature) {
		return refusedEventForged
	}
	if s.cfg.Proofs == nil {
		if !s.placed(c, author) {
			return refusedNotPlaced
		}
		return ""
	}
	cl, reason := s.checkProofCopy(c, se.Grant, author)
	if reason != "" {
		return reason
	}
	if se.Entry.LeaseId > cl.leaseID {
		return refusedProofStale
	}
	return ""
}

// checkProofCopy verifies the grant a copy of region c was committed
// under: it must name one of holders and not be older than the newest
// known, but may have ended (the copy outlives its coordinator's lease).
func (s *Service) checkProofCopy(c Coord, proof []byte, holders ...peer.ID) (claim, string) {
	return s.checkProof(c, proof, false, holders...)
}
