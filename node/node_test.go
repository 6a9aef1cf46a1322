package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/overworld-p2p/overworld/node/await"
)

var loopbackTCP = ma.StringCast("/ip4/127.0.0.1/tcp/0")

// startNode starts a node on 127.0.0.1 with a fresh data dir; the test
// closes it.
func startNode(t *testing.T, opts ...Option) *Node {
	t.Helper()
	opts = append([]Option{
		WithDataDir(t.TempDir()),
		WithListenAddrs(loopbackTCP),
		WithBootstrapBackoff(Backoff{Initial: 50 * time.Millisecond, Max: time.Second, Jitter: 0.2}),
	}, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := New(ctx, opts...)
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func TestOverlayOfTwelvePeers(t *testing.T) {
	const peers = 12
	began := time.Now()
	boot := startNode(t)
	nodes := make([]*Node, peers)
	for i := range nodes {
		nodes[i] = startNode(t, WithBootstrapPeers(boot.AddrInfo()))
	}
	all := append([]*Node{boot}, nodes...)

	// Every peer's routing table fills: it knows every other node.
	for i, n := range nodes {
		await.Until(t, 2*time.Minute, fmt.Sprintf("peer %d routing table to hold all %d others", i, peers),
			func() bool { return n.DHT().RoutingTable().Size() == len(all)-1 })
		// Joined is signalled by the join loop's next poll of the table,
		// so it may trail the table filling by a poll interval.
		select {
		case <-n.Joined():
		case <-time.After(30 * time.Second):
			t.Fatalf("peer %d has a full routing table but never reported joining", i)
		}
	}

	t.Logf("routing tables full after %s", time.Since(began))
	// For random keys every peer names the same closest peer, itself
	// included; and ClosestKnown agrees with brute force over all IDs.
	ids := make([]peer.ID, len(all))
	for i, n := range all {
		ids[i] = n.ID()
	}
	for k := 0; k < 200; k++ {
		key := randomKey(t)
		want := SortByDistance(key, append([]peer.ID(nil), ids...))[0]
		for i, n := range nodes {
			got := n.ClosestKnown(key, 3)
			if len(got) != 3 || got[0] != want {
				t.Fatalf("key %x: peer %d says closest is %v, want %s", key, i, got, want)
			}
		}
	}

	// A lookup over the network returns self too when self is closest.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for k := 0; k < 5; k++ {
		key := randomKey(t)
		want := SortByDistance(key, append([]peer.ID(nil), ids...))[:3]
		got, err := nodes[k].ClosestPeers(ctx, key, 3)
		if err != nil {
			t.Fatalf("closest peers: %v", err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("network lookup for %x from peer %d: got %v, want %v", key, k, got, want)
		}
	}

	t.Logf("closest-peer agreement checked after %s", time.Since(began))
	// A message published on a topic reaches all 12 subscribers.
	const topicName = "/overworld/test/hello"
	subs := make([]*pubsub.Subscription, peers)
	topics := make([]*pubsub.Topic, peers)
	for i, n := range nodes {
		tp, err := n.PubSub().Join(topicName)
		if err != nil {
			t.Fatal(err)
		}
		topics[i] = tp
		if subs[i], err = tp.Subscribe(); err != nil {
			t.Fatal(err)
		}
	}
	// The publisher's topic announces every subscriber it learns of;
	// subscribed to before the first look, it misses none.
	joins, err := topics[0].EventHandler()
	if err != nil {
		t.Fatal(err)
	}
	defer joins.Cancel()
	joinCtx, cancelJoin := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancelJoin()
	for len(topics[0].ListPeers()) != peers-1 {
		if _, err := joins.NextPeerEvent(joinCtx); err != nil {
			t.Fatalf("publisher sees %d of %d subscribers: %v", len(topics[0].ListPeers()), peers-1, err)
		}
	}
	t.Logf("publisher sees every subscriber after %s", time.Since(began))
	// A bound of its own: the lookups' ctx may be all but spent by now,
	// after a long wait for the subscribers on a loaded machine.
	pubCtx, cancelPub := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancelPub()
	if err := topics[0].Publish(pubCtx, []byte("hello, world")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, peers)
	for i, s := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg, err := s.Next(pubCtx)
			if err != nil {
				errs <- fmt.Errorf("subscriber %d: %w", i, err)
				return
			}
			if string(msg.Data) != "hello, world" || msg.GetFrom() != nodes[0].ID() {
				errs <- fmt.Errorf("subscriber %d got %q from %s", i, msg.Data, msg.GetFrom())
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// The node's metrics saw it all: peers, table size, pubsub traffic.
	await.Until(t, time.Minute, "metrics to report peers, table size and delivered messages", func() bool {
		m := gatherValues(t, nodes[1])
		return m["overworld_node_connected_peers"] >= 1 &&
			m["overworld_node_dht_routing_table_peers"] == float64(len(all)-1) &&
			m["overworld_pubsub_messages_delivered_total"] >= 1 &&
			m["overworld_pubsub_rpc_received_bytes_total"] > 0
	})
}

// gatherValues flattens a node's unlabelled metrics into name -> value.
func gatherValues(t *testing.T, n *Node) map[string]float64 {
	t.Helper()
	families, err := n.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				out[f.GetName()] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				out[f.GetName()] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

func randomKey(t *testing.T) string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "test/" + hex.EncodeToString(b[:])
}

func TestIdentityPersists(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	first, err := New(ctx, WithDataDir(dir), WithListenAddrs(loopbackTCP))
	if err != nil {
		t.Fatal(err)
	}
	id := first.ID()
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(filepath.Join(dir, IdentityFileName))
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o600 {
		t.Fatalf("identity key mode %#o, want 0600", perm)
	}
	second, err := New(ctx, WithDataDir(dir), WithListenAddrs(loopbackTCP))
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if second.ID() != id {
		t.Fatalf("restarted node has ID %s, want %s", second.ID(), id)
	}
}

func TestBadIdentityFiles(t *testing.T) {
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	goodKey, err := crypto.MarshalPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		prepare func(path string)
		wantErr string
	}{
		{"world readable", func(p string) { os.WriteFile(p, goodKey, 0o644) }, "too open"},
		{"group readable", func(p string) { os.WriteFile(p, goodKey, 0o640) }, "too open"},
		{"a directory", func(p string) { os.Mkdir(p, 0o700) }, "not a regular file"},
		{"garbage", func(p string) { os.WriteFile(p, []byte("not a key at all"), 0o600) }, "not a libp2p private key"},
		{"empty", func(p string) { os.WriteFile(p, nil, 0o600) }, "not a libp2p private key"},
		{"huge", func(p string) { os.WriteFile(p, make([]byte, 1<<20), 0o600) }, "too large"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, IdentityFileName)
			tc.prepare(path)
			n, err := New(context.Background(), WithDataDir(dir), WithListenAddrs(loopbackTCP))
			if err == nil {
				n.Close()
				t.Fatal("node started with a bad identity file")
			}
			if !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q: want it to name %s and say %q", err, path, tc.wantErr)
			}
		})
	}
}

func TestParseBootstrapAddrs(t *testing.T) {
	good := "/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWGC6TvWhfapngX6wvJHMYvKpDMXPb3ZnCZ6dMoaMtimQ5"
	infos, err := ParseBootstrapAddrs([]string{good, " ", good + "/"[:0]})
	if err != nil {
		t.Fatalf("parse good address: %v", err)
	}
	if len(infos) != 1 {
		t.Fatalf("got %d peers, want the two entries merged into 1", len(infos))
	}
	for _, bad := range []string{
		"127.0.0.1:4001",
		"/ip4/127.0.0.1/tcp/4001", // no peer ID
		"/ip4/127.0.0.1/tcp/notaport/p2p/12D3KooWGC6TvWhfapngX6wvJHMYvKpDMXPb3ZnCZ6dMoaMtimQ5",
		"/ip4/127.0.0.1/tcp/4001/p2p/notapeerid",
		"/ip9/1.2.3.4",
	} {
		if _, err := ParseBootstrapAddrs([]string{bad}); err == nil {
			t.Errorf("%q parsed without error", bad)
		} else if !strings.Contains(err.Error(), "bootstrap address") {
			t.Errorf("%q: error %q does not say which address", bad, err)
		}
	}
}

func TestUnreachableBootstrapRetries(t *testing.T) {
	// A real identity on a port nobody listens on: every dial is refused.
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	gone := peer.AddrInfo{ID: id, Addrs: []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/tcp/1")}}
	n := startNode(t, WithBootstrapPeers(gone))
	await.Until(t, 30*time.Second, "three failed bootstrap rounds", func() bool { return n.JoinAttempts() >= 3 })

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = n.WaitJoined(ctx)
	if err == nil {
		t.Fatal("WaitJoined succeeded with an unreachable bootstrap peer")
	}
	if !strings.Contains(err.Error(), "bootstrap rounds failed") || !strings.Contains(err.Error(), id.String()) {
		t.Fatalf("error %q should count the rounds and name the peer", err)
	}
}

func TestOptionsAreChecked(t *testing.T) {
	ctx := context.Background()
	cases := map[string][]Option{
		"no identity":     {WithListenAddrs(loopbackTCP)},
		"duplicate":       {WithDataDir(t.TempDir()), WithDataDir(t.TempDir())},
		"bad conn limits": {WithDataDir(t.TempDir()), WithConnLimits(10, 5)},
		"bad backoff":     {WithDataDir(t.TempDir()), WithBootstrapBackoff(Backoff{Initial: time.Second, Max: time.Millisecond})},
	}
	for name, opts := range cases {
		if n, err := New(ctx, opts...); err == nil {
			n.Close()
			t.Errorf("%s: New succeeded", name)
		}
	}
}
