package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/overworld-p2p/overworld/game/tss/tssbench"
)

func init() {
	extraCommands = append(extraCommands, command{
		name:    "replay",
		summary: "replay a TSS trace and check every checkpoint: replay FILE",
		run:     runReplay,
	})
}

func runReplay(_ context.Context, args []string, out, _ io.Writer) error {
	fs := newFlagSet("replay FILE", "Replay a trailing state synchronization trace (written by a mirror or by bench tss -trace): every delivery, tick and delay change is run again on the world the header describes, and every recorded checkpoint (tick, hash of the last state) must come out the same. A corrupt trace is reported with the byte offset of the damaged record.", out)
	var file string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		file, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if file == "" {
		fs.Usage()
		return errors.New("replay: name a trace file")
	}
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	defer f.Close()
	res, err := tssbench.ReplayWorld(f)
	if err != nil {
		return fmt.Errorf("replay %s: %w", file, err)
	}
	c := res.Header.Config
	fmt.Fprintf(out, "%s: trace version %d, delays %v, tick %v, world seed %d, %d bytes\n", file, res.Header.Version, c.Delays, c.TickPeriod, res.Header.Seed, res.Bytes)
	fmt.Fprintf(out, "replayed %d deliveries, %d ticks, %d delay changes: %d rollbacks, %d too late\n",
		res.Deliveries, res.Ticks, res.DelayChanges, res.Counters["rollbacks"], res.Counters["too_late"])
	fmt.Fprintf(out, "all %d checkpoints match; last state at tick %d, hash %x\n", res.Checkpoints, res.LastTick, res.LastHash[:8])
	return nil
}
