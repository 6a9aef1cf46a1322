package position

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/node"
	"github.com/overworld-p2p/overworld/regions"
	"github.com/overworld-p2p/overworld/regions/topic"
)

// CandidateFunc returns peers that may coordinate the region with the given
// DHT key; the Service keeps those that run the position protocol (and
// itself) and picks regions.Placement's coordinator among them.
type CandidateFunc func(ctx context.Context, key string) ([]peer.ID, error)

// Delivery is one accepted update of another player, as the simulator and
// tests see it.
type Delivery struct {
	Player  peer.ID
	Region  regions.Coord
	Seq     uint64
	Sent    time.Time // the sender's clock at publish
	Arrived time.Time
	Batched bool // came in a coordinator's batch
	Summary bool // came in a summary (summary.go)
}

// Option configures a Service.
type Option func(*Service) error

// WithCandidates replaces the default candidate source, the node's routing
// table (node.ClosestKnown): cheap, asks nobody, and right once the table
// has settled. A DHT lookup (node.ClosestPeers) is more exact on a large
// overlay at the cost of a network round per region.
func WithCandidates(f CandidateFunc) Option {
	return func(s *Service) error {
		if f == nil {
			return errors.New("candidate function is nil")
		}
		s.candidates = f
		return nil
	}
}

// WithCoordinators takes each region's coordinator from f instead of
// computing placement over candidates. A peer that also runs the region
// service (package regions) passes its Coordinator, so the peer that
// commits a region's objects is the one that aggregates its positions, as
// the region service sees it (connections, failed peers, lease
// eligibility included). f must be quick and return "" only when it knows
// of no coordinator.
func WithCoordinators(f func(regions.Coord) peer.ID) Option {
	return func(s *Service) error {
		if f == nil {
			return errors.New("coordinator function is nil")
		}
		s.coordinatorOf = f
		return nil
	}
}

// WithDeliveryHook calls f for every accepted update of another player. f
// runs on the subscription's goroutine and must be quick.
func WithDeliveryHook(f func(Delivery)) Option {
	return func(s *Service) error {
		if f == nil {
			return errors.New("delivery hook is nil")
		}
		s.onDeliver = f
		return nil
	}
}

// Service runs the position protocol for one player on one node.
type Service struct {
	cfg        Config
	grid       Grid
	h          host.Host
	ps         *pubsub.PubSub
	self       peer.ID
	log        *slog.Logger
	candidates CandidateFunc
	// coordinatorOf, if set, names coordinators instead of candidates
	// (WithCoordinators).
	coordinatorOf func(regions.Coord) peer.ID
	// lookup, if set, refreshes coordinatorOf's view (WithLookup).
	lookup    func(context.Context, regions.Coord) error
	onDeliver func(Delivery)
	admission Admission // nil: an open world
	count     *counters

	topicMu   sync.Mutex                     // guards topics and sumTopics; taken before mu, never after
	topics    map[regions.Coord]*regionTopic // joined topics, subscribed or not
	sumTopics map[regions.Coord]*regionTopic // joined summary topics (summary.go)

	mu          sync.Mutex
	tracker     *Tracker       // updates heard on topics
	ingest      *Tracker       // updates received as a coordinator
	heard       *AuthorLimiter // per (author, region topic) on the topics
	uplinked    *AuthorLimiter // per (player, region) on coordinator streams
	placed      bool
	pos, vel    Vec
	posAt       time.Time // when pos was true, if the game said (MoveAt)
	seq         uint64
	relocations uint32
	view        map[peer.ID]*seenPlayer
	coordinator map[regions.Coord]coordinatorEntry
	lookedUp    map[regions.Coord]time.Time                // last WithLookup run per region
	interested  map[regions.Coord]map[peer.ID]registration // coordinator: who joined, as what, until when
	pending     map[regions.Coord]map[peer.ID]*Update      // coordinator: updates of this interval
	batchSeq    map[regions.Coord]uint64
	uplink      *uplink
	rendezvous  map[regions.Coord]time.Time // next rendezvous per subscribed region
	// joinedOwn is the region the last rendezvous as a member was due
	// for: a player that walks into a region it already followed joins it
	// again at once, as a member now (see register).
	joinedOwn   regions.Coord
	joinedOwnOK bool
	inFlight    map[regions.Coord]bool
	fb          fallback                      // aggregated mode: when to publish directly too
	summaries   map[regions.Coord]*summariser // coordinator: per region, for the neighbours
	own         *summariser                   // this player alone, while it publishes directly
	ownSumAt    regions.Coord

	runCtx context.Context
	wg     sync.WaitGroup

	// streams are the open coordinator streams, both directions. One
	// goroutine per service resets them all when the run ends (a stream
	// blocked on a slow peer would otherwise hold its goroutine, and the
	// in-memory transport ignores deadlines); once closing is set, new
	// streams are reset on arrival.
	streamMu sync.Mutex
	streams  map[network.Stream]struct{}
	closing  bool
}

type regionTopic struct {
	m     *topic.Membership
	until time.Time // zero while needed; else unsubscribe after
}

type seenPlayer struct {
	u       *Update
	arrived time.Time
}

type coordinatorEntry struct {
	id    peer.ID
	until time.Time
}

// New prepares the service on n; Run starts it.
func New(n *node.Node, cfg Config, opts ...Option) (*Service, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("position config: %w", err)
	}
	s := &Service{
		cfg:         cfg,
		grid:        cfg.Grid(),
		h:           n.Host(),
		ps:          n.PubSub(),
		self:        n.ID(),
		log:         n.Logger().With("service", "position"),
		count:       newCounters(),
		tracker:     NewTracker(cfg.Limits()),
		ingest:      NewTracker(cfg.Limits()),
		heard:       newAuthorLimiter(cfg),
		uplinked:    newAuthorLimiter(cfg),
		topics:      map[regions.Coord]*regionTopic{},
		sumTopics:   map[regions.Coord]*regionTopic{},
		summaries:   map[regions.Coord]*summariser{},
		view:        map[peer.ID]*seenPlayer{},
		coordinator: map[regions.Coord]coordinatorEntry{},
		lookedUp:    map[regions.Coord]time.Time{},
		interested:  map[regions.Coord]map[peer.ID]registration{},
		pending:     map[regions.Coord]map[peer.ID]*Update{},
		batchSeq:    map[regions.Coord]uint64{},
		rendezvous:  map[regions.Coord]time.Time{},
		inFlight:    map[regions.Coord]bool{},
		streams:     map[network.Stream]struct{}{},
		fb:          fallback{after: uint64(cfg.FallbackAfter)},
	}
	s.candidates = func(_ context.Context, key string) ([]peer.ID, error) {
		return n.ClosestKnown(key, 8), nil
	}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, fmt.Errorf("position option: %w", err)
		}
	}
	// Registered now, not in Run, so that identify tells peers that connect
	// from now on that this peer runs the protocol; streams that arrive
	// before Run are reset.
	s.h.SetStreamHandler(ProtocolID, s.handleStream)
	return s, nil
}

// ID is the player's peer ID.
func (s *Service) ID() peer.ID { return s.self }

// Config returns the service's configuration.
func (s *Service) Config() Config { return s.cfg }

// Move sets the player's position and velocity as of now; the next tick
// publishes them, stamped with the time it reads them. The first Move (or
// MoveAt) places the player in the world.
func (s *Service) Move(pos, vel Vec) { s.MoveAt(pos, vel, time.Time{}) }

// MoveAt sets the player's position and velocity as they were at time at,
// the time of the game tick that produced them; the next tick publishes
// them stamped with at. A game loop should use it: it and the publisher
// run apart, and on a busy peer a position read a tick or two after its
// game tick, followed by one read right after its tick, spans more ticks
// of walking than the read times are apart, which receivers reject as a
// teleport. Stamped with tick times, n ticks of walking are at least n
// ticks apart.
func (s *Service) MoveAt(pos, vel Vec, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pos, s.vel, s.posAt, s.placed = pos, vel, at, true
}

// stampOf is the time an update is stamped with: when its position was
// true if the game said so and that is not later than now, else now.
func stampOf(posAt, now time.Time) time.Time {
	if posAt.IsZero() || posAt.After(now) {
		return now
	}
	return posAt
}

// Relocate sets the player's position after the game moved it without
// walking (a respawn). Updates from now on carry a higher relocation
// count, which lets receivers take the jump instead of rejecting it as a
// teleport (see Config.MinRelocationInterval for the limits).
func (s *Service) Relocate(pos Vec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pos, s.vel, s.posAt, s.placed = pos, Vec{}, time.Time{}, true
	s.relocations++
}

// Stats returns the counters.
func (s *Service) Stats() Stats {
	// Not under s.mu: a caller sampling many services must not wait for one
	// that is busy joining a topic.
	return s.count.snapshot(s.count.trackerStats())
}

// Run serves the coordinator stream and publishes every Interval until ctx
// ends; then it unsubscribes, stops its goroutines and returns.
func (s *Service) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	s.runCtx = ctx
	s.mu.Unlock()
	// The watcher ends every open stream as soon as the run ends, even
	// while this goroutine is still inside a tick (a blocked uplink write).
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		<-ctx.Done()
		s.resetStreams()
	}()
	defer func() {
		s.h.RemoveStreamHandler(ProtocolID)
		cancel()
		<-watched
		s.shutdown()
		s.wg.Wait()
		// Streams a rendezvous opened after the watcher ran.
		s.resetStreams()
	}()
	ticker := time.NewTicker(s.cfg.Interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			s.tick(ctx)
		}
	}
}

// track adds an open stream to the set the watcher resets; false (and the
// stream reset) once the run is over.
func (s *Service) track(st network.Stream) bool {
	s.streamMu.Lock()
	closing := s.closing
	if !closing {
		s.streams[st] = struct{}{}
	}
	s.streamMu.Unlock()
	if closing {
		_ = st.Reset()
		return false
	}
	return true
}

func (s *Service) untrack(st network.Stream) {
	s.streamMu.Lock()
	delete(s.streams, st)
	s.streamMu.Unlock()
}

// resetStreams marks the service closing and resets every tracked stream,
// outside the lock: a reset on the in-memory transport waits for the
// stream's delivery goroutine.
func (s *Service) resetStreams() {
	s.streamMu.Lock()
	s.closing = true
	open := make([]network.Stream, 0, len(s.streams))
	for st := range s.streams {
		open = append(open, st)
	}
	clear(s.streams)
	s.streamMu.Unlock()
	for _, st := range open {
		_ = st.Reset()
	}
}

// shutdown leaves the topics and closes the uplink. The read loops are
// waited for outside both locks: they take s.mu.
func (s *Service) shutdown() {
	s.topicMu.Lock()
	var left []*topic.Membership
	for _, ts := range []map[regions.Coord]*regionTopic{s.topics, s.sumTopics} {
		for _, rt := range ts {
			left = append(left, rt.m)
		}
		clear(ts)
	}
	s.topicMu.Unlock()
	s.mu.Lock()
	if s.uplink != nil {
		s.uplink.close()
		s.uplink = nil
	}
	s.mu.Unlock()
	for _, m := range left {
		if err := m.Leave(); err != nil {
			s.log.Debug("leave position topic", "topic", m.Name(), "err", err)
		}
	}
}

// tick is one interval: adjust subscriptions, publish (or send to the
// coordinator), publish batches this peer coordinates, start due
// rendezvous, and expire old state. A peer without a placed player (a
// headless peer, or a player before its first Move) does the
// coordinator's part only: players send it their updates all the same
// when it coordinates their region.
func (s *Service) tick(ctx context.Context) {
	now := s.cfg.Now()
	s.mu.Lock()
	placed, pos := s.placed, s.pos
	s.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	if !placed {
		s.mu.Lock()
		batches := s.takeBatches()
		sums := s.takeSummaries(batches, now)
		s.expire(now)
		s.mu.Unlock()
		s.publishBatches(ctx, batches)
		s.publishSummaries(ctx, sums, false)
		return
	}
	s.updateSubscriptions(ctx, now, pos)
	s.refreshCoordinators(now)
	// Joining topics can take a while on a busy peer, and the player moves
	// meanwhile: stamp the update with the time its position was true (its
	// game tick's, see MoveAt) or else the time it is read, or receivers
	// would judge a long move against a short interval. Read the clock
	// under the lock, with the position: a tick held up waiting for it
	// while Move goes on would otherwise send a position newer than its
	// stamp (a walk that looks too fast, rejected as a teleport).
	s.mu.Lock()
	now = s.cfg.Now()
	s.seq++
	own := s.grid.RegionOf(s.pos)
	u := &Update{
		Player: []byte(s.self), Seq: s.seq,
		X: s.pos.X, Y: s.pos.Y, Vx: s.vel.X, Vy: s.vel.Y,
		RegionX: int32(own.X), RegionY: int32(own.Y),
		SentUnixMicro: stampOf(s.posAt, now).UnixMicro(), Relocations: s.relocations,
	}
	batches := s.takeBatches()
	sums := s.takeSummaries(batches, now)
	if !s.joinedOwnOK || s.joinedOwn != own {
		if _, subscribed := s.rendezvous[own]; subscribed {
			s.rendezvous[own] = now
			s.joinedOwn, s.joinedOwnOK = own, true
		}
	}
	if ctx.Err() == nil {
		s.startRendezvous(ctx, now)
	}
	s.expire(now)
	s.mu.Unlock()

	if s.cfg.Aggregate {
		s.sendAggregated(ctx, own, u)
	} else {
		s.publish(ctx, own, &Envelope{Body: &Envelope_Update{Update: u}})
		s.count.published.Add(1)
	}
	s.publishBatches(ctx, batches)
	s.publishSummaries(ctx, sums, false)
}

// publishBatches publishes the batches of the regions this peer
// coordinates, each on its region's topic.
func (s *Service) publishBatches(ctx context.Context, batches []*Batch) {
	for _, b := range batches {
		s.publish(ctx, coordOf(b.RegionX, b.RegionY), &Envelope{Body: &Envelope_Batch{Batch: b}})
		s.count.batches.Add(1)
		s.count.batchEntries.Add(uint64(len(b.Updates)))
	}
}

func (s *Service) publish(ctx context.Context, c regions.Coord, env *Envelope) {
	s.publishTo(ctx, c, false, env)
}

// publishTo publishes on region c's position topic, or its summary topic.
func (s *Service) publishTo(ctx context.Context, c regions.Coord, summary bool, env *Envelope) {
	data, err := proto.Marshal(env)
	if err != nil {
		s.log.Error("encode position message", "err", err)
		return
	}
	s.topicMu.Lock()
	rt, err := s.joinTopicOf(c, summary)
	s.topicMu.Unlock()
	if err != nil {
		s.log.Warn("join position topic", "region", c, "err", err)
		return
	}
	if err := rt.m.Publish(ctx, data); err != nil && ctx.Err() == nil {
		s.log.Warn("publish position", "region", c, "err", err)
	}
}

// joinTopic returns the region's topic, joining it and registering its
// validator on first use. Called with s.topicMu held (not s.mu: the pubsub
// calls wait for its event loop, and the validators need s.mu meanwhile).
func (s *Service) joinTopic(c regions.Coord) (*regionTopic, error) {
	return s.joinTopicOf(c, false)
}

// joinTopicOf is joinTopic for the position topic or the summary topic.
func (s *Service) joinTopicOf(c regions.Coord, summary bool) (*regionTopic, error) {
	joined, name := s.topics, Topic(s.cfg.World, c)
	if summary {
		joined, name = s.sumTopics, SummaryTopic(s.cfg.World, c, s.cfg.Summaries)
	}
	if rt, ok := joined[c]; ok {
		return rt, nil
	}
	m, err := topic.Join(topic.Config{PubSub: s.ps, Name: name, Validate: s.validator(c, summary), Inline: true, Score: TopicScoreParams()})
	if err != nil {
		return nil, err
	}
	rt := &regionTopic{m: m}
	joined[c] = rt
	return rt, nil
}

// updateSubscriptions subscribes to every region the player needs now and
// drops those it has not needed for Linger. Only the tick goroutine calls
// it; it takes s.topicMu, and s.mu only for the rendezvous schedule.
func (s *Service) updateSubscriptions(ctx context.Context, now time.Time, pos Vec) {
	s.topicMu.Lock()
	defer s.topicMu.Unlock()
	need := map[regions.Coord]bool{}
	var joined, left []regions.Coord
	defer func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range joined {
			s.rendezvous[c] = now
		}
		for _, c := range left {
			delete(s.rendezvous, c)
		}
	}()
	full, summarised := s.interest(pos)
	for _, c := range full {
		need[c] = true
		rt, err := s.joinTopic(c)
		if err != nil {
			s.log.Warn("join position topic", "region", c, "err", err)
			continue
		}
		rt.until = time.Time{}
		if rt.m.Subscribed() {
			continue
		}
		if err := rt.m.Subscribe(ctx, 256, s.deliver); err != nil {
			s.log.Warn("subscribe position topic", "region", c, "err", err)
			continue
		}
		joined = append(joined, c)
	}
	left = append(left, s.lingerOut(s.topics, need, now)...)
	sj, sl := s.updateSummarySubscriptions(ctx, now, summarised)
	joined = append(joined, sj...)
	left = append(left, sl...)
	// A region left on one topic and still followed on the other keeps
	// its rendezvous.
	left = slices.DeleteFunc(left, func(c regions.Coord) bool {
		return subscribed(s.topics[c]) || subscribed(s.sumTopics[c])
	})
}

func subscribed(rt *regionTopic) bool { return rt != nil && rt.m.Subscribed() }

// lingerOut unsubscribes from the topics of ts not needed for Linger and
// returns their regions. Called with s.topicMu held.
func (s *Service) lingerOut(ts map[regions.Coord]*regionTopic, need map[regions.Coord]bool, now time.Time) []regions.Coord {
	var left []regions.Coord
	for c, rt := range ts {
		if need[c] || !rt.m.Subscribed() {
			continue
		}
		if rt.until.IsZero() {
			rt.until = now.Add(s.cfg.Linger)
		} else if now.After(rt.until) {
			rt.m.Unsubscribe()
			left = append(left, c)
		}
	}
	return left
}

// deliver takes one validated message of a position or summary topic
// into the view.
func (s *Service) deliver(msg *pubsub.Message) {
	// This player's own updates carry no accepted entries; its own
	// batches (as a coordinator) carry the other players'.
	accepted, _ := msg.ValidatorData.(accepted)
	now := s.cfg.Now()
	s.mu.Lock()
	for _, u := range accepted.updates {
		id := peer.ID(u.Player)
		if old, ok := s.view[id]; !ok || old.u.GetSeq() < u.GetSeq() {
			s.view[id] = &seenPlayer{u: u, arrived: now}
		}
	}
	s.mu.Unlock()
	for _, u := range accepted.updates {
		s.count.delivered.Add(1)
		if s.onDeliver != nil {
			s.onDeliver(Delivery{
				Player: peer.ID(u.Player), Region: coordOf(u.RegionX, u.RegionY), Seq: u.Seq,
				Sent: time.UnixMicro(u.SentUnixMicro), Arrived: now, Batched: accepted.batched, Summary: accepted.summary,
			})
		}
	}
}

// accepted is what the validator hands to the reader: the updates it let
// through.
type accepted struct {
	updates []*Update
	batched bool
	summary bool
}

// validator checks a message on region c's topic (or summary topic):
// size, decoding, author, region, then each update against the Tracker.
func (s *Service) validator(c regions.Coord, summary bool) pubsub.ValidatorEx {
	return func(_ context.Context, _ peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
		var v Verdict
		var reason string
		var acc accepted
		if summary {
			v, reason, acc = s.checkSummary(c, msg)
		} else {
			v, reason, acc = s.check(c, msg)
			if v == Accept && len(acc.updates) > 0 {
				s.count.positionBytesIn.Add(uint64(len(msg.GetData())))
			}
		}
		s.count.verdict(v, reason)
		s.noteEcho(msg)
		switch v {
		case Accept:
			msg.ValidatorData = acc
			return pubsub.ValidationAccept
		case Ignore:
			return pubsub.ValidationIgnore
		default:
			s.log.Debug("position update rejected", "region", c, "author", msg.GetFrom(), "reason", reason)
			return pubsub.ValidationReject
		}
	}
}

func (s *Service) check(c regions.Coord, msg *pubsub.Message) (Verdict, string, accepted) {
	if len(msg.GetData()) > MaxBatchBytes {
		return Reject, ReasonTooLarge, accepted{}
	}
	env, err := DecodeEnvelope(msg.GetData())
	if err != nil {
		return Reject, ReasonMalformed, accepted{}
	}
	author := msg.GetFrom()
	now := s.cfg.Now()
	switch b := env.Body.(type) {
	case *Envelope_Update:
		u := b.Update
		if peer.ID(u.Player) != author {
			return Reject, ReasonForged, accepted{}
		}
		if coordOf(u.RegionX, u.RegionY) != c {
			return Reject, ReasonWrongRegion, accepted{}
		}
		if author == s.self {
			return Accept, "", accepted{}
		}
		if v, reason := s.admit(author); v != Accept {
			return v, reason, accepted{}
		}
		s.mu.Lock()
		if !s.heard.Allow(author, msg.GetTopic(), now) {
			s.mu.Unlock()
			return Ignore, ReasonRateLimited, accepted{}
		}
		v, reason := s.tracker.Observe(author, u, now)
		s.count.setTracker(s.tracker.Stats())
		s.mu.Unlock()
		if v != Accept {
			return v, reason, accepted{}
		}
		return Accept, "", accepted{updates: []*Update{u}}
	case *Envelope_Batch:
		bt := b.Batch
		if peer.ID(bt.Coordinator) != author {
			return Reject, ReasonForged, accepted{}
		}
		if coordOf(bt.RegionX, bt.RegionY) != c {
			return Reject, ReasonWrongRegion, accepted{}
		}
		if author == s.self {
			acc := accepted{batched: true}
			for _, u := range bt.Updates {
				if peer.ID(u.Player) != s.self {
					acc.updates = append(acc.updates, u)
				}
			}
			return Accept, "", acc
		}
		if v, reason := s.admit(author); v != Accept {
			return v, reason, accepted{}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		defer func() { s.count.setTracker(s.tracker.Stats()) }()
		if !s.heard.Allow(author, msg.GetTopic(), now) {
			return Ignore, ReasonRateLimited, accepted{}
		}
		if e, ok := s.coordinator[c]; ok && e.id != author {
			// By this peer's view someone else coordinates the region:
			// placement is changing. The other players' entries are the
			// author's word only: drop them without blame. Its own entry
			// is as good as a direct update, the message being signed by
			// it: take that, or a new coordinator's player would go
			// unheard until every receiver names it.
			return s.authorsOwnEntry(c, author, bt, now)
		}
		acc := accepted{batched: true}
		for _, u := range bt.Updates {
			if coordOf(u.RegionX, u.RegionY) != c {
				return Reject, ReasonWrongRegion, accepted{}
			}
			if peer.ID(u.Player) == s.self {
				continue
			}
			v, reason := s.tracker.Observe(peer.ID(u.Player), u, now)
			switch v {
			case Reject:
				return Reject, reason, accepted{}
			case Accept:
				acc.updates = append(acc.updates, u)
			}
		}
		if len(acc.updates) == 0 {
			return Ignore, ReasonDuplicate, accepted{}
		}
		return Accept, "", acc
	}
	return Reject, ReasonMalformed, accepted{}
}

// ReasonNotCoordinator marks a batch from a peer that does not coordinate
// the region by the receiver's view.
const ReasonNotCoordinator = "not_coordinator"

// authorsOwnEntry takes, of a batch from a peer that does not coordinate
// region c by this peer's view, the entry of its author alone. Called
// with s.mu held.
func (s *Service) authorsOwnEntry(c regions.Coord, author peer.ID, bt *Batch, now time.Time) (Verdict, string, accepted) {
	var own *Update
	for _, u := range bt.Updates {
		if peer.ID(u.Player) == author {
			own = u
			break
		}
	}
	if own == nil {
		return Ignore, ReasonNotCoordinator, accepted{}
	}
	if coordOf(own.RegionX, own.RegionY) != c {
		return Reject, ReasonWrongRegion, accepted{}
	}
	if v, reason := s.tracker.Observe(author, own, now); v != Accept {
		return v, reason, accepted{}
	}
	return Accept, "", accepted{updates: []*Update{own}, batched: true}
}

// Seen is another player as this player sees it now.
type Seen struct {
	Player  peer.ID
	Region  regions.Coord
	Pos     Vec // dead-reckoned to now
	Vel     Vec
	Seq     uint64
	Updated time.Time // arrival of the newest update
}

// View lists the players in the regions within Radius of the player's own,
// positions dead-reckoned to now, sorted by peer ID.
func (s *Service) View(now time.Time) []Seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	own := s.grid.RegionOf(s.pos)
	out := make([]Seen, 0, len(s.view))
	for id, sp := range s.view {
		r := coordOf(sp.u.RegionX, sp.u.RegionY)
		if !Within(own, r, s.cfg.Radius) {
			continue
		}
		vel := Vec{sp.u.Vx, sp.u.Vy}
		out = append(out, Seen{
			Player: id, Region: r, Vel: vel, Seq: sp.u.Seq, Updated: sp.arrived,
			Pos: DeadReckon(Vec{sp.u.X, sp.u.Y}, vel, now.Sub(sp.arrived), s.cfg.MaxExtrapolation),
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Player < out[j].Player })
	return out
}

// DeadReckon extrapolates pos by vel (units per second) over elapsed, at
// most limit, in integer arithmetic.
func DeadReckon(pos, vel Vec, elapsed, limit time.Duration) Vec {
	elapsed = min(max(elapsed, 0), limit)
	us := elapsed.Microseconds()
	return Vec{
		X: sat(pos.X, int32(int64(vel.X)*us/1e6)),
		Y: sat(pos.Y, int32(int64(vel.Y)*us/1e6)),
	}
}

// expire drops players silent for Expire from the view and tracker state
// older than ten times that. Called with s.mu held.
func (s *Service) expire(now time.Time) {
	for id, sp := range s.view {
		if now.Sub(sp.arrived) > s.cfg.Expire {
			delete(s.view, id)
		}
	}
	s.tracker.Forget(now.Add(-10 * s.cfg.Expire))
	s.forgetLookups(now)
	s.ingest.Forget(now.Add(-10 * s.cfg.Expire))
	for c, m := range s.interested {
		for id, reg := range m {
			if now.After(reg.until) {
				delete(m, id)
			}
		}
		if len(m) == 0 {
			delete(s.interested, c)
		}
	}
}
