package play

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/bootstrap/accounts"
	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/node"
	"github.com/overworld-p2p/overworld/regions"
	"github.com/overworld-p2p/overworld/regions/guard"
	"github.com/overworld-p2p/overworld/regions/position"
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

// Peer is one player's runtime on the overlay: a thin composition of its
// parts (parts.go), which it builds, starts and stops in order.
type Peer struct {
	cfg     Config
	n       *node.Node
	h       host.Host
	log     *slog.Logger
	id      game.PlayerID
	metrics *metrics

	services *RegionServices
	regions  *regions.Service
	store    ObjectStore
	pos      *position.Service
	admit    *guard.Admission // with an account: token check of topic authors
	httpc    *http.Client     // the account server's

	msgs    *messageLog
	loop    *gameLoop
	objects *objectCache
	social  *social
	fights  *fights
	latency *latencyProbe
	saves   *saves // nil without an account
	// positions runs the position service's Run.
	positions lifetime

	// quit ends Run (Close); runMu orders Run against Close: done is set
	// when Run starts and closed when it has returned.
	quit     chan struct{}
	quitOnce sync.Once
	runMu    sync.Mutex
	done     chan struct{}
	torn     sync.Once
}

// New builds the player's runtime on n: the avatar (restored from the
// saved character with an Account), the region and position services, and
// the parts of the runtime. Run starts it.
func New(ctx context.Context, n *node.Node, cfg Config) (_ *Peer, err error) {
	if n == nil {
		return nil, errors.New("play: node is nil")
	}
	if err := cfg.fill(n); err != nil {
		return nil, fmt.Errorf("play config: %w", err)
	}
	p := &Peer{
		cfg: cfg, n: n, h: n.Host(), id: game.PlayerID(n.ID().String()),
		msgs: &messageLog{}, positions: newLifetime(), quit: make(chan struct{}),
	}
	p.log = cfg.Logger.With("player", cfg.Name)
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if p.metrics, err = newMetrics(cfg.Registerer); err != nil {
		return nil, fmt.Errorf("play metrics: %w", err)
	}
	av, err := NewAvatar(cfg.Game, p.id, cfg.Name)
	if err != nil {
		return nil, err
	}
	if cfg.StartRegion != nil {
		av.PlaceInRegion(*cfg.StartRegion)
	}
	if cfg.Account != nil {
		var name string
		p.saves, p.httpc, name, err = login(ctx, *cfg.Account, p.h.ID(), av, p.log)
		if err != nil {
			return nil, err
		}
		p.cfg.Name = name
	}
	rs, err := StartRegionServices(ctx, n, RegionServicesConfig{
		World: cfg.World, Game: cfg.Game, PositionInterval: cfg.PositionInterval, Aggregate: cfg.Aggregate,
		Summaries: cfg.Summaries, Accounts: p.account(), Logger: cfg.Logger, Registerer: cfg.Registerer, positionOptions: cfg.positionOptions,
	})
	if err != nil {
		return nil, fmt.Errorf("play: %w", err)
	}
	p.services, p.regions, p.pos, p.admit = rs, rs.Regions, rs.Positions, rs.Admission
	p.store = p.regions.Client()
	p.compose(av)
	p.msgs.notice("system", fmt.Sprintf("Welcome, %s. Arrows/WASD move, E eats, F fights, Enter chats (\"/w name text\" whispers).", p.cfg.Name))
	return p, nil
}

// compose builds the parts around the avatar and wires what each asks of
// the others.
func (p *Peer) compose(av *Avatar) {
	var bot *game.Bot
	if p.cfg.Bot {
		bot = game.NewBot(p.cfg.Game, p.id, p.cfg.BotSeed, p.cfg.BotPace)
	}
	p.loop = newGameLoop(p.cfg.Game, p.id, av, bot, p.pos, p.msgs)
	p.objects = newObjectCache(p.cfg, p.store, p.loop, p.msgs, p.metrics, p.log)
	p.social = newSocial(p.cfg, p.h, p.n.PubSub(), p.admit, p.loop, p.msgs, p.metrics, p.log)
	p.fights = newFights(p.cfg.Game, p.id, p.h, p.admit, p.pos, p.loop, p.social, p.msgs, p.metrics, p.log)
	p.latency = newLatencyProbe(p.h, p.store, p.loop)
	if p.saves != nil {
		p.saves.loop, p.saves.every = p.loop, p.cfg.SaveEvery
	}
	p.loop.cards, p.loop.loaded, p.loop.nameOf = p.social.cardsOf, p.objects.loaded, p.social.nameOf
	p.loop.act = func(in game.Input) {
		if in.Eat || in.PickUp {
			p.objects.tryTake(in.Eat, in.PickUp)
		}
		if in.Fight {
			p.fights.tryAttack(string(in.Target))
		}
	}
}

// account is the logged-in account client, nil without an account.
func (p *Peer) account() *accounts.Client {
	if p.saves == nil {
		return nil
	}
	return p.saves.acct
}

// parts lists the parts in the order they start: each after the parts it
// calls into, the game loop, which drives the others, last. They stop in
// the reverse order.
func (p *Peer) parts() []part {
	ps := []part{positionsPart{p}, p.objects, p.social, p.fights, p.latency}
	if p.saves != nil {
		ps = append(ps, p.saves)
	}
	return append(ps, p.loop)
}

// positionsPart runs the position service as a part.
type positionsPart struct{ p *Peer }

func (pp positionsPart) start() {
	p := pp.p
	p.positions.spawn(func() {
		if err := p.pos.Run(p.positions.ctx); err != nil {
			p.log.Warn("position service stopped", "err", err)
		}
	})
}

func (pp positionsPart) stop() { pp.p.positions.end() }

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
func (p *Peer) Player() game.Player { return p.loop.player() }

// Place moves the player to pos if it is open ground (demos and tests set
// scenes with it; it is not a game action).
func (p *Peer) Place(pos game.Vec) bool {
	var ok bool
	p.loop.with(func(av *Avatar) { ok = av.Place(pos) })
	return ok
}

// With runs f with the avatar while no step runs, to inspect state.
func (p *Peer) With(f func(a *Avatar)) { p.loop.with(f) }

// Loaded reports whether the peer holds region rc's objects.
func (p *Peer) Loaded(rc game.RegionCoord) bool { return p.objects.isLoaded(rc) }

// Run plays until ctx ends (or Close is called): it starts the parts
// (the position service, the object cache, social, fights, the latency
// probe, saves, then the game loop), and on the way out stops them in the
// reverse order, saves the character and closes the peer (not the node).
// A peer runs once.
func (p *Peer) Run(ctx context.Context) error {
	p.runMu.Lock()
	select {
	case <-p.quit:
		p.runMu.Unlock()
		return errors.New("play: the peer is closed")
	default:
	}
	if p.done != nil {
		p.runMu.Unlock()
		return errors.New("play: the peer runs already")
	}
	p.done = make(chan struct{})
	p.runMu.Unlock()
	defer close(p.done)
	defer p.teardown()
	parts := p.parts()
	for _, pt := range parts {
		pt.start()
	}
	select {
	case <-ctx.Done():
	case <-p.quit:
	}
	for i := len(parts) - 1; i >= 0; i-- {
		parts[i].stop()
	}
	if p.saves != nil {
		// Generous: a whole demo saving at once queues on the account
		// store's single writer.
		if err := p.saves.saveOnExit(30 * time.Second); err != nil {
			p.log.Warn("saving the character on exit failed", "err", err)
		} else {
			p.log.Info("character saved")
		}
	}
	return nil
}

// Close ends Run, if it runs, and waits for it: the parts stop, the
// character is saved, the region services close. Without Run it closes
// the peer itself. The node stays up. Safe more than once, and on a peer
// New could not finish.
func (p *Peer) Close() error {
	p.quitOnce.Do(func() { close(p.quit) })
	p.runMu.Lock()
	done := p.done
	p.runMu.Unlock()
	if done != nil {
		<-done
		return nil
	}
	p.teardown()
	return nil
}

// teardown stops the parts, then the region services: the region service,
// the admission (after the topics), the guard (which releases the
// leases).
func (p *Peer) teardown() {
	p.torn.Do(func() {
		if p.loop != nil {
			parts := p.parts()
			for i := len(parts) - 1; i >= 0; i-- {
				parts[i].stop()
			}
		}
		if p.services != nil {
			p.services.Close()
		}
		if p.httpc != nil {
			// A request cancelled while dialing leaves a connection the
			// account server would wait on for seconds when it shuts down.
			p.httpc.CloseIdleConnections()
		}
	})
}

// Snapshot is the player's view now.
func (p *Peer) Snapshot() View {
	v := View{Messages: p.msgs.all()}
	here := p.loop.view(&v, p.objects.loaded())
	coord, _ := p.store.Coordinator(coordOf(here))
	v.Status = Status{
		Mode: "p2p", Peers: len(p.h.Network().Peers()), Region: here.String(),
		Coordinator: shortID(coord), LatencyMs: int(p.latency.latency().Milliseconds()),
	}
	if coord == p.h.ID() {
		v.Status.Coordinator = "you"
	}
	return v
}

// Map is the terrain of region rc (nil outside the world). Terrain never
// changes.
func (p *Peer) Map(rc game.RegionCoord) *game.RegionMap { return p.loop.terrain().Map(rc) }

// Input takes the client's input for the next ticks: the direction is held
// until changed; eat, pick-up and fight happen on the next tick. A bot
// ignores it.
func (p *Peer) Input(in game.Input) error { return p.loop.setInput(in) }

// Chat says a line to everyone in the player's region, or, with to set,
// whispers it to the player of that name or peer ID.
func (p *Peer) Chat(text, to string) error { return p.social.chat(text, to) }

// Whisper sends a private line to the player named to (a name or a peer
// ID) over a direct stream and waits for its acknowledgement.
func (p *Peer) Whisper(ctx context.Context, to, text string) error {
	return p.social.whisper(ctx, to, text)
}

// Messages returns the recent messages (chat, whispers, notices).
func (p *Peer) Messages() []Message { return p.msgs.all() }

// Attack fights the player target now if it is in range (the F key does
// the same on the next tick).
func (p *Peer) Attack(ctx context.Context, target game.PlayerID) (FightRecord, error) {
	o, counter, ok := p.fights.plan(string(target))
	if !ok {
		return FightRecord{}, fmt.Errorf("attack %s: not in range, dead, busy or cooling down", target)
	}
	return p.fights.attack(ctx, o, counter)
}

// Fights returns the recent fights this peer took part in, oldest first.
func (p *Peer) Fights() []FightRecord { return p.fights.list() }

// EatNearest eats one unit of the nearest food in reach, now, through the
// region's coordinator (the E key does the same on the next tick).
func (p *Peer) EatNearest(ctx context.Context) (TakeResult, error) { return p.objects.eatNearest(ctx) }

// Save stores the character on the account server now.
func (p *Peer) Save(ctx context.Context) error {
	if p.saves == nil {
		return errors.New("save: not logged in")
	}
	return p.saves.save(ctx)
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
