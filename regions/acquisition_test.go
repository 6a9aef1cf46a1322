package regions

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// The acquisition's tests script it with fakes: no network, keys or
// placement. self is the acquiring peer; near is closer to the region
// than self, p1..p6 are farther.
var (
	acqSelf = testPeer(20)
	acqNear = testPeer(21)
	p1      = testPeer(22)
	p2      = testPeer(23)
	p3      = testPeer(24)
	p4      = testPeer(25)
	p5      = testPeer(26)
	p6      = testPeer(27)
)

var acqNames = map[peer.ID]string{acqSelf: "self", acqNear: "near", p1: "p1", p2: "p2", p3: "p3", p4: "p4", p5: "p5", p6: "p6"}

// fakeChecks stands in for the Service's keys and view.
type fakeChecks struct {
	unproven   map[peer.ID]string   // proveCopy's reason per holder
	ranks      map[peer.ID]copyRank // what weigh finds
	leased     map[peer.ID]bool
	badHandoff map[peer.ID]string // checkHandoff's reason per source
	forged     map[string]bool    // verifyEntry refuses these signatures
	verified   map[string]int     // verifyEntry calls per signature
}

// acqStart is when the tests' acquisitions start, acqTimeout how long
// they may wait for the network.
var (
	acqStart   = time.Unix(1_000_000, 0)
	acqTimeout = 9 * time.Second
)

// acqOrder is the fake placement, closest first.
var acqOrder = []peer.ID{acqNear, acqSelf, p1, p2, p3, p4, p5, p6}

func acqRank(p peer.ID) int {
	for i, q := range acqOrder {
		if q == p {
			return i
		}
	}
	return len(acqOrder)
}

func (f *fakeChecks) closer(a, b peer.ID) bool { return acqRank(a) < acqRank(b) }
func (f *fakeChecks) proveCopy(p peer.ID, _ *pb.InfoReply) string {
	return f.unproven[p]
}
func (f *fakeChecks) weigh(h *holder) { h.copyRank, h.leased = f.ranks[h.p], f.leased[h.p] }
func (f *fakeChecks) checkHandoff(src peer.ID, _ *pb.HandoffReply) string {
	return f.badHandoff[src]
}
func (f *fakeChecks) verifyEntry(se *pb.SignedEntry) string {
	if f.verified == nil {
		f.verified = map[string]int{}
	}
	f.verified[string(se.Signature)]++
	if f.forged[string(se.Signature)] || strings.HasPrefix(string(se.Entry.Object.Value), "made up") {
		return refusedEventForged
	}
	return ""
}

// fakeNet answers an acquisition's asks at once, in the order asked. A
// peer missing from infos or handoffs fails (unreachable).
type fakeNet struct {
	own      *pb.InfoReply
	infos    map[peer.ID]*pb.InfoReply
	handoffs map[peer.ID]*pb.HandoffReply
	members  []peer.ID
	ownCache []*pb.SignedEntry
	caches   map[peer.ID][]*pb.SignedEntry
}

func copyOf(role pb.Role, epoch, seq uint64) *pb.InfoReply {
	return &pb.InfoReply{Role: role, Epoch: epoch, Seq: seq}
}

var (
	coordRole   = pb.Role_ROLE_COORDINATOR
	replicaRole = pb.Role_ROLE_REPLICA
	noRole      = pb.Role_ROLE_NONE
)

func handedOverAt(epoch uint64) *pb.HandoffReply {
	return &pb.HandoffReply{Ok: true, Snapshot: &pb.Snapshot{Epoch: epoch, Seq: 1}}
}

func redirectTo(p peer.ID) *pb.HandoffReply {
	return &pb.HandoffReply{Error: "ask elsewhere", Redirect: []byte(p)}
}

// play runs a to its end against net and returns what it did, one line
// per effect, and its last effects.
func play(t *testing.T, a *acquisition, net fakeNet) ([]string, acqEffects) {
	t.Helper()
	var trace []string
	var queue []acqInput
	eff := a.Start(acqStart)
	for range 100 {
		for _, r := range eff.refusals {
			trace = append(trace, fmt.Sprintf("refuse %s %s %s", acqNames[r.from], r.what, r.reason))
		}
		if eff.nudge != "" {
			trace = append(trace, "nudge "+acqNames[eff.nudge])
		}
		if eff.takeOver {
			trace = append(trace, "take over own copy")
		}
		if eff.install != nil {
			trace = append(trace, "install from "+acqNames[eff.install.from])
		}
		if r := eff.rebuilt; r != nil {
			trace = append(trace, fmt.Sprintf("rebuild epoch %d objects %d caches %d created %v", r.snap.Epoch, r.objects, r.caches, r.created))
		}
		for _, p := range eff.askInfo {
			queue = append(queue, infoReplied(p, net.infos[p]))
		}
		if p := eff.askHandoff; p != "" {
			trace = append(trace, "hand-off from "+acqNames[p])
			hr, ok := net.handoffs[p]
			var err error
			if !ok {
				err = errors.New("unreachable")
			}
			queue = append(queue, handoffReplied(p, hr, err))
		}
		for _, p := range eff.askCaches {
			queue = append(queue, cacheReplied(p, net.caches[p]))
		}
		switch {
		case eff.done != acqRunning:
			if a.Result() != eff.done {
				t.Fatalf("Result() = %v, the last step said %v", a.Result(), eff.done)
			}
			return trace, eff
		case eff.readOwn:
			eff = a.Step(ownCopy(net.own))
		case eff.listMembers:
			trace = append(trace, "list members")
			eff = a.Step(membersListed(net.members, net.ownCache))
		case len(queue) == 0:
			t.Fatalf("the acquisition waits for nothing asked; trace %q", trace)
		default:
			in := queue[0]
			queue = queue[1:]
			eff = a.Step(in)
		}
	}
	t.Fatalf("the acquisition did not end; trace %q", trace)
	return nil, acqEffects{}
}

func newTestAcquisition(kind acqKind, checks *fakeChecks, asked ...peer.ID) *acquisition {
	return newAcquisition(kind, acqSelf, Coord{1, 2}, asked, 7, acqTimeout, checks, slog.New(slog.DiscardHandler))
}

// TestAcquisition scripts acquire and compareCopies: what each does with
// the copies the peers it asks hold.
func TestAcquisition(t *testing.T) {
	const L = 7
	ownL := copyRank{lease: L, own: true}
	assignedL := func(serial uint64) copyRank {
		return copyRank{lease: L, assigned: true, assignEpoch: 3, serial: serial}
	}
	for _, tc := range []struct {
		name   string
		kind   acqKind
		asked  []peer.ID
		checks fakeChecks
		net    fakeNet
		trace  []string
		result acqResult
	}{
		{
			name: "the freshest copy is handed over", asked: []peer.ID{p1, p2, p3},
			net: fakeNet{infos: map[peer.ID]*pb.InfoReply{
				p1: copyOf(replicaRole, 3, 5), p2: copyOf(coordRole, 3, 9), p3: copyOf(noRole, 0, 0),
			}, handoffs: map[peer.ID]*pb.HandoffReply{p1: handedOverAt(4), p2: handedOverAt(4)}},
			trace:  []string{"hand-off from p2", "install from p2"},
			result: acqInstalled,
		},
		{
			name: "a closer live holder is nudged and the acquisition stops", asked: []peer.ID{p1, acqNear},
			net: fakeNet{infos: map[peer.ID]*pb.InfoReply{
				p1: copyOf(coordRole, 3, 9), acqNear: copyOf(noRole, 0, 0),
			}},
			trace:  []string{"nudge near"},
			result: acqSteppedBack,
		},
		{
			name: "a closer holder that steps aside is not waited for", asked: []peer.ID{p1, acqNear},
			net: fakeNet{infos: map[peer.ID]*pb.InfoReply{
				p1: copyOf(coordRole, 3, 9), acqNear: {SteppingAside: true},
			}, handoffs: map[peer.ID]*pb.HandoffReply{p1: handedOverAt(4)}},
			trace:  []string{"hand-off from p1", "install from p1"},
			result: acqInstalled,
		},
		{
			name: "a closer holder whose copy does not check out still counts as alive", asked: []peer.ID{acqNear},
			checks: fakeChecks{unproven: map[peer.ID]string{acqNear: refusedProofInvalid}},
			net:    fakeNet{infos: map[peer.ID]*pb.InfoReply{acqNear: copyOf(coordRole, 9, 99)}},
			trace:  []string{"refuse near holder's copy holder_unproven/proof_invalid", "nudge near"},
			result: acqSteppedBack,
		},
		{
			name: "this peer's own copy is the freshest: taken over", asked: []peer.ID{p1, p2},
			net: fakeNet{own: copyOf(replicaRole, 4, 10), infos: map[peer.ID]*pb.InfoReply{
				p1: copyOf(coordRole, 3, 12), p2: copyOf(replicaRole, 3, 12),
			}},
			trace:  []string{"take over own copy"},
			result: acqTookOver,
		},
		{
			name: "a copy that does not check out is refused, not handed over", asked: []peer.ID{p1, p2},
			checks: fakeChecks{unproven: map[peer.ID]string{p2: refusedAssignmentUnproven}},
			net: fakeNet{own: copyOf(replicaRole, 3, 10), infos: map[peer.ID]*pb.InfoReply{
				p1: copyOf(replicaRole, 3, 2), p2: copyOf(coordRole, 9, 99),
			}},
			trace:  []string{"refuse p2 holder's copy holder_unproven/assignment_unproven", "take over own copy"},
			result: acqTookOver,
		},
		{
			name: "a refused hand-off passes over to the next freshest copy", asked: []peer.ID{p1, p2},
			checks: fakeChecks{badHandoff: map[peer.ID]string{p2: refusedCopyUnsealed}},
			net: fakeNet{infos: map[peer.ID]*pb.InfoReply{
				p1: copyOf(replicaRole, 3, 5), p2: copyOf(coordRole, 4, 9),
			}, handoffs: map[peer.ID]*pb.HandoffReply{p1: handedOverAt(4), p2: handedOverAt(5)}},
			trace:  []string{"hand-off from p2", "refuse p2 hand-off holder_unproven/copy_unsealed", "hand-off from p1", "install from p1"},
			result: acqInstalled,
		},
		{
			name: "a refused hand-off passes over to this peer's own copy", asked: []peer.ID{p2},
			checks: fakeChecks{badHandoff: map[peer.ID]string{p2: refusedCopyUnsealed}},
			net: fakeNet{own: copyOf(replicaRole, 3, 1), infos: map[peer.ID]*pb.InfoReply{p2: copyOf(coordRole, 4, 9)},
				handoffs: map[peer.ID]*pb.HandoffReply{p2: handedOverAt(5)}},
			trace:  []string{"hand-off from p2", "refuse p2 hand-off holder_unproven/copy_unsealed", "take over own copy"},
			result: acqTookOver,
		},
		{
			name: "redirects are followed up to the hop limit", asked: []peer.ID{p1},
			net: fakeNet{infos: map[peer.ID]*pb.InfoReply{p1: copyOf(coordRole, 3, 9)},
				handoffs: map[peer.ID]*pb.HandoffReply{p1: redirectTo(p4), p4: redirectTo(p5), p5: redirectTo(p6), p6: handedOverAt(4)}},
			trace:  []string{"hand-off from p1", "hand-off from p4", "hand-off from p5"},
			result: acqFailed,
		},
		{
			name: "a redirect within the hop limit is taken over from", asked: []peer.ID{p1},
			net: fakeNet{infos: map[peer.ID]*pb.InfoReply{p1: copyOf(coordRole, 3, 9)},
				handoffs: map[peer.ID]*pb.HandoffReply{p1: redirectTo(p4), p4: redirectTo(p5), p5: handedOverAt(4)}},
			trace:  []string{"hand-off from p1", "hand-off from p4", "hand-off from p5", "install from p5"},
			result: acqInstalled,
		},
		{
			name: "a redirect to a peer closer than this one is nudged", asked: []peer.ID{p1},
			net: fakeNet{infos: map[peer.ID]*pb.InfoReply{p1: copyOf(coordRole, 3, 9)},
				handoffs: map[peer.ID]*pb.HandoffReply{p1: redirectTo(acqNear)}},
			trace:  []string{"hand-off from p1", "nudge near"},
			result: acqSteppedBack,
		},
		{
			name: "a redirect back to this peer ends the acquisition", asked: []peer.ID{p1, p2},
			net: fakeNet{infos: map[peer.ID]*pb.InfoReply{p1: copyOf(coordRole, 3, 9), p2: copyOf(replicaRole, 3, 8)},
				handoffs: map[peer.ID]*pb.HandoffReply{p1: redirectTo(acqSelf), p2: handedOverAt(4)}},
			trace:  []string{"hand-off from p1"},
			result: acqFailed,
		},
		{
			name: "a refusal without a redirect ends the acquisition", asked: []peer.ID{p1, p2},
			net: fakeNet{infos: map[peer.ID]*pb.InfoReply{p1: copyOf(coordRole, 3, 9), p2: copyOf(replicaRole, 3, 8)},
				handoffs: map[peer.ID]*pb.HandoffReply{p1: {Error: "no state for region"}, p2: handedOverAt(4)}},
			trace:  []string{"hand-off from p1"},
			result: acqFailed,
		},
		{
			name: "a failed hand-off ends the acquisition: no next copy, no rebuild", asked: []peer.ID{p1, p2},
			net:   fakeNet{infos: map[peer.ID]*pb.InfoReply{p1: copyOf(coordRole, 3, 9), p2: copyOf(replicaRole, 3, 8)}},
			trace: []string{"hand-off from p1"}, result: acqFailed,
		},
		{
			name: "every hand-off refused: rebuilt from caches", asked: []peer.ID{p1, p2},
			checks: fakeChecks{badHandoff: map[peer.ID]string{p1: refusedCopyUnsealed, p2: refusedProofInvalid}},
			net: fakeNet{infos: map[peer.ID]*pb.InfoReply{p1: copyOf(coordRole, 3, 9), p2: copyOf(replicaRole, 3, 8)},
				handoffs: map[peer.ID]*pb.HandoffReply{p1: handedOverAt(4), p2: handedOverAt(4)},
				members:  []peer.ID{p3}, caches: map[peer.ID][]*pb.SignedEntry{p3: {signedAt("a", 3, 2, 7, "s1")}}},
			trace: []string{
				"hand-off from p1", "refuse p1 hand-off holder_unproven/copy_unsealed",
				"hand-off from p2", "refuse p2 hand-off holder_unproven/proof_invalid",
				"list members", "rebuild epoch 4 objects 1 caches 1 created false",
			},
			result: acqRebuilt,
		},
		{
			name: "nobody answers and nothing is cached: the region is created", asked: []peer.ID{p1, p2},
			net:   fakeNet{members: []peer.ID{p3}},
			trace: []string{"list members", "rebuild epoch 1 objects 0 caches 0 created true"}, result: acqRebuilt,
		},
		{
			name: "peers that hold nothing: rebuilt from this peer's own cache", asked: []peer.ID{p1},
			net: fakeNet{infos: map[peer.ID]*pb.InfoReply{p1: copyOf(noRole, 0, 0)},
				ownCache: []*pb.SignedEntry{signedAt("a", 5, 1, 7, "s1")}},
			trace: []string{"list members", "rebuild epoch 6 objects 1 caches 1 created false"}, result: acqRebuilt,
		},
		{
			name: "compare, same lease and seq as the freshest: no hand-on", kind: acqCompare, asked: []peer.ID{p1},
			checks: fakeChecks{ranks: map[peer.ID]copyRank{p1: ownL, acqSelf: assignedL(1)}},
			net: fakeNet{own: copyOf(coordRole, 4, 10), infos: map[peer.ID]*pb.InfoReply{p1: copyOf(replicaRole, 4, 10)},
				handoffs: map[peer.ID]*pb.HandoffReply{p1: handedOverAt(5)}},
			trace: nil, result: acqKept,
		},
		{
			name: "compare, a fresher copy elsewhere: handed over", kind: acqCompare, asked: []peer.ID{p1, p2},
			checks: fakeChecks{ranks: map[peer.ID]copyRank{p1: ownL, p2: assignedL(2), acqSelf: assignedL(1)}},
			net: fakeNet{own: copyOf(coordRole, 4, 10), infos: map[peer.ID]*pb.InfoReply{
				p1: copyOf(replicaRole, 4, 12), p2: copyOf(replicaRole, 4, 11),
			}, handoffs: map[peer.ID]*pb.HandoffReply{p1: handedOverAt(5)}},
			trace: []string{"hand-off from p1", "install from p1"}, result: acqInstalled,
		},
		{
			name: "compare, own copy freshest", kind: acqCompare, asked: []peer.ID{p1},
			checks: fakeChecks{ranks: map[peer.ID]copyRank{p1: assignedL(1), acqSelf: ownL}},
			net: fakeNet{own: copyOf(coordRole, 4, 10), infos: map[peer.ID]*pb.InfoReply{p1: copyOf(replicaRole, 4, 12)},
				handoffs: map[peer.ID]*pb.HandoffReply{p1: handedOverAt(5)}},
			trace: nil, result: acqKept,
		},
		{
			name: "compare, a refused hand-off passes over to this peer's own copy", kind: acqCompare, asked: []peer.ID{p1},
			checks: fakeChecks{ranks: map[peer.ID]copyRank{p1: ownL, acqSelf: assignedL(1)}, badHandoff: map[peer.ID]string{p1: refusedCopyUnsealed}},
			net: fakeNet{own: copyOf(coordRole, 4, 10), infos: map[peer.ID]*pb.InfoReply{p1: copyOf(replicaRole, 4, 12)},
				handoffs: map[peer.ID]*pb.HandoffReply{p1: handedOverAt(5)}},
			trace: []string{"hand-off from p1", "refuse p1 hand-off holder_unproven/copy_unsealed"}, result: acqKept,
		},
		{
			name: "compare, a failed hand-off: not compared", kind: acqCompare, asked: []peer.ID{p1},
			checks: fakeChecks{ranks: map[peer.ID]copyRank{p1: ownL, acqSelf: assignedL(1)}},
			net:    fakeNet{own: copyOf(coordRole, 4, 10), infos: map[peer.ID]*pb.InfoReply{p1: copyOf(replicaRole, 4, 12)}},
			trace:  []string{"hand-off from p1"}, result: acqFailed,
		},
		{
			name: "compare never steps back nor rebuilds", kind: acqCompare, asked: []peer.ID{acqNear},
			net:   fakeNet{infos: map[peer.ID]*pb.InfoReply{acqNear: copyOf(noRole, 0, 0)}},
			trace: nil, result: acqRefused,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checks := tc.checks
			a := newTestAcquisition(tc.kind, &checks, tc.asked...)
			trace, _ := play(t, a, tc.net)
			if !reflect.DeepEqual(trace, tc.trace) {
				t.Errorf("trace\n got %q\nwant %q", trace, tc.trace)
			}
			if a.Result() != tc.result {
				t.Errorf("result %v, want %v", a.Result(), tc.result)
			}
		})
	}
}

// signedAt is a cached entry of object id at version in epoch under lease,
// with signature sig (the fake checks judge by it).
func signedAt(id string, epoch, version, lease uint64, sig string) *pb.SignedEntry {
	return &pb.SignedEntry{
		Epoch: epoch, Signature: []byte(sig), Grant: []byte("grant-" + sig),
		Entry: &pb.Entry{LeaseId: lease, Object: &pb.Object{Id: id, Version: version, Value: []byte(fmt.Sprintf("%s@%d", id, version))}},
	}
}

// TestAcquisitionRebuildMerges: the newest entry of each object wins,
// only verified entries count (each signature checked once), the epoch
// follows the newest verified one, the grant is the newest lease's, and
// locks are not carried over.
func TestAcquisitionRebuildMerges(t *testing.T) {
	locked := signedAt("b", 4, 6, 9, "b6")
	locked.Entry.Object.LockHolder, locked.Entry.Object.LockExpiresMs, locked.Entry.Object.LockSinceMs = []byte("alice"), 99, 98
	checks := &fakeChecks{forged: map[string]bool{"forged": true}}
	forged := signedAt("a", 40, 100, 50, "forged")
	net := fakeNet{
		members:  []peer.ID{p1, p2, p3},
		ownCache: []*pb.SignedEntry{signedAt("a", 3, 1, 7, "a1")},
		caches: map[peer.ID][]*pb.SignedEntry{
			p1: {signedAt("a", 3, 4, 8, "a4"), signedAt("b", 3, 2, 7, "b2"), forged},
			p2: {signedAt("a", 3, 4, 8, "a4"), locked, signedAt("c", 2, 9, 6, "c9")},
			// p3 fails.
		},
	}
	a := newTestAcquisition(acqTake, checks)
	trace, eff := play(t, a, net)
	if a.Result() != acqRebuilt || eff.rebuilt == nil {
		t.Fatalf("not rebuilt: %q", trace)
	}
	r := eff.rebuilt
	var got []string
	for _, o := range r.snap.Objects {
		got = append(got, fmt.Sprintf("%s v%d %s lock=%q/%d/%d", o.Id, o.Version, o.Value, o.LockHolder, o.LockExpiresMs, o.LockSinceMs))
	}
	want := []string{`a v4 a@4 lock=""/0/0`, `b v6 b@6 lock=""/0/0`, `c v9 c@9 lock=""/0/0`}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("objects\n got %q\nwant %q", got, want)
	}
	if r.snap.Epoch != 5 {
		t.Errorf("epoch %d, want 5 (the newest verified entry's 4, plus one)", r.snap.Epoch)
	}
	if string(r.grant) != "grant-b6" {
		t.Errorf("grant %q, want the newest lease's (grant-b6)", r.grant)
	}
	if r.created || r.objects != 3 || r.caches != 3 || r.members != 3 {
		t.Errorf("created %v objects %d caches %d members %d, want false 3 3 3", r.created, r.objects, r.caches, r.members)
	}
	if eff.unprovenEntries != 1 {
		t.Errorf("%d entries left out, want 1", eff.unprovenEntries)
	}
	for sig, n := range checks.verified {
		if n != 1 {
			t.Errorf("signature %q checked %d times, want once", sig, n)
		}
	}
	if len(checks.verified) != 6 {
		t.Errorf("%d signatures checked, want 6", len(checks.verified))
	}
	if locked.Entry.Object.LockExpiresMs != 99 {
		t.Error("the cached entry itself was changed")
	}
}

// TestAcquisitionRebuildBound: a rebuild keeps MaxObjectsInRegion
// objects, the first by ID.
func TestAcquisitionRebuildBound(t *testing.T) {
	var cache []*pb.SignedEntry
	for i := range MaxObjectsInRegion + 5 {
		id := fmt.Sprintf("o%04d", MaxObjectsInRegion+5-i)
		cache = append(cache, signedAt(id, 2, 1, 7, id))
	}
	a := newTestAcquisition(acqTake, &fakeChecks{})
	_, eff := play(t, a, fakeNet{ownCache: cache})
	objs := eff.rebuilt.snap.Objects
	if len(objs) != MaxObjectsInRegion || objs[0].Id != "o0001" || objs[len(objs)-1].Id != fmt.Sprintf("o%04d", MaxObjectsInRegion) {
		t.Fatalf("%d objects from %s to %s", len(objs), objs[0].Id, objs[len(objs)-1].Id)
	}
}

// TestAcquisitionArmsItsDeadline: Start returns the deadline's timer,
// timeout after the start, whether it asks anyone or not, and no step
// arms another.
func TestAcquisitionArmsItsDeadline(t *testing.T) {
	want := acqStart.Add(acqTimeout)
	a := newTestAcquisition(acqTake, &fakeChecks{}, p1)
	eff := a.Start(acqStart)
	if !eff.deadline.Equal(want) || !reflect.DeepEqual(eff.askInfo, []peer.ID{p1}) {
		t.Fatalf("Start: deadline %s, asked %v; want %s, [p1]", eff.deadline, eff.askInfo, want)
	}
	for _, in := range []acqInput{infoReplied(p1, nil), ownCopy(nil), deadlineReached()} {
		if eff := a.Step(in); !eff.deadline.IsZero() {
			t.Fatalf("step %v armed a deadline at %s", in.kind, eff.deadline)
		}
	}
	alone := newTestAcquisition(acqTake, &fakeChecks{})
	if eff := alone.Start(acqStart); !eff.deadline.Equal(want) || !eff.readOwn {
		t.Fatalf("Start asking nobody: deadline %s, readOwn %v; want %s, true", eff.deadline, eff.readOwn, want)
	}
}

// TestAcquisitionDeadline: the deadline ends the info round with the
// answers in (the own copy may still be taken over), fails a hand-off
// and a rebuild, and later answers change nothing.
func TestAcquisitionDeadline(t *testing.T) {
	t.Run("info round: goes on with the answers in", func(t *testing.T) {
		a := newTestAcquisition(acqTake, &fakeChecks{}, p1, p2)
		if eff := a.Start(acqStart); !reflect.DeepEqual(eff.askInfo, []peer.ID{p1, p2}) {
			t.Fatalf("asked %v", eff.askInfo)
		}
		a.Step(infoReplied(p1, copyOf(replicaRole, 3, 5)))
		eff := a.Step(deadlineReached())
		if !eff.readOwn {
			t.Fatalf("the own copy was not asked for: %+v", eff)
		}
		eff = a.Step(ownCopy(copyOf(replicaRole, 3, 9)))
		if !eff.takeOver || eff.done != acqTookOver {
			t.Fatalf("own copy not taken over: %+v", eff)
		}
		if eff := a.Step(infoReplied(p2, copyOf(coordRole, 9, 99))); !reflect.DeepEqual(eff, acqEffects{}) {
			t.Errorf("a late answer did something: %+v", eff)
		}
	})
	t.Run("info round: no hand-off asked after it", func(t *testing.T) {
		a := newTestAcquisition(acqTake, &fakeChecks{}, p1, p2)
		a.Start(acqStart)
		a.Step(infoReplied(p1, copyOf(coordRole, 3, 5)))
		a.Step(deadlineReached())
		eff := a.Step(ownCopy(copyOf(noRole, 0, 0)))
		if eff.askHandoff != "" || eff.done != acqFailed {
			t.Fatalf("want failed without asking: %+v", eff)
		}
	})
	t.Run("hand-off fails", func(t *testing.T) {
		a := newTestAcquisition(acqTake, &fakeChecks{}, p1)
		a.Start(acqStart)
		a.Step(infoReplied(p1, copyOf(coordRole, 3, 5)))
		if eff := a.Step(ownCopy(nil)); eff.askHandoff != p1 {
			t.Fatalf("p1 not asked: %+v", eff)
		}
		if eff := a.Step(deadlineReached()); eff.done != acqFailed || eff.install != nil {
			t.Fatalf("want failed: %+v", eff)
		}
		if eff := a.Step(handoffReplied(p1, handedOverAt(4), nil)); eff.install != nil {
			t.Error("a late hand-off was installed")
		}
	})
	t.Run("rebuild fails", func(t *testing.T) {
		a := newTestAcquisition(acqTake, &fakeChecks{}, p1)
		a.Start(acqStart)
		a.Step(infoReplied(p1, nil))
		if eff := a.Step(ownCopy(nil)); !eff.listMembers {
			t.Fatalf("members not asked for: %+v", eff)
		}
		if eff := a.Step(membersListed([]peer.ID{p2, p3}, nil)); !reflect.DeepEqual(eff.askCaches, []peer.ID{p2, p3}) {
			t.Fatalf("caches asked %v", eff.askCaches)
		}
		a.Step(cacheReplied(p2, []*pb.SignedEntry{signedAt("a", 3, 1, 7, "a1")}))
		if eff := a.Step(deadlineReached()); eff.done != acqFailed || eff.rebuilt != nil {
			t.Fatalf("want failed: %+v", eff)
		}
	})
	t.Run("compare hand-off fails", func(t *testing.T) {
		a := newTestAcquisition(acqCompare, &fakeChecks{}, p1)
		a.Start(acqStart)
		a.Step(infoReplied(p1, copyOf(coordRole, 5, 5)))
		a.Step(ownCopy(copyOf(coordRole, 4, 5)))
		if eff := a.Step(deadlineReached()); eff.done != acqFailed || eff.done.compared() {
			t.Fatalf("want failed, not compared: %+v", eff)
		}
	})
}

// TestAcquisitionIgnoresStrays: answers from peers not asked, repeated
// answers and answers of the wrong kind change nothing.
func TestAcquisitionIgnoresStrays(t *testing.T) {
	a := newTestAcquisition(acqTake, &fakeChecks{}, p1, p2)
	a.Start(acqStart)
	for _, in := range []acqInput{
		infoReplied(p3, copyOf(coordRole, 9, 99)),
		handoffReplied(p1, handedOverAt(9), nil),
		cacheReplied(p1, nil),
		ownCopy(copyOf(coordRole, 9, 9)),
	} {
		if eff := a.Step(in); !reflect.DeepEqual(eff, acqEffects{}) {
			t.Fatalf("stray input %v did something: %+v", in.kind, eff)
		}
	}
	a.Step(infoReplied(p1, copyOf(coordRole, 3, 5)))
	if eff := a.Step(infoReplied(p1, copyOf(coordRole, 3, 5))); !reflect.DeepEqual(eff, acqEffects{}) {
		t.Fatalf("a repeated answer did something: %+v", eff)
	}
	eff := a.Step(infoReplied(p2, nil))
	if !eff.readOwn {
		t.Fatalf("the round did not end: %+v", eff)
	}
	eff = a.Step(ownCopy(nil))
	if eff.askHandoff != p1 {
		t.Fatalf("p1 not asked: %+v", eff)
	}
	if eff := a.Step(handoffReplied(p2, handedOverAt(9), nil)); !reflect.DeepEqual(eff, acqEffects{}) {
		t.Fatalf("a hand-off from a peer not asked did something: %+v", eff)
	}
	if eff := a.Step(handoffReplied(p1, handedOverAt(4), nil)); eff.install == nil || eff.install.from != p1 {
		t.Fatal("p1's hand-off not installed")
	}
}

// TestAcquisitionRebuildSignatureReplayed: an entry a member made up
// under a real entry's signature is checked on its own, not taken on the
// real entry's verdict.
func TestAcquisitionRebuildSignatureReplayed(t *testing.T) {
	real := signedAt("a", 3, 1, 7, "s")
	madeUp := signedAt("a", 40, 9, 7, "s")
	madeUp.Entry.Object.Value = []byte("made up")
	same := signedAt("a", 3, 1, 7, "s") // another member's copy of the real one
	checks := &fakeChecks{}
	net := fakeNet{
		members:  []peer.ID{p1, p2},
		ownCache: []*pb.SignedEntry{real},
		caches:   map[peer.ID][]*pb.SignedEntry{p1: {madeUp}, p2: {same}},
	}
	_, eff := play(t, newTestAcquisition(acqTake, checks), net)
	r := eff.rebuilt
	if r == nil || len(r.snap.Objects) != 1 {
		t.Fatalf("rebuilt %+v", r)
	}
	if o := r.snap.Objects[0]; o.Version != 1 || r.snap.Epoch != 4 {
		t.Errorf("object at v%d, epoch %d: the made-up entry was taken (want v1, epoch 4)", o.Version, r.snap.Epoch)
	}
	if eff.unprovenEntries != 1 || checks.verified["s"] != 2 {
		t.Errorf("%d entries left out, signature checked %d times; want 1 and 2 (the real entry once, the made-up one once)",
			eff.unprovenEntries, checks.verified["s"])
	}
}

// FuzzAcquisitionStep feeds an acquisition inputs made from bytes: any
// kind, from any peer, in any order. It must not panic, must ask only
// peers it knows of, and must ask nobody after its deadline or its end.
func FuzzAcquisitionStep(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{0x10, 0x21, 0x32, 0x43, 0x54, 0x65, 0x76, 0x87, 0x98, 0xa9, 0xba, 0xcb})
	f.Add([]byte{5, 5, 5, 5, 0xff, 0x3c, 0x2d, 0x1e})
	peers := []peer.ID{acqNear, p1, p2, p3, p4, p5, p6}
	replies := []*pb.HandoffReply{
		nil, handedOverAt(4), redirectTo(acqNear), redirectTo(p4), redirectTo(acqSelf), {Error: "no"}, {Ok: true, Snapshot: &pb.Snapshot{}},
	}
	f.Fuzz(func(t *testing.T, script []byte) {
		if len(script) == 0 {
			return
		}
		checks := &fakeChecks{
			badHandoff: map[peer.ID]string{p2: refusedCopyUnsealed},
			unproven:   map[peer.ID]string{p3: refusedProofInvalid},
			forged:     map[string]bool{"forged": true},
		}
		kind := acqKind(script[0] % 2)
		a := newTestAcquisition(kind, checks, p1, p2, p3, p4)
		known := map[peer.ID]bool{acqSelf: true}
		for _, p := range peers {
			known[p] = true
		}
		check := func(eff acqEffects, after string) {
			asks := append(append(append([]peer.ID(nil), eff.askInfo...), eff.askCaches...), eff.askHandoff)
			for _, p := range asks {
				if p != "" && !known[p] {
					t.Fatalf("asked an unknown peer %q", p)
				}
				if p != "" && after != "" {
					t.Fatalf("asked %s after %s", acqNames[p], after)
				}
			}
		}
		eff := a.Start(acqStart)
		check(eff, "")
		after := ""
		for i, b := range script[1:] {
			if a.Result() != acqRunning {
				after = "the end"
			}
			p := peers[int(b>>4)%len(peers)]
			var in acqInput
			switch b % 8 {
			case 0:
				in = infoReplied(p, copyOf(pb.Role(b>>4%3), uint64(b>>5), uint64(i)))
			case 1:
				in = infoReplied(p, nil)
			case 2:
				in = ownCopy(copyOf(pb.Role(b>>3%3), uint64(b>>6), uint64(b>>4)))
			case 3:
				in = handoffReplied(p, replies[int(b>>4)%len(replies)], nil)
			case 4:
				in = handoffReplied(p, nil, errors.New("unreachable"))
			case 5:
				in = membersListed(peers[:int(b>>4)%len(peers)], []*pb.SignedEntry{signedAt("a", uint64(b>>4)+1, 1, 7, "own")})
			case 6:
				sig := "forged"
				if b&0x10 != 0 {
					sig = fmt.Sprint("e", b)
				}
				in = cacheReplied(p, []*pb.SignedEntry{signedAt(fmt.Sprint("o", b>>5), uint64(b>>5)+1, uint64(b>>4), 7, sig)})
			case 7:
				in = deadlineReached()
				if after == "" {
					after = "the deadline"
				}
			}
			eff = a.Step(in)
			check(eff, after)
			if eff.done != acqRunning && a.Result() != eff.done {
				t.Fatalf("done %v, Result %v", eff.done, a.Result())
			}
		}
	})
}

// TestAcquisitionAsksSparesForFailedAsks: an ask that fails is replaced by
// the next spare peer, so a peer whose closest peers just crashed still
// finds the copy a farther live peer holds instead of rebuilding without
// it; once the spares run out the round ends with what it heard.
func TestAcquisitionAsksSparesForFailedAsks(t *testing.T) {
	a := newTestAcquisition(acqTake, &fakeChecks{}, p1, p2)
	a.spare = []peer.ID{p2, acqSelf, p3, p4}
	if eff := a.Start(acqStart); !reflect.DeepEqual(eff.askInfo, []peer.ID{p1, p2}) {
		t.Fatalf("first asks: %v", eff.askInfo)
	}
	// p1 fails: p3 is asked in its place (p2 is asked already, self never).
	if eff := a.Step(infoReplied(p1, nil)); !reflect.DeepEqual(eff.askInfo, []peer.ID{p3}) {
		t.Fatalf("after p1 failed: %+v", eff)
	}
	if eff := a.Step(infoReplied(p2, nil)); !reflect.DeepEqual(eff.askInfo, []peer.ID{p4}) {
		t.Fatalf("after p2 failed: %+v", eff)
	}
	if eff := a.Step(infoReplied(p3, copyOf(replicaRole, 3, 5))); !reflect.DeepEqual(eff, acqEffects{}) {
		t.Fatalf("the round ended while p4 was asked: %+v", eff)
	}
	// p4 fails with no spare left: the round ends, and p3's copy is taken.
	if eff := a.Step(infoReplied(p4, nil)); !eff.readOwn {
		t.Fatalf("the round did not end: %+v", eff)
	}
	if eff := a.Step(ownCopy(nil)); eff.askHandoff != p3 {
		t.Fatalf("p3's copy not asked for: %+v", eff)
	}
}
