package sim

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/regions/position"
)

// The path of a position update. With flood publishing a player's own
// update goes straight to every subscriber of its region's topic that its
// gossipsub knows: one hop, the link's latency. A subscriber it does not
// know (no connection, or its subscription not heard yet) gets the update
// only from a mesh peer that forwards it: two hops or more. gossipsub
// tells which: a message's ReceivedFrom is the peer that handed it over,
// its From the publisher. The recorder counts the direct updates (not
// batches) delivered in the window by path and, for those forwarded, by
// what stood between the publisher and the receiver, as the simulator sees
// it when the update arrives.

// Causes of a forwarded delivery, in the order they are tested.
const (
	causeFasterPath       = "forwarded copy first, within the direct link's latency"
	causePublisherOffline = "publisher offline"
	causeNotConnected     = "not connected"
	causeConnectedLate    = "connected after the send"
	causeConnectedNew     = "connected < 1 s before the send"
	causeReceiverNew      = "receiver subscribed < 1 s before the send"
	causePublisherMoved   = "publisher entered its region < 1 s before the send"
	causeOther            = "connected and subscribed for 1 s or more"
)

// recentWindow is how recent a connection, subscription or region change
// must be to count as the cause of a forwarded delivery: gossipsub learns
// a new peer's subscriptions one identify and one RPC after the
// connection, a few link latencies.
const recentWindow = time.Second

// Paths are the direct position updates delivered in the window, by the
// path they took.
type Paths struct {
	OneHop    uint64 `json:"one_hop"`
	Forwarded uint64 `json:"forwarded"`
	// ForwardedShare is Forwarded over all.
	ForwardedShare float64 `json:"forwarded_share"`
	// ForwardedByCause tells why each forwarded update did not come
	// from its publisher (see the cause constants).
	ForwardedByCause map[string]uint64 `json:"forwarded_by_cause"`
	OneHopDelayMS    Dist              `json:"one_hop_delay_ms"`
	ForwardedDelayMS Dist              `json:"forwarded_delay_ms"`
	// Late are the deliveries over the delay goal (1.25 x the link's
	// latency + 10 ms), by path.
	LateOneHop    uint64 `json:"late_one_hop"`
	LateForwarded uint64 `json:"late_forwarded"`
}

// delayGoal is issue #14's bound on a direct update's delay over a link.
func delayGoal(link time.Duration) time.Duration {
	return link*5/4 + 10*time.Millisecond
}

// pathRecorder collects Paths while recording is on.
type pathRecorder struct {
	mu     sync.Mutex
	on     bool
	paths  Paths
	oneHop []float64
	fwd    []float64
}

func newPathRecorder() *pathRecorder {
	return &pathRecorder{paths: Paths{ForwardedByCause: map[string]uint64{}}}
}

func (pr *pathRecorder) setRecording(on bool) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.on = on
}

// record counts one delivery: forwarded with its cause, or one hop when
// cause is "".
func (pr *pathRecorder) record(delay, link time.Duration, cause string) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if !pr.on {
		return
	}
	ms := float64(delay.Microseconds()) / 1000
	late := delay > delayGoal(link)
	if cause == "" {
		pr.paths.OneHop++
		pr.oneHop = append(pr.oneHop, ms)
		if late {
			pr.paths.LateOneHop++
		}
		return
	}
	pr.paths.Forwarded++
	pr.paths.ForwardedByCause[cause]++
	pr.fwd = append(pr.fwd, ms)
	if late {
		pr.paths.LateForwarded++
	}
}

// report summarises what was recorded; nil if nothing was.
func (pr *pathRecorder) report() *Paths {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	p := pr.paths
	if p.OneHop+p.Forwarded == 0 {
		return nil
	}
	p.ForwardedByCause = make(map[string]uint64, len(pr.paths.ForwardedByCause))
	for k, v := range pr.paths.ForwardedByCause {
		p.ForwardedByCause[k] = v
	}
	p.ForwardedShare = float64(p.Forwarded) / float64(p.OneHop+p.Forwarded)
	p.OneHopDelayMS, p.ForwardedDelayMS = summarise(pr.oneHop), summarise(pr.fwd)
	return &p
}

// since remembers when something began, per key: a player's connections
// by peer, its topic subscriptions by name.
type since[K comparable] struct {
	mu sync.Mutex
	at map[K]time.Time
}

func (s *since[K]) begin(k K, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at == nil {
		s.at = map[K]time.Time{}
	}
	if _, ok := s.at[k]; !ok {
		s.at[k] = t
	}
}

func (s *since[K]) end(k K) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.at, k)
}

func (s *since[K]) get(k K) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.at[k]
	return t, ok
}

// connNotifee keeps conns, the time each peer has been connected since.
func connNotifee(conns *since[peer.ID]) *network.NotifyBundle {
	return &network.NotifyBundle{
		ConnectedF: func(_ network.Network, c network.Conn) { conns.begin(c.RemotePeer(), time.Now()) },
		DisconnectedF: func(n network.Network, c network.Conn) {
			// Told asynchronously: the peer may be connected again.
			if n.Connectedness(c.RemotePeer()) != network.Connected {
				conns.end(c.RemotePeer())
			}
		},
	}
}

// positionPath records the path of a direct update gossipsub delivered to
// p. It runs in p's pubsub event loop: it reads only locks that never wait
// for an event loop (the network's, the run's, the recorders').
func (r *run) positionPath(p *player, msg *pubsub.Message) {
	if !strings.HasSuffix(msg.GetTopic(), "/pos") {
		return
	}
	var env position.Envelope
	if proto.Unmarshal(msg.GetData(), &env) != nil {
		return
	}
	u := env.GetUpdate()
	from := msg.GetFrom()
	if u == nil || peer.ID(u.GetPlayer()) != from || from == p.id {
		return
	}
	now := time.Now()
	sent := time.UnixMicro(u.GetSentUnixMicro())
	link := r.latency(from, p.id)
	cause := ""
	switch {
	case msg.ReceivedFrom == from:
	case now.Sub(sent) <= link:
		// With links of different latencies two short hops can beat
		// one long one: the direct copy may well be on its way.
		cause = causeFasterPath
	default:
		cause = r.forwardCause(p, from, msg.GetTopic(), sent)
	}
	r.paths.record(now.Sub(sent), link, cause)
}

// newcomerOrMover tells, for two players not connected, which of them
// joined the game, entered its region or subscribed to the topic lately:
// what the rendezvous has not caught up with yet.
func (r *run) newcomerOrMover(p, q *player, topic string, sent time.Time) string {
	r.mu.Lock()
	pJoined, qJoined := p.joined, q.joined
	r.mu.Unlock()
	recent := func(at time.Time) bool { return !at.IsZero() && sent.Sub(at) < rendezvousWindow }
	switch {
	case recent(qJoined):
		return ", publisher joined < 5 s before"
	case recent(pJoined):
		return ", receiver joined < 5 s before"
	case q.regionSince.Load() != 0 && recent(time.Unix(0, q.regionSince.Load())):
		return ", publisher entered its region < 5 s before"
	}
	if at, ok := p.wire.topics.get(topic); ok && recent(at) {
		return ", receiver subscribed < 5 s before"
	}
	return ", neither new"
}

// rendezvousWindow is how recent a join or a move must be to explain two
// players not connected: the rendezvous that connects them takes a
// round trip to a coordinator, or waits for its next period.
const rendezvousWindow = 5 * time.Second

// forwardCause tells why an update of from, sent at sent on topic, reached
// p through another peer.
func (r *run) forwardCause(p *player, from peer.ID, topic string, sent time.Time) string {
	q := r.player(from)
	if q == nil || !r.isOnline(from) {
		return causePublisherOffline
	}
	if p.host.Network().Connectedness(from) != network.Connected {
		return causeNotConnected + r.newcomerOrMover(p, q, topic, sent)
	}
	if at, ok := p.conns.get(from); ok {
		if at.After(sent) {
			return causeConnectedLate
		}
		if sent.Sub(at) < recentWindow {
			return causeConnectedNew
		}
	}
	if at, ok := p.wire.topics.get(topic); ok && sent.Sub(at) < recentWindow {
		return causeReceiverNew
	}
	if at := q.regionSince.Load(); at != 0 && sent.Sub(time.Unix(0, at)) < recentWindow {
		return causePublisherMoved
	}
	return causeOther
}

// summary writes the paths for a person; nothing if p is nil.
func (p *Paths) summary(w io.Writer, d func(string, Dist, string)) {
	if p == nil {
		return
	}
	fmt.Fprintf(w, "  direct updates: %d one hop, %d forwarded (%.3f%%); over the delay goal (1.25 x link + 10 ms): %d one hop, %d forwarded\n",
		p.OneHop, p.Forwarded, 100*p.ForwardedShare, p.LateOneHop, p.LateForwarded)
	if p.Forwarded > 0 {
		fmt.Fprintf(w, "    forwarded by cause: %s\n", sortedCounts(p.ForwardedByCause))
	}
	d("delay, one hop", p.OneHopDelayMS, "ms")
	d("delay, forwarded", p.ForwardedDelayMS, "ms")
}
