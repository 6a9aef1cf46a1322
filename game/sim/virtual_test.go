package sim

import (
	"os"
	"strconv"
	"testing"
	"testing/synctest"
	"time"
)

// TestVirtualTime runs the simulator inside a testing/synctest bubble: every
// timer, sleep and link latency runs on a virtual clock that advances only
// when all goroutines wait, so CPU time costs no simulated time and the
// measured delays are the network's, however busy the machine. By default a
// small run; larger ones through the environment:
//
//	OVERWORLD_SIM_PLAYERS=500 OVERWORLD_SIM_REGIONS=64 OVERWORLD_SIM_DURATION=60s \
//	OVERWORLD_SIM_AGGREGATE=1 OVERWORLD_SIM_OUT=/tmp/sim-virtual \
//	go test ./game/sim -run TestVirtualTime -v -timeout 2h
func TestVirtualTime(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Players, cfg.Regions = 16, 4
	cfg.Warmup, cfg.Duration = 5*time.Second, 10*time.Second
	if v := os.Getenv("OVERWORLD_SIM_PLAYERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("OVERWORLD_SIM_PLAYERS=%q: %v", v, err)
		}
		cfg.Players = n
	}
	if v := os.Getenv("OVERWORLD_SIM_REGIONS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("OVERWORLD_SIM_REGIONS=%q: %v", v, err)
		}
		cfg.Regions = n
	}
	if v := os.Getenv("OVERWORLD_SIM_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("OVERWORLD_SIM_DURATION=%q: %v", v, err)
		}
		cfg.Duration = d
	}
	cfg.Aggregate = os.Getenv("OVERWORLD_SIM_AGGREGATE") == "1"
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
		var sb stringsBuilder
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

type stringsBuilder struct{ b []byte }

func (s *stringsBuilder) Write(p []byte) (int, error) { s.b = append(s.b, p...); return len(p), nil }
func (s *stringsBuilder) String() string              { return string(s.b) }
