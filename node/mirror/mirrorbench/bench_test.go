package mirrorbench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestRunReports: a short run fills every row with rates and fits a line
// (the figures themselves go in the report, `overworld bench mirror`).
func TestRunReports(t *testing.T) {
	cfg := Default()
	cfg.Clients, cfg.Duration, cfg.Warmup = []int{1, 2, 3}, 5*time.Second, time.Second
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 3 {
		t.Fatalf("%d rows", len(rep.Rows))
	}
	for _, r := range rep.Rows {
		if r.Payload.A <= 0 || r.Payload.B <= 0 || r.Payload.Update <= 0 || r.Wire.A <= r.Payload.A || r.UpdatesPerSecond <= 0 {
			t.Fatalf("row %+v", r)
		}
	}
	if rep.PayloadFit.DE <= 0 {
		t.Fatalf("updates do not grow with the clients in sight: %+v", rep.PayloadFit)
	}
	var b bytes.Buffer
	rep.Print(&b)
	if !strings.Contains(b.String(), "paper (table 2.3)") {
		t.Fatal(b.String())
	}
	t.Log("\n" + b.String())
}
