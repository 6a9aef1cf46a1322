package tssbench

import (
	"fmt"
	"slices"
	"time"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/tss"
)

// Bots drives players with game.Bot (the SimMud-style workload), spread
// over mirrors: each player's commands carry its ingress mirror and that
// mirror's sequence numbers. Its first command is a join; then inputs from
// what the bot sees in the world it is given.
type Bots struct {
	cfg     game.Config
	players []botPlayer
	seq     map[uint32]uint64
}

type botPlayer struct {
	id     game.PlayerID
	name   string
	mirror uint32
	bot    *game.Bot
	joined bool
}

// NewBots returns perMirror bots on each of mirrors mirrors (IDs 1..n).
func NewBots(cfg game.Config, mirrors, perMirror int, seed uint64) *Bots {
	b := &Bots{cfg: cfg, seq: map[uint32]uint64{}}
	for m := 1; m <= mirrors; m++ {
		for j := range perMirror {
			id := game.PlayerID(fmt.Sprintf("m%d-bot-%d", m, j))
			b.players = append(b.players, botPlayer{
				id: id, name: fmt.Sprintf("Bot %d.%d", m, j), mirror: uint32(m),
				bot: game.NewBot(cfg, id, seed, game.DefaultBotPace()),
			})
		}
	}
	return b
}

// Len is the number of bots.
func (b *Bots) Len() int { return len(b.players) }

// Command returns bot i's next command stamped stamp, chosen from w (the
// world before the command's tick).
func (b *Bots) Command(w *game.World, i int, stamp int64) game.Command {
	p := &b.players[i]
	b.seq[p.mirror]++
	c := game.Command{Stamp: stamp, Mirror: p.mirror, Seq: b.seq[p.mirror], Player: p.id}
	if !p.joined {
		p.joined = true
		c.Op, c.Name = game.CommandJoin, p.name
		return c
	}
	c.Op, c.Input = game.CommandInput, game.Input{Player: p.id}
	if obs, ok := w.BotObserve(p.id); ok {
		c.Input = p.bot.Next(obs)
	}
	return c
}

// Tick returns one command per bot for the tick after w's, stamped at
// evenly spread instants inside it, in canonical order.
func (b *Bots) Tick(w *game.World, epoch int64, period time.Duration) []game.Command {
	t := int64(w.Tick())
	out := make([]game.Command, 0, len(b.players))
	for i := range b.players {
		stamp := epoch + t*int64(period) + int64(i+1)*int64(period)/int64(len(b.players)+1)
		out = append(out, b.Command(w, i, stamp))
	}
	slices.SortFunc(out, game.CompareCommands)
	return out
}

// Workload describes the bench's trace: Mirrors × BotsPerMirror players,
// each sending a command every Interval (at its own phase), Commands in
// all.
type Workload struct {
	World         game.Config
	Mirrors       int
	BotsPerMirror int
	Interval      time.Duration
	Commands      int
	// Epoch is the wall clock (Unix ns) of tick 0's end; commands start
	// after it.
	Epoch int64
	Seed  uint64
}

// TickPeriod is the world's tick.
func (wl Workload) TickPeriod() time.Duration {
	return time.Second / time.Duration(wl.World.TickRate)
}

// Generate produces the workload's commands in stamp order. Each bot
// decides from the in-order world (every command of earlier ticks
// applied), as if its mirror's leading state were always right.
func Generate(wl Workload) ([]game.Command, error) {
	w, err := game.NewWorld(wl.World)
	if err != nil {
		return nil, err
	}
	tcfg := tss.Config{Epoch: wl.Epoch, TickPeriod: wl.TickPeriod()}
	bots := NewBots(wl.World, wl.Mirrors, wl.BotsPerMirror, wl.Seed)
	rng := game.NewRand(wl.Seed ^ 0x5eed)
	next := make([]int64, bots.Len())
	for i := range next {
		next[i] = wl.Epoch + 1 + int64(rng.IntN(int(wl.Interval)))
	}
	byTick := map[uint64][]game.Command{}
	cmds := make([]game.Command, 0, wl.Commands)
	for len(cmds) < wl.Commands {
		i := 0
		for j := range next {
			if next[j] < next[i] {
				i = j
			}
		}
		stamp := next[i]
		next[i] += int64(wl.Interval)
		t := tcfg.TickOf(stamp)
		for w.Tick() < t-1 {
			batch := byTick[w.Tick()+1]
			delete(byTick, w.Tick()+1)
			slices.SortFunc(batch, game.CompareCommands)
			w.Advance(batch)
		}
		c := bots.Command(w, i, stamp)
		byTick[t] = append(byTick[t], c)
		cmds = append(cmds, c)
	}
	return cmds, nil
}

// ReferenceHashes runs cmds in order on a new world and returns its hash
// after every tick up to ticks (index 0: the start): the state every
// synchronizer's last state must match.
func ReferenceHashes(world game.Config, tcfg tss.Config, cmds []game.Command, ticks uint64) ([][32]byte, error) {
	w, err := game.NewWorld(world)
	if err != nil {
		return nil, err
	}
	byTick := map[uint64][]game.Command{}
	for _, c := range cmds {
		t := tcfg.TickOf(c.Stamp)
		byTick[t] = append(byTick[t], c)
	}
	hashes := [][32]byte{w.Hash()}
	for w.Tick() < ticks {
		batch := byTick[w.Tick()+1]
		slices.SortFunc(batch, game.CompareCommands)
		w.Advance(batch)
		hashes = append(hashes, w.Hash())
	}
	return hashes, nil
}
