package mirror

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/overworld-p2p/overworld/node/crimp"
)

// Clock skew between mirrors, measured from CRIMP's session packets.
//
// A member's session packet carries its send time T3 (its clock) and, for
// every member it heard, an echo of that member's last session time T1
// (the echoed member's clock) with how long it held it (T3 - T2). When we
// receive, at T4 on our clock, a session packet echoing our own T1, we have
// the four timestamps of an NTP exchange: the peer's clock minus ours is
// θ = ((T2 - T1) + (T3 - T4)) / 2, with an error of at most half the round
// trip δ = (T4 - T1) - (T3 - T2), since the true offset lies wherever the
// two one-way delays split δ. As NTP does, we keep the last few samples and
// trust the one with the smallest δ.
//
// The skew is alarming only when it is certain: |θ| - δ/2 > MaxSkew, i.e.
// however the round trip splits, the clocks differ by more than MaxSkew.
// Jitter thus never raises the alarm by itself; a wrong clock does.

// skewSamples is how many recent samples per peer the estimate picks from.
const skewSamples = 8

type skewSample struct {
	offset, rtt time.Duration
	at          time.Time
}

// PeerSkew is the measured clock offset to one other mirror.
type PeerSkew struct {
	// Offset is the peer's clock minus ours.
	Offset time.Duration
	// Uncertainty is half the round trip of the sample: the true offset is
	// within Offset ± Uncertainty.
	Uncertainty time.Duration
	// At is when the sample was taken (our clock).
	At time.Time
}

// Beyond reports whether the offset is certainly larger than limit.
func (p PeerSkew) Beyond(limit time.Duration) bool {
	off := p.Offset
	if off < 0 {
		off = -off
	}
	return off-p.Uncertainty > limit
}

// skewEstimator keeps the samples; safe for concurrent use (the transport
// feeds it from its receive goroutine).
type skewEstimator struct {
	self atomic.Uint32
	mu   sync.Mutex
	// peers is bounded by crimp.MaxMembers.
	peers map[crimp.MemberID]*[skewSamples]skewSample
	next  map[crimp.MemberID]int
}

func newSkewEstimator() *skewEstimator {
	return &skewEstimator{peers: map[crimp.MemberID]*[skewSamples]skewSample{}, next: map[crimp.MemberID]int{}}
}

// observe takes a session packet p received at now.
func (e *skewEstimator) observe(p *crimp.Packet, now time.Time) {
	self := crimp.MemberID(e.self.Load())
	if self == 0 || p.Sender == self {
		return
	}
	for _, echo := range p.Echoes {
		if echo.Peer != self {
			continue
		}
		hold := time.Duration(echo.HoldMicros) * time.Microsecond
		t1, t3, t4 := echo.Time, p.Time, now.UnixNano()
		rtt := time.Duration(t4-t1) - hold
		if rtt < 0 || rtt > 10*time.Second {
			return
		}
		offset := time.Duration((t3-int64(hold)-t1)+(t3-t4)) / 2
		e.add(p.Sender, skewSample{offset: offset, rtt: rtt, at: now})
		return
	}
}

func (e *skewEstimator) add(peer crimp.MemberID, s skewSample) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ring := e.peers[peer]
	if ring == nil {
		if len(e.peers) >= crimp.MaxMembers {
			return
		}
		ring = new([skewSamples]skewSample)
		e.peers[peer] = ring
	}
	i := e.next[peer]
	ring[i] = s
	e.next[peer] = (i + 1) % skewSamples
}

// forget drops a peer (it left the group).
func (e *skewEstimator) forget(peer crimp.MemberID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.peers, peer)
	delete(e.next, peer)
}

// estimates returns the best sample of every peer.
func (e *skewEstimator) estimates() map[crimp.MemberID]PeerSkew {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[crimp.MemberID]PeerSkew, len(e.peers))
	for id, ring := range e.peers {
		best := -1
		for i, s := range ring {
			if s.at.IsZero() {
				continue
			}
			if best < 0 || s.rtt < ring[best].rtt {
				best = i
			}
		}
		if best >= 0 {
			s := ring[best]
			out[id] = PeerSkew{Offset: s.offset, Uncertainty: s.rtt / 2, At: s.at}
		}
	}
	return out
}

// skewTransport is a crimp.Transport that shows every session packet it
// receives to the estimator before the member sees it.
type skewTransport struct {
	crimp.Transport
	clock crimp.Clock
	est   *skewEstimator
}

func (t *skewTransport) Start(h func(b []byte, from netip.AddrPort)) error {
	return t.Transport.Start(func(b []byte, from netip.AddrPort) {
		if len(b) > 2 && crimp.Kind(b[1]) == crimp.KindSession {
			if p, err := crimp.Decode(b); err == nil {
				t.est.observe(p, t.clock.Now())
			}
		}
		h(b, from)
	})
}
