package sim

import (
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestVirtualTime runs the simulator inside a testing/synctest bubble: every
// timer, sleep and link latency runs on a virtual clock that advances only
// when all goroutines wait, so CPU time costs no simulated time and the
// measured delays are the network's, however busy the machine. By default a
// small run; larger ones through the environment (see the README):
//
//	OVERWORLD_SIM_PLAYERS=200 OVERWORLD_SIM_REGIONS=25 OVERWORLD_SIM_DURATION=60s \
//	OVERWORLD_SIM_AGGREGATE=1 OVERWORLD_SIM_OUT=/tmp/sim-virtual \
//	go test ./game/sim -run TestVirtualTime -v -timeout 3h
//
// Also OVERWORLD_SIM_WARMUP, OVERWORLD_SIM_EAT_EVERY and
// OVERWORLD_SIM_FIGHT_EVERY (durations, 0 turns the action off),
// OVERWORLD_SIM_HEAPPROFILE (a file: the heap at the end of the window) and
// OVERWORLD_SIM_PROGRESS=1 (a progress bar on stderr, in simulated time).
func TestVirtualTime(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Players, cfg.Regions = 16, 4
	cfg.Warmup, cfg.Duration = 5*time.Second, 10*time.Second
	atoi := func(name string, into *int) {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("%s=%q: %v", name, v, err)
			}
			*into = n
		}
	}
	duration := func(name string, into *time.Duration) {
		if v := os.Getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatalf("%s=%q: %v", name, v, err)
			}
			*into = d
		}
	}
	atoi("OVERWORLD_SIM_PLAYERS", &cfg.Players)
	atoi("OVERWORLD_SIM_REGIONS", &cfg.Regions)
	duration("OVERWORLD_SIM_DURATION", &cfg.Duration)
	duration("OVERWORLD_SIM_WARMUP", &cfg.Warmup)
	duration("OVERWORLD_SIM_EAT_EVERY", &cfg.EatEvery)
	duration("OVERWORLD_SIM_FIGHT_EVERY", &cfg.FightEvery)
	cfg.Aggregate = os.Getenv("OVERWORLD_SIM_AGGREGATE") == "1"
	if os.Getenv("OVERWORLD_SIM_PROGRESS") == "1" {
		cfg.Progress = os.Stderr // in simulated time
	}
	if path := os.Getenv("OVERWORLD_SIM_HEAPPROFILE"); path != "" {
		cfg.AtEnd = func() {
			f, err := os.Create(path)
			if err != nil {
				t.Errorf("heap profile: %v", err)
				return
			}
			defer f.Close()
			if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
				t.Errorf("heap profile: %v", err)
			}
		}
	}
	synctest.Test(t, func(t *testing.T) {
		r, err := Run(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		r.VirtualTime = true
		if r.Delivered == 0 {
			t.Fatalf("no updates delivered: %+v", r)
		}
		if len(r.Rejected) != 0 {
			t.Errorf("honest updates rejected: %v", r.Rejected)
		}
		if w := r.Workload; w != nil {
			if cfg.EatEvery > 0 && w.EatsCommitted == 0 {
				t.Errorf("no eat committed: %v", w.Outcomes)
			}
			if cfg.FightEvery > 0 && w.FightsFought == 0 {
				t.Errorf("no fight fought: %v", w.Outcomes)
			}
			// On virtual time the machine's speed costs no simulated
			// time: nothing may time out, and every region the bots
			// used has exactly the coordinator placement names.
			checkOutcomes(t, w, false)
			if w.SplitRegions != 0 || w.RegionsCoordinatedAsPlaced != w.RegionsWithObjects {
				t.Errorf("coordinators: %d of %d regions as placed, %d claimed by several", w.RegionsCoordinatedAsPlaced, w.RegionsWithObjects, w.SplitRegions)
			}
		}
		var sb strings.Builder
		r.Summary(&sb)
		t.Log("\n" + sb.String())
		if dir := os.Getenv("OVERWORLD_SIM_OUT"); dir != "" {
			files, err := r.WriteFiles(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Log("wrote", files)
		}
	})
}
