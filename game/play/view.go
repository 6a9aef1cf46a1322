package play

import (
	"sync"

	"github.com/overworld-p2p/overworld/game"
)

// What a client of the runtime draws. The browser page (game/webui's
// PeerSession) turns a View into its own frames; the runtime knows
// nothing of the page.

// View is the player's view of the game at one moment.
type View struct {
	Tick uint64
	Self PlayerView
	// Players are the other players in view, smoothed and dead-reckoned.
	Players []PlayerView
	// Objects are the objects with something left in the loaded regions
	// around the player.
	Objects []game.ObjectEntry
	// Regions are the player's region and its neighbours, whose terrain
	// (Peer.Map) the client draws.
	Regions  []game.RegionCoord
	World    game.Config
	Messages []Message
	Status   Status
}

// PlayerView is one player as the client shows it: positions in game
// units, velocities in units per tick. A player whose card has not arrived
// shows by the end of its peer ID, at full health.
type PlayerView struct {
	ID                           string
	Name                         string
	X, Y, VX, VY                 int32
	Health, Hunger, Score, Skill int32
	Alive                        bool
}

// playerViewOf shows a game player.
func playerViewOf(p game.Player) PlayerView {
	return PlayerView{
		ID: string(p.ID), Name: p.Name, X: p.Pos.X, Y: p.Pos.Y, VX: p.Vel.X, VY: p.Vel.Y,
		Health: p.Health, Hunger: p.Hunger, Score: p.Score, Skill: p.Skill, Alive: p.Alive,
	}
}

// Message is a chat line, a whisper or a game notice. Seq increases by one
// per message of a peer, so a client can take only what is new.
type Message struct {
	Seq  uint64
	Kind string // "chat", "whisper", "event" or "system"
	From string
	To   string
	Text string
}

// Status is the status line: what the network layer is doing.
type Status struct {
	Mode        string // "p2p": the runtime is P2P mode's
	Peers       int
	Region      string
	Coordinator string // short peer ID of the region's coordinator, or "you"
	LatencyMs   int
}

// maxMessages is how many recent messages the peer keeps for clients.
const maxMessages = 64

// messageLog keeps the recent messages every part adds: chat lines,
// whispers and notices. Its lock is taken last (see parts.go).
type messageLog struct {
	mu   sync.Mutex
	next uint64
	list []Message
}

// add appends m, numbering it.
func (l *messageLog) add(m Message) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	m.Seq = l.next
	l.list = append(l.list, m)
	if len(l.list) > maxMessages {
		l.list = append(l.list[:0], l.list[len(l.list)-maxMessages:]...)
	}
}

// notice adds a game notice of kind "event" or "system".
func (l *messageLog) notice(kind, text string) { l.add(Message{Kind: kind, Text: text}) }

// all returns a copy of the recent messages, oldest first.
func (l *messageLog) all() []Message {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Message(nil), l.list...)
}
