package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/play"
)

// worldFlags are the flags naming the world, which every peer of a network
// (players and headless peers) must give alike.
type worldFlags struct {
	name, size *string
	seed       *uint64
}

func addWorldFlags(fs *flag.FlagSet) worldFlags {
	return worldFlags{
		name: fs.String("world", "default", "world name"),
		size: fs.String("world-size", "8x8", "world size in regions, WxH"),
		seed: fs.Uint64("seed", 1, "world seed"),
	}
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
