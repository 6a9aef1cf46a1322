// These tests run in synctest bubbles through vnettest.Run, which under
// -race runs each bubble on one P: with the bubble's timer channels served
// on several threads, Go 1.26's race runtime crashed the process
// (golang/go#78156), so these tests used to be left out of -race builds.

package sim

import (
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
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
// Also OVERWORLD_SIM_WARMUP, OVERWORLD_SIM_LATENCY_MIN and _MAX (the range
// of the links' one-way latency), OVERWORLD_SIM_EAT_EVERY and
// OVERWORLD_SIM_FIGHT_EVERY (durations, 0 turns the action off),
// OVERWORLD_SIM_SESSION_MEAN (churn: the mean session, a duration) with
// OVERWORLD_SIM_LEAVE=handoff|crash, OVERWORLD_SIM_DHT=1 (placement by DHT
// lookups), OVERWORLD_SIM_HEAPPROFILE and OVERWORLD_SIM_GOROUTINEPROFILE
// (files: the heap and the goroutines at the end of the window) and
// OVERWORLD_SIM_BOTS=play (players are game/play's runtime with a bot)
// and OVERWORLD_SIM_PROGRESS=1 (a progress line on stderr).
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
	duration("OVERWORLD_SIM_LATENCY_MIN", &cfg.LatencyMin)
	duration("OVERWORLD_SIM_LATENCY_MAX", &cfg.LatencyMax)
	duration("OVERWORLD_SIM_EAT_EVERY", &cfg.EatEvery)
	duration("OVERWORLD_SIM_FIGHT_EVERY", &cfg.FightEvery)
	duration("OVERWORLD_SIM_SESSION_MEAN", &cfg.SessionMean)
	if v := os.Getenv("OVERWORLD_SIM_LEAVE"); v != "" {
		cfg.Leave = LeaveMode(v)
	}
	cfg.Aggregate = os.Getenv("OVERWORLD_SIM_AGGREGATE") == "1"
	cfg.DHTPlacement = os.Getenv("OVERWORLD_SIM_DHT") == "1"
	cfg.PlayBots = os.Getenv("OVERWORLD_SIM_BOTS") == "play"
	if os.Getenv("OVERWORLD_SIM_PROGRESS") == "1" {
		cfg.Progress = os.Stderr // in simulated time
	}
	profiles := map[string]string{"heap": os.Getenv("OVERWORLD_SIM_HEAPPROFILE"), "goroutine": os.Getenv("OVERWORLD_SIM_GOROUTINEPROFILE")}
	cfg.AtEnd = func() {
		for name, path := range profiles {
			if path == "" {
				continue
			}
			f, err := os.Create(path)
			if err != nil {
				t.Errorf("%s profile: %v", name, err)
				continue
			}
			if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
				t.Errorf("%s profile: %v", name, err)
			}
			f.Close()
		}
	}
	vnettest.Run(t, func(t *testing.T) {
		r := runLogged(t, cfg)
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
			// used has exactly the coordinator placement names (with
			// churn, some may be changing hands when the run ends).
			checkOutcomes(t, w, cfg.churning())
			if !cfg.churning() && (w.SplitRegions != 0 || w.RegionsCoordinatedAsPlaced != w.RegionsWithObjects) {
				t.Errorf("coordinators: %d of %d regions as placed, %d claimed by several", w.RegionsCoordinatedAsPlaced, w.RegionsWithObjects, w.SplitRegions)
			}
		}
		if dir := os.Getenv("OVERWORLD_SIM_OUT"); dir != "" {
			files, err := r.WriteFiles(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Log("wrote", files)
		}
	})
}

// runLogged runs cfg (inside the caller's synctest bubble) and logs the
// summary.
func runLogged(t *testing.T, cfg Config) *Report {
	t.Helper()
	r, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.VirtualTime = true
	var sb strings.Builder
	r.Summary(&sb)
	t.Log("\n" + sb.String())
	return r
}

// TestChurn runs players who leave and are replaced, with both leave
// modes, on virtual time: sessions end (coordinators' among them), every
// region a leaving coordinator held gets a new coordinator, the changes
// are told by cause, and positions and the workload go on.
func TestChurn(t *testing.T) {
	for _, leave := range []LeaveMode{LeaveHandoff, LeaveCrash} {
		t.Run(string(leave), func(t *testing.T) {
			vnettest.Run(t, func(t *testing.T) {
				cfg := DefaultConfig()
				cfg.Players, cfg.Regions = 12, 4
				cfg.Warmup, cfg.Duration = 3*time.Second, 12*time.Second
				cfg.SessionMean, cfg.Leave = 10*time.Second, leave
				// Crashes of coordinators matter most where they batch.
				cfg.Aggregate = leave == LeaveCrash
				r := runLogged(t, cfg)
				c := r.Churn
				if c == nil || c.Leaves == 0 || c.Joins == 0 {
					t.Fatalf("no churn in the window: %+v", c)
				}
				if c.NextCoordinatorMS.Count == 0 {
					t.Errorf("no coordinator left in the window (the seed should make some)")
				}
				if c.NextCoordinatorPending != 0 {
					t.Errorf("%d regions had no coordinator 30 s after theirs left", c.NextCoordinatorPending)
				}
				a := r.RegionActivity
				if a.CoordinatorChanges["leave ("+string(leave)+")"] == 0 {
					t.Errorf("no coordinator change caused by a leave: %v", a.CoordinatorChanges)
				}
				switch leave {
				case LeaveHandoff:
					if a.Takeovers["transfer"] == 0 {
						t.Errorf("hand-offs but no take-over by transfer: %v", a.Takeovers)
					}
				case LeaveCrash:
					if a.Takeovers["own_copy"]+a.Takeovers["rebuilt"] == 0 {
						t.Errorf("crashes but no take-over from a copy: %v", a.Takeovers)
					}
				}
				if r.Delivered == 0 || len(r.Rejected) != 0 {
					t.Errorf("deliveries %d, rejected %v", r.Delivered, r.Rejected)
				}
				if r.Workload.EatsCommitted == 0 || r.Workload.FightsFought == 0 {
					t.Errorf("workload stopped: %v", r.Workload.Outcomes)
				}
				checkOutcomes(t, r.Workload, true)
			})
		})
	}
}

// TestDHTPlacement runs players who serve the DHT and find each region's
// coordinator by DHT lookups (regions.Service.Locate): every region the
// bots used is coordinated by exactly one peer, the one placement over all
// players names.
func TestDHTPlacement(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Players, cfg.Regions = 27, 9
		cfg.Warmup, cfg.Duration = 5*time.Second, 4*time.Second
		cfg.DHTPlacement = true
		r := runLogged(t, cfg)
		w := r.Workload
		if w.RegionsWithObjects != 9 || w.RegionsCoordinatedAsPlaced != w.RegionsWithObjects || w.SplitRegions != 0 {
			t.Errorf("%d of %d used regions coordinated as placed, %d by several", w.RegionsCoordinatedAsPlaced, w.RegionsWithObjects, w.SplitRegions)
		}
		if r.Delivered == 0 || len(r.Rejected) != 0 {
			t.Errorf("deliveries %d, rejected %v", r.Delivered, r.Rejected)
		}
		checkOutcomes(t, w, false)
	})
}

// TestPlayBots runs players that are game/play's runtime driven by a
// game.Bot, with churn (players close as a quitting player's peer does):
// positions flow with nothing honest rejected, the bots eat and fight
// through play's own code, and players come and go. Whether each region
// ends with the one coordinator placement names is logged, not asserted:
// a play peer loads its regions as soon as it runs, before identify has
// told it who else serves regions, so it may create a region another peer
// coordinates too, and the region service does not heal that split
// (regions, start-up placement disagreement).
func TestPlayBots(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Players, cfg.Regions = 12, 4
		cfg.Warmup, cfg.Duration = 5*time.Second, 10*time.Second
		cfg.PlayBots = true
		cfg.SessionMean, cfg.Leave = 30*time.Second, LeaveClose
		r := runLogged(t, cfg)
		if r.Delivered == 0 || r.DelayMS.Count == 0 || len(r.Rejected) != 0 {
			t.Errorf("deliveries %d (%d delays measured), rejected %v", r.Delivered, r.DelayMS.Count, r.Rejected)
		}
		if r.Play["eat/committed"] == 0 || r.Play["fight as attacker/fought"] == 0 {
			t.Errorf("the bots did not eat and fight: %v", r.Play)
		}
		if r.Churn.Leaves == 0 {
			t.Errorf("nobody left: %+v", r.Churn)
		}
		if pc := r.RegionActivity.Placement; pc.Regions == 0 {
			t.Errorf("no region coordinated at the end: %+v", pc)
		} else if pc.Split != 0 {
			t.Logf("regions claimed by several coordinators at the end: %d of %d", pc.Split, pc.Regions)
		}
	})
}
