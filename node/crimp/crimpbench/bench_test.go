package crimpbench

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// A shortened table: every packet arrives exactly once at every loss rate,
// with and without FEC, and a simulated run is reproducible from its seed.
func TestShortTable(t *testing.T) {
	cfg := Config{Packets: 300, LossRates: []float64{0, 0.15}, FEC: 2, Seed: 3}
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 4 {
		t.Fatalf("%d rows", len(rep.Rows))
	}
	for _, r := range rep.Rows {
		if r.Expected != 6*300*5 || r.Losses != 0 || r.DupDeliveries != 0 {
			t.Errorf("loss %.0f%% fec %d: expected %d delivered %d dup %d", r.Loss*100, r.FEC, r.Expected, r.Delivered, r.DupDeliveries)
		}
		if r.Loss > 0 && r.FEC == 0 && (r.Requests == 0 || r.ViaRepair == 0) {
			t.Errorf("loss %.0f%%: recovered without requests or repairs: %+v", r.Loss*100, r)
		}
		if r.Loss > 0 && r.FEC > 0 && r.ViaFEC == 0 {
			t.Errorf("loss %.0f%% fec %d: nothing recovered by FEC", r.Loss*100, r.FEC)
		}
		if r.Paper == nil {
			t.Errorf("loss %.0f%%: no paper row", r.Loss*100)
		}
	}
	again, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range rep.Rows {
		a, b := rep.Rows[i], again.Rows[i]
		a.Wall, b.Wall, a.Paper, b.Paper = 0, 0, nil, nil
		if a != b {
			t.Fatalf("same seed, different rows:\n%+v\n%+v", a, b)
		}
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	for _, want := range []string{"without FEC", "with FEC", "161ms", "goal"} {
		if !strings.Contains(text.String(), want) {
			t.Fatalf("text report lacks %q:\n%s", want, text.String())
		}
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil || !strings.Contains(js.String(), `"dup_requests"`) {
		t.Fatalf("json report: %v\n%s", err, js.String())
	}
}
