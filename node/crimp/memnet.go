package crimp

import (
	"errors"
	"fmt"
	"math/rand"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Transport carries datagrams to and from the multicast group. The UDP
// multicast socket and the in-memory network both implement it.
type Transport interface {
	// Start begins handing received datagrams to h. h must not keep b.
	Start(h func(b []byte, from netip.AddrPort)) error
	// Send multicasts b to the group (not to the sender itself).
	Send(b []byte) error
	// LocalAddr is this endpoint's address.
	LocalAddr() netip.AddrPort
	// Close stops receiving and releases the endpoint.
	Close() error
}

// LinkParams describe a path: a fixed delay plus uniform jitter in
// [0, Jitter), and the probability that a packet is lost on it.
type LinkParams struct {
	Delay  time.Duration
	Jitter time.Duration
	Loss   float64
}

// MemNetwork is an in-memory multicast network for tests and benches.
//
// Endpoints sit at sites (think: a machine or a LAN segment). A packet sent
// at a site reaches the other endpoints of that site over the site's LAN
// (loss and delay drawn per receiver) and each other site over the link
// between the two sites. On a link, loss and delay are drawn once per packet
// for the whole far site, like a bridge that drops a frame for everyone
// behind it (the topology of the CRIMP paper's table 4.1). On top of that
// each endpoint may drop received packets with its own probability, and
// Disconnect/Partition cut pairs of endpoints.
//
// Randomness comes from one seeded source, and delivery is scheduled on the
// given Clock; on a SimClock a run is reproducible.
type MemNetwork struct {
	mu     sync.Mutex
	clock  Clock
	rng    *rand.Rand
	sites  []string
	lans   map[string]LinkParams
	links  map[[2]string]LinkParams
	eps    []*MemEndpoint
	cut    map[[2]int]bool
	tap    func(from netip.AddrPort, b []byte)
	closed bool
}

// NewMemNetwork returns an empty network whose random drops and delays are
// drawn from seed.
func NewMemNetwork(clock Clock, seed int64) *MemNetwork {
	return &MemNetwork{
		clock: clock,
		rng:   rand.New(rand.NewSource(seed)),
		lans:  map[string]LinkParams{},
		links: map[[2]string]LinkParams{},
		cut:   map[[2]int]bool{},
	}
}

// SetLAN sets delay and loss between endpoints of the same site.
func (n *MemNetwork) SetLAN(site string, p LinkParams) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.addSite(site)
	n.lans[site] = p
}

// SetLink sets the path between two sites, both directions. Sites without
// a link cannot reach each other.
func (n *MemNetwork) SetLink(a, b string, p LinkParams) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.addSite(a)
	n.addSite(b)
	n.links[[2]string{a, b}] = p
	n.links[[2]string{b, a}] = p
}

func (n *MemNetwork) addSite(s string) {
	if !slices.Contains(n.sites, s) {
		n.sites = append(n.sites, s)
	}
}

// Tap sees every datagram sent on the network (before any loss). For
// benches that count traffic.
func (n *MemNetwork) Tap(f func(from netip.AddrPort, b []byte)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.tap = f
}

// Endpoint attaches a new endpoint at site. Its address is a label
// (127.0.0.1 and a port unique to the network); no socket is opened.
func (n *MemNetwork) Endpoint(site string) *MemEndpoint {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.addSite(site)
	ep := &MemEndpoint{
		net:   n,
		index: len(n.eps),
		site:  site,
		addr:  netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(20000+len(n.eps))),
	}
	n.eps = append(n.eps, ep)
	return ep
}

// SetReceiveLoss makes ep drop each received datagram with probability p.
func (n *MemNetwork) SetReceiveLoss(ep *MemEndpoint, p float64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ep.recvLoss = p
}

// Disconnect cuts a and b from each other (both directions).
func (n *MemNetwork) Disconnect(a, b *MemEndpoint) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut[[2]int{a.index, b.index}] = true
	n.cut[[2]int{b.index, a.index}] = true
}

// Connect undoes Disconnect for a and b.
func (n *MemNetwork) Connect(a, b *MemEndpoint) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.cut, [2]int{a.index, b.index})
	delete(n.cut, [2]int{b.index, a.index})
}

// Partition cuts every pair of endpoints that are in different groups;
// endpoints in no group are cut from all grouped ones.
func (n *MemNetwork) Partition(groups ...[]*MemEndpoint) {
	n.mu.Lock()
	defer n.mu.Unlock()
	group := map[int]int{}
	for g, eps := range groups {
		for _, ep := range eps {
			group[ep.index] = g + 1
		}
	}
	for _, a := range n.eps {
		for _, b := range n.eps {
			if a != b && group[a.index] != group[b.index] {
				n.cut[[2]int{a.index, b.index}] = true
			}
		}
	}
}

// Heal removes every cut.
func (n *MemNetwork) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.cut)
}

// Close stops all deliveries.
func (n *MemNetwork) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
}

func (n *MemNetwork) send(from *MemEndpoint, b []byte) error {
	if len(b) > MaxPacketSize {
		return fmt.Errorf("memnet send: %d bytes over %d", len(b), MaxPacketSize)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || from.closed {
		return errors.New("memnet send: endpoint closed")
	}
	pkt := append([]byte(nil), b...)
	if n.tap != nil {
		n.tap(from.addr, pkt)
	}
	// One draw per far site for the shared link, in a fixed site order.
	type path struct {
		lost  bool
		delay time.Duration
	}
	paths := map[string]path{}
	for _, site := range n.sites {
		if site == from.site {
			continue
		}
		p, ok := n.links[[2]string{from.site, site}]
		if !ok {
			paths[site] = path{lost: true}
			continue
		}
		paths[site] = path{lost: n.rng.Float64() < p.Loss, delay: p.Delay + n.jitter(p.Jitter)}
	}
	for _, to := range n.eps {
		if to == from || to.closed || n.cut[[2]int{from.index, to.index}] {
			continue
		}
		var delay time.Duration
		if to.site == from.site {
			lan := n.lans[from.site]
			if n.rng.Float64() < lan.Loss {
				continue
			}
			delay = lan.Delay + n.jitter(lan.Jitter)
		} else {
			p := paths[to.site]
			if p.lost {
				continue
			}
			delay = p.delay
		}
		if to.recvLoss > 0 && n.rng.Float64() < to.recvLoss {
			continue
		}
		to := to
		src := from.addr
		n.clock.AfterFunc(delay, func() { to.deliver(pkt, src) })
	}
	return nil
}

func (n *MemNetwork) jitter(j time.Duration) time.Duration {
	if j <= 0 {
		return 0
	}
	return time.Duration(n.rng.Int63n(int64(j)))
}

// MemEndpoint is one member's attachment to a MemNetwork.
type MemEndpoint struct {
	net      *MemNetwork
	index    int
	site     string
	addr     netip.AddrPort
	recvLoss float64 // guarded by net.mu

	hmu     sync.Mutex
	handler func([]byte, netip.AddrPort)
	closed  bool // guarded by net.mu
}

var _ Transport = (*MemEndpoint)(nil)

// Start begins delivering datagrams to h.
func (e *MemEndpoint) Start(h func(b []byte, from netip.AddrPort)) error {
	e.hmu.Lock()
	defer e.hmu.Unlock()
	if e.handler != nil {
		return errors.New("memnet: endpoint already started")
	}
	e.handler = h
	return nil
}

// Send multicasts b to every other endpoint that the network lets it reach.
func (e *MemEndpoint) Send(b []byte) error { return e.net.send(e, b) }

// LocalAddr is the endpoint's label address.
func (e *MemEndpoint) LocalAddr() netip.AddrPort { return e.addr }

// Close detaches the endpoint; packets in flight to it are dropped.
func (e *MemEndpoint) Close() error {
	e.net.mu.Lock()
	e.closed = true
	e.net.mu.Unlock()
	e.hmu.Lock()
	e.handler = nil
	e.hmu.Unlock()
	return nil
}

func (e *MemEndpoint) deliver(b []byte, from netip.AddrPort) {
	e.hmu.Lock()
	h := e.handler
	e.hmu.Unlock()
	if h != nil {
		h(b, from)
	}
}
