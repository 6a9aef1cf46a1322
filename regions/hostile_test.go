package regions

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/overworld-p2p/overworld/node"
	"github.com/overworld-p2p/overworld/node/pbframe"
	"github.com/overworld-p2p/overworld/node/vnet"
	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// hostile is a peer of the cluster's network that speaks the region
// protocol its own way: a full node (DHT included, so honest peers count
// it as a region peer and place regions on it) whose stream handler
// answers every message with answer's reply, and which sends whatever a
// test makes it send.
type hostile struct {
	n      *node.Node
	key    crypto.PrivKey
	world  string
	answer func(from peer.ID, m *pb.Message) *pb.Message
}

func (h *hostile) id() peer.ID { return h.n.ID() }

// addHostile starts a hostile peer with identity key (random if nil). Its
// handler is set before it joins, so identify tells every peer it meets
// that it serves regions. A nil answer acknowledges everything.
func (cl *cluster) addHostile(t testing.TB, key crypto.PrivKey, answer func(peer.ID, *pb.Message) *pb.Message) *hostile {
	t.Helper()
	var err error
	if key == nil {
		if key, _, err = crypto.GenerateEd25519Key(rand.Reader); err != nil {
			t.Fatal(err)
		}
	}
	cl.mu.Lock()
	cl.hostiles++
	addr := vnet.Addr(1<<20 + cl.hostiles) // clear of the cluster's own addresses
	cl.mu.Unlock()
	hst, err := cl.vc.Net.AddHost(key, addr, vnet.HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := &hostile{key: key, world: cl.cfg.World, answer: answer}
	hst.SetStreamHandler(protocol.ID(ProtocolID), h.handle)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h.n, err = node.New(ctx, node.WithHost(hst), node.WithBootstrapPeers(cl.vc.Boot.AddrInfo()),
		node.WithBootstrapBackoff(node.Backoff{Initial: 20 * time.Millisecond, Max: time.Second, Jitter: 0.2}),
		node.WithLogger(testLogger().With("peer", "hostile")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.n.Close() })
	return h
}

func (h *hostile) handle(st network.Stream) {
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(st)
	if _, err := pbframe.Read(r, MaxTokenSize); err != nil {
		st.Reset()
		return
	}
	m, err := readMessage(r)
	if err != nil {
		st.Reset()
		return
	}
	var reply *pb.Message
	if h.answer != nil {
		reply = h.answer(st.Conn().RemotePeer(), m)
	}
	if reply == nil {
		reply = &pb.Message{Body: &pb.Message_Ack{Ack: &pb.Ack{}}}
	}
	reply.World, reply.X, reply.Y = m.World, m.X, m.Y
	_ = writeMessage(st, reply)
}

// send delivers m about region c to p as the protocol does and returns
// the reply.
func (h *hostile) send(ctx context.Context, p peer.ID, c Coord, m *pb.Message) (*pb.Message, error) {
	st, err := h.n.Host().NewStream(ctx, p, protocol.ID(ProtocolID))
	if err != nil {
		return nil, err
	}
	defer st.Close()
	m.World, m.X, m.Y = h.world, int32(c.X), int32(c.Y)
	if err := writeRequest(st, nil, m); err != nil {
		return nil, err
	}
	return readMessage(bufio.NewReader(st))
}

// sign signs data with the hostile peer's own key.
func (h *hostile) sign(t testing.TB, data []byte) []byte {
	sig, err := h.key.Sign(data)
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

// keyRanked returns a key whose peer ranks rank (0: closest) for region c
// among the cluster's live peers and itself.
func (cl *cluster) keyRanked(t testing.TB, c Coord, rank int) crypto.PrivKey {
	t.Helper()
	var ids []peer.ID
	for _, m := range cl.live() {
		ids = append(ids, m.id())
	}
	for range 100_000 {
		key, _, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := peer.IDFromPrivateKey(key)
		order := cl.hashes.sortByDistance(Key(cl.cfg.World, c), append(append([]peer.ID(nil), ids...), id))
		if order[rank] == id {
			return key
		}
	}
	t.Fatalf("no key ranked %d for region %s", rank, c)
	return nil
}

// refused sums overworld_region_refused_total{reason} over members.
func refusedBy(t testing.TB, reason string, members ...*member) float64 {
	var sum float64
	for _, m := range members {
		sum += metricValue(t, m.reg, "overworld_region_refused_total", map[string]string{"reason": reason})
	}
	return sum
}

// stateOf is a member's copy of region c as text, with its role and epoch.
func stateOf(m *member, c Coord) string {
	sl := m.svc.existingSlot(c)
	if sl == nil {
		return "no slot"
	}
	var state string
	inspect(m.svc, func() {
		state = fmt.Sprintf("%v epoch %d seq %d objects %v", sl.m.role, sl.m.epoch, sl.m.seq, sl.m.sortedObjects())
	})
	return state
}
