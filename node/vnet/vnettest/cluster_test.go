package vnettest

import (
	"context"
	"crypto/rand"
	"slices"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestClusterInVirtualTime: in a synctest bubble, peers that join through
// the bootstrap node find each other, a partition keeps gossip from
// crossing it until it heals, and a crashed peer restarted with its
// identity joins again.
func TestClusterInVirtualTime(t *testing.T) {
	Run(t, func(t *testing.T) {
		start := time.Now()
		cl := New(t, 4, Options{Latency: 5 * time.Millisecond})
		peers := cl.Peers()
		Eventually(t, "every peer to know the others", func() bool {
			for _, p := range peers {
				if p.Node.DHT().RoutingTable().Size() < len(peers)-1 {
					return false
				}
			}
			return true
		})
		cl.ConnectAll()

		subs := make([]*pubsub.Subscription, len(peers))
		topics := make([]*pubsub.Topic, len(peers))
		for i, p := range peers {
			tp, err := p.Node.PubSub().Join("vnettest")
			if err != nil {
				t.Fatal(err)
			}
			if subs[i], err = tp.Subscribe(); err != nil {
				t.Fatal(err)
			}
			topics[i] = tp
			p.OnClose(func() { subs[i].Cancel(); _ = tp.Close() })
		}
		Eventually(t, "the mesh to form", func() bool {
			for _, tp := range topics {
				if len(tp.ListPeers()) < len(peers)-1 {
					return false
				}
			}
			return true
		})
		// received reports whether peer i gets msg within a simulated
		// second.
		received := func(i int, msg string) bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			for {
				m, err := subs[i].Next(ctx)
				if err != nil {
					return false
				}
				if string(m.Data) == msg {
					return true
				}
			}
		}
		publish := func(i int, msg string) {
			if err := topics[i].Publish(context.Background(), []byte(msg)); err != nil {
				t.Fatal(err)
			}
		}

		cl.Partition(peers[:2], peers[2:])
		if cl.Net.Connected(peers[0].ID(), peers[3].ID()) {
			t.Fatal("connected across the partition")
		}
		publish(0, "split")
		if !received(1, "split") {
			t.Error("a peer on the same side missed the message")
		}
		if received(3, "split") {
			t.Error("the message crossed the partition")
		}

		cl.Heal()
		Eventually(t, "the mesh to form again", func() bool { return len(topics[3].ListPeers()) >= len(peers)-1 })
		publish(0, "healed")
		if !received(3, "healed") {
			t.Error("the message did not cross the healed partition")
		}

		old := peers[3].ID()
		cl.Crash(peers[3])
		Eventually(t, "the others to drop the crashed peer", func() bool {
			return !slices.Contains(topics[0].ListPeers(), old)
		})
		q := cl.Restart(peers[3])
		if q.ID() != old || cl.Peers()[3] != q {
			t.Fatalf("restarted as %s at index %d", q.ID(), q.Index)
		}
		Eventually(t, "the restarted peer to rejoin", func() bool {
			return slices.Contains(cl.Boot.Host().Network().Peers(), q.ID()) && q.Node.DHT().RoutingTable().Size() >= len(peers)-1
		})
		if ids := cl.IDs(); len(ids) != 4 || ids[3] != old || cl.ByID(old) != q {
			t.Fatalf("IDs after the restart: %v", ids)
		}
		t.Logf("simulated %s", time.Since(start))
	})
}

// TestEventuallyOutsideABubble: the same helper waits on the real clock.
func TestEventuallyOutsideABubble(t *testing.T) {
	done := time.Now().Add(30 * time.Millisecond)
	EventuallyWithin(t, 5*time.Second, "30 ms to pass", func() bool { return time.Now().After(done) })
}

// TestSeedPicksIdentities: the same seed gives the same peers.
func TestSeedPicksIdentities(t *testing.T) {
	ids := func() []peer.ID {
		cl := New(t, 3, Options{Seed: 42, NoBootstrap: true})
		return cl.IDs()
	}
	if a, b := ids(), ids(); !slices.Equal(a, b) {
		t.Fatalf("seed 42 gave %v, then %v", a, b)
	}
}

// TestAddKey: a peer added with its own identity has it.
func TestAddKey(t *testing.T) {
	cl := New(t, 1, Options{NoBootstrap: true})
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := peer.IDFromPrivateKey(key)
	if p := cl.AddKey(key); p.ID() != want || p.Index != 1 || len(cl.Peers()) != 2 {
		t.Fatalf("added %s at %d of %d peers, want %s at 1 of 2", p.ID(), p.Index, len(cl.Peers()), want)
	}
}
