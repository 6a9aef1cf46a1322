package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/play"
	"github.com/overworld-p2p/overworld/game/vfc/vfcworld"
	"github.com/overworld-p2p/overworld/regions/position"
)

// worldFlags are the flags naming the world, which every peer of a network
// (players and headless peers) must give alike.
type worldFlags struct {
	name, size, summaries *string
	seed                  *uint64
}

func addWorldFlags(fs *flag.FlagSet) worldFlags {
	return worldFlags{
		name: fs.String("world", "default", "world name"),
		size: fs.String("world-size", "8x8", "world size in regions, WxH"),
		seed: fs.Uint64("seed", 1, "world seed"),
		summaries: fs.String("summaries", "off", "position summaries of the regions around a player (aggregated mode for every player): off, on, "+
			"or zones from the region border inward as tiles:[seconds,updates,value] (value: % of a tile of dead-reckoning error), the last *:[…]; "+
			"on is "+zonesText(position.DefaultSummaries())),
	}
}

// zonesText writes summary zones as -summaries reads them.
func zonesText(sc position.SummaryConfig) string {
	return vfcworld.SetSettings{Zones: sc.Zones, Scale: sc.Scale}.String()
}

// summaryConfig is the world's summary setting from -summaries.
func (f worldFlags) summaryConfig() (position.SummaryConfig, error) {
	switch *f.summaries {
	case "off", "":
		return position.SummaryConfig{}, nil
	case "on":
		return position.DefaultSummaries(), nil
	}
	set, err := vfcworld.ParseSetSettings(*f.summaries)
	if err != nil {
		return position.SummaryConfig{}, fmt.Errorf("-summaries: %w", err)
	}
	return position.SummaryConfig{Enabled: true, Zones: set.Zones, Scale: set.Scale}, nil
}

// game is the world's configuration from the flags.
func (f worldFlags) game() (game.Config, error) {
	w, h, err := parseWorldSize(*f.size)
	if err != nil {
		return game.Config{}, fmt.Errorf("-world-size: %w", err)
	}
	g := game.DefaultConfig()
	g.Seed, g.RegionsX, g.RegionsY = *f.seed, w, h
	return g, nil
}

// accountFlags are the flags of a login on the account server.
type accountFlags struct {
	url, user, passwordFile *string
	register                *bool
}

func addAccountFlags(fs *flag.FlagSet) accountFlags {
	return accountFlags{
		url:          fs.String("account", "", "account server URL, e.g. http://127.0.0.1:8640 (empty: no account)"),
		user:         fs.String("user", "", "account name"),
		passwordFile: fs.String("password-file", "", "file holding the account password"),
		register:     fs.Bool("register", false, "create the account if it does not exist"),
	}
}

// account is the login the flags ask for (nil without -account); the
// password comes from -password-file, else OVERWORLD_PASSWORD, else a
// prompt on out.
func (f accountFlags) account(out io.Writer) (*play.Account, error) {
	if *f.url == "" {
		return nil, nil
	}
	if *f.user == "" {
		return nil, errors.New("-account needs -user")
	}
	pw, err := readPassword(*f.passwordFile, out)
	if err != nil {
		return nil, err
	}
	return &play.Account{URL: *f.url, User: *f.user, Password: pw, Register: *f.register}, nil
}
