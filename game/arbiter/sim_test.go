package arbiter_test

import (
	"container/heap"
	"fmt"
	"math/rand"
	"slices"
	"time"

	"github.com/overworld-p2p/overworld/game/arbiter"
)

// simStart is the simulated clock's origin.
var simStart = time.Date(2003, 4, 1, 0, 0, 0, 0, time.UTC)

// link describes one direction between two nodes: a fixed delay plus
// uniform jitter, a loss probability, or no path at all.
type link struct {
	delay, jitter time.Duration
	loss          float64
	cut           bool
}

// simNode is one player: an arbiter.Node, its next tick, and whether it is
// frozen (a stopped process: no ticks, and what is sent to it is lost).
type simNode struct {
	id       arbiter.MemberID // the ID it asks for and that the transport vouches for
	node     *arbiter.Node
	frozen   bool
	anon     bool // its transport does not vouch for it (plain multicast)
	nextTick time.Time
	lastTick time.Time
	spins    int
}

type inflight struct {
	at       time.Time
	seq      uint64
	from, to *simNode
	b        []byte
}

type inflightHeap []inflight

func (h inflightHeap) Len() int { return len(h) }
func (h inflightHeap) Less(i, j int) bool {
	if h[i].at.Equal(h[j].at) {
		return h[i].seq < h[j].seq
	}
	return h[i].at.Before(h[j].at)
}
func (h inflightHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *inflightHeap) Push(x any)   { *h = append(*h, x.(inflight)) }
func (h *inflightHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// simNet is an in-memory multicast network on a simulated clock: every
// message goes to every other node over its own directed link, so links
// can be lossy, slow, cut one way (asymmetric) or partitioned. One seeded
// source draws all losses and delays, and equal times keep send order, so a
// run is reproducible.
type simNet struct {
	now   time.Time
	rng   *rand.Rand
	nodes []*simNode // ascending id
	queue inflightHeap
	seq   uint64
	base  link
	links map[[2]arbiter.MemberID]link

	// Hooks for the harness and the property checks.
	onSend    func(from *simNode, b []byte)
	onReady   func(n *simNode, r arbiter.Ready, cause string)
	onStepErr func(n *simNode, err error)
}

func newSimNet(seed int64) *simNet {
	return &simNet{now: simStart, rng: rand.New(rand.NewSource(seed)), links: map[[2]arbiter.MemberID]link{}}
}

func (s *simNet) add(id arbiter.MemberID, cfg arbiter.Config) *simNode {
	cfg.ID = id
	n, err := arbiter.New(cfg, rand.New(rand.NewSource(int64(id))))
	if err != nil {
		panic(err)
	}
	sn := &simNode{id: id, node: n, nextTick: s.now}
	s.nodes = append(s.nodes, sn)
	slices.SortFunc(s.nodes, func(a, b *simNode) int { return int(a.id) - int(b.id) })
	return sn
}

func (s *simNet) get(id arbiter.MemberID) *simNode {
	for _, n := range s.nodes {
		if n.id == id {
			return n
		}
	}
	panic(fmt.Sprintf("no node %d", id))
}

func (s *simNet) linkOf(from, to arbiter.MemberID) link {
	if l, ok := s.links[[2]arbiter.MemberID{from, to}]; ok {
		return l
	}
	return s.base
}

func (s *simNet) setLink(from, to arbiter.MemberID, l link) {
	s.links[[2]arbiter.MemberID{from, to}] = l
}

// cut cuts (or restores) the direction from → to, keeping its other
// parameters.
func (s *simNet) cut(from, to arbiter.MemberID, cut bool) {
	l := s.linkOf(from, to)
	l.cut = cut
	s.setLink(from, to, l)
}

// partition cuts every pair in different groups; nodes in no group are
// cut from everyone.
func (s *simNet) partition(groups ...[]arbiter.MemberID) {
	group := map[arbiter.MemberID]int{}
	for g, ids := range groups {
		for _, id := range ids {
			group[id] = g + 1
		}
	}
	for _, a := range s.nodes {
		for _, b := range s.nodes {
			if a != b {
				s.cut(a.id, b.id, group[a.id] == 0 || group[a.id] != group[b.id])
			}
		}
	}
}

func (s *simNet) heal() {
	for k, l := range s.links {
		l.cut = false
		s.links[k] = l
	}
}

// apply carries out a Ready: multicasts its messages and records the next
// tick.
func (s *simNet) apply(n *simNode, r arbiter.Ready, cause string) {
	if s.onReady != nil {
		s.onReady(n, r, cause)
	}
	for _, b := range r.Messages {
		if s.onSend != nil {
			s.onSend(n, b)
		}
		for _, to := range s.nodes {
			if to == n {
				continue
			}
			l := s.linkOf(n.id, to.id)
			if l.cut || (l.loss > 0 && s.rng.Float64() < l.loss) {
				continue
			}
			d := l.delay
			if l.jitter > 0 {
				d += time.Duration(s.rng.Int63n(int64(l.jitter)))
			}
			s.seq++
			heap.Push(&s.queue, inflight{at: s.now.Add(d), seq: s.seq, from: n, to: to, b: b})
		}
	}
	if !r.NextTick.IsZero() {
		n.nextTick = r.NextTick
	}
}

// deliver hands one message to its receiver (lost if it is frozen).
func (s *simNet) deliver(m inflight) {
	if m.to.frozen {
		return
	}
	from := m.from.id
	if m.from.anon {
		from = 0
	}
	r, err := m.to.node.Step(s.now, from, m.b)
	if err != nil {
		if s.onStepErr != nil {
			s.onStepErr(m.to, err)
		}
		return
	}
	s.apply(m.to, r, fmt.Sprintf("from %d", m.from.id))
}

// run advances the clock to until, delivering messages and ticking nodes
// as they fall due, in time order.
func (s *simNet) run(until time.Time) { s.advance(until, true) }

// tickOnly advances the clock to until, running every node's timers as
// they fall due but delivering nothing (messages stay queued).
func (s *simNet) tickOnly(until time.Time) { s.advance(until, false) }

func (s *simNet) advance(until time.Time, deliver bool) {
	for {
		next := until
		for _, n := range s.nodes {
			if !n.frozen && n.nextTick.Before(next) {
				next = n.nextTick
			}
		}
		if deliver && len(s.queue) > 0 && !s.queue[0].at.After(next) {
			m := heap.Pop(&s.queue).(inflight)
			if m.at.After(s.now) {
				s.now = m.at
			}
			s.deliver(m)
			continue
		}
		if next.After(s.now) {
			s.now = next
		}
		if !s.tickDue() && !s.now.Before(until) {
			return
		}
	}
}

// tickDue ticks every node whose timer is due; a node that keeps asking
// for a tick at the same instant is a bug in the node.
func (s *simNet) tickDue() bool {
	ticked := false
	for _, n := range s.nodes {
		if !n.frozen && !n.nextTick.After(s.now) {
			ticked = true
			if s.now.Equal(n.lastTick) {
				n.spins++
				if n.spins > 1000 {
					panic(fmt.Sprintf("node %d asks for a tick at %v over and over", n.id, s.now))
				}
			} else {
				n.lastTick, n.spins = s.now, 0
			}
			s.apply(n, n.node.Tick(s.now), "tick")
		}
	}
	return ticked
}

// pending returns the queued messages in delivery order and empties the
// queue.
func (s *simNet) takePending() []inflight {
	out := make([]inflight, 0, len(s.queue))
	for len(s.queue) > 0 {
		out = append(out, heap.Pop(&s.queue).(inflight))
	}
	return out
}
