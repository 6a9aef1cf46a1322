package webui

import (
	"encoding/json"
	"testing"

	"github.com/overworld-p2p/overworld/game"
)

// BenchmarkViewFrame measures building and encoding one view frame for a
// page with 8 bots nearby, and reports the frame sizes: the first frame
// (with the maps of up to nine regions) and a steady-state frame.
func BenchmarkViewFrame(b *testing.B) {
	l, err := NewLocalSession(LocalOptions{Config: testConfig(), Bots: 8, BotSeed: 1})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 30; i++ {
		l.Step()
	}
	v := l.Snapshot()
	first := viewFrame{Type: "view", View: v}
	for _, r := range v.Regions {
		m, _ := l.Map(game.RegionCoord{X: r.X, Y: r.Y})
		first.Maps = append(first.Maps, m)
	}
	fb, _ := json.Marshal(first)
	steady := viewFrame{Type: "view", View: v}
	steady.View.Messages = nil
	sb, _ := json.Marshal(steady)
	b.ReportAllocs()
	for b.Loop() {
		f := viewFrame{Type: "view", View: l.Snapshot()}
		if _, err := json.Marshal(f); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(fb)), "first-frame-bytes")
	b.ReportMetric(float64(len(sb)), "steady-frame-bytes")
}
