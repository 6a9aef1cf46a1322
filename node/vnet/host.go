package vnet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/protocol/identify"
)

// Host wraps a host of the in-memory network so that every byte written on
// a stream arrives after the link's one-way latency, pipelined: writes
// queue and each leaves at its own time.
//
// mocknet's own link latency cannot carry game traffic: a stream holds at
// most 256 bytes in flight and waits a full latency for each further chunk,
// so a gossipsub stream at 100 ms carries a few kilobytes per second and
// updates pile up for seconds. mocknet links here have no latency.
//
// The streams the game's protocols open (gossipsub, the DHT, regions,
// positions, fights) are memStreams: a pair of in-memory stream ends
// between two Hosts, on the mocknet connection between them (which mocknet
// made, identify ran on and a crash closes). mocknet's own streams cost a
// goroutine per stream end for their whole life, a pipe and a timer each; a
// memStream costs a goroutine only while its writes are in flight. With a
// hundred peers per player and two gossipsub streams per peer, that is
// most of a player's goroutines and about a quarter of its memory. Streams
// that arrive through mocknet anyway (opened by the host itself, as
// identify's) get the latency by a latencyStream around them.
//
// It also links peers on first contact (see Network) and counts the bytes
// it writes and reads on its streams.
type Host struct {
	host.Host
	net     *Network
	latency func(remote peer.ID) time.Duration
	tracks  func(protocol.ID) bool
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
	// trackedOut and trackedIn count the bytes of the streams whose
	// protocol HostOptions.Tracked picks, alone.
	trackedOut, trackedIn atomic.Uint64
}

// HostOptions shape one Host.
type HostOptions struct {
	// Latency is the one-way latency from this host to remote, for links
	// the Network has no latency of its own for (SetLatency); nil leaves
	// them at the Network's default. A stream keeps the latency it was
	// opened with.
	Latency func(remote peer.ID) time.Duration
	// Tracked picks the stream protocols whose bytes TrackedBytes counts
	// apart (the simulator's workload); nil picks none.
	Tracked func(protocol.ID) bool
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

func newHost(h host.Host, net *Network, opts HostOptions) *Host {
	lh := &Host{Host: h, net: net, latency: opts.Latency, tracks: opts.Tracked, stop: make(chan struct{}),
		handlers: map[protocol.ID]network.StreamHandler{}, streams: map[stream]struct{}{}}
	// A connection that goes (a crash or a cut closes them) takes its
	// streams along.
	lh.notify = &network.NotifyBundle{DisconnectedF: func(n network.Network, c network.Conn) {
		if n.Connectedness(c.RemotePeer()) != network.Connected {
			lh.resetStreamsTo(c.RemotePeer())
		}
	}}
	h.Network().Notify(lh.notify)
	return lh
}

// latencyTo is the one-way latency of a new stream to remote.
func (h *Host) latencyTo(remote peer.ID) time.Duration {
	return h.net.latencyOf(h.ID(), remote, h.latency)
}

// tracked reports whether the bytes of protocol p count apart.
func (h *Host) tracked(p protocol.ID) bool { return h.tracks != nil && h.tracks(p) }

// send queues a copy of b on out, due after out's latency, and counts it
// as written (tracked: also in TrackedBytes).
func (h *Host) send(out *delayLine, b []byte, tracked bool, dl *deadline) (int, error) {
	cp := append([]byte(nil), b...)
	if err := out.send(pending{data: cp, at: time.Now().Add(out.delay)}, dl); err != nil {
		return 0, err
	}
	h.bytesOut.Add(uint64(len(b)))
	if tracked {
		h.trackedOut.Add(uint64(len(b)))
	}
	return len(b), nil
}

// countIn counts n bytes read (tracked: also in TrackedBytes).
func (h *Host) countIn(n int, tracked bool) {
	h.bytesIn.Add(uint64(n))
	if tracked {
		h.trackedIn.Add(uint64(n))
	}
}

// Bytes are the bytes this host wrote and read on its streams so far.
func (h *Host) Bytes() (out, in uint64) { return h.bytesOut.Load(), h.bytesIn.Load() }

// TrackedBytes are the bytes of Bytes on the streams HostOptions.Tracked
// picks.
func (h *Host) TrackedBytes() (out, in uint64) { return h.trackedOut.Load(), h.trackedIn.Load() }

// IDService is the host's identify service, as the basic host offers it:
// callers that wait for identify on a new connection (position's
// runsProtocol, NewStream here) find it through the wrapper too.
func (h *Host) IDService() identify.IDService {
	if ids, ok := h.Host.(interface{ IDService() identify.IDService }); ok {
		return ids.IDService()
	}
	return nil
}

func (h *Host) track(s stream) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.streams[s] = struct{}{}
	return true
}

func (h *Host) untrack(s stream) {
	h.mu.Lock()
	delete(h.streams, s)
	h.mu.Unlock()
}

// OpenStreams counts the stream ends open at this host.
func (h *Host) OpenStreams() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.streams)
}

// crash ends every stream of this host at once and refuses new ones, as
// when its process dies: nothing in flight arrives. Close still runs
// (Network.Crash calls it).
func (h *Host) crash() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.resetStreamsTo("")
}

// resetStreamsTo resets this host's streams to p, or all of them when p
// is "".
func (h *Host) resetStreamsTo(p peer.ID) {
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

func (h *Host) SetStreamHandler(pid protocol.ID, handler network.StreamHandler) {
	h.mu.Lock()
	h.handlers[pid] = handler
	h.mu.Unlock()
	// Registered with the host too, so that identify names the protocol.
	h.Host.SetStreamHandler(pid, func(s network.Stream) { handler(h.wrap(s)) })
}

func (h *Host) SetStreamHandlerMatch(pid protocol.ID, m func(protocol.ID) bool, handler network.StreamHandler) {
	h.mu.Lock()
	h.matchers = append(h.matchers, matchHandler{pid: pid, match: m, handler: handler})
	h.mu.Unlock()
	h.Host.SetStreamHandlerMatch(pid, m, func(s network.Stream) { handler(h.wrap(s)) })
}

func (h *Host) RemoveStreamHandler(pid protocol.ID) {
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
func (h *Host) handlerFor(pids []protocol.ID) (pid protocol.ID, handler network.StreamHandler, open bool) {
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
func (h *Host) link(p peer.ID) error {
	if h.Network().Connectedness(p) == network.Connected {
		return nil
	}
	return h.net.Link(h.ID(), p)
}

func (h *Host) Connect(ctx context.Context, ai peer.AddrInfo) error {
	if err := h.link(ai.ID); err != nil {
		return err
	}
	return h.Host.Connect(ctx, ai)
}

var errNoProtocol = errors.New("protocols not supported")

// NewStream opens a memStream to p on the connection to it, dialing
// first, waiting for identify as the host does, and choosing the first of
// pids p serves.
func (h *Host) NewStream(ctx context.Context, p peer.ID, pids ...protocol.ID) (network.Stream, error) {
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
	remote := h.net.Host(p)
	if remote == nil {
		// Not a Host of this Network: through the host, with latency.
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
func (h *Host) Close() error {
	h.mu.Lock()
	h.closed = true
	open := make([]stream, 0, len(h.streams))
	for s := range h.streams {
		open = append(open, s)
	}
	clear(h.streams)
	h.mu.Unlock()
	h.once.Do(func() { close(h.stop) })
	h.net.unregister(h)
	h.Network().StopNotify(h.notify)
	err := h.Host.Close()
	for _, s := range open {
		_ = s.Reset()
	}
	return err
}
