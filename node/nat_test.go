package node

import (
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/host/eventbus"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/overworld-p2p/overworld/node/await"
)

// In the default auto mode a peer serves the DHT until AutoNAT reports it
// private (behind NAT); then it turns DHT client, stops counting as a
// coordinator candidate for itself (ClosestKnown leaves it out) and, once
// identify has pushed its protocols, for the peers it is connected to; and
// back when it turns public. The real AutoNAT verdict through a real NAT is
// tested end to end in cmd/overworld (TestNATPlayerNetns); here the event
// is emitted as AutoNAT would.
func TestBehindNATIsNoCoordinator(t *testing.T) {
	boot := startNode(t, WithDHTMode(DHTServer))
	public := startNode(t, WithBootstrapPeers(boot.AddrInfo()))
	natted := startNode(t, WithBootstrapPeers(boot.AddrInfo()))
	for _, n := range []*Node{public, natted} {
		select {
		case <-n.Joined():
		case <-time.After(time.Minute):
			t.Fatal("timed out after a minute waiting for join")
		}
	}
	if err := natted.Host().Connect(t.Context(), public.AddrInfo()); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 30*time.Second, "both peers to count as candidates", func() bool {
		return natted.CanCoordinate(natted.ID()) && public.CanCoordinate(natted.ID()) && natted.CanCoordinate(public.ID())
	})
	key := randomKey(t)
	if !slices.Contains(natted.ClosestKnown(key, 10), natted.ID()) {
		t.Fatal("a public peer left itself out of ClosestKnown")
	}

	emit, err := natted.Host().EventBus().Emitter(new(event.EvtLocalReachabilityChanged), eventbus.Stateful)
	if err != nil {
		t.Fatal(err)
	}
	defer emit.Close()
	if err := emit.Emit(event.EvtLocalReachabilityChanged{Reachability: network.ReachabilityPrivate}); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 30*time.Second, "the private peer to leave DHT server mode", func() bool { return !natted.ServesDHT(natted.ID()) })
	if natted.CanCoordinate(natted.ID()) || slices.Contains(natted.ClosestKnown(key, 10), natted.ID()) {
		t.Fatal("a peer behind NAT counts itself as a coordinator candidate")
	}
	await.Until(t, 30*time.Second, "the public peer to learn the other is a DHT client", func() bool { return !public.CanCoordinate(natted.ID()) })
	if !slices.Contains(natted.ClosestKnown(key, 10), public.ID()) {
		t.Fatal("the peer behind NAT lost the public peer from its view")
	}

	if err := emit.Emit(event.EvtLocalReachabilityChanged{Reachability: network.ReachabilityPublic}); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 30*time.Second, "the peer to serve the DHT again", func() bool {
		return natted.CanCoordinate(natted.ID()) && public.CanCoordinate(natted.ID())
	})
}

// A network declared WithEveryPeerReachable places DHT clients too.
func TestEveryPeerReachable(t *testing.T) {
	n := startNode(t, WithDHTMode(DHTClient), WithEveryPeerReachable())
	if n.ServesDHT(n.ID()) {
		t.Fatal("a DHT client serves the DHT")
	}
	if !n.CanCoordinate(n.ID()) || !slices.Contains(n.ClosestKnown(randomKey(t), 3), n.ID()) {
		t.Fatal("WithEveryPeerReachable: the node does not count itself")
	}
}

func TestParseDHTMode(t *testing.T) {
	for _, m := range []DHTMode{DHTAuto, DHTServer, DHTClient} {
		got, err := ParseDHTMode(m.String())
		if err != nil || got != m {
			t.Fatalf("ParseDHTMode(%q) = %v, %v", m, got, err)
		}
	}
	if _, err := ParseDHTMode("sometimes"); err == nil {
		t.Fatal("ParseDHTMode accepted nonsense")
	}
}

func TestTranslated(t *testing.T) {
	for _, tc := range []struct {
		local, observed string
		want            bool
	}{
		{"/ip4/192.168.1.2/tcp/4001", "/ip4/11.0.0.1/tcp/4001", true},              // home NAT
		{"/ip4/192.168.1.2/udp/4001/quic-v1", "/ip4/11.0.0.1/udp/9/quic-v1", true}, // and a new port
		{"/ip4/11.0.0.10/tcp/4002", "/ip4/11.0.0.10/tcp/4002", false},              // public host
		{"/ip4/127.0.0.1/tcp/4001", "/ip4/127.0.0.1/tcp/4001", false},              // loopback
		{"/ip4/172.17.0.2/tcp/4001", "/ip4/172.17.0.1/tcp/4001", false},            // private on both sides: a LAN, say nothing
	} {
		if got := translated(ma.StringCast(tc.local), ma.StringCast(tc.observed)); got != tc.want {
			t.Errorf("translated(%s, %s) = %v", tc.local, tc.observed, got)
		}
	}
	if translated(nil, ma.StringCast("/ip4/11.0.0.1/tcp/1")) {
		t.Error("no local address, yet translated")
	}
}

// fakeConn is a connection that only knows its local address.
type fakeConn struct {
	network.Conn
	local ma.Multiaddr
}

func (c fakeConn) LocalMultiaddr() ma.Multiaddr { return c.local }

// A peer that claims to see a public peer at another public address (as
// identify lets any peer claim) does not make it believe it is behind NAT,
// which would take it out of region placement; the same claim from the
// operator's bootstrap node does.
func TestAdversarialObservedAddress(t *testing.T) {
	boot := startNode(t, WithDHTMode(DHTServer))
	n := startNode(t, WithBootstrapPeers(boot.AddrInfo()))
	liar := startNode(t)
	emit, err := n.Host().EventBus().Emitter(new(event.EvtPeerIdentificationCompleted))
	if err != nil {
		t.Fatal(err)
	}
	defer emit.Close()
	claim := func(from peer.ID) event.EvtPeerIdentificationCompleted {
		return event.EvtPeerIdentificationCompleted{
			Peer:         from,
			Conn:         fakeConn{local: ma.StringCast("/ip4/11.0.0.10/tcp/4002")},
			ObservedAddr: ma.StringCast("/ip4/11.9.9.9/tcp/4002"),
		}
	}
	// The watch reads identifications in order: the liar's first.
	if err := emit.Emit(claim(liar.ID())); err != nil {
		t.Fatal(err)
	}
	if err := emit.Emit(claim(boot.ID())); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 30*time.Second, "the bootstrap node's observation to count", func() bool { return n.BehindNAT() && !n.ServesDHT(n.ID()) })
	if n.nat.by != boot.ID() {
		t.Fatalf("the NAT was taken from %s's word, not the bootstrap node's", n.nat.by)
	}
}
