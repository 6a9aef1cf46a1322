package duty

import (
	"errors"
	"log/slog"
	"net/netip"
	"sync"

	"github.com/overworld-p2p/overworld/game/arbiter"
	"github.com/overworld-p2p/overworld/node/crimp"
)

// Member drives a Node over a crimp.Transport with a crimp.Clock, like
// crimp.Member: received datagrams go to Step, one timer calls Tick when
// the node asks, and every Ready is carried out. Callbacks run outside the
// member's lock, so they may call Send or Claim.
type Member struct {
	mu     sync.Mutex
	node   *Node
	tr     crimp.Transport
	clock  crimp.Clock
	timer  crimp.Timer
	closed bool

	onDeliver func(crimp.Delivery)
	onEvent   func(Event)
	discovery crimp.Transport
	log       *slog.Logger
}

// MemberOptions are the application's hooks.
type MemberOptions struct {
	// Discovery, if set, carries the node's announcements (the LAN
	// discovery group); the member only sends on it.
	Discovery crimp.Transport
	OnDeliver func(crimp.Delivery) // application payloads, each once
	OnEvent   func(Event)          // CRIMP and arbiter events
	Logger    *slog.Logger         // default slog.Default()
}

// NewMember wires node to tr and clock; Start begins.
func NewMember(node *Node, tr crimp.Transport, clock crimp.Clock, opts MemberOptions) *Member {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Member{node: node, tr: tr, clock: clock, onDeliver: opts.OnDeliver, onEvent: opts.OnEvent, discovery: opts.Discovery, log: opts.Logger}
}

var errClosed = errors.New("duty: member closed")

// Start begins receiving and arms the first tick (the founder's game
// starts here).
func (m *Member) Start() error {
	if err := m.tr.Start(m.receive); err != nil {
		return err
	}
	m.mu.Lock()
	m.finish(m.node.Tick(m.clock.Now()))
	return nil
}

// Join asks the group for a place; the game follows.
func (m *Member) Join() error {
	return m.call(func() (Ready, error) { return m.node.Join(m.clock.Now()) })
}

// Send multicasts an application payload.
func (m *Member) Send(payload []byte) error {
	return m.call(func() (Ready, error) { return m.node.Send(m.clock.Now(), payload) })
}

// SendUnreliable multicasts an application payload once, unreliably.
func (m *Member) SendUnreliable(payload []byte) error {
	return m.call(func() (Ready, error) { return m.node.SendUnreliable(m.clock.Now(), payload) })
}

// Claim asks the arbiter on duty for resource r.
func (m *Member) Claim(r arbiter.ResourceID) error {
	return m.call(func() (Ready, error) { return m.node.Claim(m.clock.Now(), r) })
}

// Leave hands the duty on and leaves the game (see Node.Leave); call it
// before Close when the process stops on purpose.
func (m *Member) Leave() error {
	return m.call(func() (Ready, error) { return m.node.Leave(m.clock.Now()) })
}

// Inspect runs f with the node under the member's lock.
func (m *Member) Inspect(f func(*Node)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m.node)
}

// Metrics returns the reconciliation counters (safe to read concurrently).
func (m *Member) Metrics() *Metrics { return m.node.Metrics() }

// CRIMPMetrics returns the group member's counters.
func (m *Member) CRIMPMetrics() *crimp.Metrics { return m.node.CRIMP().Metrics() }

// Close stops the timer and the transport.
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

func (m *Member) call(f func() (Ready, error)) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return errClosed
	}
	r, err := f()
	m.finish(r)
	return err
}

func (m *Member) receive(b []byte, from netip.AddrPort) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	r, err := m.node.Step(m.clock.Now(), from, b)
	if err != nil {
		m.log.Debug("duty: dropped packet", "from", from, "err", err)
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

// finish carries out r; entered with m.mu held, it releases it before the
// callbacks.
func (m *Member) finish(r Ready) {
	for _, b := range r.Packets {
		if err := m.tr.Send(b); err != nil {
			m.log.Warn("duty: send failed", "err", err)
		}
	}
	if m.discovery != nil {
		for _, b := range r.Announcements {
			if err := m.discovery.Send(b); err != nil {
				m.log.Warn("duty: announce failed", "err", err)
			}
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
