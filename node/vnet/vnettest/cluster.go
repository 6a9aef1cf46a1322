// Package vnettest builds clusters of real peers (node.Node, with gossipsub
// and the DHT) on a vnet.Network for multi-peer tests: a bootstrap node and
// N peers, options per test, crash, partition, heal and restart, and one
// polling helper, Eventually.
//
// Everything here works inside a testing/synctest bubble, which is where
// the tests should run when they can: every timer, latency and poll then
// runs on the bubble's virtual clock, which advances only when every
// goroutine of the bubble waits. A test costs the CPU its peers use and no
// wall time on top, and its deadlines bound simulated time, so they need no
// stretching for a slow machine or the race detector.
package vnettest

import (
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/overworld-p2p/overworld/node"
	"github.com/overworld-p2p/overworld/node/vnet"
)

// Options shape a cluster. The zero value is a cluster whose peers join
// through a bootstrap node over links of 1 ms.
type Options struct {
	// Latency is the links' one-way latency; 0 means 1 ms. Use
	// Cluster.Net.SetLatency for single links.
	Latency time.Duration
	// Seed picks the peers' identities (the same seed, the same peers).
	Seed uint64
	// NoBootstrap leaves out the bootstrap node: peers meet only through
	// ConnectAll or Net.Connect.
	NoBootstrap bool
	// Logger is every node's logger (with a "peer" attribute); nil
	// discards.
	Logger *slog.Logger
	// Node adds options for peer i's node (not WithHost, WithLogger,
	// WithBootstrapPeers or WithBootstrapBackoff: the cluster sets those).
	Node func(i int) []node.Option
}

// Cluster is a bootstrap node and peers on one vnet.Network. It closes
// everything when the test ends: each peer's OnClose functions, then its
// node (all peers at once), then the bootstrap node and the network.
type Cluster struct {
	Net *vnet.Network
	// Boot is the bootstrap node; nil with Options.NoBootstrap.
	Boot *node.Node

	t    testing.TB
	opts Options

	mu    sync.Mutex
	peers []*Peer
	// ids are the identities handed out so far, the bootstrap node's
	// among them, for keyFor.
	ids   []peer.ID
	nkeys uint64
	addrs int
	// cut are the pairs Partition cut, for Heal to reconnect.
	cut [][2]peer.ID

	closeOnce sync.Once
}

// Peer is one peer of a cluster.
type Peer struct {
	// Index is the peer's place in Cluster.Peers; a restart keeps it.
	Index int
	Key   crypto.PrivKey
	Host  *vnet.Host
	Node  *node.Node

	extra   []node.Option
	mu      sync.Mutex
	onClose []func()
	closed  bool
}

// ID is the peer's ID.
func (p *Peer) ID() peer.ID { return p.Node.ID() }

// OnClose registers f to run when the peer closes (at a restart or when
// the test ends), before its node closes: the services built on the node
// stop while it still runs. The last registered runs first.
func (p *Peer) OnClose(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.onClose = append(p.onClose, f)
}

// close runs the OnClose functions and closes the node, once.
func (p *Peer) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	fs := slices.Clone(p.onClose)
	p.mu.Unlock()
	for _, f := range slices.Backward(fs) {
		f()
	}
	_ = p.Node.Close()
}

// New starts a cluster with count peers (more can be added with Add).
func New(t testing.TB, count int, opts Options) *Cluster {
	t.Helper()
	if opts.Latency == 0 {
		opts.Latency = time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{Net: vnet.New(opts.Latency), t: t, opts: opts}
	t.Cleanup(c.Close)
	if !opts.NoBootstrap {
		h, err := c.Net.AddHost(c.keyFor(), c.addr(), vnet.HostOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c.Boot, err = node.New(context.Background(), node.WithHost(h), node.WithLogger(opts.Logger.With("peer", "boot"))); err != nil {
			_ = h.Close()
			t.Fatalf("bootstrap node: %v", err)
		}
	}
	for range count {
		c.Add()
	}
	return c
}

// Close ends the cluster before the test does (it ends with the test
// anyway): peers first, all at once (one by one, thirty DHT shutdowns add
// up), then the bootstrap node and the network.
func (c *Cluster) Close() { c.closeOnce.Do(c.close) }

func (c *Cluster) close() {
	var wg sync.WaitGroup
	for _, p := range c.Peers() {
		wg.Go(p.close)
	}
	wg.Wait()
	if c.Boot != nil {
		_ = c.Boot.Close()
	}
	_ = c.Net.Close()
	// A stream opened while its host was closing can outlive the close.
	c.Net.CloseConns()
}

// Add starts one more peer, with extra options on top of Options.Node's.
func (c *Cluster) Add(extra ...node.Option) *Peer {
	c.t.Helper()
	return c.AddKey(c.keyFor(), extra...)
}

// AddKey is Add with the peer's identity given (a test that places
// regions by hand picks its peers' IDs).
func (c *Cluster) AddKey(key crypto.PrivKey, extra ...node.Option) *Peer {
	c.t.Helper()
	if id, err := peer.IDFromPrivateKey(key); err == nil {
		c.mu.Lock()
		if !slices.Contains(c.ids, id) {
			c.ids = append(c.ids, id)
		}
		c.mu.Unlock()
	}
	c.mu.Lock()
	i := len(c.peers)
	c.mu.Unlock()
	p := c.start(i, key, extra)
	c.mu.Lock()
	c.peers = append(c.peers, p)
	c.mu.Unlock()
	return p
}

// start builds peer i's host and node.
func (c *Cluster) start(i int, key crypto.PrivKey, extra []node.Option) *Peer {
	c.t.Helper()
	h, err := c.Net.AddHost(key, c.addr(), vnet.HostOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	opts := []node.Option{node.WithHost(h), node.WithLogger(c.opts.Logger.With("peer", i))}
	if c.Boot != nil {
		opts = append(opts, node.WithBootstrapPeers(c.Boot.AddrInfo()),
			node.WithBootstrapBackoff(node.Backoff{Initial: 20 * time.Millisecond, Max: time.Second, Jitter: 0.2}))
	}
	if c.opts.Node != nil {
		opts = append(opts, c.opts.Node(i)...)
	}
	opts = append(opts, extra...)
	n, err := node.New(context.Background(), opts...)
	if err != nil {
		_ = h.Close()
		c.t.Fatalf("peer %d: %v", i, err)
	}
	return &Peer{Index: i, Key: key, Host: h, Node: n, extra: extra}
}

// addr is a new address of the in-memory network.
func (c *Cluster) addr() ma.Multiaddr {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.addrs++
	return vnet.Addr(c.addrs)
}

// keyFor returns the next identity of the seed's sequence whose peer ID
// leaves every routing table of the cluster able to hold all the others:
// no peer has more than a Kademlia bucket's worth (20) of others at one
// common-prefix length. Random identities break that about once in twenty
// clusters of 30; a peer then never lists everyone, and placement, read
// from the routing table, differs between peers.
func (c *Cluster) keyFor() crypto.PrivKey {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		var seed [ed25519.SeedSize]byte
		binary.BigEndian.PutUint64(seed[:], c.opts.Seed)
		binary.BigEndian.PutUint64(seed[8:], c.nkeys)
		copy(seed[16:], "overworld-vnettest")
		c.nkeys++
		sk := ed25519.NewKeyFromSeed(seed[:])
		key, _, err := crypto.KeyPairFromStdKey(&sk)
		if err != nil {
			c.t.Fatal(err)
		}
		id, err := peer.IDFromPrivateKey(key)
		if err != nil {
			c.t.Fatal(err)
		}
		if fitsTables(append(c.ids, id)) {
			c.ids = append(c.ids, id)
			return key
		}
	}
}

// fitsTables reports whether, for every peer of ids, at most 20 others
// share each common-prefix length with it.
func fitsTables(ids []peer.ID) bool {
	for _, a := range ids {
		perCPL := map[int]int{}
		for _, b := range ids {
			if a == b {
				continue
			}
			cpl := kb.CommonPrefixLen(kb.ConvertPeerID(a), kb.ConvertPeerID(b))
			if perCPL[cpl]++; perCPL[cpl] > 20 {
				return false
			}
		}
	}
	return true
}

// Peers are the cluster's peers, in the order they were added.
func (c *Cluster) Peers() []*Peer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.peers)
}

// IDs are the peers' IDs, in the order of Peers.
func (c *Cluster) IDs() []peer.ID {
	var ids []peer.ID
	for _, p := range c.Peers() {
		ids = append(ids, p.ID())
	}
	return ids
}

// ByID is the peer with ID id, nil if none.
func (c *Cluster) ByID(id peer.ID) *Peer {
	for _, p := range c.Peers() {
		if p.ID() == id {
			return p
		}
	}
	return nil
}

// ConnectAll links and connects every pair of peers (crashed ones and cut
// links left out).
func (c *Cluster) ConnectAll() {
	c.t.Helper()
	peers := c.Peers()
	for i, a := range peers {
		for _, b := range peers[i+1:] {
			if err := c.Net.Connect(a.ID(), b.ID()); err != nil {
				c.t.Logf("connect %d to %d: %v", a.Index, b.Index, err)
			}
		}
	}
}

// WaitRoutingTables waits until every peer's routing table holds all the
// other peers (placement reads the routing table).
func (c *Cluster) WaitRoutingTables(within time.Duration) {
	c.t.Helper()
	peers := c.Peers()
	polls := 0
	EventuallyWithin(c.t, within, "full routing tables", func() bool {
		polls++
		full := true
		for _, p := range peers {
			if p.Node.DHT().RoutingTable().Size() < len(peers)-1 {
				full = false
				// A peer whose identify finished before its DHT watched
				// for it is only added by a lookup: ask for one now and
				// then rather than wait for the periodic refresh (forced:
				// a plain refresh skips buckets refreshed moments ago).
				if polls%200 == 0 {
					p.Node.DHT().ForceRefresh()
				}
			}
		}
		return full
	})
}

// Crash stops p as a dying process stops: its links and streams go at
// once, nothing it sent arrives any more, nobody can dial it, and its
// node is not closed (its goroutines run on, cut off) until Restart or
// the end of the test.
func (c *Cluster) Crash(p *Peer) { c.Net.Crash(p.ID()) }

// Restart closes p (crashing it first if it was not) and starts a new
// node with the same identity and options in its place, returned and in
// Peers at the same index. The new node joins through the bootstrap node,
// if any; OnClose functions are not carried over.
func (c *Cluster) Restart(p *Peer) *Peer {
	c.t.Helper()
	c.Net.Crash(p.ID())
	p.close()
	q := c.start(p.Index, p.Key, p.extra)
	c.mu.Lock()
	c.peers[p.Index] = q
	c.mu.Unlock()
	return q
}

// Partition cuts every link between a peer of side and a peer of other
// (see vnet.Network.Partition).
func (c *Cluster) Partition(side, other []*Peer) {
	for _, a := range side {
		for _, b := range other {
			c.Net.Cut(a.ID(), b.ID())
			c.mu.Lock()
			c.cut = append(c.cut, [2]peer.ID{a.ID(), b.ID()})
			c.mu.Unlock()
		}
	}
}

// Heal heals every cut link and reconnects the pairs Partition cut (but
// not crashed peers): gossipsub and the DHT would only dial a peer they
// look for, and a partition's heal brings the connections back.
func (c *Cluster) Heal() {
	c.Net.HealAll()
	c.mu.Lock()
	cut := c.cut
	c.cut = nil
	c.mu.Unlock()
	for _, pr := range cut {
		if err := c.Net.Connect(pr[0], pr[1]); err != nil {
			c.t.Logf("reconnect after the heal: %v", err)
		}
	}
}

// String names the peer for messages.
func (p *Peer) String() string { return fmt.Sprintf("peer %d (%s)", p.Index, p.ID().ShortString()) }
