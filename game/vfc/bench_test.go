package vfc_test

import (
	"fmt"
	"testing"

	"github.com/overworld-p2p/overworld/game/vfc/vfcbench"
)

// BenchmarkRound is the paper's round-handler micro-benchmark [S §5.1, fig
// 11]: one client, one pivot, three zones, 4-byte values, 1,000 to 10,000
// objects with 0, 50 or 100% of them written (and sent) before each round.
// Only Round is timed; the writes happen with the timer stopped and are
// measured by BenchmarkUpdate.
func BenchmarkRound(b *testing.B) {
	for _, n := range []int{1000, 5000, 10000} {
		for _, pct := range []int{0, 50, 100} {
			for _, moving := range []bool{false, true} {
				pivot := "still"
				if moving {
					pivot = "moving"
				}
				b.Run(fmt.Sprintf("objects=%d/updated=%d%%/pivot=%s", n, pct, pivot), func(b *testing.B) {
					w, err := vfcbench.NewRoundWorkload(vfcbench.RoundSetup{Objects: n, UpdatedPercent: pct, MovingPivot: moving, Seed: 1})
					if err != nil {
						b.Fatal(err)
					}
					b.ReportAllocs()
					sent := 0
					for b.Loop() {
						b.StopTimer()
						if err := w.Prepare(); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
						k, err := w.Round()
						if err != nil {
							b.Fatal(err)
						}
						sent = k
					}
					b.ReportMetric(float64(sent), "sent/round")
				})
			}
		}
	}
}

// BenchmarkUpdate times CMB-UPDATE-RECEIVED for one view: a write of a
// 10,000-object pool with every zone's vector unbounded in value.
func BenchmarkUpdate(b *testing.B) {
	w, err := vfcbench.NewRoundWorkload(vfcbench.RoundSetup{Objects: 10000, UpdatedPercent: 100, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		if _, err := w.Round(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := w.Prepare(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/9999, "ns/write")
}
