package mirror

import (
	"cmp"
	"context"
	"crypto/ed25519"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/tss"
	"github.com/overworld-p2p/overworld/node/crimp"
	"github.com/overworld-p2p/overworld/node/duty"
)

// synchronizer is the mirror's TSS.
type synchronizer = tss.Synchronizer[*State, Command, game.TickRecord]

// authorityID is the authority's CRIMP member ID: it starts the group.
const authorityID crimp.MemberID = 1

// maxBuffered bounds the commands a joining mirror keeps while its state
// transfer is in flight.
const maxBuffered = 1 << 16

// resyncCooldown is the least time between two resyncs.
const resyncCooldown = 2 * time.Second

// Server is one mirror: a CRIMP member, a trailing state synchronizer over
// the game world, and the sessions of the clients for which it is the
// ingress. See the package doc for the data flow.
//
// Everything is serialized by one lock. Callbacks from CRIMP, client
// frames and the tick timer take it; work that waits on the network
// (account server calls, state transfers) runs through Config.Spawn
// without it, and CRIMP sends happen after it is released (posted), so the
// member's callbacks can never find it held by their own caller.
type Server struct {
	cfg   Config
	log   *slog.Logger
	clock crimp.Clock
	m     *metrics
	tssm  *tss.Metrics
	skew  *skewEstimator

	member  groupMember
	stateLn net.Listener
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup // ServeState

	mu        sync.Mutex
	closed    bool
	id        crimp.MemberID
	authority uint32
	stateAddr string         // the authority's state-transfer address
	stateFrom crimp.MemberID // ... the mirror that serves it (the holder that admitted us)
	// Rotate mode: this mirror's own state-transfer address, the holder's
	// (from its signed checkpoints), and the signed releases and
	// checkpoints of mirrors not yet known to hold the duty.
	ownStateAddr string
	holderAddr   struct {
		id   crimp.MemberID
		addr string
	}
	parked    []parkedDelivery
	sync      *synchronizer
	seq       uint64
	post      []func()
	buffered  []Command
	joined    bool // CRIMP member (established)
	resyncing bool
	lastSync  time.Time
	timer     crimp.Timer
	frame     uint64
	nextSave  time.Time
	retuner   *tss.Retuner
	base      uint64 // the tick of the state this mirror started from

	sessions    map[uint64]*session
	players     map[game.PlayerID]*session
	nextSession uint64
	captures    []capture
	unconfirmed []leaveSave
	cps         checkpoints
	releases    map[crimp.MemberID]crimp.Timer
	ev          eventState // the event protocol's (event.go)
	vfc         *vfcEgress // EgressVFC's filter (egress.go)
}

// capture is a character to save once the last state has executed the
// tick before its leave (so the save holds everything the player did).
type capture struct {
	player  game.PlayerID
	tok     string
	version int64
	at      uint64 // the last state's tick to read it at
}

// leaveSave is a leaving player's character read from this mirror's last
// state, waiting for the authority to confirm that state: the save reads
// the departure from the first checkpoint at or after the leave on which
// this mirror's hash and the authority's agree. A command this mirror
// executed can have reached the authority too late (its last state had
// passed the tick) and so never have happened in the game everyone else
// plays; a character saved unconfirmed could hold it.
type leaveSave struct {
	player  game.PlayerID
	tok     string
	version int64
	leave   uint64         // the leave's tick
	own     game.Character // as this mirror's last state has it
}

// confirmLeaveTicks is how long, in the last state's ticks, a leave's save
// waits for the authority's agreement before it takes this mirror's own
// reading: well inside the time a state remembers departures, so that a
// resync in between still finds the leave in the authority's state.
func confirmLeaveTicks(g game.Config) uint64 { return uint64(keepDepartedSeconds * g.TickRate / 2) }

// New builds a mirror server; Start runs it.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("mirror config: %w", err)
	}
	cfg = cfg.withDefaults()
	s := &Server{
		cfg: cfg, log: cfg.Logger, clock: cfg.Clock,
		m: newMetrics(), tssm: &tss.Metrics{}, skew: newSkewEstimator(),
		sessions: map[uint64]*session{}, players: map[game.PlayerID]*session{},
		releases: map[crimp.MemberID]crimp.Timer{},
	}
	s.ev.actions, s.ev.moves = map[actionKey]trackedAction{}, map[game.PlayerID][]Command{}
	s.cps.init()
	s.m.confirmed = s.confirmedRefusals
	s.m.notReady.Store("starting")
	s.m.skew = func() map[string]PeerSkew {
		out := map[string]PeerSkew{}
		for id, p := range s.skew.estimates() {
			out[peerLabel(uint32(id))] = p
		}
		return out
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(s.m); err != nil {
			return nil, fmt.Errorf("mirror metrics: %w", err)
		}
		if err := cfg.Registerer.Register(s.tssm.Collector(nil)); err != nil {
			return nil, fmt.Errorf("mirror tss metrics: %w", err)
		}
	}
	return s, nil
}

// Start opens the state-transfer listener (authority), starts the CRIMP
// member and either starts the game (authority) or joins the group.
func (s *Server) Start() error {
	cc := s.cfg.CRIMP
	cc.Peers, cc.ID, cc.Authority = nil, 0, false
	cc.AuthorityKey, cc.AuthorityPublicKey = nil, s.cfg.AuthorityPublicKey
	if s.cfg.Rotate {
		cc.AuthorityPublicKey = nil
		if s.cfg.MemberKey == nil {
			_, k, err := ed25519.GenerateKey(crand.Reader)
			if err != nil {
				return fmt.Errorf("mirror member key: %w", err)
			}
			s.cfg.MemberKey = k
		}
		cc.Key, cc.Founder = s.cfg.MemberKey, s.cfg.Authority
		cc.MaxGroup = min(max(cc.MaxGroup, 0), crimp.MaxDutyGroup)
	}
	if s.cfg.Authority || s.cfg.Rotate {
		// In rotate mode every mirror may come to hold the duty, and
		// serves the state to the mirrors it admits.
		ln, err := net.Listen("tcp", s.cfg.StateListen)
		if err != nil {
			return fmt.Errorf("mirror state transfer: %w", err)
		}
		s.stateLn = ln
		cc.StateAddr = s.cfg.StateAdvertise
		if cc.StateAddr == "" {
			cc.StateAddr = ln.Addr().String()
		}
		s.ownStateAddr = cc.StateAddr
	}
	if s.cfg.Authority {
		cc.ID = authorityID
		if !s.cfg.Rotate {
			cc.Authority, cc.AuthorityKey = true, s.cfg.AuthorityKey
		}
	}
	seed := s.cfg.Seed
	if seed == 0 {
		var b [8]byte
		_, _ = crand.Read(b[:])
		seed = int64(binary.BigEndian.Uint64(b[:]))
	}
	tr := &skewTransport{Transport: s.cfg.Transport, clock: s.clock, est: s.skew}
	var cm *crimp.Metrics
	if s.cfg.Rotate {
		node, err := duty.New(duty.Config{CRIMP: cc, Arbiter: s.cfg.Arbiter, Seed: seed, Announce: s.cfg.Announce})
		if err != nil {
			if s.stateLn != nil {
				s.stateLn.Close()
			}
			return fmt.Errorf("mirror: %w", err)
		}
		cm = node.CRIMP().Metrics()
		s.member = rotateMember{duty.NewMember(node, tr, s.clock, duty.MemberOptions{
			OnDeliver: s.onDeliver,
			OnEvent: func(e duty.Event) {
				if e.CRIMP != nil {
					s.onEvent(*e.CRIMP)
				}
			},
			Discovery: s.cfg.Discovery,
			Logger:    s.log.With("part", "duty"),
		})}
		if s.cfg.Registerer != nil {
			if err := s.cfg.Registerer.Register(node.Metrics().Collector(nil)); err != nil {
				return fmt.Errorf("mirror duty metrics: %w", err)
			}
		}
	} else {
		node, err := crimp.New(cc, rand.New(rand.NewSource(seed)))
		if err != nil {
			if s.stateLn != nil {
				s.stateLn.Close()
			}
			return fmt.Errorf("mirror: %w", err)
		}
		cm = node.Metrics()
		s.member = fixedMember{crimp.NewMember(node, tr, s.clock, crimp.MemberOptions{
			OnDeliver: s.onDeliver, OnEvent: s.onEvent, Logger: s.log.With("part", "crimp"),
		})}
	}
	if s.cfg.Registerer != nil {
		if err := s.cfg.Registerer.Register(cm.Collector(nil)); err != nil {
			return fmt.Errorf("mirror crimp metrics: %w", err)
		}
	}
	if s.cfg.Authority {
		now := s.clock.Now()
		s.mu.Lock()
		s.id, s.authority, s.joined = authorityID, uint32(authorityID), true
		s.skew.self.Store(uint32(authorityID))
		w, err := game.NewWorld(s.cfg.Game)
		if err != nil {
			s.mu.Unlock()
			return err
		}
		epoch := now.Truncate(time.Millisecond).UnixNano()
		stateAuthority := uint32(authorityID)
		if s.cfg.Rotate {
			stateAuthority = AnyAuthority
		}
		if err := s.startSync(s.cfg.tssConfig(epoch), NewState(w, stateAuthority)); err != nil {
			s.mu.Unlock()
			return err
		}
		s.mu.Unlock()
		s.log.Info("mirror started the game", "rotate", s.cfg.Rotate, "epoch", time.Unix(0, epoch).UTC(), "delays", s.cfg.Delays, "state", cc.StateAddr)
	}
	if s.stateLn != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			sc := crimp.StateServerConfig{Snapshot: s.serveState, Metrics: cm, Logger: s.log.With("part", "state")}
			if err := crimp.ServeState(s.ctx, s.stateLn, sc); err != nil {
				s.log.Error("state transfer server stopped", "err", err)
			}
		}()
	}
	if err := s.member.Start(); err != nil {
		return fmt.Errorf("mirror: %w", err)
	}
	if !s.cfg.Authority {
		if err := s.member.Join(); err != nil {
			return fmt.Errorf("mirror join: %w", err)
		}
	}
	s.locked(func() { s.schedule(s.clock.Now()) })
	return nil
}

// startSync builds the synchronizer from st with cfg (lock held).
func (s *Server) startSync(cfg tss.Config, st *State) error {
	cfg.History = s.cfg.CRIMP.History
	start := time.Now()
	sy, err := tss.New(cfg, st, s.newState, tss.Options[Command]{
		Metrics: s.tssm, CostClock: func() time.Duration { return time.Since(start) },
	})
	if err != nil {
		return fmt.Errorf("mirror synchronizer: %w", err)
	}
	if s.event() {
		// The last state runs actions only as the authority decided them.
		sy.Last().ev.confirming = true
	}
	s.sync = sy
	s.authority = st.authority
	if s.cfg.AutoDelays && s.retuner == nil {
		r, err := tss.NewRetuner(tss.RetunerConfig{Model: tss.DelayModel{
			TickPeriod: cfg.TickPeriod, History: cfg.Delays[len(cfg.Delays)-1],
			CommandCost: 20 * time.Microsecond, TickCost: 20 * time.Microsecond, CopyCost: 20 * time.Microsecond,
		}})
		if err != nil {
			return err
		}
		s.retuner = r
	}
	return nil
}

// sessionList returns the sessions in the order they connected, so that
// what the server does for each (and a simulation of it) does not depend
// on map order.
func (s *Server) sessionList() []*session {
	out := make([]*session, 0, len(s.sessions))
	for _, sess := range s.sessions {
		out = append(out, sess)
	}
	slices.SortFunc(out, func(a, b *session) int { return cmp.Compare(a.id, b.id) })
	return out
}

// locked runs f under the lock, then what f posted (CRIMP sends, joins)
// after releasing it.
func (s *Server) locked(f func()) {
	s.mu.Lock()
	f()
	if len(s.ev.out) > 0 {
		s.flushDecisions()
	}
	post := s.post
	s.post = nil
	s.mu.Unlock()
	for _, p := range post {
		p()
	}
}

// send multicasts a payload once the lock is released.
func (s *Server) send(payload []byte) {
	s.post = append(s.post, func() {
		if err := s.member.Send(payload); err != nil && !errors.Is(err, crimp.ErrNotMember) {
			s.log.Warn("crimp send failed", "err", err)
		}
	})
}

// spawn runs f through Config.Spawn unless the server is closed.
func (s *Server) spawn(f func()) {
	s.post = append(s.post, func() { s.cfg.Spawn(f) })
}

// ID is this mirror's CRIMP member ID (0 until it joined).
func (s *Server) ID() uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return uint32(s.id)
}

// Ready reports whether the mirror serves clients: it has the game state,
// is not resyncing, and no other mirror's clock is certainly off by more
// than MaxSkew.
func (s *Server) Ready() bool { return s.m.ready.Load() }

func (s *Server) updateReady() {
	alarm := false
	for _, p := range s.skew.estimates() {
		if p.Beyond(s.cfg.MaxSkew) {
			alarm = true
		}
	}
	s.m.skewAlarm.Store(alarm)
	why := ""
	switch {
	case s.closed:
		why = "shutting down"
	case !s.joined:
		why = "joining the mirror group"
	case s.sync == nil:
		why = "waiting for the state transfer"
	case s.resyncing:
		why = "resyncing from the authority"
	case alarm:
		why = "clock skew to another mirror beyond MaxSkew"
	}
	s.m.notReady.Store(why)
	// Only the turns are logged (this runs every tick): an operator sees
	// when /readyz starts and stops answering 200, and why it stopped.
	ready := why == ""
	if was := s.m.ready.Swap(ready); was != ready {
		if ready {
			s.log.Info("mirror ready: serving clients")
		} else {
			s.log.Info("mirror not ready", "reason", why)
		}
	}
}

// confirmedRefusals are the refusals of the last state (a scrape calls it).
func (s *Server) confirmedRefusals() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sync == nil {
		return nil
	}
	r := s.sync.Last().refused
	return map[string]uint64{refusedNotIngress: r[RefusedNotIngress], refusedNotAuthority: r[RefusedRelease]}
}

// Skew returns the measured clock offset to every other mirror.
func (s *Server) Skew() map[uint32]PeerSkew {
	out := map[uint32]PeerSkew{}
	for id, p := range s.skew.estimates() {
		out[uint32(id)] = p
	}
	return out
}

// now is the clock in Unix nanoseconds.
func (s *Server) now() int64 { return s.clock.Now().UnixNano() }

// schedule arms the timer for the leading state's next tick boundary.
func (s *Server) schedule(now time.Time) {
	if s.closed {
		return
	}
	period := time.Second / time.Duration(s.cfg.Game.TickRate)
	wait := period
	if s.sync != nil {
		c := s.sync.Config()
		n := now.UnixNano() - c.Epoch
		next := (n/int64(period) + 1) * int64(period)
		wait = time.Duration(next-n) + c.Delays[0]
	}
	s.timer = s.clock.AfterFunc(wait, s.onTimer)
}

func (s *Server) onTimer() {
	s.locked(func() {
		if s.closed {
			return
		}
		now := s.clock.Now()
		if len(s.parked) > 0 {
			s.unpark() // expired ones go; the ones whose key came are taken
		}
		if s.sync != nil {
			s.flushHeld(now)
			s.tickTo(now)
			if s.event() {
				s.eventTick(now)
			}
			s.frame++
			if s.frame%uint64(s.cfg.FrameTicks) == 0 {
				s.egress(now)
			}
			if s.frame%uint64(s.cfg.Game.TickRate) == 0 {
				s.everySecond(now)
			}
		}
		s.updateReady()
		s.schedule(now)
	})
}

// everySecond does the slow upkeep: saves, ownership checks, delay tuning.
func (s *Server) everySecond(now time.Time) {
	if s.nextSave.IsZero() {
		s.nextSave = now.Add(s.cfg.SaveEvery)
	}
	if !now.Before(s.nextSave) {
		s.nextSave = now.Add(s.cfg.SaveEvery)
		s.saveSessions()
	}
	s.checkOwnership()
	s.leaveOrphans()
	s.retune(now)
	if s.event() {
		s.eventSecond()
	}
}

// retune applies the retuner's inner delays (AutoDelays); the last delay is
// the group's and stays.
func (s *Server) retune(now time.Time) {
	if s.retuner == nil {
		return
	}
	cur := s.sync.Config().Delays
	choice, ok := s.retuner.Propose(now.UnixNano(), cur)
	if !ok {
		return
	}
	last := cur[len(cur)-1]
	var next []time.Duration
	for _, d := range choice.Delays {
		if d < last && (len(next) == 0 || d > next[len(next)-1]) {
			next = append(next, d)
		}
	}
	next = append(next, last)
	if slices.Equal(next, cur) {
		return
	}
	if err := s.sync.SetDelays(now.UnixNano(), next); err != nil {
		s.log.Warn("retuned delays refused", "delays", next, "err", err)
		return
	}
	if choice.Tail > last {
		s.log.Warn("the observed latency tail exceeds the group's last delay; commands may come too late", "tail", choice.Tail, "last", last)
	}
	s.log.Info("retuned the synchronizer's inner delays", "from", cur, "to", next)
}

// tickTo advances the synchronizer to now, stopping at the last state's
// checkpoint ticks (to keep a copy of the state whose hash the mirrors
// compare) and at the ticks before pending leaves (to save the leaving
// player's character as the last state has it). Every change of the
// synchronizer's time goes through here, so no stop is ever skipped.
func (s *Server) tickTo(now time.Time) {
	if s.sync == nil {
		return
	}
	n := now.UnixNano()
	c := s.sync.Config()
	dk := int64(c.Delays[len(c.Delays)-1])
	for {
		t := s.sync.Last().Tick()
		stop := (t/c.CheckpointTicks + 1) * c.CheckpointTicks
		for _, cp := range s.captures {
			if cp.at > t && cp.at < stop {
				stop = cp.at
			}
		}
		b := c.Epoch + int64(stop)*int64(c.TickPeriod) + dk
		if b > n {
			break
		}
		r := s.sync.Tick(b)
		s.atStop(s.sync.Last()) // first: a checkpoint compared in absorb may need its copy
		s.absorb(r)
	}
	r := s.sync.Tick(n)
	s.atStop(s.sync.Last())
	s.absorb(r)
}

// absorb handles what the synchronizer reports.
func (s *Server) absorb(r tss.Ready) {
	for _, rb := range r.Rollbacks {
		if rb.State == 0 {
			s.m.leadingRollbacks.Add(1)
		}
	}
	for _, cp := range r.Checkpoints {
		s.ownCheckpoint(cp)
	}
	s.m.leadingTick.Store(r.Leading)
	s.m.confirmedTick.Store(r.Confirmed)
}

// atStop does what waits for the last state to reach its tick.
func (s *Server) atStop(last *State) {
	t := last.Tick()
	if t%s.sync.Config().CheckpointTicks == 0 {
		s.cps.keep(t, last)
	}
	kept := s.captures[:0]
	for _, cp := range s.captures {
		switch {
		case cp.at > t:
			kept = append(kept, cp)
		case cp.at == t:
			p, ok := last.World().Player(cp.player)
			switch {
			case !ok:
			case s.isHolder():
				// Our state is the reference.
				s.m.leaveSaves(leaveSaveReference)
				s.saveCharacter(cp.player, cp.tok, cp.version, game.CharacterOf(p))
			default:
				s.unconfirmed = append(s.unconfirmed, leaveSave{player: cp.player, tok: cp.tok, version: cp.version,
					leave: cp.at + 1, own: game.CharacterOf(p)})
			}
		default:
			// The last state jumped past the tick: a resync put the
			// authority's state in place. It has the departure, or the
			// player is still there (the leave had not run yet).
			if d, ok := last.Departed(cp.player, cp.at+1); ok {
				s.m.leaveSaves(leaveSaveReference)
				s.saveCharacter(cp.player, cp.tok, cp.version, d.Character)
			} else if p, ok := last.World().Player(cp.player); ok {
				s.m.leaveSaves(leaveSaveReference)
				s.saveCharacter(cp.player, cp.tok, cp.version, game.CharacterOf(p))
			}
		}
	}
	s.captures = kept
	if len(s.unconfirmed) > 0 {
		s.expireLeaveSaves(t)
	}
}

// confirmLeaveSaves saves the characters of the leaves up to tick c from
// our state of that checkpoint, which the authority's hash has just
// confirmed (lock held).
func (s *Server) confirmLeaveSaves(c uint64) {
	st := s.cps.clones[c]
	if st == nil {
		return // no copy left: a later checkpoint will do
	}
	kept := s.unconfirmed[:0]
	for _, u := range s.unconfirmed {
		if u.leave > c {
			kept = append(kept, u)
			continue
		}
		d, departed := st.Departed(u.player, u.leave)
		p, still := st.World().Player(u.player)
		switch {
		case departed:
			s.m.leaveSaves(leaveSaveAgreed)
			s.saveCharacter(u.player, u.tok, u.version, d.Character)
		case still && st.OwnerOf(u.player) == uint32(s.id):
			// The leave itself reached the authority too late: its game
			// still has the player here (leaveOrphans takes them out).
			s.m.leaveSaves(leaveSaveAgreed)
			s.saveCharacter(u.player, u.tok, u.version, game.CharacterOf(p))
		default:
			s.log.Warn("a confirmed state has neither the player's leave nor the player here; saving our own reading", "player", u.player, "leave", u.leave, "checkpoint", c)
			s.m.leaveSaves(leaveSaveUnconfirmed)
			s.saveCharacter(u.player, u.tok, u.version, u.own)
		}
	}
	clear(s.unconfirmed[len(kept):])
	s.unconfirmed = kept
}

// expireLeaveSaves saves our own reading of the leaves the authority has
// not confirmed within confirmLeaveTicks of the last state's tick t, or
// all of them (t == math.MaxUint64) when this mirror cannot wait (lock
// held).
func (s *Server) expireLeaveSaves(t uint64) {
	wait := confirmLeaveTicks(s.cfg.Game)
	kept := s.unconfirmed[:0]
	for _, u := range s.unconfirmed {
		if t < u.leave+wait {
			kept = append(kept, u)
			continue
		}
		s.log.Warn("the authority did not confirm a leaving player's state in time; saving our own reading", "player", u.player, "leave", u.leave)
		s.m.leaveSaves(leaveSaveUnconfirmed)
		s.saveCharacter(u.player, u.tok, u.version, u.own)
	}
	clear(s.unconfirmed[len(kept):])
	s.unconfirmed = kept
}

// issue stamps nothing itself: cmd carries this mirror's stamp. It feeds
// the own synchronizer ("like every other command") and multicasts it.
func (s *Server) issue(cmd Command, now time.Time) {
	s.tickTo(now)
	if v := s.sync.Deliver(cmd, now.UnixNano()); v != tss.Accepted {
		s.log.Warn("own command refused by the synchronizer", "cmd", cmd, "verdict", v)
		s.countVerdict(v)
	}
	pm, err := commandMessage(cmd)
	if err != nil {
		s.log.Error("cannot encode own command", "cmd", cmd, "err", err)
		return
	}
	if cmd.Release != 0 {
		s.send(signedPeerMessage(s.signingKey(), pm)) // only the authority releases
	} else {
		s.send(s.outgoing(pm))
	}
	s.m.commandsSent.Add(1)
}

// stamp makes this mirror's next command header.
func (s *Server) stamp(now time.Time) game.Command {
	s.seq++
	return game.Command{Stamp: now.UnixNano(), Mirror: uint32(s.id), Seq: s.seq}
}

func (s *Server) countVerdict(v tss.Verdict) {
	switch v {
	case tss.Duplicate:
		s.m.refuse(refusedDuplicate)
	case tss.TooLate:
		s.m.refuse(refusedTooLate)
	case tss.Future:
		s.m.refuse(refusedFuture)
	case tss.Overflow:
		s.m.refuse(refusedOverflow)
	}
}

// onDeliver takes a CRIMP payload from another mirror.
func (s *Server) onDeliver(d crimp.Delivery) {
	s.locked(func() {
		if s.closed {
			return
		}
		s.deliverPeer(d)
	})
}

// deliverPeer handles a CRIMP payload from another mirror (lock held).
func (s *Server) deliverPeer(d crimp.Delivery) {
	holder := s.holderID()
	key := s.keyOf(holder)
	if s.cfg.Rotate {
		// The sender's own key: a signature binds a decision to the
		// mirror that took it, holder now or (parked) soon.
		if key = s.keyOf(d.Source); key == nil {
			// A member whose establishment we lost: the holder's next
			// refresh tells its key.
			s.park(d, true)
			return
		}
	}
	msg, err := decodePeerMessage(d.Payload, key)
	if errors.Is(err, errBadAuthoritySignature) {
		s.m.refuse(refusedAuthoritySignature)
		s.log.Warn("a message in the authority's name without its signature", "from", d.Source)
		return
	}
	if err != nil {
		s.m.refuse(refusedPayload)
		s.log.Debug("undecodable payload", "from", d.Source, "err", err)
		return
	}
	fromAuthority := d.Source == holder
	own := msg.moves != nil || msg.command != nil && msg.command.Release == 0
	if s.cfg.Rotate && own && !msg.signed {
		// Its sender's key, which CRIMP bound to its ID, signs what a
		// mirror sends in rotate mode: unsigned, it may come from anyone.
		s.m.refuse(refusedUnsigned)
		s.log.Warn("a command or moves without its sender's signature", "from", d.Source)
		return
	}
	if s.cfg.Rotate && msg.signed && !fromAuthority && !own {
		// Signed by its sender, which we do not know to hold the duty
		// yet: CRIMP is unordered, and the move of the duty may still
		// be on its way. Check again when the duty moves.
		s.park(d, false)
		return
	}
	if fromAuthority && msg.checkpoint != nil && msg.stateAddr != "" {
		s.holderAddr.id, s.holderAddr.addr = d.Source, msg.stateAddr
	}
	authorityOnly := msg.command != nil && msg.command.Release != 0 || msg.decisions != nil || msg.consistent != nil
	if msg.checkpoint != nil && msg.signed != fromAuthority || authorityOnly && !(msg.signed && fromAuthority) {
		// Releases, decisions, consistent events and the authority's
		// checkpoints are signed by it; no other mirror takes those
		// decisions (or replays them).
		s.m.refuse(refusedAuthorityUnsigned)
		s.log.Warn("a release, decision, consistent event or authority checkpoint not signed by the authority, or signed but not sent by it", "from", d.Source, "signed", msg.signed)
		return
	}
	if (d.Via == crimp.ViaDatagram) != (msg.moves != nil) || !s.event() && (msg.moves != nil || msg.decisions != nil || msg.consistent != nil) {
		// Moves, and only moves, travel unreliably, and only under the
		// event protocol; decisions and consistent events are its too.
		s.m.refuse(refusedProtocol)
		s.log.Debug("a message this protocol does not carry that way", "from", d.Source, "via", d.Via, "protocol", s.cfg.Protocol)
		return
	}
	switch {
	case msg.checkpoint != nil:
		s.peerCheckpoint(d.Source, *msg.checkpoint)
		return
	case msg.moves != nil:
		s.deliverMoves(d.Source, msg.moves)
		return
	case msg.decisions != nil:
		s.takeDecisions(msg.decisions)
		return
	case msg.consistent != nil:
		s.takeConsistent(msg.consistent)
		return
	}
	cmd := *msg.command
	if cmd.Mirror != uint32(d.Source) {
		s.m.refuse(refusedForged)
		s.log.Warn("command claims another ingress than its sender", "from", d.Source, "claims", cmd.Mirror)
		return
	}
	s.m.commandsReceived.Add(1)
	now := s.clock.Now()
	if s.sync == nil {
		if len(s.buffered) >= maxBuffered {
			s.m.refuse(refusedBuffer)
			return
		}
		s.buffered = append(s.buffered, cmd)
		return
	}
	s.deliver(cmd, now)
	if s.event() && isAction(cmd.Command) {
		s.trackAction(cmd, now)
	}
}

// deliver files a command from another mirror (or a transfer) at now.
func (s *Server) deliver(cmd Command, now time.Time) {
	if s.sync.Config().TickOf(cmd.At()) <= s.base {
		// CRIMP recovers what the group sent before this mirror joined;
		// what is older than the transferred state is in that state (or
		// was too late for the authority too).
		s.m.refuse(refusedBeforeState)
		return
	}
	s.tickTo(now)
	v := s.sync.Deliver(cmd, now.UnixNano())
	s.countVerdict(v)
	if v == tss.Accepted && s.retuner != nil {
		s.retuner.Observe(now.UnixNano(), time.Duration(now.UnixNano()-cmd.Stamp))
	}
}

// onEvent handles CRIMP membership.
func (s *Server) onEvent(e crimp.Event) {
	s.locked(func() {
		if s.closed {
			return
		}
		switch e.Kind {
		case crimp.EventJoined:
			s.id, s.joined, s.stateAddr = e.Member, true, e.StateAddr
			s.stateFrom = s.holderID() // the holder that admitted us serves our state
			s.ev.holder = s.stateFrom
			s.skew.self.Store(uint32(e.Member))
			s.log.Info("joined the mirror group; fetching the state", "id", e.Member, "state", e.StateAddr)
			s.fetch(false)
		case crimp.EventDenied:
			s.log.Error("the authority refused this mirror", "reason", e.Reason)
		case crimp.EventDuty:
			s.log.Info("the authority duty moved", "holder", e.Member, "epoch", e.Epoch)
			s.onDuty(e.Member, s.clock.Now())
			s.unpark()
		case crimp.EventMemberJoined:
			s.log.Info("mirror joined the group", "member", e.Member)
			if t := s.releases[e.Member]; t != nil {
				t.Stop()
				delete(s.releases, e.Member)
			}
		case crimp.EventMemberDropped:
			s.log.Warn("mirror dropped from the group", "member", e.Member)
			s.skew.forget(e.Member)
			s.cps.forget(e.Member)
			if s.cfg.Authority || s.cfg.Rotate {
				// In rotate mode every mirror keeps the timer: whoever
				// holds the duty when it fires releases.
				s.scheduleRelease(e.Member)
			}
		case crimp.EventDropped:
			s.log.Error("the authority dropped this mirror; closing sessions and joining again")
			for _, sess := range s.sessionList() {
				s.closeSession(sess, closedMirrorDropped, "this mirror left the group; reconnect to another", false)
			}
			// Leaves waiting for the authority's confirmation will not
			// get it from this membership: what we read is all we have.
			s.expireLeaveSaves(math.MaxUint64)
			s.sync, s.joined, s.id, s.buffered, s.captures = nil, false, 0, nil, nil
			s.skew.self.Store(0)
			s.cps.init()
			if !s.cfg.Rotate { // in rotate mode node/duty joins again by itself
				s.post = append(s.post, func() {
					if err := s.member.Join(); err != nil {
						s.log.Error("rejoin failed", "err", err)
					}
				})
			}
		}
		s.updateReady()
	})
}

// scheduleRelease makes the authority release a dropped mirror's players
// after ReleaseAfter, unless they moved to other mirrors by then.
func (s *Server) scheduleRelease(m crimp.MemberID) {
	if t := s.releases[m]; t != nil {
		t.Stop()
	}
	s.releases[m] = s.clock.AfterFunc(s.cfg.ReleaseAfter, func() {
		s.locked(func() {
			delete(s.releases, m)
			if s.closed || s.sync == nil || !s.isHolder() {
				return
			}
			now := s.clock.Now()
			cmd := Command{Command: s.stamp(now), Release: uint32(m)}
			s.m.releases.Add(1)
			s.log.Info("releasing the players of a dropped mirror", "mirror", m)
			s.issue(cmd, now)
		})
	})
}

// fetch starts a state transfer from the authority: a join, or a resync
// (lock held).
func (s *Server) fetch(resync bool) {
	addr, id := s.stateAddr, s.id
	if addr == "" {
		s.log.Error("no state-transfer address from the authority")
		return
	}
	if resync {
		s.resyncing, s.lastSync = true, s.clock.Now()
	}
	gcfg, pub := s.cfg.Game, s.keyOf(s.stateFrom)
	s.spawn(func() {
		var t transfer
		err := crimp.FetchState(s.ctx, addr, id, func(r io.Reader) error {
			b, err := io.ReadAll(io.LimitReader(r, crimp.MaxStateSize))
			if err != nil {
				return err
			}
			if b, err = openTransfer(pub, b); err != nil {
				return err
			}
			t, err = decodeTransfer(b, gcfg)
			return err
		})
		s.locked(func() {
			if s.closed || s.id != id {
				return
			}
			if err == nil {
				err = s.install(t, resync)
			}
			if err != nil {
				s.log.Error("state transfer failed", "resync", resync, "err", err)
				if resync {
					s.resyncing = false
					s.m.resyncsFailed.Add(1)
					return
				}
				// Try again in a second: the group keeps us, the state
				// server may have been busy.
				s.clock.AfterFunc(time.Second, func() { s.locked(func() { s.fetch(false) }) })
				return
			}
			if resync {
				s.resyncing = false
				s.m.resyncs.Add(1)
			}
			s.updateReady()
		})
	})
}

// install puts a transferred state in place (lock held).
func (s *Server) install(t transfer, resync bool) error {
	now := s.clock.Now()
	if t.protocol != s.cfg.Protocol {
		return fmt.Errorf("the group runs the %s protocol, this mirror the %s protocol", t.protocol, s.cfg.Protocol)
	}
	if !resync || s.sync == nil {
		if err := s.startSync(t.cfg, t.state); err != nil {
			return err
		}
	} else if err := s.sync.Reset(t.state); err != nil {
		s.log.Warn("resync: the transferred state is older than what we keep; starting over from it", "err", err)
		if err := s.startSync(t.cfg, t.state); err != nil {
			return err
		}
	}
	s.base = t.state.Tick()
	// Our hashes of the ticks from the transferred state's on are void:
	// the last state makes them again from the new state.
	for tick := range s.cps.own {
		if tick >= s.base {
			delete(s.cps.own, tick)
			delete(s.cps.clones, tick)
		}
	}
	if s.base > 0 && s.base%s.sync.Config().CheckpointTicks == 0 {
		s.cps.own[s.base] = s.sync.Last().Hash()
	}
	for _, c := range slices.Concat(t.pending, s.buffered) {
		switch {
		case c.Decision != 0:
			s.applyDecision(c, now)
		case s.event() && isAction(c.Command):
			s.deliver(c, now)
			s.trackAction(c, now)
		default:
			s.deliver(c, now)
		}
	}
	s.buffered = nil
	s.log.Info("state in place", "resync", resync, "tick", t.state.Tick(), "pending", len(t.pending), "authority", t.authority)
	return nil
}

// serveState is the authority's snapshot for a state transfer: its last
// trailing state (the one every mirror agrees on), the synchronizer's
// timing and the commands that state has not executed yet.
func (s *Server) serveState(ctx context.Context, member crimp.MemberID, w io.Writer) error {
	var (
		st      *State
		pending []Command
		cfg     tss.Config
		now     int64
	)
	s.locked(func() {
		if s.sync == nil {
			return
		}
		s.tickTo(s.clock.Now())
		st = s.sync.Last().Clone()
		pending = s.sync.PendingCommands()
		cfg = s.sync.Config()
		now = s.now()
	})
	if st == nil {
		return errors.New("no state yet")
	}
	b, err := encodeTransfer(uint32(s.id), s.cfg.Protocol, cfg, st, pending, now)
	if err != nil {
		return err
	}
	if b, err = signedTransfer(s.signingKey(), b); err != nil {
		return err
	}
	s.log.Info("serving the state", "to", member, "tick", st.Tick(), "pending", len(pending), "bytes", len(b))
	_, err = w.Write(b)
	return err
}

// Close stops the server at once: sessions end without leaving (their
// players stay in the world until they reconnect or the authority
// releases them), CRIMP stops. Use Shutdown to leave gracefully first.
func (s *Server) Close() error {
	s.locked(func() {
		if s.closed {
			return
		}
		for _, sess := range s.sessionList() {
			s.closeSession(sess, "shutdown", "mirror shutting down", false)
		}
		s.closed = true
		if s.timer != nil {
			s.timer.Stop()
		}
		for _, t := range s.releases {
			t.Stop()
		}
		s.updateReady()
	})
	s.cancel()
	var err error
	if s.member != nil {
		err = s.member.Close()
	}
	s.wg.Wait()
	return err
}

// Shutdown leaves gracefully: every session's player leaves the world, its
// character saved from the last trailing state, then Close. It waits for
// the saves until ctx ends (on the wall clock; a simulation drives its
// clock and calls LeaveAll and Close itself).
func (s *Server) Shutdown(ctx context.Context) error {
	s.LeaveAll()
	for {
		var left int
		s.locked(func() {
			s.tickTo(s.clock.Now())
			if ctx.Err() != nil && s.sync != nil {
				s.expireLeaveSaves(math.MaxUint64)
			}
			left = len(s.captures) + len(s.unconfirmed) + s.m.pendingSaves()
		})
		if left == 0 || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	if rm, ok := s.member.(rotateMember); ok {
		// Hand the duty on before going, so the others need not wait out
		// our silence and vote.
		if err := rm.Leave(); err != nil {
			s.log.Warn("leaving the rotating authority", "err", err)
		}
	}
	return s.Close()
}

// LeaveAll ends every session as if its client had left.
func (s *Server) LeaveAll() {
	s.locked(func() {
		for _, sess := range s.sessionList() {
			s.closeSession(sess, "shutdown", "mirror shutting down", true)
		}
	})
}

// Metrics exposes the counters (tests and benches).
func (s *Server) Metrics() Stats {
	st := Stats{Refused: s.m.Refused(), TSS: s.tssm.Counters()}
	st.CommandsSent, st.CommandsReceived = s.m.commandsSent.Load(), s.m.commandsReceived.Load()
	st.Agreed, st.Mismatched = s.m.checkpointsAgreed.Load(), s.m.checkpointsMismatched.Load()
	st.Resyncs, st.Dumps = s.m.resyncs.Load(), s.m.dumps.Load()
	st.UpdatesSent, st.UpdateBytes = s.m.updatesSent.Load(), s.m.updateBytes.Load()
	st.Saves, st.SavesFailed = s.m.saves.Load(), s.m.savesFailed.Load()
	st.OrphanLeaves = s.m.orphanLeaves.Load()
	st.LeaveSaves = map[string]uint64{}
	for k, label := range leaveSaveLabels {
		st.LeaveSaves[label] = s.m.leaveSavesBy[k].Load()
	}
	st.LeadingRollbacks = s.m.leadingRollbacks.Load()
	st.Event = s.m.ev.stats()
	if s.member != nil {
		st.CRIMP = s.member.crimpMetrics().Counters()
		st.CRIMPMeanLatency = s.member.crimpMetrics().MeanLatency()
	}
	for k, v := range s.confirmedRefusals() {
		st.Refused[k] = v
	}
	return st
}

// Stats is a copy of a mirror's counters.
type Stats struct {
	Refused                        map[string]uint64
	TSS, CRIMP                     map[string]uint64
	CommandsSent, CommandsReceived uint64
	Agreed, Mismatched             uint64
	Resyncs, Dumps                 uint64
	UpdatesSent, UpdateBytes       uint64
	Saves, SavesFailed             uint64
	OrphanLeaves                   uint64
	// LeaveSaves counts leaving players' characters read for saving, by
	// how their state was confirmed (mirror_leave_saves_total's labels).
	LeaveSaves       map[string]uint64
	LeadingRollbacks uint64
	Event            EventStats // the event protocol's
	// CRIMPMeanLatency is the mean perceived latency of what CRIMP
	// delivered to this mirror (receive time minus send time).
	CRIMPMeanLatency time.Duration
}

// Inspect runs f with the synchronizer's leading and last states under the
// server's lock (tests, status pages). f must not keep them. It returns
// false if the mirror has no state yet.
func (s *Server) Inspect(f func(leading, last *State)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sync == nil {
		return false
	}
	f(s.sync.Leading(), s.sync.Last())
	return true
}

// Checkpoints returns this mirror's last-state hashes by tick (the ones it
// still remembers).
func (s *Server) Checkpoints() map[uint64][32]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cps.ownCopy()
}

// Registerer-free collectors for callers that gather metrics themselves.
func (s *Server) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.m, s.tssm.Collector(nil)}
}
