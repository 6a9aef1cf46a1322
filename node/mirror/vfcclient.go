package mirror

import (
	"cmp"
	"slices"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/vfc/vfcworld"
	"github.com/overworld-p2p/overworld/node/mirror/mirrorpb"
)

// The client side of EgressVFC: updates carry only what vector-field
// consistency sends, so the client keeps every player it was sent with the
// leading tick of the update that carried it, forgets those the mirror
// says left, and shows each where dead reckoning puts it now — the same
// reckoning (vfcworld.Reckon) whose error the mirror's zones bound, so a
// nearby player drifts at most a tenth of a tile from where it really is
// before the mirror sends it again.

// reckonTicks is what the welcome tells clients: how long they dead-reckon
// a silent player (0 outside EgressVFC: every update is whole).
func (s *Server) reckonTicks() uint32 {
	if s.cfg.Egress != EgressVFC {
		return 0
	}
	return uint32(s.cfg.Consistency.ReckonTicks)
}

// HeldPlayer is a player as the mirror last sent it, and the leading tick
// it was sent at.
type HeldPlayer struct {
	Player game.Player
	Tick   uint64
}

// maxHeldPlayers bounds the players a client keeps (a mirror can send no
// more than a world holds; a hostile one cannot grow the table past this).
const maxHeldPlayers = maxUpdatePlayers

// mergeDelta applies a VFC delta update: players sent replace what the
// client held, gone ones are forgotten, and the view's players are every
// held one dead-reckoned to the update's leading tick, in ID order.
func (c *ClientCore) mergeDelta(u *mirrorpb.Update) {
	if c.held == nil {
		c.held = map[game.PlayerID]HeldPlayer{}
	}
	for _, id := range u.Gone {
		delete(c.held, game.PlayerID(id))
	}
	for _, ps := range u.Players {
		p := playerOf(ps)
		if _, ok := c.held[p.ID]; !ok && len(c.held) >= maxHeldPlayers {
			continue
		}
		c.held[p.ID] = HeldPlayer{Player: p, Tick: u.LeadingTick}
	}
	delete(c.held, c.view.Player)
	v := &c.view
	v.Players = v.Players[:0]
	for _, h := range c.held {
		v.Players = append(v.Players, reckon(h, u.LeadingTick, int(c.welcome.ReckonTicks)))
	}
	slices.SortFunc(v.Players, func(a, b game.Player) int { return cmp.Compare(a.ID, b.ID) })
}

// reckon is where the client shows held player h at tick: moved along its
// velocity for the ticks since it was sent, at most limit of them.
func reckon(h HeldPlayer, tick uint64, limit int) game.Player {
	var el uint64
	if tick > h.Tick {
		el = tick - h.Tick
	}
	p := h.Player
	p.Pos = vfcworld.Reckon(vfcworld.StateOf(h.Tick, p), el, limit)
	return p
}

// HeldPlayers returns the players the client holds as they were sent, in
// ID order (benches compare them with the mirror's world).
func (c *ClientCore) HeldPlayers() []HeldPlayer {
	out := make([]HeldPlayer, 0, len(c.held))
	for _, h := range c.held {
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b HeldPlayer) int { return cmp.Compare(a.Player.ID, b.Player.ID) })
	return out
}

// Reckoning reports whether the mirror sends VFC deltas, and for how many
// ticks the client dead-reckons a silent player.
func (c *ClientCore) Reckoning() (ticks int, ok bool) {
	if c.welcome == nil || c.welcome.ReckonTicks == 0 {
		return 0, false
	}
	return int(c.welcome.ReckonTicks), true
}
