package vnet

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

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
// the queue is full, until the writer's deadline if it set one.
func (l *delayLine) send(p pending, dl *deadline) error {
	l.mu.Lock()
	for len(l.queue) >= maxInFlight && l.err == nil {
		if l.room == nil {
			l.room = make(chan struct{}, 1)
		}
		room := l.room
		l.mu.Unlock()
		if dl.passed() {
			return os.ErrDeadlineExceeded
		}
		changed, expired, stop := dl.wait()
		select {
		case <-room:
		case <-changed:
		case <-expired:
		case <-l.done:
			stop()
			return network.ErrReset
		case <-l.stop:
			stop()
			return network.ErrReset
		}
		stop()
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

// memStream is one end of an in-memory stream between two Hosts.
// Writes reach the other end's read buffer through a delayLine; a reset of
// either end resets both at once, as mocknet does.
type memStream struct {
	h       *Host
	other   *memStream
	peer    peer.ID
	conn    network.Conn
	id      string
	dir     network.Direction
	opened  time.Time
	tracked bool
	proto   atomic.Pointer[protocol.ID]
	out     *delayLine

	mu         sync.Mutex
	buf        []byte // received, not read yet
	eof        bool   // the other end closed its writing
	readClosed bool
	readable   chan struct{} // signalled on new data, EOF or reset
	consumed   chan struct{} // signalled when the reader takes data

	done     chan struct{} // closed on reset
	doneOnce sync.Once
	closed   atomic.Bool // Close was called

	// Deadlines are kept as on a real stream: code that bounds an
	// exchange with one must see it time out here too.
	readDeadline, writeDeadline deadline
}

var memStreamIDs atomic.Uint64

// maxUnread bounds the bytes a stream end holds unread: a sender past it
// waits for the reader, as a receive window makes it.
const maxUnread = 1 << 20

func newMemPair(a, b *Host, pid protocol.ID, connA, connB network.Conn) (*memStream, *memStream) {
	tracked := a.tracked(pid)
	mk := func(h *Host, remote peer.ID, conn network.Conn, dir network.Direction) *memStream {
		s := &memStream{h: h, peer: remote, conn: conn, dir: dir, opened: time.Now(), tracked: tracked,
			id:       fmt.Sprintf("vnet-%d", memStreamIDs.Add(1)),
			readable: make(chan struct{}, 1), consumed: make(chan struct{}, 1), done: make(chan struct{})}
		s.proto.Store(&pid)
		return s
	}
	sa, sb := mk(a, b.ID(), connA, network.DirOutbound), mk(b, a.ID(), connB, network.DirInbound)
	sa.other, sb.other = sb, sa
	delay := a.latencyTo(b.ID())
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
		if s.readDeadline.passed() {
			return 0, os.ErrDeadlineExceeded
		}
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
			s.h.countIn(n, s.tracked)
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
		changed, expired, stop := s.readDeadline.wait()
		select {
		case <-s.readable:
		case <-s.done:
		case <-changed:
		case <-expired:
		}
		stop()
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
	if s.writeDeadline.passed() {
		return 0, os.ErrDeadlineExceeded
	}
	return s.h.send(s.out, b, s.tracked, &s.writeDeadline)
}

// CloseWrite reaches the other end after the data written before it.
func (s *memStream) CloseWrite() error {
	other := s.other
	_ = s.out.send(pending{at: time.Now().Add(s.out.delay), finish: other.receiveEOF}, &s.writeDeadline)
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

func (s *memStream) SetDeadline(t time.Time) error {
	s.readDeadline.set(t)
	s.writeDeadline.set(t)
	return nil
}

func (s *memStream) SetReadDeadline(t time.Time) error {
	s.readDeadline.set(t)
	return nil
}

func (s *memStream) SetWriteDeadline(t time.Time) error {
	s.writeDeadline.set(t)
	return nil
}

// deadline is one direction's deadline. Setting it wakes the calls that
// wait under the old one, which then wait again under the new one (the
// zero time means none), as net.Conn's deadlines behave.
type deadline struct {
	mu      sync.Mutex
	at      time.Time
	changed chan struct{} // closed by the next set
}

func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.at = t
	if d.changed != nil {
		close(d.changed)
		d.changed = nil
	}
}

func (d *deadline) passed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.at.IsZero() && !time.Now().Before(d.at)
}

// wait returns what a blocked call selects on besides its own events:
// changed is closed by the next set, expired fires when the deadline
// passes (nil, never ready, when there is none); the caller then looks
// again. stop releases the timer.
func (d *deadline) wait() (changed <-chan struct{}, expired <-chan time.Time, stop func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.changed == nil {
		d.changed = make(chan struct{})
	}
	if d.at.IsZero() {
		return d.changed, nil, func() {}
	}
	t := time.NewTimer(time.Until(d.at))
	return d.changed, t.C, func() { t.Stop() }
}

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
	h        *Host
	tracked  bool
	out      *delayLine
	done     chan struct{}
	doneOnce sync.Once
	// writeDeadline bounds a write waiting for room in out. Reads are
	// mocknet's, which keeps no deadlines; only the host's own streams
	// (identify) are latencyStreams.
	writeDeadline deadline
}

// wrap adds latency to s and tracks it; on a closed host it resets s and
// returns it wrapped all the same (reads and writes then fail).
func (h *Host) wrap(s network.Stream, pids ...protocol.ID) *latencyStream {
	ls := &latencyStream{Stream: s, h: h, done: make(chan struct{})}
	ls.out = &delayLine{delay: h.latencyTo(s.Conn().RemotePeer()), deliver: ls.deliver, done: ls.done, stop: h.stop}
	ls.tracked = h.tracked(s.Protocol())
	for _, p := range pids {
		ls.tracked = ls.tracked || h.tracked(p)
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
	if s.writeDeadline.passed() {
		return 0, os.ErrDeadlineExceeded
	}
	return s.h.send(s.out, b, s.tracked, &s.writeDeadline)
}

func (s *latencyStream) Read(b []byte) (int, error) {
	n, err := s.Stream.Read(b)
	s.h.countIn(n, s.tracked)
	return n, err
}

// Close and CloseWrite take effect after the data written before them has
// arrived, as on a real link.
func (s *latencyStream) Close() error {
	_ = s.out.send(pending{at: time.Now().Add(s.out.delay), finish: func() {
		_ = s.Stream.Close()
		s.h.untrack(s)
	}}, &s.writeDeadline)
	return nil
}

func (s *latencyStream) CloseWrite() error {
	_ = s.out.send(pending{at: time.Now().Add(s.out.delay), finish: func() { _ = s.Stream.CloseWrite() }}, &s.writeDeadline)
	return nil
}

// Reset drops the queued writes and ends the pump at once.
func (s *latencyStream) Reset() error {
	s.doneOnce.Do(func() { close(s.done) })
	s.h.untrack(s)
	return s.Stream.Reset()
}

func (s *latencyStream) SetDeadline(t time.Time) error {
	s.writeDeadline.set(t)
	return s.Stream.SetDeadline(t)
}

func (s *latencyStream) SetWriteDeadline(t time.Time) error {
	s.writeDeadline.set(t)
	return s.Stream.SetWriteDeadline(t)
}

func (s *latencyStream) ResetWithError(code network.StreamErrorCode) error {
	s.doneOnce.Do(func() { close(s.done) })
	s.h.untrack(s)
	return s.Stream.ResetWithError(code)
}
