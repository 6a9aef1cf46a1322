package sim

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// latencyHost wraps a host of the in-memory network so that every byte
// written on a stream it opens or accepts arrives after the link's one-way
// latency, pipelined: writes queue and each leaves at its own time.
//
// mocknet's own link latency cannot carry game traffic: a stream holds at
// most 256 bytes in flight and waits a full latency for each further chunk,
// so a gossipsub stream at 100 ms carries a few kilobytes per second and
// updates pile up for seconds. mocknet links here have no latency; this
// wrapper adds it. It also links peers on first contact (see linker) and
// counts the bytes each node writes and reads on its streams.
type latencyHost struct {
	host.Host
	latency func(remote peer.ID) time.Duration
	links   *linker
	stop    chan struct{}
	once    sync.Once

	// streams are the wrapped streams not reset yet; Close resets them, so that a
	// stream opened while the host was closing (mocknet can add one to a
	// connection it is tearing down) ends too. Once closed is set, new
	// streams are reset as they are wrapped.
	mu      sync.Mutex
	closed  bool
	streams map[*latencyStream]struct{}

	bytesOut, bytesIn atomic.Uint64
	// workloadOut and workloadIn count the bytes of the eat and fight
	// workload's streams (workloadProtocol) alone.
	workloadOut, workloadIn atomic.Uint64
}

func newLatencyHost(h host.Host, latency func(peer.ID) time.Duration, links *linker) *latencyHost {
	return &latencyHost{Host: h, latency: latency, links: links, stop: make(chan struct{}), streams: map[*latencyStream]struct{}{}}
}

// wrap adds latency to s and tracks it; on a closed host it resets s and
// returns it wrapped all the same (reads and writes then fail).
func (h *latencyHost) wrap(s network.Stream, pids ...protocol.ID) *latencyStream {
	ls := &latencyStream{Stream: s, h: h, delay: h.latency(s.Conn().RemotePeer()), done: make(chan struct{})}
	ls.workload = workloadProtocol(s.Protocol())
	for _, p := range pids {
		ls.workload = ls.workload || workloadProtocol(p)
	}
	h.mu.Lock()
	closed := h.closed
	if !closed {
		h.streams[ls] = struct{}{}
	}
	h.mu.Unlock()
	if closed {
		_ = ls.Reset()
	}
	return ls
}

func (h *latencyHost) untrack(s *latencyStream) {
	h.mu.Lock()
	delete(h.streams, s)
	h.mu.Unlock()
}

func (h *latencyHost) SetStreamHandler(pid protocol.ID, handler network.StreamHandler) {
	h.Host.SetStreamHandler(pid, func(s network.Stream) { handler(h.wrap(s)) })
}

func (h *latencyHost) SetStreamHandlerMatch(pid protocol.ID, m func(protocol.ID) bool, handler network.StreamHandler) {
	h.Host.SetStreamHandlerMatch(pid, m, func(s network.Stream) { handler(h.wrap(s)) })
}

// link makes sure this host's network has a link to p before a dial.
func (h *latencyHost) link(p peer.ID) error {
	if h.links == nil || h.Network().Connectedness(p) == network.Connected {
		return nil
	}
	return h.links.ensure(h.ID(), p)
}

func (h *latencyHost) Connect(ctx context.Context, ai peer.AddrInfo) error {
	if err := h.link(ai.ID); err != nil {
		return err
	}
	return h.Host.Connect(ctx, ai)
}

func (h *latencyHost) NewStream(ctx context.Context, p peer.ID, pids ...protocol.ID) (network.Stream, error) {
	if err := h.link(p); err != nil {
		return nil, err
	}
	s, err := h.Host.NewStream(ctx, p, pids...)
	if err != nil {
		return nil, err
	}
	ls := h.wrap(s, pids...)
	select {
	case <-ls.done:
		return nil, network.ErrReset
	default:
	}
	return ls, nil
}

// Close stops the pumps, closes the host and resets every stream still open.
func (h *latencyHost) Close() error {
	h.mu.Lock()
	h.closed = true
	open := make([]*latencyStream, 0, len(h.streams))
	for s := range h.streams {
		open = append(open, s)
	}
	clear(h.streams)
	h.mu.Unlock()
	h.once.Do(func() { close(h.stop) })
	err := h.Host.Close()
	for _, s := range open {
		_ = s.Reset()
	}
	return err
}

// latencyStream delays its writes by the link latency. Its pump runs only
// while writes are in flight: most streams are idle most of the time (a
// gossipsub stream carries a message every few tens of milliseconds, a
// latency of up to 100 ms), and an idle pump would cost a goroutine stack
// per stream.
type latencyStream struct {
	network.Stream
	h        *latencyHost
	delay    time.Duration
	workload bool // a stream of the eat and fight workload

	mu      sync.Mutex
	queue   []pending // writes in flight, oldest first
	pumping bool
	err     error
	// room is signalled when the pump takes a write off a full queue.
	room chan struct{}

	// done closes when the stream is reset or its pump fails: queued
	// writes are dropped and blocked writers return.
	done     chan struct{}
	doneOnce sync.Once
}

// maxInFlight bounds the writes in flight per stream, like a socket
// buffer: a writer past it waits for the pump.
const maxInFlight = 64

func (s *latencyStream) finish() { s.doneOnce.Do(func() { close(s.done) }) }

type pending struct {
	data   []byte
	at     time.Time
	finish func() error // CloseWrite or Close, after the data before it
	// closes: finish is Close, which ends the stream both ways.
	closes bool
}

// enqueue adds a write (or a close) to the queue and starts the pump if it
// is not running; it waits while the queue is full.
func (s *latencyStream) enqueue(p pending) error {
	s.mu.Lock()
	for len(s.queue) >= maxInFlight {
		if s.room == nil {
			s.room = make(chan struct{}, 1)
		}
		room := s.room
		s.mu.Unlock()
		select {
		case <-room:
		case <-s.done:
			return network.ErrReset
		case <-s.h.stop:
			return network.ErrReset
		}
		s.mu.Lock()
	}
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return err
	}
	s.queue = append(s.queue, p)
	start := !s.pumping
	s.pumping = true
	s.mu.Unlock()
	if start {
		go s.pump()
	}
	return nil
}

// pump delivers queued writes when their time comes and ends when the
// queue is empty, when the stream is finished or fails, or when the host
// closes.
func (s *latencyStream) pump() {
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		s.mu.Lock()
		if len(s.queue) == 0 {
			s.pumping = false
			s.queue = nil
			s.mu.Unlock()
			return
		}
		p := s.queue[0]
		s.queue[0] = pending{}
		s.queue = s.queue[1:]
		if s.room != nil {
			select {
			case s.room <- struct{}{}:
			default:
			}
		}
		s.mu.Unlock()
		if d := time.Until(p.at); d > 0 {
			if t == nil {
				t = time.NewTimer(d)
			} else {
				t.Reset(d)
			}
			select {
			case <-t.C:
			case <-s.done:
				s.stopPump()
				return
			case <-s.h.stop:
				s.stopPump()
				return
			}
		}
		if p.finish != nil {
			_ = p.finish()
			s.stopPump()
			if p.closes {
				// Closed both ways: nothing is left for Close of the
				// host to reset.
				s.finish()
				s.h.untrack(s)
			}
			return
		}
		if _, err := s.Stream.Write(p.data); err != nil {
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
			s.stopPump()
			s.finish()
			return
		}
	}
}

// stopPump drops the writes still queued: the stream is over.
func (s *latencyStream) stopPump() {
	s.mu.Lock()
	s.queue, s.pumping = nil, false
	if s.err == nil {
		s.err = network.ErrReset
	}
	s.mu.Unlock()
}

func (s *latencyStream) Write(b []byte) (int, error) {
	select {
	case <-s.done:
		return 0, network.ErrReset
	case <-s.h.stop:
		return 0, network.ErrReset
	default:
	}
	cp := append([]byte(nil), b...)
	if err := s.enqueue(pending{data: cp, at: time.Now().Add(s.delay)}); err != nil {
		return 0, err
	}
	s.h.bytesOut.Add(uint64(len(b)))
	if s.workload {
		s.h.workloadOut.Add(uint64(len(b)))
	}
	return len(b), nil
}

func (s *latencyStream) Read(b []byte) (int, error) {
	n, err := s.Stream.Read(b)
	s.h.bytesIn.Add(uint64(n))
	if s.workload {
		s.h.workloadIn.Add(uint64(n))
	}
	return n, err
}

func (s *latencyStream) finishAfterData(f func() error, closes bool) error {
	_ = s.enqueue(pending{at: time.Now().Add(s.delay), finish: f, closes: closes})
	return nil
}

// Reset drops the queued writes and ends the pump at once.
func (s *latencyStream) Reset() error {
	s.finish()
	s.h.untrack(s)
	return s.Stream.Reset()
}

func (s *latencyStream) ResetWithError(code network.StreamErrorCode) error {
	s.finish()
	s.h.untrack(s)
	return s.Stream.ResetWithError(code)
}

// Close and CloseWrite take effect after the data written before them has
// arrived, as on a real link.
func (s *latencyStream) Close() error { return s.finishAfterData(s.Stream.Close, true) }

func (s *latencyStream) CloseWrite() error { return s.finishAfterData(s.Stream.CloseWrite, false) }
