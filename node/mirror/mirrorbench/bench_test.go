package mirrorbench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestRunReports: a short run of both protocols fills every row with
// rates, fits a line per protocol and compares them (the figures
// themselves go in the report, `overworld bench mirror`).
func TestRunReports(t *testing.T) {
	cfg := Default()
	cfg.Clients, cfg.Duration, cfg.Warmup = []int{1, 2, 3}, 5*time.Second, time.Second
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 6 || len(rep.Summaries) != 2 {
		t.Fatalf("%d rows, %d summaries", len(rep.Rows), len(rep.Summaries))
	}
	for _, r := range rep.Rows {
		if r.Payload.A <= 0 || r.Payload.B <= 0 || r.Payload.Update <= 0 || r.Wire.A <= r.Payload.A || r.UpdatesPerSecond <= 0 ||
			r.LinkWire <= r.LinkPayload || r.LinkPayload < r.Payload.B || r.EventDelay <= 0 {
			t.Fatalf("row %+v", r)
		}
	}
	for _, s := range rep.Summaries {
		if s.PayloadFit.DE <= 0 {
			t.Fatalf("%s protocol: updates do not grow with the clients in sight: %+v", s.Protocol, s.PayloadFit)
		}
	}
	var b bytes.Buffer
	rep.Print(&b)
	if !strings.Contains(b.String(), "paper (table 2.3)") || !strings.Contains(b.String(), "Protocols compared") {
		t.Fatal(b.String())
	}
	t.Log("\n" + b.String())
}
