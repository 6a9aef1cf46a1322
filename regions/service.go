package regions

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/node"
	"github.com/overworld-p2p/overworld/node/pbframe"
	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// Service runs the region protocol on one node: it serves the regions this
// peer coordinates or replicates, answers everyone else with redirects, and
// is the client through which the game reads and updates objects.
type Service struct {
	tr Transport
	// h names this peer (h.ID()), as when it was the libp2p host.
	h       interface{ ID() peer.ID }
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	spawnMu sync.Mutex // orders spawn against Close

	mu sync.Mutex
	// slots holds a slot per region this peer took a role in: one it is
	// placed to coordinate (an acquisition), one a verified coordinator
	// replicates to it, one handed to it. Asks alone never make one
	// (existingSlot), and regions are bounded by the world's size, so the
	// map is too. A slot is never dropped: goroutines off the loop hold
	// it between their steps on the loop, and a region's second slot
	// would be a second machine for it.
	slots map[Coord]*slot

	// topicMu guards topics. It is held across gossipsub calls (joining a
	// topic, subscribing), which can take long on a busy peer, so it is not
	// s.mu: role and placement questions must not wait for them.
	topicMu sync.Mutex
	topics  map[Coord]*regionTopic

	hashes hashCache

	candMu sync.Mutex
	cand   []peer.ID // region peers known, refreshed by candidateLoop

	// live is the liveness table (liveness.go), the loop's alone: dead
	// peers, replicas left out after answering maxStrikes times without
	// acknowledging or proving anything, suspects probed for requests.
	live *liveness
	// dead is the loop's latest copy of live's dead peers, for placement
	// asked on any goroutine (liveness.go deadView).
	dead atomic.Pointer[deadView]

	// leases: the newest lease ID known per region (trust.go).
	leases newestLeases
	// refusalLog rate-limits the log lines of refusals (trust.go refuse).
	refusalLog refusalLimiter

	reported map[Coord]Role // last roles told to OnRoleChange (the loop only)

	// The loop's inputs (loop.go) besides its timer.
	wake       chan wakeup   // regions to look at now (nudges, deaths)
	downed     chan peer.ID  // peers whose last connection closed
	revived    chan peer.ID  // dead peers a first connection opened to
	steps      chan loopStep // machine steps of inbound messages
	acks       chan func()   // outcomes of this peer's own exchanges
	stopNotify func()
	closed     sync.Once
}

// slot is one region's machine at this peer plus the transport's own
// bookkeeping around it, both the Service's loop's alone (loop.go).
// Readers off the loop read view, what the loop last published.
type slot struct {
	view      atomic.Pointer[regionView]
	m         *machine
	acquiring bool
	// acquired is closed when the running acquisition ends: requests that
	// reach this peer meanwhile wait for it instead of being sent away.
	acquired chan struct{}
	source   peer.ID // hand-off source while the transfer runs
	// driven is the acquisition the Service's loop drives (loop only).
	driven    *driven
	lastNudge time.Time
	lastCheck time.Time // a replica's last check with its coordinator
	// lastCompare: when a coordinator last compared copies under a new
	// lease (acquire.go compareCopies).
	lastCompare time.Time
	// serial counts the assignments this peer signed for the region as
	// coordinator; assigned is the last one, reused while it holds (trust.go).
	serial   uint64
	assigned *pb.Assignment
	// waiters are the callers waiting for the machine's answer to a
	// request (serveRequestOnce), handoffs those waiting for a hand-off's
	// reply (serveHandoff), by the peer that asked. Only callers still
	// waiting are here, each for at most its request timeout: both are
	// bounded by the streams being served.
	waiters  map[waitKey]chan *pb.Reply
	handoffs map[peer.ID]chan *pb.HandoffReply
	// events are the committed batches waiting to be published, in commit
	// order; publishing says a goroutine publishes them (queuePublish).
	// Bounded by the batches committed while one is published.
	events     []*pb.Event
	publishing bool
}

// waitKey names a request whose answer a caller waits for: the player
// and its request ID (a machine answer names both).
type waitKey struct {
	from peer.ID
	id   string
}

// wait makes ch the one waiting for k's answer. A retry of a request
// that is still waited for (the player gave up on the first answer and
// sent it again) takes its place: the earlier caller is told to retry,
// and the answer goes to the latest. On the loop.
func (sl *slot) wait(k waitKey, ch chan *pb.Reply) {
	if sl.waiters == nil {
		sl.waiters = map[waitKey]chan *pb.Reply{}
	}
	if old := sl.waiters[k]; old != nil {
		// Entries leave the table when answered: old's buffer is free.
		old <- &pb.Reply{Status: pb.Status_STATUS_RETRY, Error: "the request was sent again"}
	}
	sl.waiters[k] = ch
}

// unwait removes ch as k's waiter and reports whether it still was (not
// answered, nor replaced by a retry). On the loop.
func (sl *slot) unwait(k waitKey, ch chan *pb.Reply) bool {
	if sl.waiters[k] != ch {
		return false
	}
	delete(sl.waiters, k)
	return true
}

// feedLease gives sl's machine the commit gate's current answer for c
// (the machine does not ask the gate itself), when it coordinates: only a
// coordinator's steps use it. Only then is the gate asked, as when the
// machine asked it: a gate may act on being asked (the tests' lease
// service grants a free lease to the first peer that asks). On the loop,
// before each machine step.
func (s *Service) feedLease(c Coord, sl *slot) {
	if sl.m.role == pb.Role_ROLE_COORDINATOR {
		sl.m.SetLease(s.cfg.Gate.Allowed(c))
	}
}

// feedLeaseTaking is feedLease before a step that makes this peer the
// coordinator (TakeOver, Install).
func (s *Service) feedLeaseTaking(c Coord, sl *slot) { sl.m.SetLease(s.cfg.Gate.Allowed(c)) }

// New starts the region service on n, over libp2p.
func New(n *node.Node, cfg Config) (*Service, error) {
	if n == nil {
		return nil, errors.New("regions: node is nil")
	}
	if cfg.Logger == nil {
		cfg.Logger = n.Logger()
	}
	filled := cfg // for the request timeout the transport needs
	if err := filled.fill(); err != nil {
		return nil, fmt.Errorf("regions config: %w", err)
	}
	return NewWithTransport(NewLibp2pTransport(n, filled.RequestTimeout), cfg)
}

// NewWithTransport starts the region service over tr (see Transport).
func NewWithTransport(tr Transport, cfg Config) (*Service, error) {
	if tr == nil {
		return nil, errors.New("regions: transport is nil")
	}
	if err := cfg.fill(); err != nil {
		return nil, fmt.Errorf("regions config: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Service{
		tr: tr, h: tr, cfg: cfg, log: cfg.Logger.With("world", cfg.World),
		ctx: ctx, cancel: cancel,
		slots:    map[Coord]*slot{},
		topics:   map[Coord]*regionTopic{},
		live:     newLiveness(cfg.DeadFor, cfg.ProbeTimeout, maxDead),
		reported: map[Coord]Role{},
		wake:     make(chan wakeup, 256),
		downed:   make(chan peer.ID, 256),
		revived:  make(chan peer.ID, 256),
		steps:    make(chan loopStep),
		acks:     make(chan func()),
	}
	m, err := newMetrics(s, cfg.Registerer)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("regions metrics: %w", err)
	}
	s.metrics = m
	s.dead.Store(s.live.view())
	// Connection notifications must not wait (libp2p delivers them while
	// it sets a connection up): they are queued for the loop, and one
	// dropped when the queue is full is made good by the next message.
	s.stopNotify = tr.Notify(func(p peer.ID) {
		if s.alive(p) {
			return // nothing to change
		}
		select {
		case s.revived <- p:
		default:
		}
	}, func(p peer.ID) {
		select {
		case s.downed <- p:
		default:
		}
	})
	tr.Serve(s.serveExchange)
	s.wg.Add(2)
	go s.loop()
	go s.candidateLoop()
	return s, nil
}

// Close stops serving and leaves the region topics. The node stays up.
func (s *Service) Close() error {
	s.closed.Do(func() {
		s.tr.Serve(nil)
		s.stopNotify()
		s.spawnMu.Lock()
		s.cancel()
		s.spawnMu.Unlock()
		s.closeTopics()
		s.wg.Wait()
	})
	return nil
}

// spawn runs f on a goroutine the service waits for on Close; after Close
// has begun it does nothing.
func (s *Service) spawn(f func()) {
	s.spawnMu.Lock()
	defer s.spawnMu.Unlock()
	if s.ctx.Err() != nil {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

func (s *Service) key(c Coord) string { return Key(s.cfg.World, c) }

func (s *Service) slot(c Coord) *slot {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := s.slots[c]
	if sl == nil {
		sl = &slot{m: newMachine(s.h.ID(), c, s.cfg.Proofs, s.cfg.Map, s.log)}
		sl.m.maxHoldMs = s.cfg.MaxLockHold.Milliseconds()
		s.slots[c] = sl
	}
	return sl
}

// existingSlot returns region c's slot if this peer has one. Messages that
// only ask (info, requests, nudges, cache queries) use it, so that nobody
// can make this peer keep state for every region of the world.
func (s *Service) existingSlot(c Coord) *slot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.slots[c]
}

func (s *Service) heldRegions() []Coord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Coord, 0, len(s.slots))
	for c := range s.slots {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].X != out[j].X {
			return out[i].X < out[j].X
		}
		return out[i].Y < out[j].Y
	})
	return out
}

// --- liveness -------------------------------------------------------------

// The liveness table is the loop's (liveness.go); the methods named
// "...OnLoop" run there only. The others may be called on any goroutine
// but the loop: they hand the change to the loop, or read the dead
// peers it last published.

// markDeadOnLoop leaves p out of placement until it shows up again or
// DeadFor passes, and drops it from the DHT's routing table (on a
// goroutine: the routing table's lock is the DHT's too, and the loop must
// not wait for it).
func (s *Service) markDeadOnLoop(p peer.ID) {
	if p == "" || p == s.h.ID() {
		return
	}
	if s.live.markDead(p, time.Now()) {
		s.log.Debug("peer unreachable", "peer", p)
	}
	s.publishDead()
	s.spawn(func() { s.tr.RemovePeer(p) })
}

// markDead is markDeadOnLoop from another goroutine; it returns once the
// loop marked p (or the Service closed).
func (s *Service) markDead(p peer.ID) {
	if p == "" || p == s.h.ID() {
		return
	}
	s.onLoop(func() { s.markDeadOnLoop(p) })
}

// heardOnLoop records a sign of life from p.
func (s *Service) heardOnLoop(p peer.ID) {
	if s.live.heard(p) {
		s.publishDead()
	}
}

// heard records a sign of life from p (an answer, or a message from it),
// from a goroutine but the loop: only a peer the loop has dead is news,
// handed to the loop before heard returns, so that what this goroutine
// asks next sees p alive.
func (s *Service) heard(p peer.ID) {
	if s.alive(p) {
		return
	}
	s.onLoop(func() { s.heardOnLoop(p) })
}

// publishDead gives the readers off the loop the dead peers as they
// stand now (on the loop, after each change).
func (s *Service) publishDead() { s.dead.Store(s.live.view()) }

// excludeOnLoop leaves p out as replica for DeadFor; why says what it did.
func (s *Service) excludeOnLoop(c Coord, p peer.ID, why string) {
	s.live.exclude(p, time.Now())
	s.refuse(c, p, why, refusedReplicaExcluded)
}

// replicaChoiceOnLoop is the best replica for region c in this peer's
// view: the closest live peer but this one, leaving out excluded replicas
// and skip.
func (s *Service) replicaChoiceOnLoop(c Coord, skip ...peer.ID) peer.ID {
	order := s.placement(c, skip...)
	return replicaIn(order, s.h.ID(), s.live.excludedAmong(order, s.h.ID(), time.Now()))
}

// alive reports whether p is not dead in the loop's latest published
// view (on the loop: its table as it stands).
func (s *Service) alive(p peer.ID) bool {
	if p == s.h.ID() {
		return true
	}
	return s.dead.Load().alive(p, time.Now())
}

// servesRegions reports whether p is known (via identify) to speak the
// region protocol: the DHT also holds bootstrap nodes, which do not.
func (s *Service) servesRegions(p peer.ID) bool { return s.tr.ServesRegions(p) }

// topicPeers are the peers this peer knows subscribed to region c's event
// topic: its members.
func (s *Service) topicPeers(c Coord) []peer.ID { return s.tr.TopicPeers(EventTopic(s.cfg.World, c)) }

// candidates are the live region peers this peer knows, itself included.
// The list of known region peers is rebuilt in the background every
// candidateTTL: reading the routing table contends with the DHT and can
// block for a long while on a busy peer, which a request must not.
// Deaths noticed since apply at once.
func (s *Service) candidates() []peer.ID {
	s.candMu.Lock()
	list := s.cand
	s.candMu.Unlock()
	if list == nil {
		list = s.refreshCandidates()
	}
	out := make([]peer.ID, 0, len(list))
	for _, p := range list {
		if s.alive(p) {
			out = append(out, p)
		}
	}
	return out
}

// candidateTTL is the period of the background refresh of candidates.
const candidateTTL = 100 * time.Millisecond

func (s *Service) refreshCandidates() []peer.ID {
	list := s.collectCandidates()
	s.candMu.Lock()
	s.cand = list
	s.candMu.Unlock()
	return list
}

func (s *Service) candidateLoop() {
	defer s.wg.Done()
	tick := time.NewTicker(candidateTTL)
	defer tick.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
			s.refreshCandidates()
		}
	}
}

func (s *Service) collectCandidates() []peer.ID {
	seen := map[peer.ID]bool{s.h.ID(): true}
	out := []peer.ID{s.h.ID()}
	consider := func(p peer.ID) {
		if seen[p] {
			return
		}
		seen[p] = true
		if s.alive(p) && s.servesRegions(p) && s.tr.CanCoordinate(p) { // not behind NAT (node.CanCoordinate)
			out = append(out, p)
		}
	}
	for _, p := range s.tr.RoutingPeers() {
		consider(p)
	}
	for _, p := range s.tr.ConnectedPeers() {
		consider(p)
	}
	return out
}

// placement orders the live candidates by distance to the region's key.
func (s *Service) placement(c Coord, exclude ...peer.ID) []peer.ID {
	cands := s.candidates()
	out := cands[:0]
	for _, p := range cands {
		if !containsPeer(exclude, p) {
			out = append(out, p)
		}
	}
	out = s.hashes.sortByDistance(s.key(c), out)
	if len(out) > 1 && !s.eligible(c) {
		// A peer whose gate cannot let it commit ranks itself last, so
		// that it hands the region on (and is never chosen as the next
		// coordinator by itself); it stays in the list as a last resort.
		for i, p := range out {
			if p == s.h.ID() {
				copy(out[i:], out[i+1:])
				out[len(out)-1] = p
				break
			}
		}
	}
	return out
}

// eligible reports whether this peer's gate lets it coordinate region c
// (see Eligibility).
func (s *Service) eligible(c Coord) bool {
	e, ok := s.cfg.Gate.(Eligibility)
	return s.tr.CanCoordinate(s.h.ID()) && (!ok || e.Eligible(c)) // behind NAT: never (see serveRequest)
}

func containsPeer(list []peer.ID, p peer.ID) bool {
	for _, q := range list {
		if q == p {
			return true
		}
	}
	return false
}

// closer reports whether a is closer than b to the region's key.
func (s *Service) closer(c Coord, a, b peer.ID) bool {
	return s.hashes.closer(s.key(c), a, b)
}

// Coordinator returns the coordinator and replica of region c as this
// peer's view of the live peers says (either may be this peer). It asks
// nobody; Locate refreshes the view with a network lookup.
func (s *Service) Coordinator(c Coord) (coordinator, replica peer.ID) {
	order := s.placement(c)
	if len(order) > 1 {
		return order[0], order[1]
	}
	return order[0], ""
}

// Locate looks the region's key up on the DHT, which also connects to the
// peers found, then answers as Coordinator.
func (s *Service) Locate(ctx context.Context, c Coord) (coordinator, replica peer.ID, err error) {
	if !s.cfg.Contains(c) {
		return "", "", fmt.Errorf("locate region %s: outside the %dx%d world", c, s.cfg.Width, s.cfg.Height)
	}
	found, err := s.tr.ClosestPeers(ctx, s.key(c), 8)
	if err != nil {
		return "", "", fmt.Errorf("locate region %s: %w", c, err)
	}
	// Dial the peers found all at once: one after another, each up to
	// ProbeTimeout on a busy network, a lookup of eight took seconds.
	var dials sync.WaitGroup
	for _, p := range found {
		if p == s.h.ID() || s.tr.Connected(p) {
			continue
		}
		dials.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, s.cfg.ProbeTimeout)
			defer cancel()
			if err := s.tr.Connect(cctx, p); err == nil {
				s.heard(p)
			}
		})
	}
	dials.Wait()
	coordinator, replica = s.Coordinator(c)
	return coordinator, replica, nil
}

// probe checks that p answers on the region protocol, and has the loop
// mark it dead if it does not; from a goroutine but the loop.
func (s *Service) probe(p peer.ID) bool {
	if s.ping(p) {
		return true
	}
	s.markDead(p)
	return false
}

// ping is the network half of probe: whether p answers a ping within
// ProbeTimeout (an answer is a sign of life, see call).
func (s *Service) ping(p peer.ID) bool {
	if p == s.h.ID() {
		return true
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ProbeTimeout)
	defer cancel()
	_, err := s.call(ctx, p, Coord{}, &pb.Message{Body: &pb.Message_Ping{Ping: &pb.Ping{}}})
	return err == nil
}

// --- transport --------------------------------------------------------------

func (s *Service) envelope(c Coord, m *pb.Message) *pb.Message {
	m.World, m.X, m.Y = s.cfg.World, int32(c.X), int32(c.Y)
	return m
}

// call sends one message to p and returns its one reply (Transport.Call).
// A failure to reach p (dial, negotiation, reset, timeout) is an error;
// success is a sign of life.
func (s *Service) call(ctx context.Context, p peer.ID, c Coord, m *pb.Message) (*pb.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	var req bytes.Buffer
	if err := writeRequest(&req, s.cfg.Token(), s.envelope(c, m)); err != nil {
		return nil, fmt.Errorf("send to %s: %w", p, err)
	}
	body, err := s.tr.Call(ctx, p, req.Bytes())
	if err != nil {
		return nil, err
	}
	reply, err := decodeMessage(body)
	if err != nil {
		return nil, fmt.Errorf("reply from %s: %w", p, err)
	}
	s.heard(p)
	return reply, nil
}

// serveExchange is the Service's Handler: one inbound request, answered
// (an answer that cannot be encoded is nil, which the transport resets).
func (s *Service) serveExchange(from peer.ID, r *bufio.Reader, watch func() <-chan struct{}) []byte {
	reply := s.serveFrameWatched(from, r, watch)
	body, err := proto.Marshal(reply)
	if err != nil {
		s.log.Warn("encode region reply", "err", err)
		return nil
	}
	return body
}

// serveFrame reads, checks and answers one request: the sender's token
// frame first, checked before the message frame is read (so a peer without
// a valid token makes this peer read and hold at most a token's worth),
// then the message. Anything malformed gets a BAD_REQUEST reply and changes
// nothing.
func (s *Service) serveFrame(from peer.ID, r *bufio.Reader) *pb.Message {
	return s.serveFrameWatched(from, r, nil)
}

// serveFrameWatched is serveFrame; watch, if set, starts watching the
// stream once the request is read and returns what closes when its caller
// goes away (only a player's request waits long enough to care).
func (s *Service) serveFrameWatched(from peer.ID, r *bufio.Reader, watch func() <-chan struct{}) *pb.Message {
	tok, err := pbframe.Read(r, MaxTokenSize)
	if err == nil {
		if err := s.cfg.Authorizer.Authorize(from, tok); err != nil {
			s.metrics.denied.Inc()
			return s.envelope(Coord{}, &pb.Message{Body: &pb.Message_Reply{Reply: &pb.Reply{
				Status: pb.Status_STATUS_DENIED, Error: truncate(err.Error()),
			}}})
		}
	}
	var msg *pb.Message
	if err == nil {
		msg, err = readMessage(r)
	}
	if err != nil {
		s.metrics.refused.WithLabelValues(refusedBounds).Inc()
		return s.envelope(Coord{}, &pb.Message{Body: &pb.Message_Reply{Reply: &pb.Reply{
			Status: pb.Status_STATUS_BAD_REQUEST, Error: truncate(err.Error()),
		}}})
	}
	var gone <-chan struct{}
	if watch != nil && msg.GetRequest() != nil {
		gone = watch()
	}
	return s.serve(from, msg, gone)
}

func truncate(s string) string {
	if len(s) > 500 {
		return s[:500]
	}
	return s
}

func badRequest(c Coord, format string, args ...any) *pb.Message {
	return &pb.Message{Body: &pb.Message_Reply{Reply: &pb.Reply{
		Status: pb.Status_STATUS_BAD_REQUEST, Error: truncate(fmt.Sprintf(format, args...)),
	}}}
}

// serve answers msg from from; gone, if not nil, closes when the caller
// stops waiting for the answer.
func (s *Service) serve(from peer.ID, msg *pb.Message, gone <-chan struct{}) *pb.Message {
	c := Coord{X: int(msg.X), Y: int(msg.Y)}
	if msg.World != s.cfg.World {
		return s.envelope(c, badRequest(c, "world %q: this peer plays %q", msg.World, s.cfg.World))
	}
	if !s.cfg.Contains(c) {
		return s.envelope(c, badRequest(c, "region %s outside the %dx%d world", c, s.cfg.Width, s.cfg.Height))
	}
	s.heard(from)
	var out *pb.Message
	switch b := msg.Body.(type) {
	case *pb.Message_Request:
		out = &pb.Message{Body: &pb.Message_Reply{Reply: s.serveRequest(from, c, b.Request, gone)}}
	case *pb.Message_Replicate:
		out = &pb.Message{Body: &pb.Message_ReplicateAck{ReplicateAck: s.serveReplicate(from, c, b.Replicate)}}
	case *pb.Message_Info:
		info := &pb.InfoReply{}
		if sl := s.existingSlot(c); sl != nil {
			// Read between two machine steps, as the loop takes them.
			s.onLoop(func() {
				info = sl.m.infoFor(from)
			})
		}
		info.SteppingAside = !s.eligible(c)
		out = &pb.Message{Body: &pb.Message_InfoReply{InfoReply: info}}
	case *pb.Message_Handoff:
		out = &pb.Message{Body: &pb.Message_HandoffReply{HandoffReply: s.serveHandoff(from, c, b.Handoff.Grant)}}
	case *pb.Message_Retire:
		if sl := s.existingSlot(c); sl != nil {
			s.onLoop(func() {
				eff := sl.m.Retire(from, b.Retire.Epoch)
				s.run(c, sl, eff)
			})
		}
		out = &pb.Message{Body: &pb.Message_Ack{Ack: &pb.Ack{}}}
	case *pb.Message_Nudge:
		select {
		case s.wake <- wakeup{c: c, nudged: true, nudger: from}:
		default:
		}
		out = &pb.Message{Body: &pb.Message_Ack{Ack: &pb.Ack{}}}
	case *pb.Message_CacheQuery:
		epoch, objs, signed := s.cacheOf(c)
		out = &pb.Message{Body: &pb.Message_CacheReply{CacheReply: &pb.CacheReply{Epoch: epoch, Objects: objs, Entries: signed}}}
	case *pb.Message_Ping:
		out = &pb.Message{Body: &pb.Message_Ack{Ack: &pb.Ack{}}}
	default:
		out = badRequest(c, "unexpected %T", b)
	}
	return s.envelope(c, out)
}

// serveReplicate answers a coordinator's replication. A message that
// claims the coordinator's role for this peer's copy (a snapshot, or
// entries from the coordinator it replicates) is taken only from a peer
// that is placed and, with a lease service, shows a valid grant of the
// region naming it (trust.go); the machine then orders it by epoch.
func (s *Service) serveReplicate(from peer.ID, c Coord, r *pb.Replicate) *pb.ReplicateAck {
	cl, reason := s.verifyCoordinator(c, from, r.Grant)
	if reason != "" {
		s.refuse(c, from, "replication", reason)
		ack := &pb.ReplicateAck{}
		if sl := s.existingSlot(c); sl != nil {
			// The epoch between two machine steps, as the loop takes them.
			var epoch uint64
			if s.onLoop(func() {
				epoch = sl.m.epoch
			}) {
				ack.Epoch = epoch
			}
		}
		return ack
	}
	sl := s.slot(c)
	var ack *pb.ReplicateAck
	var leaseWins bool
	if !s.onLoop(func() { ack, leaseWins = s.replicateStep(c, sl, from, cl, r) }) {
		return &pb.ReplicateAck{}
	}
	if leaseWins && ack.Ok {
		s.log.Info("a coordinator under a newer lease took this peer's copy over", "region", c, "coordinator", from, "lease", cl.leaseID)
	}
	return ack
}

// replicateStep applies coordinator from's replication r, shown with
// claim cl, to region c's machine (on the Service's loop); leaseWins says
// a newer lease took over the copy this peer held.
func (s *Service) replicateStep(c Coord, sl *slot, from peer.ID, cl claim, r *pb.Replicate) (*pb.ReplicateAck, bool) {
	leaseWins := false
	if s.cfg.Proofs != nil && r.Snapshot != nil && sl.m.role != pb.Role_ROLE_NONE {
		var own uint64
		if g := sl.m.proofOfCopy(); g != nil {
			if _, id, _, err := s.cfg.Proofs.CheckProof(c, g); err == nil {
				own = id
			}
		}
		// A newer lease wins; so does the same lease against a copy that
		// was taken over from it without a lease of its own (a replica that
		// wrongly found its coordinator dead): nothing was committed there
		// since, so the holder's copy has all of it.
		leaseWins = cl.leaseID > own ||
			(cl.leaseID == own && own != 0 && (sl.m.role != pb.Role_ROLE_COORDINATOR || sl.m.currentProof() == nil))
	}
	ack, eff := sl.m.Replicate(from, r, leaseWins)
	s.run(c, sl, eff)
	return ack, leaseWins
}

// run carries out a machine's effects, on the loop.
func (s *Service) run(c Coord, sl *slot, eff effects) {
	if len(eff.answers) > 0 {
		// An answer nobody waits for (its caller gave up, or a lock's
		// expiry) is dropped.
		for _, a := range eff.answers {
			k := waitKey{a.from, string(a.id)}
			if ch := sl.waiters[k]; ch != nil {
				delete(sl.waiters, k)
				ch <- a.r
			}
		}
	}
	if eff.singleCopy > 0 {
		s.metrics.singleCopy.Add(float64(eff.singleCopy))
	}
	if eff.exclude != "" {
		s.excludeOnLoop(c, eff.exclude, "replica answers")
	}
	if eff.handoffReply != nil {
		if ch := sl.handoffs[eff.handoffFor]; ch != nil {
			delete(sl.handoffs, eff.handoffFor)
			ch <- eff.handoffReply
		}
	}
	if eff.publish != nil {
		s.queuePublish(c, sl, eff.publish)
	}
	for _, r := range eff.retire {
		s.spawn(func() {
			ctx, cancel := context.WithTimeout(s.ctx, s.cfg.RequestTimeout)
			defer cancel()
			_, _ = s.call(ctx, r.to, c, &pb.Message{Body: &pb.Message_Retire{Retire: &pb.Retire{Epoch: r.epoch}}})
		})
	}
	if eff.send != nil {
		out := eff.send
		s.spawn(func() { s.replicate(c, sl, out) })
	}
	if eff.compare != 0 {
		lease := eff.compare
		s.spawn(func() { s.feedLoop(func() { s.compareCopies(c, sl, lease) }) })
	}
	if eff.needReplica {
		next := s.replicaChoiceOnLoop(c)
		s.feedLease(c, sl)
		more := sl.m.SetReplica(next, time.Now())
		s.run(c, sl, more)
	}
}

// queuePublish publishes ev on region c's topic after the batches
// committed before it, on a goroutine the Service owns: signing the
// entries and gossipsub can take a while on a busy peer, and the loop
// that steps the machines must not wait for them. On the loop.
func (s *Service) queuePublish(c Coord, sl *slot, ev *pb.Event) {
	sl.events = append(sl.events, ev)
	if !sl.publishing {
		s.publishNextOnLoop(c, sl)
	}
}

// publishNextOnLoop hands the batches queued for region c to one
// publishing goroutine, which hands the loop back the turn when it has
// published them; with none queued, publishing ends.
func (s *Service) publishNextOnLoop(c Coord, sl *slot) {
	if len(sl.events) == 0 {
		sl.publishing = false
		return
	}
	batches := sl.events
	sl.events = nil
	sl.publishing = true
	s.spawn(func() {
		for _, ev := range batches {
			s.publish(c, ev)
		}
		s.feedLoop(func() { s.publishNextOnLoop(c, sl) })
	})
}

// replicate sends one message to the replica and feeds the outcome to the
// Service's loop.
func (s *Service) replicate(c Coord, sl *slot, out *outbound) {
	// The replica keeps this peer's signed assignment with its copy: what
	// lets it claim the copy when the region is taken over.
	// And this peer's seal of what the copy holds once the message is
	// applied, so that the replica cannot change it unnoticed. Both name
	// the lease of the grant the message carries, checked once here. The
	// assignment is the slot's (on the loop); the seal is signed here.
	if lease, ok := s.grantLease(c, out.msg.Grant); ok {
		s.onLoop(func() { out.msg.Assignment = s.assignOnLoop(c, sl, out.msg.Epoch, lease, out.to) })
		if out.hash != nil {
			out.msg.Seal = s.seal(c, out.msg.Epoch, lease, out.seq, out.hash)
		}
	}
	// Half a request's time: a replica that does not answer by then is
	// replaced while the players' requests waiting on the batch still
	// wait, so they are answered rather than timed out.
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.RequestTimeout/2)
	defer cancel()
	reply, err := s.call(ctx, out.to, c, &pb.Message{Body: &pb.Message_Replicate{Replicate: out.msg}})
	s.feedLoop(func() { s.replicaAnswered(c, sl, out, reply, err) })
}

// replicaAnswered feeds the outcome of a replication to region c's
// machine (on the Service's loop): the replica's acknowledgement, or its
// failure to answer (err).
func (s *Service) replicaAnswered(c Coord, sl *slot, out *outbound, reply *pb.Message, err error) {
	var ack *pb.ReplicateAck
	if err == nil {
		ack = reply.GetReplicateAck()
		if ack == nil {
			err = fmt.Errorf("replica %s answered %T", out.to, reply.Body)
		}
	}
	var eff effects
	if err != nil {
		if s.ctx.Err() != nil {
			return
		}
		s.log.Info("replica unreachable; choosing another", "region", c, "replica", out.to, "err", err)
		s.metrics.replicas.Inc()
		// Still connected: the peer lives but left the replication
		// unanswered (a staller, or a peer too busy to be a replica). A
		// probe or any message from it would bring it back into placement
		// at once and make it the replica again, a stall each time; it is
		// left out as replica for DeadFor instead.
		stalled := s.tr.Connected(out.to)
		s.markDeadOnLoop(out.to)
		if stalled {
			s.excludeOnLoop(c, out.to, "replication left unanswered")
		}
		next := s.replicaChoiceOnLoop(c, out.to)
		s.feedLease(c, sl)
		eff = sl.m.ReplicaFailed(out.to, next, time.Now())
		eff.retire = append(eff.retire, retirement{to: out.to, epoch: out.msg.Epoch})
	} else {
		proven := false
		if ack.Stale {
			proven = s.verifyDeposal(c, out, ack)
		}
		s.feedLease(c, sl)
		eff = sl.m.ReplicaAck(out.to, ack, proven, time.Now())
	}
	s.run(c, sl, eff)
}

// verifyDeposal checks a replica's answer that a newer coordinator exists.
// With a lease service it must carry a grant of the region under a lease
// newer than the one this coordinator replicated under: lease IDs are
// fencing tokens, so this coordinator's lease is over. Without one, the
// named coordinator must at least be placed.
func (s *Service) verifyDeposal(c Coord, out *outbound, ack *pb.ReplicateAck) bool {
	next, err := peer.IDFromBytes(ack.Coordinator)
	reason := ""
	switch {
	case err != nil || next == s.h.ID():
		reason = refusedDeposalUnproven
	case !s.placed(c, next):
		reason = refusedNotPlaced
	case s.cfg.Proofs != nil:
		// Any grant of the region newer than this coordinator's proves
		// its lease over, whoever it names (the named coordinator may
		// hold the copy without a lease of its own yet).
		_, mine, _, merr := s.cfg.Proofs.CheckProof(c, out.msg.Grant)
		cl, r := s.checkProofCopy(c, ack.Grant)
		switch {
		case r != "":
			reason = r
		case merr != nil || cl.leaseID <= mine:
			reason = refusedDeposalUnproven
		}
	}
	if reason != "" {
		s.refuse(c, out.to, "deposal", reason)
		return false
	}
	return true
}

// --- roles --------------------------------------------------------------------

func roleOf(r pb.Role) Role {
	switch r {
	case pb.Role_ROLE_COORDINATOR:
		return RoleCoordinator
	case pb.Role_ROLE_REPLICA:
		return RoleReplica
	default:
		return RoleNone
	}
}

func newRequestID() []byte {
	id := make([]byte, requestIDLen)
	_, _ = rand.Read(id)
	return id
}
