package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/protocol/identify"
)

// latencyHost wraps a host of the in-memory network so that every byte
// written on a stream arrives after the link's one-way latency, pipelined:
// writes queue and each leaves at its own time.
//
// mocknet's own link latency cannot carry game traffic: a stream holds at
// most 256 bytes in flight and waits a full latency for each further chunk,
// so a gossipsub stream at 100 ms carries a few kilobytes per second and
// updates pile up for seconds. mocknet links here have no latency.
//
// The streams the game's protocols open (gossipsub, the DHT, regions,
// positions, fights) are memStreams: a pair of in-memory stream ends
// between two latencyHosts, on the mocknet connection between them (which
// mocknet made, identify ran on and a crash closes). mocknet's own streams
// cost a goroutine per stream end for their whole life and a pipe each; a
// memStream costs a goroutine only while its writes are in flight. With a
// hundred peers per player and two gossipsub streams per peer, that is
// most of a player's goroutines and about a quarter of its memory. Streams
// that arrive through mocknet anyway (opened by the host itself, as
// identify's) get the latency by a latencyStream around them.
//
// It also links peers on first contact (see linker) and counts the bytes
// each node writes and reads on its streams.
type latencyHost struct {
	host.Host
	latency func(remote peer.ID) time.Duration
	links   *linker
	stop    chan struct{}
	once    sync.Once
	notify  *network.NotifyBundle

	mu       sync.Mutex
	closed   bool
	handlers map[protocol.ID]network.StreamHandler
	matchers []matchHandler
	// streams are the stream ends of this host not reset or closed yet;
	// Close resets them, so that a stream opened while the host was
	// closing ends too. Once closed is set, new streams are refused.
	streams map[stream]struct{}

	bytesOut, bytesIn atomic.Uint64
	// workloadOut and workloadIn count the bytes of the eat and fight
	// workload's streams (workloadProtocol) alone.
	workloadOut, workloadIn atomic.Uint64
}

type matchHandler struct {
	pid     protocol.ID
	match   func(protocol.ID) bool
	handler network.StreamHandler
}

// stream is a stream end the host tracks.
type stream interface {
	network.Stream
	remote() peer.ID
}

func newLatencyHost(h host.Host, latency func(peer.ID) time.Duration, links *linker) *latencyHost {
	lh := &latencyHost{Host: h, latency: latency, links: links, stop: make(chan struct{}),
		handlers: map[protocol.ID]network.StreamHandler{}, streams: map[stream]struct{}{}}
	// A connection that goes (a crash closes them) takes its streams along.
	lh.notify = &network.NotifyBundle{DisconnectedF: func(n network.Network, c network.Conn) {
		if n.Connectedness(c.RemotePeer()) != network.Connected {
			lh.resetStreamsTo(c.RemotePeer())
		}
	}}
	h.Network().Notify(lh.notify)
	if links != nil {
		links.register(lh)
	}
	return lh
}

// IDService is the host's identify service, as the basic host offers it:
// callers that wait for identify on a new connection (position's
// runsProtocol, NewStream here) find it through the wrapper too.
func (h *latencyHost) IDService() identify.IDService {
	if ids, ok := h.Host.(interface{ IDService() identify.IDService }); ok {
		return ids.IDService()
	}
	return nil
}

func (h *latencyHost) track(s stream) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.streams[s] = struct{}{}
	return true
}

func (h *latencyHost) untrack(s stream) {
	h.mu.Lock()
	delete(h.streams, s)
	h.mu.Unlock()
}

// openStreams counts the stream ends open at this host.
func (h *latencyHost) openStreams() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.streams)
}

// crash ends every stream of this host at once and refuses new ones, as
// when its process dies: nothing in flight arrives. Close still runs.
func (h *latencyHost) crash() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.resetStreamsTo("")
}

// resetStreamsTo resets this host's streams to p, or all of them when p
// is "".
func (h *latencyHost) resetStreamsTo(p peer.ID) {
	h.mu.Lock()
	var gone []stream
	for s := range h.streams {
		if p == "" || s.remote() == p {
			gone = append(gone, s)
		}
	}
	h.mu.Unlock()
	for _, s := range gone {
		_ = s.Reset()
	}
}

func (h *latencyHost) SetStreamHandler(pid protocol.ID, handler network.StreamHandler) {
	h.mu.Lock()
	h.handlers[pid] = handler
	h.mu.Unlock()
	// Registered with the host too, so that identify names the protocol.
	h.Host.SetStreamHandler(pid, func(s network.Stream) { handler(h.wrap(s)) })
}

func (h *latencyHost) SetStreamHandlerMatch(pid protocol.ID, m func(protocol.ID) bool, handler network.StreamHandler) {
	h.mu.Lock()
	h.matchers = append(h.matchers, matchHandler{pid: pid, match: m, handler: handler})
	h.mu.Unlock()
	h.Host.SetStreamHandlerMatch(pid, m, func(s network.Stream) { handler(h.wrap(s)) })
}

func (h *latencyHost) RemoveStreamHandler(pid protocol.ID) {
	h.mu.Lock()
	delete(h.handlers, pid)
	kept := h.matchers[:0]
	for _, m := range h.matchers {
		if m.pid != pid {
			kept = append(kept, m)
		}
	}
	h.matchers = kept
	h.mu.Unlock()
	h.Host.RemoveStreamHandler(pid)
}

// handlerFor picks the first of pids this host serves, as multistream
// negotiation would; open is false once the host is closed (or crashed).
func (h *latencyHost) handlerFor(pids []protocol.ID) (pid protocol.ID, handler network.StreamHandler, open bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return "", nil, false
	}
	for _, pid := range pids {
		if f, ok := h.handlers[pid]; ok {
			return pid, f, true
		}
		for _, m := range h.matchers {
			if m.match(pid) {
				return pid, m.handler, true
			}
		}
	}
	return "", nil, true
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

var errNoProtocol = errors.New("protocols not supported")

// NewStream opens a memStream to p on the connection to it, dialing
// first, waiting for identify as the host does, and choosing the first of
// pids p serves.
func (h *latencyHost) NewStream(ctx context.Context, p peer.ID, pids ...protocol.ID) (network.Stream, error) {
	if err := h.link(p); err != nil {
		return nil, err
	}
	if h.Network().Connectedness(p) != network.Connected {
		if nodial, _ := network.GetNoDial(ctx); nodial {
			return nil, network.ErrNoConn
		}
		if err := h.Host.Connect(ctx, peer.AddrInfo{ID: p}); err != nil {
			return nil, err
		}
	}
	var remote *latencyHost
	if h.links != nil {
		remote = h.links.host(p)
	}
	if remote == nil {
		// Not one of the simulator's hosts: through the host, with latency.
		s, err := h.Host.NewStream(ctx, p, pids...)
		if err != nil {
			return nil, err
		}
		return h.wrap(s, pids...), nil
	}
	conns, back := h.Network().ConnsToPeer(p), remote.Network().ConnsToPeer(h.ID())
	if len(conns) == 0 || len(back) == 0 {
		return nil, fmt.Errorf("open stream to %s: %w", p, network.ErrNoConn)
	}
	if ids := h.IDService(); ids != nil {
		select {
		case <-ids.IdentifyWait(conns[0]):
		case <-ctx.Done():
			return nil, fmt.Errorf("identify failed to complete: %w", ctx.Err())
		}
	}
	pid, handler, open := remote.handlerFor(pids)
	if !open {
		return nil, fmt.Errorf("open stream to %s: %w", p, network.ErrNoConn)
	}
	if handler == nil {
		return nil, fmt.Errorf("open stream to %s: %w: %v", p, errNoProtocol, pids)
	}
	_ = h.Peerstore().AddProtocols(p, pid)
	mine, theirs := newMemPair(h, remote, pid, conns[0], back[0])
	if !h.track(mine) {
		mine.Reset()
		return nil, network.ErrReset
	}
	if !remote.track(theirs) {
		mine.Reset()
		return nil, network.ErrReset
	}
	go handler(theirs)
	return mine, nil
}

// Close stops the pumps, closes the host and resets every stream still open.
func (h *latencyHost) Close() error {
	h.mu.Lock()
	h.closed = true
	open := make([]stream, 0, len(h.streams))
	for s := range h.streams {
		open = append(open, s)
	}
	clear(h.streams)
	h.mu.Unlock()
	h.once.Do(func() { close(h.stop) })
	if h.links != nil {
		h.links.unregister(h)
	}
	h.Network().StopNotify(h.notify)
	err := h.Host.Close()
	for _, s := range open {
		_ = s.Reset()
	}
	return err
}

// delayLine carries one direction of a stream: each write is delivered
// after the link's latency, in order, by a pump goroutine that runs only
// while writes are in flight (a stream is idle most of the time: a
// gossipsub stream carries a message every few tens of milliseconds over a
// latency of up to 100 ms).
type delayLine struct {
	delay   time.Duration
	deliver func([]byte) error
	// done ends the line (the stream was reset); stop is the host's.
	done, stop <-chan struct{}

	mu      sync.Mutex
	queue   []pending // in flight, oldest first
	pumping bool
	err     error
	// room is signalled when the pump takes a write off a full queue.
	room chan struct{}
}

// maxInFlight bounds the writes in flight per stream, like a socket
// buffer: a writer past it waits for the pump.
const maxInFlight = 64

type pending struct {
	data []byte
	at   time.Time
	// finish, if set, runs after the data before it (a close) and ends
	// the line.
	finish func()
}

// send queues p and starts the pump if it is not running; it waits while
// the queue is full.
func (l *delayLine) send(p pending) error {
	l.mu.Lock()
	for len(l.queue) >= maxInFlight && l.err == nil {
		if l.room == nil {
			l.room = make(chan struct{}, 1)
		}
		room := l.room
		l.mu.Unlock()
		select {
		case <-room:
		case <-l.done:
			return network.ErrReset
		case <-l.stop:
			return network.ErrReset
		}
		l.mu.Lock()
	}
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		return err
	}
	l.queue = append(l.queue, p)
	start := !l.pumping
	l.pumping = true
	l.mu.Unlock()
	if start {
		go l.pump()
	}
	return nil
}

// pump delivers queued writes when their time comes and ends when the
// queue is empty, the line ends or fails, or the host closes.
func (l *delayLine) pump() {
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		l.mu.Lock()
		if len(l.queue) == 0 {
			l.pumping, l.queue = false, nil
			l.mu.Unlock()
			return
		}
		p := l.queue[0]
		l.queue[0] = pending{}
		l.queue = l.queue[1:]
		if l.room != nil {
			select {
			case l.room <- struct{}{}:
			default:
			}
		}
		l.mu.Unlock()
		if d := time.Until(p.at); d > 0 {
			if t == nil {
				t = time.NewTimer(d)
			} else {
				t.Reset(d)
			}
			select {
			case <-t.C:
			case <-l.done:
				l.end(network.ErrReset)
				return
			case <-l.stop:
				l.end(network.ErrReset)
				return
			}
		}
		if p.finish != nil {
			l.end(network.ErrReset)
			p.finish()
			return
		}
		if err := l.deliver(p.data); err != nil {
			l.end(err)
			return
		}
	}
}

// end drops what is still queued; later sends fail with err.
func (l *delayLine) end(err error) {
	l.mu.Lock()
	l.queue, l.pumping = nil, false
	if l.err == nil {
		l.err = err
	}
	l.mu.Unlock()
}

// memStream is one end of an in-memory stream between two latencyHosts.
// Writes reach the other end's read buffer through a delayLine; a reset of
// either end resets both at once, as mocknet does.
type memStream struct {
	h        *latencyHost
	other    *memStream
	peer     peer.ID
	conn     network.Conn
	id       string
	dir      network.Direction
	opened   time.Time
	workload bool
	proto    atomic.Pointer[protocol.ID]
	out      *delayLine

	mu         sync.Mutex
	buf        []byte // received, not read yet
	eof        bool   // the other end closed its writing
	readClosed bool
	readable   chan struct{} // signalled on new data, EOF or reset
	consumed   chan struct{} // signalled when the reader takes data

	done     chan struct{} // closed on reset
	doneOnce sync.Once
	closed   atomic.Bool // Close was called
}

var memStreamIDs atomic.Uint64

// maxUnread bounds the bytes a stream end holds unread: a sender past it
// waits for the reader, as a receive window makes it.
const maxUnread = 1 << 20

func newMemPair(a, b *latencyHost, pid protocol.ID, connA, connB network.Conn) (*memStream, *memStream) {
	workload := workloadProtocol(pid)
	mk := func(h *latencyHost, remote peer.ID, conn network.Conn, dir network.Direction) *memStream {
		s := &memStream{h: h, peer: remote, conn: conn, dir: dir, opened: time.Now(), workload: workload,
			id:       fmt.Sprintf("sim-%d", memStreamIDs.Add(1)),
			readable: make(chan struct{}, 1), consumed: make(chan struct{}, 1), done: make(chan struct{})}
		s.proto.Store(&pid)
		return s
	}
	sa, sb := mk(a, b.ID(), connA, network.DirOutbound), mk(b, a.ID(), connB, network.DirInbound)
	sa.other, sb.other = sb, sa
	delay := a.latency(b.ID())
	sa.out = &delayLine{delay: delay, deliver: sb.receive, done: sa.done, stop: a.stop}
	sb.out = &delayLine{delay: delay, deliver: sa.receive, done: sb.done, stop: b.stop}
	return sa, sb
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (s *memStream) remote() peer.ID { return s.peer }

// receive takes data the other end wrote, once its latency has passed.
func (s *memStream) receive(data []byte) error {
	s.mu.Lock()
	for len(s.buf) >= maxUnread && !s.readClosed {
		s.mu.Unlock()
		select {
		case <-s.consumed:
		case <-s.done:
			return network.ErrReset
		}
		s.mu.Lock()
	}
	if !s.readClosed {
		s.buf = append(s.buf, data...)
	}
	s.mu.Unlock()
	signal(s.readable)
	return nil
}

// receiveEOF marks the other end's writing closed.
func (s *memStream) receiveEOF() {
	s.mu.Lock()
	s.eof = true
	s.mu.Unlock()
	signal(s.readable)
}

func (s *memStream) Read(b []byte) (int, error) {
	for {
		s.mu.Lock()
		switch {
		case len(s.buf) > 0:
			n := copy(b, s.buf)
			s.buf = s.buf[n:]
			if len(s.buf) == 0 {
				s.buf = nil
			}
			s.mu.Unlock()
			signal(s.consumed)
			s.h.bytesIn.Add(uint64(n))
			if s.workload {
				s.h.workloadIn.Add(uint64(n))
			}
			return n, nil
		case s.isReset():
			s.mu.Unlock()
			return 0, network.ErrReset
		case s.readClosed:
			s.mu.Unlock()
			return 0, errors.New("read on a closed stream")
		case s.eof:
			s.mu.Unlock()
			return 0, io.EOF
		}
		s.mu.Unlock()
		select {
		case <-s.readable:
		case <-s.done:
		}
	}
}

func (s *memStream) isReset() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *memStream) Write(b []byte) (int, error) {
	if s.isReset() {
		return 0, network.ErrReset
	}
	cp := append([]byte(nil), b...)
	if err := s.out.send(pending{data: cp, at: time.Now().Add(s.out.delay)}); err != nil {
		return 0, err
	}
	s.h.bytesOut.Add(uint64(len(b)))
	if s.workload {
		s.h.workloadOut.Add(uint64(len(b)))
	}
	return len(b), nil
}

// CloseWrite reaches the other end after the data written before it.
func (s *memStream) CloseWrite() error {
	other := s.other
	_ = s.out.send(pending{at: time.Now().Add(s.out.delay), finish: other.receiveEOF})
	return nil
}

func (s *memStream) CloseRead() error {
	s.mu.Lock()
	s.readClosed, s.buf = true, nil
	s.mu.Unlock()
	signal(s.readable)
	signal(s.consumed)
	return nil
}

// Close closes both directions; this end is then forgotten by its host.
func (s *memStream) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	_ = s.CloseRead()
	_ = s.CloseWrite()
	s.h.untrack(s)
	return nil
}

// Reset ends both ends at once: reads and writes fail, queued writes are
// dropped.
func (s *memStream) Reset() error {
	for _, e := range []*memStream{s, s.other} {
		e.doneOnce.Do(func() { close(e.done) })
		e.h.untrack(e)
	}
	return nil
}

func (s *memStream) ResetWithError(network.StreamErrorCode) error { return s.Reset() }

// Deadlines are not kept, as on mocknet's streams.
func (s *memStream) SetDeadline(time.Time) error      { return nil }
func (s *memStream) SetReadDeadline(time.Time) error  { return nil }
func (s *memStream) SetWriteDeadline(time.Time) error { return nil }

func (s *memStream) ID() string { return s.id }

func (s *memStream) Protocol() protocol.ID { return *s.proto.Load() }

func (s *memStream) SetProtocol(id protocol.ID) error {
	s.proto.Store(&id)
	return nil
}

func (s *memStream) Stat() network.Stats {
	return network.Stats{Direction: s.dir, Opened: s.opened}
}

func (s *memStream) Conn() network.Conn { return s.conn }

func (s *memStream) Scope() network.StreamScope { return &network.NullScope{} }

// latencyStream puts the latency on a stream that came through mocknet
// (one the host itself opened).
type latencyStream struct {
	network.Stream
	h        *latencyHost
	workload bool
	out      *delayLine
	done     chan struct{}
	doneOnce sync.Once
}

// wrap adds latency to s and tracks it; on a closed host it resets s and
// returns it wrapped all the same (reads and writes then fail).
func (h *latencyHost) wrap(s network.Stream, pids ...protocol.ID) *latencyStream {
	ls := &latencyStream{Stream: s, h: h, done: make(chan struct{})}
	ls.out = &delayLine{delay: h.latency(s.Conn().RemotePeer()), deliver: ls.deliver, done: ls.done, stop: h.stop}
	ls.workload = workloadProtocol(s.Protocol())
	for _, p := range pids {
		ls.workload = ls.workload || workloadProtocol(p)
	}
	if !h.track(ls) {
		_ = ls.Reset()
	}
	return ls
}

func (s *latencyStream) remote() peer.ID { return s.Stream.Conn().RemotePeer() }

func (s *latencyStream) deliver(b []byte) error {
	_, err := s.Stream.Write(b)
	return err
}

func (s *latencyStream) Write(b []byte) (int, error) {
	cp := append([]byte(nil), b...)
	if err := s.out.send(pending{data: cp, at: time.Now().Add(s.out.delay)}); err != nil {
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

// Close and CloseWrite take effect after the data written before them has
// arrived, as on a real link.
func (s *latencyStream) Close() error {
	_ = s.out.send(pending{at: time.Now().Add(s.out.delay), finish: func() {
		_ = s.Stream.Close()
		s.h.untrack(s)
	}})
	return nil
}

func (s *latencyStream) CloseWrite() error {
	_ = s.out.send(pending{at: time.Now().Add(s.out.delay), finish: func() { _ = s.Stream.CloseWrite() }})
	return nil
}

// Reset drops the queued writes and ends the pump at once.
func (s *latencyStream) Reset() error {
	s.doneOnce.Do(func() { close(s.done) })
	s.h.untrack(s)
	return s.Stream.Reset()
}

func (s *latencyStream) ResetWithError(code network.StreamErrorCode) error {
	s.doneOnce.Do(func() { close(s.done) })
	s.h.untrack(s)
	return s.Stream.ResetWithError(code)
}
