package play

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/bootstrap/accounts"
	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/webui"
	"github.com/overworld-p2p/overworld/node"
	"github.com/overworld-p2p/overworld/regions"
	"github.com/overworld-p2p/overworld/regions/guard"
	"github.com/overworld-p2p/overworld/regions/position"
	"github.com/overworld-p2p/overworld/regions/topic"
)

// Config configures a Peer. Every peer of a network must agree on World and
// Game (the world's name, shape, seed and rules).
type Config struct {
	// World names the world: it is part of every region key and topic.
	// Default "default".
	World string
	// Game is the world's shape and rules; zero means game.DefaultConfig().
	Game game.Config
	// Name is the player's display name. Default: the account name, else
	// "player-" and the end of the peer ID. With an Account it must be the
	// account's name (other players show the name on the login token).
	Name string
	// Bot drives the player with game.Bot instead of a browser's input,
	// seeded with BotSeed, at BotPace (zero: game.DefaultBotPace()).
	Bot     bool
	BotSeed uint64
	BotPace game.BotPace
	// StartRegion, if set, is where the player first appears instead of its
	// home region (a saved character's position wins over both).
	StartRegion *game.RegionCoord
	// PositionInterval is the gap between two position updates (default
	// 150 ms, the position package's).
	PositionInterval time.Duration
	// Aggregate sends the player's positions to its region's coordinator
	// (the peer that coordinates the region's objects), which publishes one
	// batch per interval for the whole region, instead of publishing them
	// on the region's topic itself. While the coordinator does not answer
	// (position.Config.FallbackAfter updates) the player publishes directly
	// as well, and goes back when it answers again.
	Aggregate bool
	// Summaries is the world's position summary setting
	// (RegionServicesConfig.Summaries).
	Summaries position.SummaryConfig
	// CardInterval is the gap between two player cards on the chat topic
	// when nothing changed (default 2 s).
	CardInterval time.Duration
	// RegionEvery is the period of the region upkeep: loading the objects
	// of regions the player comes near, regrowth (default 250 ms).
	RegionEvery time.Duration
	// Account logs in on an account server when set.
	Account *Account
	// SaveEvery is the gap between two character saves (default 30 s).
	SaveEvery time.Duration
	// Logger defaults to the node's.
	Logger *slog.Logger
	// Registerer receives the runtime's metrics; default a private registry
	// (several peers may share a process).
	Registerer prometheus.Registerer

	// positionOptions are added to the position service's (tests).
	positionOptions []position.Option
}

// Account is a login on an account server.
type Account struct {
	// URL of the account server, e.g. http://127.0.0.1:8640.
	URL string
	// User and Password of the account.
	User, Password string
	// Register creates the account if the login finds none (demos, bots).
	Register bool
	// HTTPClient defaults to one with a 10 s timeout.
	HTTPClient *http.Client
}

func (c *Config) fill(n *node.Node) error {
	var errs []error
	if c.World == "" {
		c.World = "default"
	}
	if c.Game == (game.Config{}) {
		c.Game = game.DefaultConfig()
	}
	if err := c.Game.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Account != nil && c.Name != "" && !strings.EqualFold(c.Name, c.Account.User) {
		errs = append(errs, fmt.Errorf("name %q with account %q: a logged-in player is shown by its account's name", c.Name, c.Account.User))
	}
	if c.Name == "" {
		switch {
		case c.Account != nil:
			c.Name = c.Account.User
		default:
			s := n.ID().String()
			c.Name = "player-" + s[max(len(s)-6, 0):]
		}
	}
	if err := game.ValidateName(c.Name); err != nil {
		errs = append(errs, fmt.Errorf("name: %w", err))
	}
	if c.BotPace == (game.BotPace{}) {
		c.BotPace = game.DefaultBotPace()
	}
	def := func(d *time.Duration, v time.Duration, what string) {
		switch {
		case *d == 0:
			*d = v
		case *d < 10*time.Millisecond:
			errs = append(errs, fmt.Errorf("%s %s: want at least 10ms", what, *d))
		}
	}
	def(&c.PositionInterval, 150*time.Millisecond, "position interval")
	def(&c.CardInterval, 2*time.Second, "card interval")
	def(&c.RegionEvery, 250*time.Millisecond, "region upkeep period")
	def(&c.SaveEvery, 30*time.Second, "save period")
	if c.StartRegion != nil {
		r := *c.StartRegion
		if r.X < 0 || r.Y < 0 || r.X >= c.Game.RegionsX || r.Y >= c.Game.RegionsY {
			errs = append(errs, fmt.Errorf("start region %s outside the %dx%d world", r, c.Game.RegionsX, c.Game.RegionsY))
		}
	}
	if a := c.Account; a != nil && (a.URL == "" || a.User == "" || a.Password == "") {
		errs = append(errs, errors.New("account: URL, user and password are all needed"))
	}
	if c.Logger == nil {
		c.Logger = n.Logger()
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	return errors.Join(errs...)
}

// ObjectStore is what the runtime needs of the region object store;
// *regions.Client provides it.
type ObjectStore interface {
	Get(ctx context.Context, c regions.Coord) (regions.State, error)
	ReadWrite(ctx context.Context, c regions.Coord, id string, readVersion uint64, value []byte) (regions.Object, error)
	// The two-step write of eats and pick-ups (objects.go, take).
	Lock(ctx context.Context, c regions.Coord, id string, ttl time.Duration) (regions.Object, error)
	ReleaseWith(ctx context.Context, c regions.Coord, id string, value []byte) (regions.Object, error)
	Release(ctx context.Context, c regions.Coord, id string) error
	Subscribe(c regions.Coord) (*regions.Subscription, error)
	Coordinator(c regions.Coord) (coordinator, replica peer.ID)
}

// Peer is one player's runtime on the overlay. It implements webui.Session.
type Peer struct {
	cfg     Config
	n       *node.Node
	h       host.Host
	log     *slog.Logger
	id      game.PlayerID
	regions *regions.Service
	store   ObjectStore
	pos     *position.Service
	acct    *accounts.Client
	guard   *guard.Guard     // with an account: leases and tokens for regions
	admit   *guard.Admission // with an account: token check of topic authors
	// chatLimit bounds each author's rate on each chat topic; limitMu
	// guards it (the validators run concurrently).
	limitMu   sync.Mutex
	chatLimit *position.AuthorLimiter
	httpc     *http.Client // the account server's
	metrics   *metrics

	// ctx ends when Run returns (or Close is called); it bounds every
	// goroutine the peer spawns, which wg tracks.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed sync.Once
	ran    chan struct{} // closed when Run has finished its shutdown

	// saveMu serializes saves; unacked are the saves since the last
	// answered one that got no answer (any may have been stored).
	saveMu  sync.Mutex
	unacked []accounts.Character

	mu        sync.Mutex
	av        *Avatar
	character accounts.Character // last loaded or saved, for its version
	input     webui.InputLatch
	bot       *game.Bot
	rs        map[game.RegionCoord]*regionState
	topics    map[game.RegionCoord]*topic.Membership
	cards     map[peer.ID]*cardEntry
	others    []other
	smoothers map[peer.ID]*game.Smoother
	messages  []webui.Message
	nextSeq   uint64
	acting    bool // an eat or pick-up is in flight
	fighting  bool
	regrowing map[game.ObjectID]bool
	attackers map[peer.ID]attackSeen
	fights    []FightRecord
	rule      fightRule // game.FightOutcome; tests give a peer another
	nonces    io.Reader // fight nonces: crypto/rand; tests give a seeded one
	latency   time.Duration
	cardSeq   uint64
	lastCard  cardState
	lastCardT time.Time

	// relocationsSent is the avatar's relocation count the position
	// service last heard of; only the step goroutine touches it.
	relocationsSent uint32
}

// other is another player as this peer shows it.
type other struct {
	id   peer.ID
	pos  game.Vec // smoothed, dead-reckoned
	vel  game.Vec // units per tick
	card *cardEntry
}

// maxMessages is how many recent messages the peer keeps for pages.
const maxMessages = 64

// maxChatAuthors bounds the chat rate limiter's table.
const maxChatAuthors = 4096

// New builds the player's runtime on n: the region service and the
// position service, the fight and whisper protocols, and (with an Account)
// the login and the saved character. Run starts it.
func New(ctx context.Context, n *node.Node, cfg Config) (_ *Peer, err error) {
	if n == nil {
		return nil, errors.New("play: node is nil")
	}
	if err := cfg.fill(n); err != nil {
		return nil, fmt.Errorf("play config: %w", err)
	}
	p := &Peer{
		cfg: cfg, n: n, h: n.Host(), log: cfg.Logger.With("player", cfg.Name),
		id: game.PlayerID(n.ID().String()), ran: make(chan struct{}),
		rs: map[game.RegionCoord]*regionState{}, topics: map[game.RegionCoord]*topic.Membership{},
		cards: map[peer.ID]*cardEntry{}, smoothers: map[peer.ID]*game.Smoother{},
		regrowing: map[game.ObjectID]bool{}, attackers: map[peer.ID]attackSeen{},
		rule: game.FightOutcome, nonces: rand.Reader, chatLimit: position.NewAuthorLimiter(chatEvery, chatBurst, maxChatAuthors),
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if p.metrics, err = newMetrics(cfg.Registerer); err != nil {
		return nil, fmt.Errorf("play metrics: %w", err)
	}
	if p.av, err = NewAvatar(cfg.Game, p.id, cfg.Name); err != nil {
		return nil, err
	}
	if cfg.StartRegion != nil {
		p.av.PlaceInRegion(*cfg.StartRegion)
	}
	if cfg.Bot {
		p.bot = game.NewBot(cfg.Game, p.id, cfg.BotSeed, cfg.BotPace)
	}

	if cfg.Account != nil {
		if err := p.login(ctx); err != nil {
			return nil, err
		}
	}
	rs, err := StartRegionServices(ctx, n, RegionServicesConfig{
		World: cfg.World, Game: cfg.Game, PositionInterval: cfg.PositionInterval, Aggregate: cfg.Aggregate,
		Summaries: cfg.Summaries, Accounts: p.acct, Logger: cfg.Logger, Registerer: cfg.Registerer, positionOptions: cfg.positionOptions,
	})
	if err != nil {
		return nil, fmt.Errorf("play: %w", err)
	}
	p.regions, p.pos, p.guard, p.admit = rs.Regions, rs.Positions, rs.Guard, rs.Admission
	p.store = p.regions.Client()

	p.h.SetStreamHandler(protocol.ID(FightProtocol), p.handleFight)
	p.h.SetStreamHandler(protocol.ID(WhisperProtocol), p.handleWhisper)
	p.notice("system", "", fmt.Sprintf("Welcome, %s. Arrows/WASD move, E eats, F fights, Enter chats (\"/w name text\" whispers).", cfg.Name))
	return p, nil
}

// ID is the player's ID (its peer ID).
func (p *Peer) ID() game.PlayerID { return p.id }

// Name is the player's display name.
func (p *Peer) Name() string { return p.cfg.Name }

// Node is the peer's node.
func (p *Peer) Node() *node.Node { return p.n }

// Regions is the peer's region service.
func (p *Peer) Regions() *regions.Service { return p.regions }

// PositionStats returns the position service's counters: what the player
// published, sent to coordinators and heard, and its fallbacks to direct
// publishing in aggregated mode.
func (p *Peer) PositionStats() position.Stats { return p.pos.Stats() }

// Player returns a copy of the player's own state.
func (p *Peer) Player() game.Player {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.av.Player()
}

// Place moves the player to pos if it is open ground (demos and tests set
// scenes with it; it is not a game action).
func (p *Peer) Place(pos game.Vec) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.av.Place(pos)
}

// With runs f with the avatar while no step runs, to inspect state.
func (p *Peer) With(f func(a *Avatar)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p.av)
}

// Run plays until ctx ends: the fixed-step loop, position multicast, region
// upkeep, player cards, the latency probe and character saves. On the way
// out it saves the character and closes the peer (not the node).
func (p *Peer) Run(ctx context.Context) error {
	defer close(p.ran)
	defer p.Close()
	stop := context.AfterFunc(ctx, p.cancel)
	defer stop()
	p.spawn(func() {
		if err := p.pos.Run(p.ctx); err != nil {
			p.log.Warn("position service stopped", "err", err)
		}
	})
	p.spawn(p.regionLoop)
	p.spawn(p.cardLoop)
	p.spawn(p.latencyLoop)
	if p.acct != nil {
		p.spawn(p.saveLoop)
	}
	tick := time.NewTicker(time.Second / time.Duration(p.cfg.Game.TickRate))
	defer tick.Stop()
	for {
		select {
		case <-p.ctx.Done():
			if p.acct != nil {
				// Generous: a whole demo saving at once queues on the
				// account store's single writer.
				if err := p.saveOnExit(30 * time.Second); err != nil {
					p.log.Warn("saving the character on exit failed", "err", err)
				} else {
					p.log.Info("character saved")
				}
			}
			return nil
		case now := <-tick.C:
			p.step(now)
		}
	}
}

// Close stops the peer's goroutines, protocols and services; the node stays
// up. Run calls it on the way out; it is safe to call more than once.
func (p *Peer) Close() error {
	p.closed.Do(func() {
		p.cancel()
		p.h.RemoveStreamHandler(protocol.ID(FightProtocol))
		p.h.RemoveStreamHandler(protocol.ID(WhisperProtocol))
		p.wg.Wait()
		p.mu.Lock()
		topics := p.topics
		p.topics = map[game.RegionCoord]*topic.Membership{}
		for _, st := range p.rs {
			if st.sub != nil {
				st.sub.Close()
			}
		}
		p.mu.Unlock()
		for _, t := range topics {
			p.leaveTopic(t)
		}
		if p.regions != nil {
			p.regions.Close()
		}
		if p.admit != nil {
			p.admit.Close() // after the topics and the position service
		}
		if p.guard != nil {
			p.guard.Close() // after the region service: releases the leases
		}
		if p.httpc != nil {
			// A request cancelled while dialing leaves a connection the
			// account server would wait on for seconds when it shuts down.
			p.httpc.CloseIdleConnections()
		}
	})
	return nil
}

// spawn runs f on a goroutine that Close waits for.
func (p *Peer) spawn(f func()) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f()
	}()
}

// step is one tick of the fixed-step loop.
func (p *Peer) step(now time.Time) {
	seen := p.pos.View(now)
	p.mu.Lock()
	p.updateOthers(seen)
	in := p.input.Take().GameInput(p.id)
	if p.bot != nil {
		in = p.bot.Next(p.observe())
	}
	for _, e := range p.av.Step(in.MoveX, in.MoveY) {
		p.describe(e)
	}
	var jobs []func()
	if in.Eat || in.PickUp {
		if e, ok := p.planTake(in.Eat, in.PickUp); ok {
			jobs = append(jobs, func() {
				ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
				defer cancel()
				_, _ = p.take(ctx, e)
			})
		}
	}
	if in.Fight {
		if target, counter, ok := p.planFight(string(in.Target)); ok {
			jobs = append(jobs, func() {
				ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
				defer cancel()
				_, _ = p.attack(ctx, target, counter)
			})
		}
	}
	self := p.av.Player()
	relocations := p.av.Relocations()
	p.mu.Unlock()
	if relocations != p.relocationsSent {
		p.relocationsSent = relocations
		p.pos.Relocate(position.Vec{X: self.Pos.X, Y: self.Pos.Y})
	}
	tr := p.cfg.Game.TickRate
	p.pos.Move(position.Vec{X: self.Pos.X, Y: self.Pos.Y}, position.Vec{X: self.Vel.X * int32(tr), Y: self.Vel.Y * int32(tr)})
	for _, j := range jobs {
		p.spawn(j)
	}
}

// updateOthers refreshes the smoothed view of other players from the
// position service's dead-reckoned view. Caller holds p.mu.
func (p *Peer) updateOthers(seen []position.Seen) {
	p.others = p.others[:0]
	keep := make(map[peer.ID]bool, len(seen))
	tr := int32(p.cfg.Game.TickRate)
	for _, s := range seen {
		sm := p.smoothers[s.Player]
		if sm == nil {
			sm = game.NewSmoother()
			p.smoothers[s.Player] = sm
		}
		keep[s.Player] = true
		shown := sm.Update(game.Vec{X: s.Pos.X, Y: s.Pos.Y})
		p.others = append(p.others, other{
			id: s.Player, pos: shown, vel: game.Vec{X: s.Vel.X / tr, Y: s.Vel.Y / tr}, card: p.cards[s.Player],
		})
	}
	for id := range p.smoothers {
		if !keep[id] {
			delete(p.smoothers, id)
		}
	}
}

// observe builds the bot's observation. Caller holds p.mu.
func (p *Peer) observe() game.BotObservation {
	const sight = 8 * game.TileUnits
	self := p.av.Player()
	obs := game.BotObservation{Tick: p.av.Tick(), Self: self}
	if e, ok := p.av.Nearest(game.ObjectFood, sight, p.loadedLocked); ok {
		obs.Food, obs.HasFood = e.Pos, true
	}
	if e, ok := p.av.Nearest(game.ObjectHealthPack, sight, p.loadedLocked); ok {
		obs.Pack, obs.HasPack = e.Pos, true
	}
	best := int64(-1)
	for _, o := range p.others {
		if o.card != nil && !o.card.Alive {
			continue
		}
		if d := game.DistSq(self.Pos, o.pos); d <= sight*sight && (best < 0 || d < best) {
			best, obs.Opponent, obs.HasOpponent = d, o.pos, true
		}
	}
	return obs
}

// notice appends a message for the pages. Caller holds p.mu.
func (p *Peer) notice(kind, from, text string) {
	p.addMessage(webui.Message{Kind: kind, From: from, Text: text})
}

func (p *Peer) addMessage(m webui.Message) {
	p.nextSeq++
	m.Seq = p.nextSeq
	p.messages = append(p.messages, m)
	if len(p.messages) > maxMessages {
		p.messages = append(p.messages[:0], p.messages[len(p.messages)-maxMessages:]...)
	}
}

// Messages returns the recent messages (chat, whispers, notices).
func (p *Peer) Messages() []webui.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]webui.Message(nil), p.messages...)
}

// describe turns an avatar event into a notice. Caller holds p.mu.
func (p *Peer) describe(e game.Event) {
	switch e.Kind {
	case game.EventDied:
		if e.Other != "" {
			p.notice("event", "", fmt.Sprintf("You were defeated by %s.", p.nameOf(peer.ID(e.Other))))
		} else {
			p.notice("event", "", "You starved.")
		}
	case game.EventRespawned:
		p.notice("event", "", "You are back on your feet.")
	case game.EventRegionChanged:
		p.notice("event", "", fmt.Sprintf("Entered region %s.", e.To))
	}
}

// nameOf is a player's display name as its card gives it, else the end of
// its peer ID. Caller holds p.mu.
func (p *Peer) nameOf(id peer.ID) string {
	if c := p.cards[id]; c != nil {
		return c.Name
	}
	return shortID(id)
}

// shortID is the last six characters of a peer ID, as the status line and
// unnamed players show it.
func shortID(id peer.ID) string {
	s := id.String()
	return s[max(len(s)-6, 0):]
}

// Snapshot implements webui.Session.
func (p *Peer) Snapshot() webui.View {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.av.World()
	self := p.av.Player()
	here := w.RegionOf(self.Pos)
	v := webui.View{
		Tick:     p.av.Tick(),
		Self:     webui.PlayerViewOf(self),
		World:    webui.WorldInfoOf(p.cfg.Game),
		Messages: append([]webui.Message(nil), p.messages...),
	}
	for _, rc := range w.Neighbours(here) {
		v.Regions = append(v.Regions, webui.RegionRef{X: rc.X, Y: rc.Y, Revision: 1})
		if !p.loadedLocked(rc) {
			continue
		}
		for _, e := range w.Objects(rc) {
			if e.Object.Amount > 0 {
				v.Objects = append(v.Objects, webui.ObjectViewOf(e))
			}
		}
	}
	for _, o := range p.others {
		pv := webui.PlayerView{
			ID: o.id.String(), Name: shortID(o.id), X: o.pos.X, Y: o.pos.Y, VX: o.vel.X, VY: o.vel.Y,
			Health: game.MaxHealth, Skill: 1, Alive: true,
		}
		if c := o.card; c != nil {
			pv.Name, pv.Health, pv.Hunger, pv.Score, pv.Skill, pv.Alive = c.Name, c.Health, c.Hunger, c.Score, c.Skill, c.Alive
		}
		v.Players = append(v.Players, pv)
	}
	coord, _ := p.store.Coordinator(coordOf(here))
	v.Status = webui.Status{
		Mode: "p2p", Peers: len(p.h.Network().Peers()), Region: here.String(),
		Coordinator: shortID(coord), LatencyMs: int(p.latency.Milliseconds()),
	}
	if coord == p.h.ID() {
		v.Status.Coordinator = "you"
	}
	return v
}

// Map implements webui.Session.
func (p *Peer) Map(rc game.RegionCoord) (webui.MapView, bool) {
	p.mu.Lock()
	w := p.av.World()
	p.mu.Unlock()
	m := w.Map(rc) // terrain is immutable and safe to read concurrently
	if m == nil {
		return webui.MapView{}, false
	}
	return webui.NewMapView(m, 1), true
}

// Input implements webui.Session: the direction is held until changed; eat
// and fight happen on the next tick. A bot ignores it.
func (p *Peer) Input(c webui.Control) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.input.Apply(c)
}

func coordOf(rc game.RegionCoord) regions.Coord { return regions.Coord{X: rc.X, Y: rc.Y} }

// positionAdmission turns the token check into the position service's
// admission: refused players' updates are rejected, those of players whose
// token is still being fetched ignored.
func positionAdmission(a *guard.Admission) position.Admission {
	return func(id peer.ID) position.Verdict {
		switch a.Check(id) {
		case guard.Admitted:
			return position.Accept
		case guard.Refused:
			return position.Reject
		default:
			return position.Ignore
		}
	}
}
