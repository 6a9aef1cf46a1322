package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/overworld-p2p/overworld/bootstrap/master"
	"github.com/overworld-p2p/overworld/bootstrap/master/finder"
	"github.com/overworld-p2p/overworld/bootstrap/master/probe"
)

func init() { extraCommands = append(extraCommands, findCommand()) }

func findCommand() command {
	const summary = "find the mirror-mode game mirror with the lowest RTT from here"
	return command{name: "find", summary: summary, run: func(ctx context.Context, args []string, out, _ io.Writer) error {
		fs := newFlagSet("find", summary+`.

Asks the master (-master) for the games that match -world, -mode and
-has-space (or the one -game names), pings every mirror of those games
-pings times in parallel over UDP, and prints the mirrors ranked by median
RTT (ties: lower load, then lower mirror ID), best first. Mirrors silent for
-silence are listed last. -json prints the same for scripts. Exits with an
error if no mirror answered.`, out)
		masterURL := fs.String("master", "", "master server URL, e.g. https://master.example.org (required)")
		world := fs.String("world", "", "only games of this world (map)")
		mode := fs.String("mode", "", "only games of this mode")
		hasSpace := fs.Bool("has-space", false, "only games with a free player slot")
		minFree := fs.Int("min-free", 0, "only games with at least this many free slots")
		gameID := fs.String("game", "", "probe this game only (ignores the filters)")
		maxGames := fs.Int("max-games", 8, "games probed at most")
		pings := fs.Int("pings", 5, "pings per mirror")
		silence := fs.Duration("silence", time.Second, "how long to wait for pongs; a dead mirror costs at most this")
		jsonF := addJSONFlags(fs, "print JSON instead of a table")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		if *masterURL == "" {
			return errors.New("-master (or OVERWORLD_MASTER) is required")
		}
		c, err := master.NewClient(*masterURL, nil)
		if err != nil {
			return err
		}
		q := finder.Query{GameID: *gameID, World: *world, Mode: *mode, MinFree: *minFree, MaxGames: *maxGames}
		if *hasSpace {
			q.MinFree = max(q.MinFree, 1)
		}
		res, err := finder.Find(ctx, c, q, finder.Options{Probe: probe.Options{Pings: *pings, Silence: *silence}})
		if err != nil {
			return err
		}
		if *jsonF.on {
			err = res.WriteJSON(out)
		} else {
			err = res.WriteTable(out)
		}
		if err != nil {
			return err
		}
		if _, ok := res.Best(); !ok {
			return fmt.Errorf("none of the %d mirrors answered within %v", len(res.Silent), *silence)
		}
		return nil
	}}
}
