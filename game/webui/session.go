// Package webui is the browser client of overworld: a small web page (a
// canvas, a chat box and a minimap, in plain JavaScript embedded in the
// binary) and the WebSocket endpoint it talks to.
//
// Data flow: a Session gives the page its view: PeerSession over a P2P
// player's runtime (game/play, which knows nothing of the page),
// node/mirror's PageSession in mirror mode, LocalSession over a local
// game.World for single-player demos and tests. For every connected page
// the Server polls Session.Snapshot about a dozen times a second and
// pushes the View as a JSON "view" frame, adding the tile maps the page
// has not seen yet (Session.Map) and only the chat lines it has not
// received. The page sends back "input" frames (held direction, eat,
// fight) and "chat" frames; the server bounds and validates each before
// calling Session.Input or Session.Chat.
package webui

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/overworld-p2p/overworld/game"
)

// Session is the peer side of one browser client: the player's view of the
// world and the actions it may take. Implementations must be safe for
// concurrent use; the server calls them from one goroutine per page.
type Session interface {
	// Snapshot returns the current view of the player.
	Snapshot() View
	// Map returns the terrain of a region the view lists in Regions.
	Map(rc game.RegionCoord) (MapView, bool)
	// Input applies the player's control state (already validated).
	Input(Control) error
	// Chat sends a chat line, to everyone nearby or, if to is set, to the
	// player with that name or ID (already validated).
	Chat(text, to string) error
}

// View is everything the page draws. Positions are game units
// (game.TileUnits per tile).
type View struct {
	Tick    uint64       `json:"tick"`
	Self    PlayerView   `json:"self"`
	Players []PlayerView `json:"players"`
	Objects []ObjectView `json:"objects"`
	// Regions lists the region around the player and its neighbours whose
	// maps the page should hold, with a revision that changes when a map
	// does.
	Regions  []RegionRef `json:"regions"`
	World    WorldInfo   `json:"world"`
	Messages []Message   `json:"messages"`
	Status   Status      `json:"status"`
}

// PlayerView is one player as the page shows it.
type PlayerView struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	X      int32  `json:"x"`
	Y      int32  `json:"y"`
	VX     int32  `json:"vx"`
	VY     int32  `json:"vy"`
	Health int32  `json:"health"`
	Hunger int32  `json:"hunger"`
	Score  int32  `json:"score"`
	Skill  int32  `json:"skill"`
	Alive  bool   `json:"alive"`
}

// ObjectView is one food object or health pack.
type ObjectView struct {
	ID     string `json:"id"`
	Kind   string `json:"kind"` // "food" or "health"
	X      int32  `json:"x"`
	Y      int32  `json:"y"`
	Amount int    `json:"amount"`
	Max    int    `json:"max"`
}

// RegionRef names a region map and its revision.
type RegionRef struct {
	X        int    `json:"x"`
	Y        int    `json:"y"`
	Revision uint64 `json:"rev"`
}

// MapView is a region's terrain: Size rows of Size characters, row-major,
// one game.Tile.Rune per tile ('.' floor, ',' grass, '#' wall, '~' water).
type MapView struct {
	X        int    `json:"x"`
	Y        int    `json:"y"`
	Revision uint64 `json:"rev"`
	Size     int    `json:"size"`
	Tiles    string `json:"tiles"`
}

// NewMapView renders a region map for the page.
func NewMapView(m *game.RegionMap, revision uint64) MapView {
	var b strings.Builder
	b.Grow(len(m.Tiles))
	for _, t := range m.Tiles {
		b.WriteByte(t.Rune())
	}
	return MapView{X: m.Coord.X, Y: m.Coord.Y, Revision: revision, Size: m.Size, Tiles: b.String()}
}

// WorldInfo is the shape of the world, for the minimap and coordinates.
type WorldInfo struct {
	RegionsX    int `json:"regionsX"`
	RegionsY    int `json:"regionsY"`
	RegionTiles int `json:"regionTiles"`
	TileUnits   int `json:"tileUnits"`
	TickRate    int `json:"tickRate"`
}

// Message is a chat line or a game notice. Seq increases by one per
// message of a session, so the server sends each page only what is new.
type Message struct {
	Seq  uint64 `json:"seq"`
	Kind string `json:"kind"` // "chat", "whisper", "event" or "system"
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	Text string `json:"text"`
}

// Status is the status line: what the network layer is doing.
type Status struct {
	Mode        string `json:"mode"` // "local", "p2p", "mirror"
	Peers       int    `json:"peers"`
	Region      string `json:"region"`
	Coordinator string `json:"coordinator"` // short peer ID of the region's coordinator
	LatencyMs   int    `json:"latencyMs"`
	// Mirror is set in mirror mode.
	Mirror *MirrorStatus `json:"mirror,omitempty"`
}

// Control is the player's input as the page sends it: the held direction
// (each axis -1, 0 or 1) and one-shot actions.
type Control struct {
	MoveX, MoveY int
	Eat          bool // eat nearby food or take a nearby health pack
	Fight        bool
	Target       string // player ID to attack; empty for the nearest
}

// Limits on what a page may send.
const (
	// MaxChatRunes bounds a chat line.
	MaxChatRunes = game.MaxChatRunes
	// MaxTargetLen bounds a target or recipient name.
	MaxTargetLen = game.MaxPlayerIDLen
)

// InputLatch holds what a page asked for between two ticks: the direction
// until the page changes it, eat and fight once, on the next tick. Sessions
// guard it with their own lock.
type InputLatch struct {
	held    Control // direction
	pending Control // one-shot actions
}

// Apply records a control from the page after validating it.
func (l *InputLatch) Apply(c Control) error {
	if err := c.Validate(); err != nil {
		return err
	}
	l.held.MoveX, l.held.MoveY = c.MoveX, c.MoveY
	l.pending.Eat = l.pending.Eat || c.Eat
	if c.Fight {
		l.pending.Fight, l.pending.Target = true, c.Target
	}
	return nil
}

// Take returns the control for this tick and clears the one-shot actions.
func (l *InputLatch) Take() Control {
	c := l.held
	c.Eat, c.Fight, c.Target = l.pending.Eat, l.pending.Fight, l.pending.Target
	l.pending = Control{}
	return c
}

// Validate checks a control against the protocol's ranges.
func (c Control) Validate() error {
	if c.MoveX < -1 || c.MoveX > 1 || c.MoveY < -1 || c.MoveY > 1 {
		return fmt.Errorf("move (%d,%d): each axis must be -1, 0 or 1", c.MoveX, c.MoveY)
	}
	if len(c.Target) > MaxTargetLen || !utf8.ValidString(c.Target) {
		return fmt.Errorf("target of %d bytes: need UTF-8 of at most %d", len(c.Target), MaxTargetLen)
	}
	return nil
}

// GameInput converts the control into the game's input for player id.
func (c Control) GameInput(id game.PlayerID) game.Input {
	return game.Input{
		Player: id,
		MoveX:  int8(c.MoveX * 127),
		MoveY:  int8(c.MoveY * 127),
		Eat:    c.Eat,
		PickUp: c.Eat,
		Fight:  c.Fight,
		Target: game.PlayerID(c.Target),
	}
}

// ValidateChat checks a chat line and recipient: the line by the game's
// rule (game.ValidateChat), the recipient UTF-8 of at most MaxTargetLen
// bytes.
func ValidateChat(text, to string) error {
	if err := game.ValidateChat(text); err != nil {
		return err
	}
	if !utf8.ValidString(to) {
		return errors.New("chat is not UTF-8")
	}
	if len(to) > MaxTargetLen {
		return fmt.Errorf("recipient of %d bytes, limit %d", len(to), MaxTargetLen)
	}
	return nil
}

// PlayerViewOf converts a game player for the page.
func PlayerViewOf(p game.Player) PlayerView {
	return PlayerView{
		ID: string(p.ID), Name: p.Name,
		X: p.Pos.X, Y: p.Pos.Y, VX: p.Vel.X, VY: p.Vel.Y,
		Health: p.Health, Hunger: p.Hunger, Score: p.Score, Skill: p.Skill,
		Alive: p.Alive,
	}
}

// ObjectViewOf converts a game object for the page.
func ObjectViewOf(e game.ObjectEntry) ObjectView {
	return ObjectView{
		ID: e.ID.String(), Kind: e.Object.Kind.String(),
		X: e.Pos.X, Y: e.Pos.Y,
		Amount: int(e.Object.Amount), Max: int(e.Object.Max),
	}
}

// WorldInfoOf describes a world config for the page.
func WorldInfoOf(cfg game.Config) WorldInfo {
	return WorldInfo{
		RegionsX: cfg.RegionsX, RegionsY: cfg.RegionsY, RegionTiles: cfg.RegionTiles,
		TileUnits: game.TileUnits, TickRate: cfg.TickRate,
	}
}
