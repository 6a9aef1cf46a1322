package main

import (
	"flag"
	"fmt"

	"github.com/overworld-p2p/overworld/game/vfc/vfcworld"
	"github.com/overworld-p2p/overworld/node/mirror"
)

// consistencyFlags choose what a mirror sends its clients each frame:
// vector-field consistency and its zones, or a baseline.
type consistencyFlags struct {
	egress, players, objects *string
}

func addConsistencyFlags(fs *flag.FlagSet) consistencyFlags {
	d := vfcworld.DefaultSettings()
	return consistencyFlags{
		egress:  fs.String("egress", "vfc", "what clients are sent each frame: vfc (vector-field consistency), area (everyone in the 3x3 regions around them) or all (everything)"),
		players: fs.String("vfc-players", d.Players.String(), "VFC zones for players, inside out: outer bound in tiles:[seconds,updates,value] (value: % of a tile of dead-reckoning error, or bar points), the last *:[…]"),
		objects: fs.String("vfc-objects", d.Objects.String(), "VFC zones for food and health packs, as -vfc-players (value: % of the maximum amount)"),
	}
}

// apply sets c's egress and consistency settings from the flags.
func (f consistencyFlags) apply(c *mirror.Config) error {
	mode, err := mirror.ParseEgressMode(*f.egress)
	if err != nil {
		return fmt.Errorf("-egress: %w", err)
	}
	s := vfcworld.DefaultSettings()
	if s.Players, err = vfcworld.ParseSetSettings(*f.players); err != nil {
		return fmt.Errorf("-vfc-players: %w", err)
	}
	if s.Objects, err = vfcworld.ParseSetSettings(*f.objects); err != nil {
		return fmt.Errorf("-vfc-objects: %w", err)
	}
	if err := s.Validate(); err != nil {
		return fmt.Errorf("-vfc-players/-vfc-objects: %w", err)
	}
	c.Egress, c.Consistency = mode, s
	return nil
}
