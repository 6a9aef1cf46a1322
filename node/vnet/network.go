package vnet

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
)

// Network is a virtual network of Hosts on libp2p's in-memory network.
// Two hosts are linked when one first dials the other (the all-pairs links
// grow as the square of the peers), never while the link is cut or either
// host is down (crashed or removed). It also keeps each link's latency.
type Network struct {
	mn             mocknet.Mocknet
	defaultLatency time.Duration

	mu     sync.Mutex
	linked map[peer.ID]map[peer.ID]struct{}
	// down are the hosts that crashed or were removed: nobody links to
	// them until a host with the same identity is added again.
	down    map[peer.ID]bool
	cut     map[pair]struct{}
	latency map[pair]time.Duration
	hosts   map[peer.ID]*Host
}

// pair is an unordered pair of peers, the smaller ID first.
type pair struct{ a, b peer.ID }

func pairOf(a, b peer.ID) pair {
	if a > b {
		a, b = b, a
	}
	return pair{a, b}
}

// ErrDown is returned for a link to a host that crashed or was removed.
var ErrDown = errors.New("peer is down")

// ErrCut is returned for a link that a partition cut.
var ErrCut = errors.New("link is cut")

// New returns an empty network whose links have the one-way latency
// defaultLatency unless SetLatency or a host's own HostOptions.Latency
// says otherwise.
func New(defaultLatency time.Duration) *Network {
	return &Network{mn: mocknet.New(), defaultLatency: defaultLatency,
		linked: map[peer.ID]map[peer.ID]struct{}{}, down: map[peer.ID]bool{},
		cut: map[pair]struct{}{}, latency: map[pair]time.Duration{}, hosts: map[peer.ID]*Host{}}
}

// Addr is the i-th address of the in-memory network, distinct for each i
// (mocknet needs one per host; nothing dials it).
func Addr(i int) ma.Multiaddr {
	ip := net.ParseIP("100::")
	ip[12], ip[13], ip[14], ip[15] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
	return ma.StringCast(fmt.Sprintf("/ip6/%s/tcp/4242", ip))
}

// AddHost adds a host with identity key at addr. A host that had the same
// identity and is down (see Crash) is replaced: this is a restart. The
// caller closes the host (or the node built on it).
func (n *Network) AddHost(key crypto.PrivKey, addr ma.Multiaddr, opts HostOptions) (*Host, error) {
	h, err := n.mn.AddPeer(key, addr)
	if err != nil {
		return nil, fmt.Errorf("add host at %s: %w", addr, err)
	}
	vh := newHost(h, n, opts)
	n.mu.Lock()
	delete(n.down, h.ID())
	n.hosts[h.ID()] = vh
	n.mu.Unlock()
	return vh, nil
}

// unregister forgets a host that closed and takes it off the network, as
// a process that exits leaves nothing to dial: its links go and a dial to
// it fails at once (as a refused connection does) instead of reaching a
// closed host. A host added since with the same identity (a restart)
// stays.
func (n *Network) unregister(h *Host) {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := h.ID()
	if n.hosts[p] != h {
		return
	}
	delete(n.hosts, p)
	n.removeLocked(p)
}

// Host is p's host, nil once it closed.
func (n *Network) Host(p peer.ID) *Host {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.hosts[p]
}

// Link links a and b unless they are linked already; it fails when either
// is down or a partition cut the link.
func (n *Network) Link(a, b peer.ID) error {
	if a == b {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.down[a] || n.down[b] {
		return fmt.Errorf("link %s-%s: %w", a, b, ErrDown)
	}
	if _, ok := n.cut[pairOf(a, b)]; ok {
		return fmt.Errorf("link %s-%s: %w", a, b, ErrCut)
	}
	if _, ok := n.linked[a][b]; ok {
		return nil
	}
	if _, err := n.mn.LinkPeers(a, b); err != nil {
		return fmt.Errorf("link %s-%s: %w", a, b, err)
	}
	for _, ends := range [2][2]peer.ID{{a, b}, {b, a}} {
		m := n.linked[ends[0]]
		if m == nil {
			m = map[peer.ID]struct{}{}
			n.linked[ends[0]] = m
		}
		m[ends[1]] = struct{}{}
	}
	return nil
}

// Connect links a and b and dials b from a.
func (n *Network) Connect(a, b peer.ID) error {
	if a == b || n.mn.Net(a).Connectedness(b) == network.Connected {
		return nil
	}
	if err := n.Link(a, b); err != nil {
		return err
	}
	if _, err := n.mn.ConnectPeers(a, b); err != nil {
		return fmt.Errorf("connect %s to %s: %w", a, b, err)
	}
	return nil
}

// unlinkLocked removes the link between a and b, if any. n.mu is held.
func (n *Network) unlinkLocked(a, b peer.ID) {
	if _, ok := n.linked[a][b]; !ok {
		return
	}
	_ = n.mn.UnlinkPeers(a, b)
	delete(n.linked[a], b)
	delete(n.linked[b], a)
}

// Remove takes p off the network for good (until a host with its identity
// is added again): its links go and nobody can dial it. Its connections
// still open are the caller's to close.
func (n *Network) Remove(p peer.ID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.removeLocked(p)
}

// removeLocked marks p down and removes its links. n.mu is held.
func (n *Network) removeLocked(p peer.ID) {
	n.down[p] = true
	for q := range n.linked[p] {
		n.unlinkLocked(p, q)
	}
	delete(n.linked, p)
}

// Crash stops p as a dying process stops, without its Close: its links
// are cut, its streams reset at once on both ends (nothing in flight
// arrives), its connections closed, and nobody can dial it. The host (and
// whatever runs on it) still has to be closed; AddHost with its identity
// restarts it.
func (n *Network) Crash(p peer.ID) {
	n.Remove(p)
	h := n.Host(p)
	if h == nil {
		return
	}
	h.crash()
	for _, c := range h.Network().Conns() {
		_ = c.Close()
	}
}

// Cut cuts the link between a and b until Heal: the connection between
// them closes (with its streams) and neither can dial the other.
func (n *Network) Cut(a, b peer.ID) {
	if a == b {
		return
	}
	n.mu.Lock()
	n.cut[pairOf(a, b)] = struct{}{}
	n.unlinkLocked(a, b)
	n.mu.Unlock()
	_ = n.mn.DisconnectPeers(a, b)
}

// Partition cuts every link between a peer of side and a peer of other.
func (n *Network) Partition(side, other []peer.ID) {
	for _, a := range side {
		for _, b := range other {
			n.Cut(a, b)
		}
	}
}

// Heal lets a and b link again; they do on the next dial.
func (n *Network) Heal(a, b peer.ID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.cut, pairOf(a, b))
}

// HealAll heals every cut link.
func (n *Network) HealAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.cut)
}

// SetLatency sets the one-way latency between a and b, both ways, for the
// streams opened from now on.
func (n *Network) SetLatency(a, b peer.ID, d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.latency[pairOf(a, b)] = d
}

// latencyOf is the latency of a new stream from a to b: SetLatency's,
// else the host's own (own, if not nil), else the default.
func (n *Network) latencyOf(a, b peer.ID, own func(peer.ID) time.Duration) time.Duration {
	n.mu.Lock()
	d, ok := n.latency[pairOf(a, b)]
	n.mu.Unlock()
	switch {
	case ok:
		return d
	case own != nil:
		return own(b)
	default:
		return n.defaultLatency
	}
}

// Connected reports whether a has a connection to b.
func (n *Network) Connected(a, b peer.ID) bool {
	return n.mn.Net(a).Connectedness(b) == network.Connected
}

// Close closes the in-memory network and every host still on it.
func (n *Network) Close() error { return n.mn.Close() }

// CloseConns closes every connection still open on the network: a stream
// opened while its host was closing can outlive the close.
func (n *Network) CloseConns() {
	for _, nt := range n.mn.Nets() {
		for _, c := range nt.Conns() {
			_ = c.Close()
		}
	}
}
