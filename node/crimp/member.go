package crimp

import (
	"errors"
	"log/slog"
	"net/netip"
	"sync"
)

// Member drives a Node over a Transport with a Clock: received datagrams go
// to Step, a single timer calls Tick when the node asks for it, and every
// Ready is carried out — packets sent in order, deliveries and events
// handed to the callbacks. The same driver runs over UDP multicast on the
// wall clock and over a MemNetwork on a SimClock.
//
// Callbacks run outside the member's lock, so they may call Send; on the
// wall clock they may run on different goroutines (receive loop, timer).
type Member struct {
	mu     sync.Mutex
	node   *Node
	tr     Transport
	clock  Clock
	timer  Timer
	closed bool

	onDeliver func(Delivery)
	onEvent   func(Event)
	log       *slog.Logger
}

// MemberOptions are the application's hooks into a Member.
type MemberOptions struct {
	// OnDeliver receives every payload once. It should not block long.
	OnDeliver func(Delivery)
	// OnEvent receives membership events.
	OnEvent func(Event)
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// NewMember wires node to tr and clock. Call Start to begin.
func NewMember(node *Node, tr Transport, clock Clock, opts MemberOptions) *Member {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Member{node: node, tr: tr, clock: clock, onDeliver: opts.OnDeliver, onEvent: opts.OnEvent, log: opts.Logger}
}

// Start begins receiving and arms the first tick.
func (m *Member) Start() error {
	if err := m.tr.Start(m.receive); err != nil {
		return err
	}
	m.mu.Lock()
	r := m.node.Tick(m.clock.Now())
	m.finish(r)
	return nil
}

// Send multicasts payload as the member's next data packet.
func (m *Member) Send(payload []byte) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return errors.New("crimp: member closed")
	}
	r, err := m.node.Send(m.clock.Now(), payload)
	if err != nil {
		m.mu.Unlock()
		return err
	}
	m.finish(r)
	return nil
}

// SendUnreliable multicasts payload once, unreliably (Node.SendUnreliable).
func (m *Member) SendUnreliable(payload []byte) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return errors.New("crimp: member closed")
	}
	r, err := m.node.SendUnreliable(m.clock.Now(), payload)
	if err != nil {
		m.mu.Unlock()
		return err
	}
	m.finish(r)
	return nil
}

// Join starts the join handshake through the authority; EventJoined or
// EventDenied reports the outcome.
func (m *Member) Join() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return errors.New("crimp: member closed")
	}
	r, err := m.node.Join(m.clock.Now())
	if err != nil {
		m.mu.Unlock()
		return err
	}
	m.finish(r)
	return nil
}

// Inspect runs f with the node under the member's lock (for status pages
// and tests). f must not keep the node.
func (m *Member) Inspect(f func(*Node)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m.node)
}

// Metrics returns the node's counters (safe to read concurrently).
func (m *Member) Metrics() *Metrics { return m.node.Metrics() }

// Close stops the timer and the transport. Deliveries already in flight
// from the transport are discarded.
func (m *Member) Close() error {
	m.mu.Lock()
	m.closed = true
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	m.mu.Unlock()
	return m.tr.Close()
}

func (m *Member) receive(b []byte, from netip.AddrPort) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	r, err := m.node.Step(m.clock.Now(), from, b)
	if err != nil {
		m.log.Debug("crimp: dropped packet", "from", from, "err", err)
	}
	m.finish(r)
}

func (m *Member) tick() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.finish(m.node.Tick(m.clock.Now()))
}

// finish carries out r. It is entered with m.mu held and releases it before
// running the callbacks.
func (m *Member) finish(r Ready) {
	for _, b := range r.Packets {
		if err := m.tr.Send(b); err != nil {
			m.log.Warn("crimp: send failed", "err", err)
		}
	}
	if !m.closed && !r.NextTick.IsZero() {
		if m.timer != nil {
			m.timer.Stop()
		}
		m.timer = m.clock.AfterFunc(max(r.NextTick.Sub(m.clock.Now()), 0), m.tick)
	}
	m.mu.Unlock()
	if m.onEvent != nil {
		for _, e := range r.Events {
			m.onEvent(e)
		}
	}
	if m.onDeliver != nil {
		for _, d := range r.Deliveries {
			m.onDeliver(d)
		}
	}
}
