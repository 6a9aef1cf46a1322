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
// wrapper adds it. It also counts the bytes each node writes and reads on
// its streams.
type latencyHost struct {
	host.Host
	latency func(remote peer.ID) time.Duration
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

func newLatencyHost(h host.Host, latency func(peer.ID) time.Duration) *latencyHost {
	return &latencyHost{Host: h, latency: latency, stop: make(chan struct{}), streams: map[*latencyStream]struct{}{}}
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

func (h *latencyHost) NewStream(ctx context.Context, p peer.ID, pids ...protocol.ID) (network.Stream, error) {
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

// latencyStream delays its writes by the link latency.
type latencyStream struct {
	network.Stream
	h        *latencyHost
	delay    time.Duration
	workload bool // a stream of the eat and fight workload

	mu      sync.Mutex
	queue   chan pending
	started bool
	err     error

	// done closes when the stream is reset or its pump ends: queued writes
	// are dropped and blocked writers return.
	done     chan struct{}
	doneOnce sync.Once
}

func (s *latencyStream) finish() { s.doneOnce.Do(func() { close(s.done) }) }

type pending struct {
	data   []byte
	at     time.Time
	finish func() error // CloseWrite or Close, after the data before it
}

func (s *latencyStream) start() chan pending {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		s.started = true
		// Writes in flight per stream, like a socket buffer: a
		// gossipsub stream carries a few dozen messages per second, a
		// handful per 100 ms latency.
		s.queue = make(chan pending, 32)
		go s.pump(s.queue)
	}
	return s.queue
}

// pump delivers queued writes when their time comes. It ends when the
// stream is finished or fails, or when the host closes.
func (s *latencyStream) pump(q chan pending) {
	defer s.finish()
	for {
		var p pending
		select {
		case p = <-q:
		case <-s.done:
			return
		case <-s.h.stop:
			return
		}
		if d := time.Until(p.at); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-s.done:
				t.Stop()
				return
			case <-s.h.stop:
				t.Stop()
				return
			}
		}
		if p.finish != nil {
			_ = p.finish()
			return
		}
		if _, err := s.Stream.Write(p.data); err != nil {
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
			return
		}
	}
}

func (s *latencyStream) Write(b []byte) (int, error) {
	s.mu.Lock()
	err := s.err
	s.mu.Unlock()
	if err != nil {
		return 0, err
	}
	q := s.start()
	cp := append([]byte(nil), b...)
	select {
	case q <- pending{data: cp, at: time.Now().Add(s.delay)}:
	case <-s.done:
		return 0, network.ErrReset
	case <-s.h.stop:
		return 0, network.ErrReset
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

func (s *latencyStream) finishAfterData(f func() error) error {
	q := s.start()
	select {
	case q <- pending{at: time.Now().Add(s.delay), finish: f}:
	case <-s.done:
	case <-s.h.stop:
	}
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
func (s *latencyStream) Close() error { return s.finishAfterData(s.Stream.Close) }

func (s *latencyStream) CloseWrite() error { return s.finishAfterData(s.Stream.CloseWrite) }
