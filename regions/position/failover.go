package position

import (
	"context"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/regions"
)

// Aggregated mode hands a player's updates to one peer, the region's
// coordinator; a coordinator that dies, hangs or drops them would silence
// the player. The player therefore listens for its own updates in the
// coordinator's batches (it is subscribed to its region's topic, and the
// coordinator flood-publishes to the peers it is connected to, the player
// among them): an update that came back in a batch has been published. It
// publishes directly as well — on its region's topic, as in direct mode —
// while:
//
//   - it knows no coordinator for its region, or the stream to it broke
//     (reason no_coordinator, uplink_failed): at once;
//   - the coordinator has left FallbackAfter of its updates unanswered
//     (reason unanswered): the update of tick n goes out directly when
//     none since tick n-FallbackAfter has come back.
//
// It keeps sending to the coordinator meanwhile, and goes back to the
// coordinator alone as soon as one of its updates comes back in a batch
// from the coordinator it sends to. The count is in updates, one per
// interval, not in wall-clock time, so a busy machine that delays ticks
// does not turn into false fallbacks, and a receiver misses at most
// FallbackAfter of a player's updates when its coordinator fails: the
// coordinator published update k last, updates k+1 .. k+FallbackAfter go
// unanswered, and update k+FallbackAfter+1 is published directly.
//
// An echo proves the batch reached this player, not every receiver: a
// hostile coordinator could publish to the player alone. It does catch a
// coordinator that crashed, hung, or quietly drops updates.

// Reasons a player in aggregated mode published directly; they label
// overworld_position_fallbacks_total.
const (
	FallbackNoCoordinator = "no_coordinator"
	FallbackUplinkFailed  = "uplink_failed"
	FallbackUnanswered    = "unanswered"
)

// fallback is the pure state behind the decision: which coordinator the
// player sends to, since which update, and the newest of its updates that
// came back. Not safe for concurrent use; the Service guards it with mu.
type fallback struct {
	after  uint64
	coord  peer.ID // the coordinator the player sends to; "" none
	since  uint64  // seq of the first update sent to coord
	echoed uint64  // newest own seq heard in coord's batches, >= since; 0 none
	// direct: publishing directly too, until the coordinator answers;
	// published: whether the last update went out directly.
	direct, published bool
}

// uplinkResult is where a tick's update went, as decide takes it.
type uplinkResult int

const (
	uplinkSent   uplinkResult = iota // written to the coordinator's stream
	uplinkLocal                      // this peer coordinates: queued locally
	uplinkNone                       // no coordinator known
	uplinkBroken                     // stream could not be opened or written
)

// decide takes the update numbered seq, which went to coord as result
// says, and reports whether it must also be published directly, with the
// reason when that starts a fallback ("" otherwise), and whether a
// fallback ended (the coordinator answered since the last update).
func (f *fallback) decide(seq uint64, coord peer.ID, result uplinkResult) (direct bool, started string, resumed bool) {
	reason := FallbackUnanswered
	switch result {
	case uplinkLocal:
		f.coord, f.since, f.echoed, f.direct = coord, seq, 0, false
	case uplinkNone, uplinkBroken:
		f.coord, f.since, f.echoed, f.direct = "", 0, 0, true
		reason = FallbackNoCoordinator
		if result == uplinkBroken {
			reason = FallbackUplinkFailed
		}
	case uplinkSent:
		if coord != f.coord {
			// A new coordinator gets its own FallbackAfter updates; a
			// player already publishing directly stays so until it
			// answers.
			f.coord, f.since, f.echoed = coord, seq, 0
		}
		if oldest := max(f.since, f.echoed+1); seq >= oldest && seq-oldest >= f.after {
			f.direct = true
		}
	}
	was := f.published
	f.published = f.direct
	if f.direct && !was {
		started = reason
	}
	return f.direct, started, was && !f.direct
}

// echo records that the batch of coordinator from carried this player's
// update seq. An answer from the coordinator the player sends to ends a
// fallback. It reports whether this is the coordinator's first answer
// since the player began sending to it.
func (f *fallback) echo(from peer.ID, seq uint64) (first bool) {
	if from == "" || from != f.coord || seq < f.since || seq <= f.echoed {
		return false
	}
	first = f.echoed == 0
	f.echoed = seq
	f.direct = false
	return first
}

// sendAggregated is the aggregated-mode half of a tick: the update goes
// to the region's coordinator and, while fallback says so, on the topic
// too. Only the tick goroutine calls it.
func (s *Service) sendAggregated(ctx context.Context, own regions.Coord, u *Update) {
	s.mu.Lock()
	e, known := s.coordinator[own]
	s.mu.Unlock()
	s.sendUplink(ctx, own, u)
	// sendUplink keeps the stream of a coordinator it could write to and
	// drops the one it could not: read the result back.
	result := uplinkNone
	switch {
	case !known:
	case e.id == s.self:
		result = uplinkLocal
	case s.uplink != nil && s.uplink.peer == e.id:
		result = uplinkSent
	default:
		result = uplinkBroken
	}
	s.mu.Lock()
	direct, started, resumed := s.fb.decide(u.Seq, e.id, result)
	var ownSum *Batch
	if result != uplinkLocal {
		ownSum = s.ownSummary(coordOf(u.RegionX, u.RegionY), u, direct, s.cfg.Now())
	}
	s.mu.Unlock()
	if started != "" {
		s.count.fallback(started)
		s.log.Debug("publishing positions directly", "region", own, "coordinator", e.id, "reason", started)
	}
	if resumed {
		s.count.resumed.Add(1)
		s.log.Debug("coordinator answers again: aggregated only", "region", own, "coordinator", e.id)
	}
	s.count.setDirect(direct)
	if direct {
		s.publish(ctx, own, &Envelope{Body: &Envelope_Update{Update: u}})
		s.count.published.Add(1)
		s.count.fallbackPublished.Add(1)
	}
	if ownSum != nil {
		s.publishSummaries(ctx, []*Batch{ownSum}, true)
	}
}

// noteEcho looks for this player's own update in a batch that arrived on
// a topic from the coordinator it sends to. It runs in the topic
// validator whatever the validator decided: a batch all of whose other
// entries the receiver already had is ignored (and not forwarded), and
// still answers.
func (s *Service) noteEcho(msg *pubsub.Message) {
	author := msg.GetFrom()
	if !s.cfg.Aggregate || author == s.self {
		return
	}
	s.mu.Lock()
	ours := author == s.fb.coord
	s.mu.Unlock()
	if !ours {
		return
	}
	env, err := DecodeEnvelope(msg.GetData())
	if err != nil {
		return
	}
	b := env.GetBatch()
	var newest uint64
	for _, u := range b.GetUpdates() {
		if peer.ID(u.GetPlayer()) == s.self {
			newest = max(newest, u.GetSeq())
		}
	}
	if newest == 0 {
		return
	}
	s.mu.Lock()
	first := s.fb.echo(author, newest)
	s.mu.Unlock()
	if first {
		// Once per coordinator the player turns to: from here on its
		// updates reach the region through that coordinator's batches.
		s.log.Debug("coordinator publishes our positions", "region", coordOf(b.GetRegionX(), b.GetRegionY()), "coordinator", author)
	}
}

// refreshCoordinators takes the coordinators of the subscribed regions
// from WithCoordinators' function once per tick, so that the uplink and
// the batches this peer accepts follow the region service's view as it
// changes (a fail-over, a hand-over) instead of a cached one. The
// function is quick by its contract; placement over candidates, which
// asks the network, keeps its CoordinatorTTL. Called without locks.
func (s *Service) refreshCoordinators(now time.Time) {
	if s.coordinatorOf == nil {
		return
	}
	s.topicMu.Lock()
	regs := make([]regions.Coord, 0, len(s.topics)+len(s.sumTopics))
	for c, rt := range s.topics {
		if rt.m.Subscribed() {
			regs = append(regs, c)
		}
	}
	for c, rt := range s.sumTopics {
		if rt.m.Subscribed() && !subscribed(s.topics[c]) {
			regs = append(regs, c)
		}
	}
	s.topicMu.Unlock()
	ids := make([]peer.ID, len(regs))
	for i, c := range regs {
		ids[i] = s.coordinatorOf(c)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, c := range regs {
		if ids[i] == "" {
			continue
		}
		if e, ok := s.coordinator[c]; !ok || e.id != ids[i] {
			s.coordinator[c] = coordinatorEntry{id: ids[i], until: now.Add(s.cfg.CoordinatorTTL)}
			// Register with the new coordinator now: it names the
			// region's members to a player that has just come.
			if _, subscribed := s.rendezvous[c]; subscribed {
				s.rendezvous[c] = now
			}
		}
	}
}
