package memnet

import (
	"bufio"
	"context"
	"fmt"
	"slices"
	"sync"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/regions/topic"
)

// Peer is one peer of a Network; it implements regions.Transport.
type Peer struct {
	net *Network
	id  peer.ID
	key crypto.PrivKey

	// Under net.mu:
	up            bool
	canCoordinate bool
	handler       func(peer.ID, *bufio.Reader, func() <-chan struct{}) []byte
	served        bool // it ever served the protocol
	notifiers     map[int]notifier
	nextNotifier  int
	topics        map[string]*channel
	removed       map[peer.ID]bool // dropped from its routing table
	// lingering are the crashed peers p still lists (CrashLingering) until
	// Forget; lingerTopics, of a peer crashed so, the topics it was
	// subscribed to then, which those lists keep showing.
	lingering    map[peer.ID]bool
	lingerTopics map[string]bool
}

type notifier struct{ up, down func(peer.ID) }

// notifyLocked returns the calls telling p's notifiers that other came
// up or went down.
func (p *Peer) notifyLocked(other peer.ID, up bool) []func() {
	ids := make([]int, 0, len(p.notifiers))
	for i := range p.notifiers {
		ids = append(ids, i)
	}
	slices.Sort(ids)
	var out []func()
	for _, i := range ids {
		nf := p.notifiers[i]
		if up {
			out = append(out, func() { nf.up(other) })
		} else {
			out = append(out, func() { nf.down(other) })
		}
	}
	return out
}

// SetCanCoordinate says whether p may be placed (default true).
func (p *Peer) SetCanCoordinate(ok bool) {
	p.net.mu.Lock()
	p.canCoordinate = ok
	p.net.mu.Unlock()
}

func (p *Peer) ID() peer.ID             { return p.id }
func (p *Peer) PrivKey() crypto.PrivKey { return p.key }

func (p *Peer) PubKey(id peer.ID) crypto.PubKey {
	p.net.mu.Lock()
	defer p.net.mu.Unlock()
	if q := p.net.peers[id]; q != nil {
		return q.key.GetPublic()
	}
	return nil
}

func (p *Peer) Call(ctx context.Context, to peer.ID, request []byte) ([]byte, error) {
	n := p.net
	n.mu.Lock()
	q := n.peers[to]
	if n.closed || !n.linkedLocked(p, q) {
		n.mu.Unlock()
		return nil, fmt.Errorf("open stream to %s: %w", to, ErrUnreachable)
	}
	x := &exchange{from: p.id, to: to, gone: make(chan struct{}), reply: make(chan result, 1)}
	n.enqueueLocked(&Message{From: p.id, To: to, Kind: KindCall, Data: slices.Clone(request), x: x})
	n.mu.Unlock()
	return n.callWait(ctx, x)
}

func (p *Peer) Serve(h func(peer.ID, *bufio.Reader, func() <-chan struct{}) []byte) {
	p.net.mu.Lock()
	defer p.net.mu.Unlock()
	p.handler = h
	if h != nil {
		p.served = true
	}
}

func (p *Peer) Notify(up, down func(peer.ID)) func() {
	p.net.mu.Lock()
	defer p.net.mu.Unlock()
	i := p.nextNotifier
	p.nextNotifier++
	p.notifiers[i] = notifier{up, down}
	return func() {
		p.net.mu.Lock()
		delete(p.notifiers, i)
		p.net.mu.Unlock()
	}
}

// Connected is true of a lingering peer too: its connection has not
// noticed the crash.
func (p *Peer) Connected(id peer.ID) bool {
	p.net.mu.Lock()
	defer p.net.mu.Unlock()
	return p.net.linkedLocked(p, p.net.peers[id]) || p.listsLingeringLocked(id)
}

// listsLingeringLocked reports whether p, up, still lists id, crashed.
func (p *Peer) listsLingeringLocked(id peer.ID) bool { return p.up && p.lingering[id] }

func (p *Peer) Connect(_ context.Context, id peer.ID) error {
	if !p.Connected(id) {
		return fmt.Errorf("connect to %s: %w", id, ErrUnreachable)
	}
	return nil
}

func (p *Peer) CanCoordinate(id peer.ID) bool {
	p.net.mu.Lock()
	defer p.net.mu.Unlock()
	q := p.net.peers[id]
	return q != nil && q.canCoordinate
}

func (p *Peer) ServesRegions(id peer.ID) bool {
	p.net.mu.Lock()
	defer p.net.mu.Unlock()
	q := p.net.peers[id]
	return q != nil && q.served
}

// linkedPeersLocked lists the peers linked to p, and the crashed ones it
// still lists, by ID.
func (p *Peer) linkedPeersLocked() []peer.ID {
	var out []peer.ID
	for _, q := range p.net.sortedPeersLocked() {
		if q != p && (p.net.linkedLocked(p, q) || p.listsLingeringLocked(q.id)) {
			out = append(out, q.id)
		}
	}
	return out
}

// RoutingPeers: the linked peers this peer did not remove.
func (p *Peer) RoutingPeers() []peer.ID {
	p.net.mu.Lock()
	defer p.net.mu.Unlock()
	return slices.DeleteFunc(p.linkedPeersLocked(), func(id peer.ID) bool { return p.removed[id] })
}

func (p *Peer) ConnectedPeers() []peer.ID {
	p.net.mu.Lock()
	defer p.net.mu.Unlock()
	return p.linkedPeersLocked()
}

func (p *Peer) RemovePeer(id peer.ID) {
	p.net.mu.Lock()
	defer p.net.mu.Unlock()
	if p.removed == nil {
		p.removed = map[peer.ID]bool{}
	}
	p.removed[id] = true
}

// RefreshRoutingTable learns every linked peer again.
func (p *Peer) RefreshRoutingTable() {
	p.net.mu.Lock()
	defer p.net.mu.Unlock()
	p.removed = nil
}

// ClosestPeers answers from the whole side of the network p is on, as a
// lookup that reaches everyone would.
func (p *Peer) ClosestPeers(_ context.Context, key string, count int) ([]peer.ID, error) {
	p.net.mu.Lock()
	defer p.net.mu.Unlock()
	if !p.up {
		return nil, fmt.Errorf("closest peers to %q: %w", key, ErrUnreachable)
	}
	var ids []peer.ID
	for _, q := range p.net.sortedPeersLocked() {
		if (q == p || p.net.linkedLocked(p, q)) && q.canCoordinate {
			ids = append(ids, q.id)
		}
	}
	ids = closestTo(key, ids)
	return ids[:min(count, len(ids))], nil
}

func (p *Peer) JoinTopic(name string, validate topic.Validator) (topic.Channel, error) {
	p.net.mu.Lock()
	defer p.net.mu.Unlock()
	if p.topics[name] != nil {
		return nil, fmt.Errorf("join topic %s: already joined", name)
	}
	ch := &channel{p: p, name: name, validate: validate}
	p.topics[name] = ch
	return ch, nil
}

func (p *Peer) TopicPeers(name string) []peer.ID {
	p.net.mu.Lock()
	defer p.net.mu.Unlock()
	return p.topicPeersLocked(name)
}

func (p *Peer) topicPeersLocked(name string) []peer.ID {
	return slices.DeleteFunc(p.linkedPeersLocked(), func(id peer.ID) bool {
		q := p.net.peers[id]
		if p.listsLingeringLocked(id) {
			return !q.lingerTopics[name]
		}
		ch := q.topics[name]
		return ch == nil || !ch.subscribed
	})
}

// channel is a peer's membership of one topic.
type channel struct {
	p        *Peer
	name     string
	validate topic.Validator

	// Under p.net.mu:
	subscribed bool
	left       bool
	deliver    func(peer.ID, any)
	ctx        context.Context

	order sync.Mutex // one delivery at a time, as a read loop
}

func (c *channel) Name() string { return c.name }

func (c *channel) ListPeers() []peer.ID { return c.p.TopicPeers(c.name) }

// Publish validates data locally, delivers it to this peer if subscribed,
// and queues one message to each subscriber linked to it.
func (c *channel) Publish(_ context.Context, data []byte) error {
	n := c.p.net
	n.mu.Lock()
	left := c.left
	n.mu.Unlock()
	if left {
		return fmt.Errorf("publish on %s: topic left", c.name)
	}
	if verdict, _ := c.validate(c.p.id, data); verdict != pubsub.ValidationAccept {
		return fmt.Errorf("publish on %s: validation failed", c.name)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !c.p.up {
		return nil
	}
	data = slices.Clone(data)
	if c.subscribed {
		n.goLocked(func() { c.receive(c.p.id, data) })
	}
	for _, id := range c.p.topicPeersLocked(c.name) {
		if !n.linkedLocked(c.p, n.peers[id]) {
			continue // a lingering peer: what is sent to it is lost
		}
		n.enqueueLocked(&Message{From: c.p.id, To: id, Kind: KindEvent, Topic: c.name, Data: data})
	}
	return nil
}

// receive judges one message with the validator and hands an accepted
// one to the subscriber.
func (c *channel) receive(author peer.ID, data []byte) {
	c.order.Lock()
	defer c.order.Unlock()
	verdict, value := c.validate(author, data)
	if verdict != pubsub.ValidationAccept {
		return
	}
	c.p.net.mu.Lock()
	deliver := c.deliver
	if !c.subscribed || !c.p.up || c.ctx.Err() != nil {
		deliver = nil
	}
	c.p.net.mu.Unlock()
	if deliver != nil {
		deliver(author, value)
	}
}

func (c *channel) Subscribe(ctx context.Context, _ int, deliver func(peer.ID, any)) error {
	c.p.net.mu.Lock()
	defer c.p.net.mu.Unlock()
	if c.left {
		return fmt.Errorf("subscribe to %s: topic left", c.name)
	}
	if !c.subscribed {
		c.subscribed, c.deliver, c.ctx = true, deliver, ctx
	}
	return nil
}

func (c *channel) Subscribed() bool {
	c.p.net.mu.Lock()
	defer c.p.net.mu.Unlock()
	return c.subscribed
}

func (c *channel) Unsubscribe() {
	c.p.net.mu.Lock()
	defer c.p.net.mu.Unlock()
	c.subscribed, c.deliver = false, nil
}

// Leave unsubscribes, waits for a delivery under way and leaves.
func (c *channel) Leave() error {
	c.Unsubscribe()
	c.order.Lock()
	c.order.Unlock() //nolint:staticcheck // waits for the delivery under way
	c.p.net.mu.Lock()
	defer c.p.net.mu.Unlock()
	c.left = true
	if c.p.topics[c.name] == c {
		delete(c.p.topics, c.name)
	}
	return nil
}
