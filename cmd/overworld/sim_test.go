package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/overworld-p2p/overworld/node/await"
)

// TestSimCommandChurnAndScale runs `overworld sim` twice with churn (one
// run placing regions by DHT lookups), then `sim -scale-from` over their
// reports: the flags reach the simulator, the reports say what churn did,
// and the scale table and plots come out of the two reports.
func TestSimCommandChurnAndScale(t *testing.T) {
	dir := t.TempDir()
	runs := []struct {
		leave string
		args  []string
	}{
		{"crash", []string{"-players", "6", "-regions", "4"}},
		{"handoff", []string{"-players", "8", "-regions", "4", "-dht"}},
		{"close", []string{"-players", "6", "-regions", "4", "-bots", "play"}},
	}
	var reports []string
	for i, run := range runs {
		out := filepath.Join(dir, "run"+string(rune('a'+i)))
		args := append([]string{"sim", "-warmup", "1s", "-duration", "3s", "-session-mean", "2s", "-leave", run.leave, "-out", out}, run.args...)
		var stdout await.Output // the progress line and the logs write from different goroutines
		if err := dispatch(context.Background(), args, &stdout, &stdout); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, stdout.String())
		}
		for _, want := range []string{"churn: mean session 2 s, leave by " + run.leave, "memory (", "peers per player"} {
			if !strings.Contains(stdout.String(), want) {
				t.Errorf("%v: output lacks %q:\n%s", args, want, stdout.String())
			}
		}
		reports = append(reports, filepath.Join(out, "report.json"))
	}
	plots := filepath.Join(dir, "scale")
	var stdout await.Output
	if err := dispatch(context.Background(), []string{"sim", "-scale-from", strings.Join(reports, ","), "-out", plots}, &stdout, &stdout); err != nil {
		t.Fatalf("scale: %v\n%s", err, stdout.String())
	}
	table := stdout.String()
	for _, want := range []string{"| direct, churn (crash) | 6 | 4 |", "| direct, DHT, churn (handoff) | 8 | 4 |", "| direct, play bots, churn (close) | 6 | 4 |"} {
		if !strings.Contains(table, want) {
			t.Errorf("scale table lacks %q:\n%s", want, table)
		}
	}
	for _, f := range []string{"scale-bandwidth.svg", "scale-delay.svg"} {
		if st, err := os.Stat(filepath.Join(plots, f)); err != nil || st.Size() == 0 {
			t.Errorf("plot %s: %v", f, err)
		}
	}
	if err := dispatch(context.Background(), []string{"sim", "-scale-from", filepath.Join(dir, "missing.json")}, &stdout, &stdout); err == nil {
		t.Error("a missing report was accepted")
	}
}
