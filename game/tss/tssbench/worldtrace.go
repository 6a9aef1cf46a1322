package tssbench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/tss"
)

// worldMetaFormat names what a trace header's Meta holds for the world.
const worldMetaFormat = "overworld-world/1"

// WorldMeta is the Meta of a trace of the game world: how to build the
// world every state started from (a new world of this config).
type WorldMeta struct {
	Format string      `json:"format"`
	World  game.Config `json:"world"`
}

// NewWorldTraceWriter starts a trace of a synchronizer with configuration
// cfg whose states start as a new world of config world.
func NewWorldTraceWriter(w io.Writer, world game.Config, cfg tss.Config) (*tss.TraceWriter[game.Command], error) {
	start, err := game.NewWorld(world)
	if err != nil {
		return nil, err
	}
	meta, err := json.Marshal(WorldMeta{Format: worldMetaFormat, World: world})
	if err != nil {
		return nil, err
	}
	h := tss.TraceHeader{Config: cfg, Seed: world.Seed, StartTick: start.Tick(), StartHash: start.Hash(), Meta: meta}
	return tss.NewTraceWriter(w, h, game.Command.MarshalBinary)
}

// StartWorld builds the starting state a world trace's header describes.
func StartWorld(h tss.TraceHeader) (*game.World, func() *game.World, error) {
	var m WorldMeta
	if err := json.Unmarshal(h.Meta, &m); err != nil {
		return nil, nil, fmt.Errorf("trace meta: %w", err)
	}
	if m.Format != worldMetaFormat {
		return nil, nil, fmt.Errorf("trace meta format %q, want %q", m.Format, worldMetaFormat)
	}
	w, err := game.NewWorld(m.World)
	if err != nil {
		return nil, nil, fmt.Errorf("trace meta: %w", err)
	}
	cfg := m.World
	alloc := func() *game.World {
		a, err := game.NewWorld(cfg)
		if err != nil {
			panic(err) // the same config built w above
		}
		return a
	}
	return w, alloc, nil
}

// ReplayWorld replays a trace of the game world and checks every
// checkpoint (see tss.Replay).
func ReplayWorld(r io.Reader) (tss.ReplayResult, error) {
	if r == nil {
		return tss.ReplayResult{}, errors.New("replay: no trace")
	}
	return tss.Replay[*game.World, game.Command, game.TickRecord](r, game.UnmarshalCommand, StartWorld)
}
