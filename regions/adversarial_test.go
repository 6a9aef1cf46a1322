package regions

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// The attacks of issue #10 on the region protocol, each played by a
// hostile peer against real libp2p peers (mocknet); each test checks that
// the honest peers' state does not change and that the refusal is counted
// in overworld_region_refused_total by its reason.

// leasedCluster is n honest peers that commit under signed lease grants,
// settled, with "apple" written to region c and held by its replica.
func leasedCluster(t *testing.T, n int, c Coord) (*cluster, *testLeases, *member, *member) {
	t.Helper()
	cl, book := settledLeasedCluster(t, n)
	co, re := cl.appleAtReplica(t, c)
	return cl, book, co, re
}

// settledLeasedCluster is n region peers of a 2x2 world under the test
// lease service, settled.
func settledLeasedCluster(t *testing.T, n int) (*cluster, *testLeases) {
	t.Helper()
	cfg := testConfig(2, 2)
	book := newTestLeases(cfg.World)
	cl := newCluster(t, 0, time.Millisecond, cfg)
	cl.adjust = book.install
	for range n {
		cl.add(t, nil)
	}
	cl.settle(t, 30*time.Second)
	return cl, book
}

// subscribeAllBut subscribes every live peer but those of skip to region
// c's events and returns them.
func (cl *cluster) subscribeAllBut(t *testing.T, c Coord, skip ...*member) []*member {
	t.Helper()
	var members []*member
	for _, m := range cl.live() {
		if slices.Contains(skip, m) {
			continue
		}
		if _, err := m.svc.Subscribe(c); err != nil {
			t.Fatal(err)
		}
		members = append(members, m)
	}
	return members
}

// honestWriteThenDoubleFailure has coordinator co write apple = 2 in
// region c, waits until every one of members caches the signed entry,
// stops co and its replica re together, and returns the region as the
// first member then reads it: rebuilt from the caches.
func honestWriteThenDoubleFailure(t *testing.T, ctx context.Context, co, re *member, members []*member, c Coord) State {
	t.Helper()
	if _, err := co.cl.ReadWrite(ctx, c, "apple", 1, []byte("2")); err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		waitUntil(t, 10*time.Second, "members to cache the honest write", func() bool {
			_, _, signed := m.svc.cacheOf(c)
			return len(signed) == 1 && string(signed[0].Entry.Object.Value) == "2"
		})
	}
	co.stop()
	re.stop()
	st, err := members[0].cl.Get(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// appleAtReplica writes "apple" = 1 to region c through its coordinator
// and waits until the replica holds it.
func (cl *cluster) appleAtReplica(t *testing.T, c Coord) (*member, *member) {
	t.Helper()
	coID, reID := cl.truth(c)
	co, re := cl.byID(coID), cl.byID(reID)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := co.cl.Initialize(ctx, c, "apple", []byte("1")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the replica to hold the apple", func() bool {
		sl := re.svc.existingSlot(c)
		if sl == nil {
			return false
		}
		var holds bool
		inspect(re.svc, func() { holds = sl.m.role == pb.Role_ROLE_REPLICA && sl.m.objects["apple"] != nil })
		return holds
	})
	return co, re
}

func forgedSnapshot(epoch uint64) *pb.Snapshot {
	return &pb.Snapshot{Epoch: epoch, Seq: 99, Objects: []*pb.Object{{Id: "apple", Value: []byte("stolen"), Version: 99}}}
}

// TestAdversarialTakeoverBySnapshot: a hostile peer sends the coordinator
// and the replica a snapshot of a newer epoch, to depose the coordinator
// and load its own objects: without a grant, with the coordinator's grant
// replayed, and with an epoch that would wrap. Without a lease service a
// peer far from the region is refused by placement alone.
func TestAdversarialTakeoverBySnapshot(t *testing.T) {
	c := Coord{1, 0}
	t.Run("leases", func(t *testing.T) {
		vnettest.Run(t, func(t *testing.T) {
			cl, book, co, re := leasedCluster(t, 4, c)
			h := cl.addHostile(t, nil, nil)
			cl.settle(t, 30*time.Second)
			before := map[*member]string{co: stateOf(co, c), re: stateOf(re, c)}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			attacks := []struct {
				reason string
				msg    *pb.Replicate
			}{
				{refusedProofMissing, &pb.Replicate{Epoch: 50}},
				{refusedProofHolder, &pb.Replicate{Epoch: 50, Grant: book.proof(c)}},
				{refusedBounds, &pb.Replicate{Epoch: math.MaxUint64}},
			}
			for _, a := range attacks {
				a.msg.Snapshot = forgedSnapshot(a.msg.Epoch)
				for _, target := range []*member{co, re} {
					reply, err := h.send(ctx, target.id(), c, &pb.Message{Body: &pb.Message_Replicate{Replicate: a.msg}})
					if err != nil {
						t.Fatal(err)
					}
					if ack := reply.GetReplicateAck(); ack != nil && ack.Ok {
						t.Fatalf("%s: %s acknowledged the forged snapshot", a.reason, target.id().ShortString())
					}
				}
				if got := refusedBy(t, a.reason, co, re); got < 2 {
					t.Errorf("%s: refusals counted %v, want 2", a.reason, got)
				}
			}
			for m, want := range before {
				if got := stateOf(m, c); got != want {
					t.Fatalf("%s's copy changed:\n%s\n%s", m.id().ShortString(), want, got)
				}
			}
			if o, err := re.cl.ReadWrite(ctx, c, "apple", 1, []byte("2")); err != nil || o.Version != 2 {
				t.Fatalf("an honest write after the attack: %+v %v", o, err)
			}
		})
	})
	t.Run("placement only", func(t *testing.T) {
		vnettest.Run(t, func(t *testing.T) {
			cl := newCluster(t, 10, time.Millisecond, testConfig(2, 2))
			cl.settle(t, 30*time.Second)
			co, re := cl.appleAtReplica(t, c)
			h := cl.addHostile(t, cl.keyRanked(t, c, 10), nil)
			cl.settle(t, 30*time.Second)
			before := map[*member]string{co: stateOf(co, c), re: stateOf(re, c)}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			snap := forgedSnapshot(50)
			for _, target := range []*member{co, re} {
				if _, err := h.send(ctx, target.id(), c, &pb.Message{Body: &pb.Message_Replicate{Replicate: &pb.Replicate{Epoch: 50, Snapshot: snap}}}); err != nil {
					t.Fatal(err)
				}
			}
			if got := refusedBy(t, refusedNotPlaced, co, re); got < 2 {
				t.Errorf("refusals counted %v, want 2", got)
			}
			for m, want := range before {
				if got := stateOf(m, c); got != want {
					t.Fatalf("%s's copy changed:\n%s\n%s", m.id().ShortString(), want, got)
				}
			}
		})
	})
}

// TestAdversarialDeposalByReplica: the hostile peer ranks second for the
// region, so the coordinator makes it its replica. It answers every
// replication with a deposal naming itself under the coordinator's own
// grant replayed (a liar), or with neither acknowledgement nor proof (a
// staller). Under a steady stream of writes the coordinator must not step
// down, must leave the hostile replica out after three such answers, and
// must go on acknowledging writes held by an honest replica.
func TestAdversarialDeposalByReplica(t *testing.T) {
	c := Coord{0, 1}
	for _, mode := range []string{"liar", "staller"} {
		t.Run(mode, func(t *testing.T) {
			vnettest.Run(t, func(t *testing.T) {
				cl, book := settledLeasedCluster(t, 4)
				coID, honestReplica := cl.truth(c)
				co := cl.byID(coID)
				key := cl.keyRanked(t, c, 1)
				liar, _ := peer.IDFromPrivateKey(key)
				cl.addHostile(t, key, func(_ peer.ID, m *pb.Message) *pb.Message {
					if m.GetReplicate() == nil {
						return nil
					}
					ack := &pb.ReplicateAck{}
					if mode == "liar" {
						ack = &pb.ReplicateAck{Stale: true, Epoch: 1000, Coordinator: []byte(liar), Grant: book.proof(c)}
					}
					return &pb.Message{Body: &pb.Message_ReplicateAck{ReplicateAck: ack}}
				})
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				// A steady stream of writes while the coordinator learns of
				// the peer ranked second.
				stop := make(chan struct{})
				done := make(chan error, 1)
				var acked uint64
				go func() {
					var version uint64
					for {
						select {
						case <-stop:
							done <- nil
							return
						default:
						}
						o, err := co.cl.ReadWrite(ctx, c, "counter", version, counter(version+1))
						if err != nil {
							done <- err
							return
						}
						version = o.Version
						acked = version
					}
				}()
				waitUntil(t, 30*time.Second, "the coordinator to leave the hostile replica out", func() bool {
					return refusedBy(t, refusedReplicaExcluded, co) >= 1
				})
				if mode == "liar" && refusedBy(t, refusedDeposalUnproven, co) < 1 {
					t.Errorf("the deposal's refusal was not counted as deposal_unproven")
				}
				waitUntil(t, 30*time.Second, "writes held by the honest replica", func() bool {
					sl := co.svc.existingSlot(c)
					var held bool
					inspect(co.svc, func() { held = sl.m.replica == honestReplica && sl.m.replicaSynced && sl.m.seq > 5 })
					return held
				})
				close(stop)
				if err := <-done; err != nil {
					t.Fatalf("a write failed under the attack: %v", err)
				}
				if co.svc.Role(c) != RoleCoordinator {
					t.Fatal("the coordinator stepped down")
				}
				if acked == 0 {
					t.Fatal("no write acknowledged")
				}
			})
		})
	}
}

// TestAdversarialForgedEvents: a hostile member publishes region events
// on the region's topic: without a grant, under the coordinator's grant
// replayed, and with an epoch that would wrap. Members' caches and
// subscribers see none of them.
func TestAdversarialForgedEvents(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		c := Coord{1, 1}
		cl, book, co, re := leasedCluster(t, 5, c)
		var members []*member
		var subs []*Subscription
		for _, m := range cl.live() {
			sub, err := m.svc.Subscribe(c)
			if err != nil {
				t.Fatal(err)
			}
			members, subs = append(members, m), append(subs, sub)
		}
		h := cl.addHostile(t, nil, nil)
		topic, err := h.n.PubSub().Join(EventTopic(cl.cfg.World, c))
		if err != nil {
			t.Fatal(err)
		}
		hsub, err := topic.Subscribe()
		if err != nil {
			t.Fatal(err)
		}
		defer hsub.Cancel()
		waitUntil(t, 20*time.Second, "the hostile peer in every member's event mesh", func() bool {
			for _, m := range members {
				m.svc.topicMu.Lock()
				peers := m.svc.topics[c].m.ListPeers()
				m.svc.topicMu.Unlock()
				if !containsPeer(peers, h.id()) {
					return false
				}
			}
			return true
		})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		// An honest write reaches every member's cache first.
		if _, err := re.cl.ReadWrite(ctx, c, "apple", 1, []byte("2")); err != nil {
			t.Fatal(err)
		}
		cached := func(m *member) string {
			for _, o := range m.svc.Cached(c) {
				if o.ID == "apple" {
					return fmt.Sprintf("%s@%d", o.Value, o.Version)
				}
			}
			return ""
		}
		for _, m := range members {
			waitUntil(t, 10*time.Second, "every member to cache the honest write", func() bool { return cached(m) == "2@2" })
		}
		forged := func(epoch uint64, grant []byte) []byte {
			e := &pb.Entry{Seq: 100, LeaseId: 1, Object: &pb.Object{Id: "apple", Value: []byte("forged"), Version: 100},
				Done: &pb.Done{RequestId: reqID(200), Status: pb.Status_STATUS_OK, Version: 100}}
			ev := &pb.Event{World: cl.cfg.World, X: int32(c.X), Y: int32(c.Y), Epoch: epoch, LeaseId: 1, Grant: grant, Entries: []*pb.Entry{e},
				EntrySignatures: [][]byte{h.sign(t, entryDigest(cl.cfg.World, c, epoch, e))}}
			b, err := proto.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		for _, a := range []struct {
			reason string
			data   []byte
		}{
			{refusedProofMissing, forged(9, nil)},
			{refusedProofHolder, forged(9, book.proof(c))},
			{refusedBounds, forged(math.MaxUint64, book.proof(c))},
		} {
			if err := topic.Publish(ctx, a.data); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, 10*time.Second, "the members to refuse the forged event ("+a.reason+")", func() bool {
				return refusedBy(t, a.reason, members...) >= 1
			})
		}
		for i, m := range members {
			if got := cached(m); got != "2@2" {
				t.Errorf("%s caches apple %s after the attack, want 2@2", m.id().ShortString(), got)
			}
			for len(subs[i].C) > 0 {
				up := <-subs[i].C
				for _, o := range up.Objects {
					if string(o.Value) == "forged" {
						t.Errorf("%s's subscriber was handed the forged event", m.id().ShortString())
					}
				}
			}
		}
		_ = co
	})
}

// TestAdversarialSpoofedOrigin: a hostile peer forwards lock requests to
// the coordinator in another player's name, without that player's
// signature and with its own. Neither takes the lock.
func TestAdversarialSpoofedOrigin(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		c := Coord{0, 0}
		cl, _, co, re := leasedCluster(t, 4, c)
		h := cl.addHostile(t, nil, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		victim := re.id()
		lock := func(id byte) *pb.Request {
			return &pb.Request{RequestId: reqID(id), Op: pb.Op_OP_LOCK, ObjectId: "apple", LockTtlMs: MaxLockTTL, Forwarded: true, Origin: []byte(victim)}
		}
		unsigned := lock(1)
		ownSig := lock(2)
		ownSig.OriginSignature = h.sign(t, requestDigest(cl.cfg.World, c, ownSig))
		for _, req := range []*pb.Request{unsigned, ownSig} {
			reply, err := h.send(ctx, co.id(), c, &pb.Message{Body: &pb.Message_Request{Request: req}})
			if err != nil {
				t.Fatal(err)
			}
			if r := reply.GetReply(); r == nil || r.Status != pb.Status_STATUS_DENIED {
				t.Fatalf("forwarded lock in the victim's name answered %v", reply)
			}
		}
		if got := refusedBy(t, refusedOriginUnproven, co); got != 2 {
			t.Fatalf("refusals counted %v, want 2", got)
		}
		st, err := re.cl.Get(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range st.Objects {
			if o.LockHolder != "" {
				t.Fatalf("apple locked by %s after the attack", o.LockHolder.ShortString())
			}
		}
	})
}

// TestAdversarialSuspectsAndFrames: a hostile peer names strangers as
// suspects in its requests, to make a peer probe (dial) them, and, refused
// a token, announces a maximal frame to make a peer allocate it. Neither
// happens; both are counted.
func TestAdversarialSuspectsAndFrames(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		c := Coord{1, 0}
		cfg := testConfig(2, 2)
		key, _, _ := crypto.GenerateEd25519Key(rand.Reader)
		hostileID, _ := peer.IDFromPrivateKey(key)
		cfg.Authorizer = refusePeer{hostileID}
		cl := newCluster(t, 5, time.Millisecond, cfg)
		cl.settle(t, 30*time.Second)
		coID, reID := cl.truth(c)
		var target *member
		for _, m := range cl.live() {
			if m.id() != coID && m.id() != reID {
				target = m
			}
		}
		// The suspects: the hostile peer's requests carry a token (it is
		// admitted: the refusal below is for frames) -- here it is a peer the
		// authorizer lets in.
		h := cl.addHostile(t, nil, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for i := range 20 {
			req := &pb.Request{RequestId: reqID(byte(i)), Op: pb.Op_OP_GET}
			for range MaxSuspects {
				_, pub, _ := crypto.GenerateEd25519Key(rand.Reader)
				stranger, _ := peer.IDFromPublicKey(pub)
				req.Suspects = append(req.Suspects, []byte(stranger))
			}
			reply, err := h.send(ctx, target.id(), c, &pb.Message{Body: &pb.Message_Request{Request: req}})
			if err != nil {
				t.Fatal(err)
			}
			if r := reply.GetReply(); r == nil || r.Status != pb.Status_STATUS_REDIRECT {
				t.Fatalf("request %d answered %v, want a redirect", i, reply)
			}
		}
		var probed int
		target.svc.onLoop(func() { probed = len(target.svc.live.probed.at) })
		if probed != 0 {
			t.Fatalf("the target probed %d strangers", probed)
		}
		if got := refusedBy(t, refusedSuspectNotPlaced, target); got != 20*MaxSuspects {
			t.Fatalf("ignored suspects counted %v, want %d", got, 20*MaxSuspects)
		}

		// The refused peer announces a 4 MiB frame after its token and sends
		// none of it: the answer comes at once, and nothing waits for the body.
		bad := cl.addHostile(t, key, nil)
		st, err := bad.n.Host().NewStream(ctx, target.id(), protocol.ID(ProtocolID))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		frame := binary.AppendUvarint(nil, 5)
		frame = append(frame, "bogus"...)
		frame = binary.AppendUvarint(frame, MaxFrameSize)
		if _, err := st.Write(frame); err != nil {
			t.Fatal(err)
		}
		_ = st.SetReadDeadline(time.Now().Add(10 * time.Second))
		reply, err := readMessage(bufio.NewReader(st))
		if err != nil {
			t.Fatalf("no answer before the announced frame: %v", err)
		}
		if r := reply.GetReply(); r == nil || r.Status != pb.Status_STATUS_DENIED {
			t.Fatalf("answered %v, want DENIED", reply)
		}
		if got := metricValue(t, target.reg, "overworld_region_denied_total", nil); got < 1 {
			t.Fatalf("denied counted %v", got)
		}
	})
}

// refusePeer admits everyone but one peer.
type refusePeer struct{ p peer.ID }

func (r refusePeer) Authorize(remote peer.ID, _ []byte) error {
	if remote == r.p {
		return errors.New("no valid token")
	}
	return nil
}

// TestAdversarialForgedCacheReply: after the coordinator and the replica
// fail together, the region is rebuilt from its members' caches. A hostile
// member answers the cache query with entries of a huge version and epoch,
// signed by itself: without a grant, and under the old coordinator's grant
// replayed. The rebuilt region holds the honest value.
func TestAdversarialForgedCacheReply(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		c := Coord{1, 0}
		cl, book, co, re := leasedCluster(t, 6, c)
		// The hostile member ranks last, so that it does not take the region
		// over itself (a peer placed first may, and then answers as it likes).
		var h *hostile
		h = cl.addHostile(t, cl.keyRanked(t, c, 6), func(_ peer.ID, m *pb.Message) *pb.Message {
			if m.GetCacheQuery() == nil {
				return nil
			}
			var entries []*pb.SignedEntry
			for i, grant := range [][]byte{nil, book.proof(c)} {
				e := &pb.Entry{Seq: 1000, LeaseId: 1, Object: &pb.Object{Id: fmt.Sprintf("apple%d", i), Value: []byte("forged"), Version: 1000},
					Done: &pb.Done{RequestId: reqID(byte(100 + i)), Status: pb.Status_STATUS_OK, Version: 1000}}
				entries = append(entries, &pb.SignedEntry{Epoch: 1000, Entry: e, Grant: grant, Author: []byte(h.id()),
					Signature: h.sign(t, entryDigest(cl.cfg.World, c, 1000, e))})
			}
			// And the honest object, claimed at a huge version.
			e := &pb.Entry{Seq: 1000, LeaseId: 1, Object: &pb.Object{Id: "apple", Value: []byte("forged"), Version: 1000},
				Done: &pb.Done{RequestId: reqID(103), Status: pb.Status_STATUS_OK, Version: 1000}}
			entries = append(entries, &pb.SignedEntry{Epoch: 1000, Entry: e, Grant: book.proof(c), Author: []byte(h.id()),
				Signature: h.sign(t, entryDigest(cl.cfg.World, c, 1000, e))})
			return &pb.Message{Body: &pb.Message_CacheReply{CacheReply: &pb.CacheReply{Epoch: 1000, Entries: entries,
				Objects: []*pb.Object{{Id: "apple", Value: []byte("forged"), Version: 1000}}}}}
		})
		topic, err := h.n.PubSub().Join(EventTopic(cl.cfg.World, c))
		if err != nil {
			t.Fatal(err)
		}
		hsub, err := topic.Subscribe()
		if err != nil {
			t.Fatal(err)
		}
		defer hsub.Cancel()
		members := cl.subscribeAllBut(t, c, co, re)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		waitUntil(t, 20*time.Second, "members and the hostile peer to meet on the event topic", func() bool {
			for _, m := range members {
				m.svc.topicMu.Lock()
				peers := m.svc.topics[c].m.ListPeers()
				m.svc.topicMu.Unlock()
				if len(peers) < len(members) {
					return false
				}
			}
			return true
		})
		st := honestWriteThenDoubleFailure(t, ctx, co, re, members, c)
		if len(st.Objects) != 1 || st.Objects[0].ID != "apple" || string(st.Objects[0].Value) != "2" || st.Objects[0].Version != 2 {
			t.Fatalf("rebuilt region holds %+v, want only apple = 2 at version 2", st.Objects)
		}
		if got := refusedBy(t, refusedCacheUnproven, cl.live()...); got < 3 {
			t.Fatalf("unproven cached entries counted %v, want 3", got)
		}
	})
}
