package webui

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/overworld-p2p/overworld/game"
)

// LocalOptions configures a LocalSession.
type LocalOptions struct {
	// Config is the world; zero means game.DefaultConfig().
	Config *game.Config
	// PlayerID and Name are the human player's.
	PlayerID game.PlayerID
	Name     string
	// Bots adds that many bot players driven by the SimMud workload,
	// seeded with BotSeed; they start in the player's region.
	Bots    int
	BotSeed uint64
}

// maxMessages is how many recent messages a session keeps for pages.
const maxMessages = 64

// LocalSession is a single-player Session over a local game.World: the
// reference implementation of Session, used by `overworld demo` style runs
// and the tests. Run steps the world at its tick rate.
type LocalSession struct {
	mu       sync.Mutex
	world    *game.World
	self     game.PlayerID
	bots     []*game.Bot
	input    InputLatch
	messages []Message
	nextSeq  uint64
	names    map[game.PlayerID]string
}

var botNames = []string{"Ada", "Bram", "Cleo", "Dov", "Esme", "Finn", "Gus", "Hana", "Ivo", "Jun", "Kit", "Lux"}

// NewLocalSession builds the world with the player (and bots) in it.
func NewLocalSession(opts LocalOptions) (*LocalSession, error) {
	cfg := game.DefaultConfig()
	if opts.Config != nil {
		cfg = *opts.Config
	}
	if opts.PlayerID == "" {
		opts.PlayerID = "local-player"
	}
	if opts.Name == "" {
		opts.Name = "You"
	}
	w, err := game.NewWorld(cfg)
	if err != nil {
		return nil, fmt.Errorf("local session: %w", err)
	}
	self, err := w.AddPlayer(opts.PlayerID, opts.Name)
	if err != nil {
		return nil, fmt.Errorf("local session: %w", err)
	}
	l := &LocalSession{world: w, self: opts.PlayerID, names: map[game.PlayerID]string{opts.PlayerID: opts.Name}}
	home := w.RegionOf(self.Pos)
	for i := 0; i < opts.Bots; i++ {
		id := game.PlayerID(fmt.Sprintf("bot-%03d", i))
		name := botNames[i%len(botNames)]
		if i >= len(botNames) {
			name = fmt.Sprintf("%s%d", name, i/len(botNames)+1)
		}
		if _, err := w.AddPlayer(id, name); err != nil {
			return nil, fmt.Errorf("local session: bot %d: %w", i, err)
		}
		l.names[id] = name
		// Bots spawn where the player is, so there is company at once.
		if err := l.place(id, w.SpawnPoint(id, home, 0)); err != nil {
			return nil, err
		}
		l.bots = append(l.bots, game.NewBot(cfg, id, opts.BotSeed, game.DefaultBotPace()))
	}
	l.notice("system", "", fmt.Sprintf("Welcome, %s. Arrows/WASD move, E eats, F fights, Enter chats.", opts.Name))
	return l, nil
}

// place moves a freshly added player; it goes through a one-player world
// edit because World keeps players private.
func (l *LocalSession) place(id game.PlayerID, pos game.Vec) error {
	if !l.world.Teleport(id, pos) {
		return fmt.Errorf("local session: cannot place %s at %+v", id, pos)
	}
	return nil
}

// With runs f with the session's world while no step runs, for setting up
// scenes and inspecting state.
func (l *LocalSession) With(f func(w *game.World)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(l.world)
}

// PlayerID is the human player's ID.
func (l *LocalSession) PlayerID() game.PlayerID { return l.self }

// Run steps the world at its tick rate until ctx is cancelled.
func (l *LocalSession) Run(ctx context.Context) error {
	tick := time.NewTicker(time.Second / time.Duration(l.world.Config().TickRate))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			l.Step()
		}
	}
}

// Step advances the world by one tick with the player's held control, any
// pending actions, and the bots' inputs.
func (l *LocalSession) Step() {
	l.mu.Lock()
	defer l.mu.Unlock()
	inputs := []game.Input{l.input.Take().GameInput(l.self)}
	for _, b := range l.bots {
		if obs, ok := l.world.BotObserve(b.ID()); ok {
			inputs = append(inputs, b.Next(obs))
		}
	}
	for _, e := range l.world.Step(inputs) {
		l.describe(e)
	}
}

// describe turns an event that concerns the player into a notice.
func (l *LocalSession) describe(e game.Event) {
	name := func(id game.PlayerID) string {
		if id == l.self {
			return "you"
		}
		if n, ok := l.names[id]; ok {
			return n
		}
		return string(id)
	}
	mine := e.Player == l.self || e.Other == l.self
	var text string
	switch e.Kind {
	case game.EventAte:
		if mine {
			text = "You ate some food."
		}
	case game.EventPickedUp:
		if mine {
			text = fmt.Sprintf("You picked up a health pack (+%d).", e.Amount)
		}
	case game.EventHit:
		if mine {
			text = fmt.Sprintf("%s hit %s for %d.", capitalise(name(e.Player)), name(e.Other), e.Amount)
		}
	case game.EventMissed:
		if mine {
			text = fmt.Sprintf("%s missed %s.", capitalise(name(e.Player)), name(e.Other))
		}
	case game.EventDied:
		if e.Other != "" {
			text = fmt.Sprintf("%s was defeated by %s.", capitalise(name(e.Player)), name(e.Other))
		} else if e.Player == l.self {
			text = "You starved."
		}
	case game.EventRespawned:
		if mine {
			text = "You are back on your feet."
		}
	case game.EventRegionChanged:
		if mine {
			text = fmt.Sprintf("Entered region %s.", e.To)
		}
	}
	if text != "" {
		l.notice("event", "", text)
	}
}

func capitalise(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}

// notice appends a message; callers hold l.mu (or own l exclusively).
func (l *LocalSession) notice(kind, from, text string) {
	l.nextSeq++
	l.messages = append(l.messages, Message{Seq: l.nextSeq, Kind: kind, From: from, Text: text})
	if len(l.messages) > maxMessages {
		l.messages = append(l.messages[:0], l.messages[len(l.messages)-maxMessages:]...)
	}
}

// Snapshot implements Session.
func (l *LocalSession) Snapshot() View {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.world
	self, _ := w.Player(l.self)
	here := w.RegionOf(self.Pos)
	near := map[game.RegionCoord]bool{}
	v := View{
		Tick:     w.Tick(),
		Self:     PlayerViewOf(self),
		World:    WorldInfoOf(w.Config()),
		Messages: append([]Message(nil), l.messages...),
		Status: Status{
			Mode: "local", Peers: 1, Region: here.String(), Coordinator: "local",
		},
	}
	for _, rc := range w.Neighbours(here) {
		near[rc] = true
		v.Regions = append(v.Regions, RegionRef{X: rc.X, Y: rc.Y, Revision: 1})
		for _, e := range w.Objects(rc) {
			if e.Object.Amount > 0 {
				v.Objects = append(v.Objects, ObjectViewOf(e))
			}
		}
	}
	for _, p := range w.Players() {
		if p.ID != l.self && near[w.RegionOf(p.Pos)] {
			v.Players = append(v.Players, PlayerViewOf(p))
		}
	}
	return v
}

// Map implements Session.
func (l *LocalSession) Map(rc game.RegionCoord) (MapView, bool) {
	m := l.world.Map(rc) // terrain is immutable and safe to read concurrently
	if m == nil {
		return MapView{}, false
	}
	return NewMapView(m, 1), true
}

// Input implements Session: the direction is held until changed; eat and
// fight happen on the next tick.
func (l *LocalSession) Input(c Control) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.input.Apply(c)
}

// Chat implements Session: with nobody else human around, the line is
// echoed into the player's own log.
func (l *LocalSession) Chat(text, to string) error {
	if err := ValidateChat(text, to); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	name := l.names[l.self]
	if to != "" {
		l.nextSeq++
		l.messages = append(l.messages, Message{Seq: l.nextSeq, Kind: "whisper", From: name, To: to, Text: text})
	} else {
		l.notice("chat", name, text)
	}
	if len(l.messages) > maxMessages {
		l.messages = append(l.messages[:0], l.messages[len(l.messages)-maxMessages:]...)
	}
	return nil
}
