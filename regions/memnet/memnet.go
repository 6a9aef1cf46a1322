// Package memnet is an in-memory network for the region service
// (regions.Transport): peers, exchanges and topic messages live in one
// Network, and every message is a queued Message that is delivered, by the
// network itself or by a test script, one at a time.
//
// Two modes. Automatic: each message is delivered after its link's latency
// (a timer; zero latency delivers at once on a goroutine). Manual: nothing
// moves until the script calls Deliver or Drop, which is what makes
// scripted scenarios repeatable inside a testing/synctest bubble.
//
// An exchange (Call) is two messages, the request and the reply; a topic
// publish is one message per subscriber, which the receiver's validator
// judges when it is delivered. Partitions cut links; a crash makes a peer
// silent. Either way the messages queued across the cut are dropped and
// the exchanges running across it fail at once, as a reset connection
// does; Drop instead loses one message silently (its caller waits until
// its context ends). Peers on each side of a change of links are told
// through Notify, as libp2p's connection notifications do. A crash can
// also leave the peer lingering (CrashLingering): the peers linked to it
// are not told, and keep listing it among their routing, connected and
// topic peers, as a host whose peer died without closing its connections
// does, until Forget tells them; calls to it fail at once all the same.
//
// The package must not import regions (whose tests use it), so it speaks
// the Transport's types only: bytes, peer IDs and regions/topic.
package memnet

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/node"
)

// Kind is what a Message carries.
type Kind string

const (
	KindCall  Kind = "call"  // a request of an exchange
	KindReply Kind = "reply" // its reply
	KindEvent Kind = "event" // a topic message
)

// Message is one queued message.
type Message struct {
	Seq      uint64 // order of sending
	From, To peer.ID
	Kind     Kind
	Topic    string // KindEvent: the topic
	// Data is the request stream (KindCall), the reply body (KindReply)
	// or the topic message (KindEvent). Do not change it.
	Data []byte

	x *exchange
}

// ErrUnreachable fails a call to a peer that is down or cut off.
var ErrUnreachable = errors.New("memnet: peer unreachable")

// ErrReset fails an exchange whose link was cut (partition or crash).
var ErrReset = errors.New("memnet: connection reset")

// Network is a set of peers and the messages between them.
type Network struct {
	mu      sync.Mutex
	peers   map[peer.ID]*Peer
	queue   []*Message
	seq     uint64
	manual  bool
	latency time.Duration
	links   map[[2]peer.ID]time.Duration // per-link latency (from, to)
	side    map[peer.ID]int              // partition side; linked iff equal
	open    map[*exchange]bool           // delivered calls not yet answered
	closed  bool
	wg      sync.WaitGroup // handler and delivery goroutines
}

// New returns an empty network in automatic mode without latency.
func New() *Network {
	return &Network{peers: map[peer.ID]*Peer{}, links: map[[2]peer.ID]time.Duration{},
		side: map[peer.ID]int{}, open: map[*exchange]bool{}}
}

// SetManual switches between manual delivery (true: only Deliver and
// Drop move messages) and automatic. Going automatic schedules what is
// queued.
func (n *Network) SetManual(manual bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.manual = manual
	if !manual {
		for _, m := range n.queue {
			n.scheduleLocked(m)
		}
	}
}

// SetLatency sets the default one-way latency of automatic delivery.
func (n *Network) SetLatency(d time.Duration) {
	n.mu.Lock()
	n.latency = d
	n.mu.Unlock()
}

// SetLinkLatency sets the one-way latency from a to b.
func (n *Network) SetLinkLatency(a, b peer.ID, d time.Duration) {
	n.mu.Lock()
	n.links[[2]peer.ID{a, b}] = d
	n.mu.Unlock()
}

// Add makes a peer with key; it is up and linked to every peer on its
// side (the default side, 0, unless a partition placed it).
func (n *Network) Add(key crypto.PrivKey) (*Peer, error) {
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("memnet: peer ID: %w", err)
	}
	n.mu.Lock()
	if n.peers[id] != nil {
		n.mu.Unlock()
		return nil, fmt.Errorf("memnet: peer %s added twice", id)
	}
	p := &Peer{net: n, id: id, key: key, up: true, canCoordinate: true,
		notifiers: map[int]notifier{}, topics: map[string]*channel{}}
	n.peers[id] = p
	var calls []func()
	for _, q := range n.sortedPeersLocked() {
		if q != p && n.linkedLocked(p, q) {
			calls = append(calls, q.notifyLocked(p.id, true)...)
		}
	}
	n.mu.Unlock()
	run(calls)
	return p, nil
}

// Peer returns the peer with ID id (nil if none).
func (n *Network) Peer(id peer.ID) *Peer {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.peers[id]
}

func run(calls []func()) {
	for _, f := range calls {
		f()
	}
}

func (n *Network) sortedPeersLocked() []*Peer {
	out := make([]*Peer, 0, len(n.peers))
	for _, p := range n.peers {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *Peer) int { return bytesCompare(a.id, b.id) })
	return out
}

func bytesCompare(a, b peer.ID) int { return bytes.Compare([]byte(a), []byte(b)) }

// linkedLocked: both up and on the same side.
func (n *Network) linkedLocked(a, b *Peer) bool {
	return a != nil && b != nil && a.up && b.up && n.side[a.id] == n.side[b.id]
}

// Pending returns the queued messages in sending order.
func (n *Network) Pending() []*Message {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.queue)
}

// Deliver delivers m now (false if it is no longer queued). The receiver
// handles it on a goroutine of the network's.
func (n *Network) Deliver(m *Message) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.unqueueLocked(m) {
		return false
	}
	n.deliverLocked(m)
	return true
}

// Drop loses m (false if it is no longer queued): an exchange it belongs
// to waits until its caller gives up.
func (n *Network) Drop(m *Message) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.unqueueLocked(m)
}

func (n *Network) unqueueLocked(m *Message) bool {
	i := slices.Index(n.queue, m)
	if i < 0 {
		return false
	}
	n.queue = slices.Delete(n.queue, i, i+1)
	return true
}

func (n *Network) enqueueLocked(m *Message) {
	n.seq++
	m.Seq = n.seq
	n.queue = append(n.queue, m)
	if !n.manual {
		n.scheduleLocked(m)
	}
}

// scheduleLocked arranges m's automatic delivery after its link's latency.
func (n *Network) scheduleLocked(m *Message) {
	d, ok := n.links[[2]peer.ID{m.From, m.To}]
	if !ok {
		d = n.latency
	}
	deliver := func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.manual || n.closed || !n.unqueueLocked(m) {
			return
		}
		n.deliverLocked(m)
	}
	if d <= 0 {
		n.goLocked(deliver)
		return
	}
	time.AfterFunc(d, deliver)
}

// goLocked runs f on a goroutine the network waits for on Close.
func (n *Network) goLocked(f func()) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f()
	}()
}

func (n *Network) deliverLocked(m *Message) {
	from, to := n.peers[m.From], n.peers[m.To]
	if !n.linkedLocked(from, to) {
		if m.x != nil {
			m.x.failLocked(n, ErrReset)
		}
		return
	}
	switch m.Kind {
	case KindCall:
		n.open[m.x] = true
		h := to.handler
		x := m.x
		n.goLocked(func() {
			if h == nil {
				n.mu.Lock()
				x.failLocked(n, fmt.Errorf("open stream to %s: protocol not supported", to.id))
				n.mu.Unlock()
				return
			}
			body := h(from.id, bufio.NewReader(bytes.NewReader(m.Data)), func() <-chan struct{} { return x.gone })
			n.mu.Lock()
			defer n.mu.Unlock()
			switch {
			case x.done:
			case body == nil || !n.linkedLocked(from, to):
				x.failLocked(n, ErrReset)
			default:
				delete(n.open, x)
				n.enqueueLocked(&Message{From: to.id, To: from.id, Kind: KindReply, Data: body, x: x})
			}
		})
	case KindReply:
		m.x.finishLocked(n, m.Data, nil)
	case KindEvent:
		ch := to.topics[m.Topic]
		if ch == nil || !ch.subscribed {
			return
		}
		n.goLocked(func() { ch.receive(m.From, m.Data) })
	}
}

// Crash makes p silent for good: its queued messages are dropped, the
// exchanges it takes part in fail, and the peers linked to it hear that
// its connection closed.
func (n *Network) Crash(id peer.ID) { n.crash(id, false) }

// CrashLingering makes p silent for good as Crash does, but the peers
// linked to it hear nothing: it lingers in their routing, connected and
// topic peer lists (with the topics it was subscribed to) until Forget,
// while every call to it fails at once. So a script can show a peer
// acting on a view that still holds peers that just crashed.
func (n *Network) CrashLingering(id peer.ID) { n.crash(id, true) }

func (n *Network) crash(id peer.ID, linger bool) {
	n.mu.Lock()
	p := n.peers[id]
	if p == nil || !p.up {
		n.mu.Unlock()
		return
	}
	var linked []*Peer
	for _, q := range n.sortedPeersLocked() {
		if q != p && n.linkedLocked(p, q) {
			linked = append(linked, q)
		}
	}
	if linger {
		p.lingerTopics = map[string]bool{}
		for name, ch := range p.topics {
			if ch.subscribed {
				p.lingerTopics[name] = true
			}
		}
	}
	p.up = false
	n.cutLocked(func(m *Message) bool { return m.From == id || m.To == id })
	var calls []func()
	for _, q := range linked {
		if linger {
			if q.lingering == nil {
				q.lingering = map[peer.ID]bool{}
			}
			q.lingering[id] = true
			continue
		}
		calls = append(calls, q.notifyLocked(id, false)...)
	}
	n.mu.Unlock()
	run(calls)
}

// Forget ends the lingering of a peer crashed by CrashLingering: the peers
// that still listed it drop it and hear that its connection closed.
func (n *Network) Forget(id peer.ID) {
	n.mu.Lock()
	var calls []func()
	for _, q := range n.sortedPeersLocked() {
		if !q.lingering[id] {
			continue
		}
		delete(q.lingering, id)
		if q.up {
			calls = append(calls, q.notifyLocked(id, false)...)
		}
	}
	n.mu.Unlock()
	run(calls)
}

// cutLocked drops the queued messages and fails the open exchanges that
// cut says cross a cut link.
func (n *Network) cutLocked(cut func(*Message) bool) {
	kept := n.queue[:0]
	var failed []*exchange
	for _, m := range n.queue {
		if cut(m) {
			if m.x != nil {
				failed = append(failed, m.x)
			}
			continue
		}
		kept = append(kept, m)
	}
	clear(n.queue[len(kept):])
	n.queue = kept
	for x := range n.open {
		if cut(&Message{From: x.from, To: x.to}) {
			failed = append(failed, x)
		}
	}
	for _, x := range failed {
		x.failLocked(n, ErrReset)
	}
}

// Partition cuts the network into sides: each group is one side, and the
// peers in no group form one more. Heal undoes it.
func (n *Network) Partition(groups ...[]peer.ID) {
	side := map[peer.ID]int{}
	for i, g := range groups {
		for _, id := range g {
			side[id] = i + 1
		}
	}
	n.relink(side)
}

// Heal links every peer again.
func (n *Network) Heal() { n.relink(map[peer.ID]int{}) }

func (n *Network) relink(side map[peer.ID]int) {
	n.mu.Lock()
	peers := n.sortedPeersLocked()
	before := map[[2]peer.ID]bool{}
	for _, a := range peers {
		for _, b := range peers {
			if a != b {
				before[[2]peer.ID{a.id, b.id}] = n.linkedLocked(a, b)
			}
		}
	}
	n.side = side
	n.cutLocked(func(m *Message) bool { return n.side[m.From] != n.side[m.To] })
	var calls []func()
	for _, a := range peers {
		for _, b := range peers {
			if a == b {
				continue
			}
			now := n.linkedLocked(a, b)
			if now != before[[2]peer.ID{a.id, b.id}] {
				calls = append(calls, a.notifyLocked(b.id, now)...)
			}
		}
	}
	n.mu.Unlock()
	run(calls)
}

// Close fails every exchange, drops every message and waits for the
// network's goroutines (the peers' services should be closed first).
func (n *Network) Close() {
	n.mu.Lock()
	n.closed = true
	n.cutLocked(func(*Message) bool { return true })
	n.mu.Unlock()
	n.wg.Wait()
}

// exchange is one Call: its caller waits on reply until it is done.
type exchange struct {
	from, to peer.ID
	gone     chan struct{} // closed when the caller stops waiting
	reply    chan result   // buffered: the one result
	done     bool          // under Network.mu
}

type result struct {
	body []byte
	err  error
}

func (x *exchange) finishLocked(n *Network, body []byte, err error) {
	delete(n.open, x)
	if x.done {
		return
	}
	x.done = true
	x.reply <- result{body, err}
}

func (x *exchange) failLocked(n *Network, err error) { x.finishLocked(n, nil, err) }

// abandon ends x for a caller that stopped waiting: its queued messages
// go, and its handler learns it through gone.
func (n *Network) abandon(x *exchange) {
	n.mu.Lock()
	defer n.mu.Unlock()
	x.done = true
	delete(n.open, x)
	kept := n.queue[:0]
	for _, m := range n.queue {
		if m.x != x {
			kept = append(kept, m)
		}
	}
	clear(n.queue[len(kept):])
	n.queue = kept
	select {
	case <-x.gone:
	default:
		close(x.gone)
	}
}

// closestTo sorts ids by distance to key, as the DHT does.
func closestTo(key string, ids []peer.ID) []peer.ID { return node.SortByDistance(key, ids) }

// callWait is how Call waits: the result, or ctx's end.
func (n *Network) callWait(ctx context.Context, x *exchange) ([]byte, error) {
	select {
	case r := <-x.reply:
		// A result the caller got also ends the handler's watch.
		n.abandon(x)
		if r.err != nil {
			return nil, fmt.Errorf("exchange with %s: %w", x.to, r.err)
		}
		return r.body, nil
	case <-ctx.Done():
		n.abandon(x)
		return nil, fmt.Errorf("reply from %s: %w", x.to, ctx.Err())
	}
}
