package mirror

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/webui"
)

// PageConfig configures a PageSession.
type PageConfig struct {
	// Mirrors are the mirrors' WebSocket URLs (ws://host:port/ws); the
	// session uses the first that answers and moves to the next when it
	// loses one.
	Mirrors []string
	// Key is the peer key the player's token was issued to; Token returns
	// the current access token (accounts.Client.AccessToken refreshes it).
	Key   crypto.PrivKey
	Token func(context.Context) (string, error)
	// Bot lets a bot play instead of the page (seeded with BotSeed).
	Bot     bool
	BotSeed uint64
	Logger  *slog.Logger
}

// PageSession is the browser page's Session in mirror mode: the local page
// server (game/webui) drives it, and it plays through a mirror over the
// client protocol. The page shows which mirror the player is on, the
// mirror's rollbacks and whether the mirrors' state hashes agree.
type PageSession struct {
	cfg PageConfig
	log *slog.Logger

	mu       sync.Mutex
	client   *Client
	url      string
	world    *game.World // terrain for the maps (the welcome's config)
	latch    webui.InputLatch
	messages []webui.Message
	nextMsg  uint64
	noted    map[uint64]bool // event notes turned into messages
	undone   map[uint64]bool // retractions turned into messages
	sentAt   map[uint64]time.Time
	rtt      time.Duration
	conns    int
}

// NewPageSession checks cfg; Run plays.
func NewPageSession(cfg PageConfig) (*PageSession, error) {
	if len(cfg.Mirrors) == 0 {
		return nil, errors.New("mirror page: no mirror URLs")
	}
	if cfg.Key == nil || cfg.Token == nil {
		return nil, errors.New("mirror page: a peer key and a token source are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &PageSession{cfg: cfg, log: cfg.Logger, noted: map[uint64]bool{}, undone: map[uint64]bool{}, sentAt: map[uint64]time.Time{}}, nil
}

// Run connects to a mirror and plays until ctx ends, moving to the next
// mirror whenever the current one is lost. The player leaves the world when
// Run returns.
func (p *PageSession) Run(ctx context.Context) error {
	backoff := 250 * time.Millisecond
	for i := 0; ctx.Err() == nil; i++ {
		url := p.cfg.Mirrors[i%len(p.cfg.Mirrors)]
		err := p.play(ctx, url)
		if ctx.Err() != nil {
			return nil
		}
		p.notice("system", fmt.Sprintf("Lost the mirror at %s (%v); trying the next one.", url, err))
		p.log.Warn("mirror session ended", "url", url, "err", err)
		if (i+1)%len(p.cfg.Mirrors) == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
		}
	}
	return nil
}

// play runs one session with the mirror at url.
func (p *PageSession) play(ctx context.Context, url string) error {
	tok, err := p.cfg.Token(ctx)
	if err != nil {
		return fmt.Errorf("token: %w", err)
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	c, err := Dial(dctx, url, p.cfg.Key, tok)
	cancel()
	if err != nil {
		return err
	}
	v := c.View()
	w, err := game.NewWorld(v.Config)
	if err != nil {
		c.Close()
		return err
	}
	p.mu.Lock()
	p.client, p.url, p.world, p.conns = c, url, w, p.conns+1
	clear(p.noted)
	clear(p.undone)
	clear(p.sentAt)
	p.mu.Unlock()
	how := "a new character"
	if v.Restored {
		how = "your character as it was"
	}
	p.notice("system", fmt.Sprintf("Playing on mirror %d (%s) with %s. Arrows/WASD move, E eats, F fights.", v.Mirror, url, how))
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go KeepToken(sctx, c, tok, p.cfg.Token, 30*time.Second)
	period := time.Second / time.Duration(max(v.Config.TickRate, 1))
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			c.Close()
			return nil
		case <-c.Done():
			return c.Err()
		case <-t.C:
		}
		var in game.Input
		if p.cfg.Bot {
			var ok bool
			if in, ok = c.BotInput(p.cfg.BotSeed); !ok {
				continue
			}
		} else {
			p.mu.Lock()
			in = p.latch.Take().GameInput("")
			p.mu.Unlock()
		}
		if err := c.SendInput(ctx, in, false); err != nil {
			return err
		}
		p.mu.Lock()
		p.sentAt[c.LastSeq()] = time.Now()
		if len(p.sentAt) > 256 {
			clear(p.sentAt)
		}
		p.mu.Unlock()
	}
}

// notice appends a message for the page (lock not held).
func (p *PageSession) notice(kind, text string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.noticeLocked(kind, text)
}

func (p *PageSession) noticeLocked(kind, text string) {
	p.nextMsg++
	p.messages = append(p.messages, webui.Message{Seq: p.nextMsg, Kind: kind, Text: text})
	if n := len(p.messages); n > 64 {
		p.messages = append(p.messages[:0], p.messages[n-64:]...)
	}
}

// Client returns the current mirror session (nil between sessions).
func (p *PageSession) Client() *Client {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.client
}

// Snapshot implements webui.Session.
func (p *PageSession) Snapshot() webui.View {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client == nil {
		return webui.View{Status: webui.Status{Mode: "mirror", Coordinator: "connecting…"}, Messages: slices.Clone(p.messages)}
	}
	v := p.client.View()
	if at, ok := p.sentAt[v.InputSeq]; ok {
		p.rtt = time.Since(at)
		delete(p.sentAt, v.InputSeq)
	}
	p.describe(v)
	cfg := v.Config
	here := game.RegionOf(cfg, v.Self.Pos)
	near := map[game.RegionCoord]bool{}
	view := webui.View{
		Tick: v.LeadingTick, Self: webui.PlayerViewOf(v.Self), World: webui.WorldInfoOf(cfg),
		Messages: slices.Clone(p.messages),
	}
	for _, rc := range p.world.Neighbours(here) {
		near[rc] = true
		view.Regions = append(view.Regions, webui.RegionRef{X: rc.X, Y: rc.Y, Revision: 1})
	}
	for _, o := range v.Objects {
		if o.Amount > 0 && near[o.ID.Region] {
			view.Objects = append(view.Objects, webui.ObjectView{
				ID: o.ID.String(), Kind: o.Kind.String(), X: o.Pos.X, Y: o.Pos.Y, Amount: o.Amount, Max: o.Max,
			})
		}
	}
	for _, pl := range v.Players {
		// Under VFC the client holds everyone (far players at low rates);
		// the page draws its neighbourhood.
		if near[game.RegionOf(cfg, pl.Pos)] {
			view.Players = append(view.Players, webui.PlayerViewOf(pl))
		}
	}
	st := v.Status
	view.Status = webui.Status{
		Mode: "mirror", Peers: len(st.Members) + 1, Region: here.String(),
		Coordinator: fmt.Sprintf("mirror %d", v.Mirror), LatencyMs: int(p.rtt.Milliseconds()),
		Mirror: &webui.MirrorStatus{
			Mirror: v.Mirror, URL: p.url, Mirrors: len(st.Members) + 1, Authority: st.Authority,
			Rollbacks: st.Rollbacks, LeadingRollbacks: st.LeadingRollbacks,
			Agreed: st.Agreed, Mismatched: st.Mismatched, Agreeing: st.Agreeing, CheckpointTick: st.CheckpointTick,
			Resyncs: st.Resyncs, LeadingTick: v.LeadingTick, ConfirmedTick: v.ConfirmedTick,
			Protocol: st.Protocol, Decided: st.Decided, DecidedLate: st.DecidedLate, Undecided: st.Undecided, Reconciled: st.Reconciled,
		},
	}
	return view
}

// describe turns the events that concern the player into messages: at
// once when the leading state shows them, and a correction if the
// confirmed state retracts one.
func (p *PageSession) describe(v ClientView) {
	name := func(id game.PlayerID) string {
		if id == v.Player {
			return "you"
		}
		for _, pl := range v.Players {
			if pl.ID == id {
				return pl.Name
			}
		}
		return "someone"
	}
	for _, e := range v.Events {
		ev := e.Event
		if ev.Player != v.Player && ev.Other != v.Player {
			continue
		}
		var text string
		switch ev.Kind {
		case game.EventAte:
			text = "You ate some food."
		case game.EventPickedUp:
			text = fmt.Sprintf("You picked up a health pack (+%d).", ev.Amount)
		case game.EventHit:
			text = fmt.Sprintf("%s hit %s for %d.", name(ev.Player), name(ev.Other), ev.Amount)
		case game.EventMissed:
			text = fmt.Sprintf("%s missed %s.", name(ev.Player), name(ev.Other))
		case game.EventDied:
			text = "You were defeated."
			if ev.Player != v.Player {
				text = fmt.Sprintf("You defeated %s.", name(ev.Player))
			}
		case game.EventRespawned:
			text = "You are back on your feet."
		default:
			continue
		}
		if !p.noted[e.ID] {
			p.noted[e.ID] = true
			p.noticeLocked("event", text)
		}
		if e.Retracted && !p.undone[e.ID] {
			p.undone[e.ID] = true
			p.noticeLocked("system", "↺ rolled back: "+text)
		}
	}
	if len(p.noted) > 4*maxClientEvents {
		clear(p.noted)
		clear(p.undone)
		for _, e := range v.Events {
			p.noted[e.ID], p.undone[e.ID] = true, e.Retracted
		}
	}
}

// Map implements webui.Session.
func (p *PageSession) Map(rc game.RegionCoord) (webui.MapView, bool) {
	p.mu.Lock()
	w := p.world
	p.mu.Unlock()
	if w == nil {
		return webui.MapView{}, false
	}
	m := w.Map(rc)
	if m == nil {
		return webui.MapView{}, false
	}
	return webui.NewMapView(m, 1), true
}

// Input implements webui.Session.
func (p *PageSession) Input(c webui.Control) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latch.Apply(c)
}

// Chat implements webui.Session: mirrors carry commands, not chat.
func (p *PageSession) Chat(text, to string) error {
	return errors.New("chat is not carried in mirror mode")
}
