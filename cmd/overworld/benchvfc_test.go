package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"testing"
)

// TestBenchVFC runs `overworld bench vfc` small, end to end through the
// command line, and reads its JSON report.
func TestBenchVFC(t *testing.T) {
	var out bytes.Buffer
	args := []string{"bench", "vfc", "-json", "-objects", "1000,10000", "-updated", "0,100", "-pivot", "moving", "-rounds", "5", "-clients", "8", "-seconds", "3"}
	if err := dispatch(context.Background(), args, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Rounds []struct {
			Objects int `json:"objects"`
			Sent    int `json:"sent"`
		} `json:"rounds"`
		Demo struct {
			Clients int `json:"clients"`
			VFC     struct {
				Bytes int64 `json:"bytes"`
			} `json:"vfc"`
			SendAll struct {
				Bytes int64 `json:"bytes"`
			} `json:"send_all"`
			Zones []struct {
				Exceeded int64 `json:"exceeded"`
			} `json:"zones"`
		} `json:"demo"`
		Goals []struct {
			Name string `json:"name"`
			OK   bool   `json:"ok"`
		} `json:"goals"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, out.String())
	}
	if len(rep.Rounds) != 4 || rep.Rounds[3].Objects != 10000 || rep.Rounds[3].Sent != 10000 {
		t.Errorf("round rows %+v", rep.Rounds)
	}
	if rep.Demo.Clients != 8 || rep.Demo.VFC.Bytes == 0 || rep.Demo.VFC.Bytes >= rep.Demo.SendAll.Bytes || len(rep.Demo.Zones) != 7 {
		t.Errorf("demo %+v", rep.Demo)
	}
	// Timings are reported, not judged; the other goals are properties.
	for _, g := range rep.Goals {
		if !g.OK && g.Name != "round cost at 10,000 objects ≤ 1 ms per client" {
			t.Errorf("goal missed: %s", g.Name)
		}
	}
	if len(rep.Goals) != 3 {
		t.Errorf("goals %+v", rep.Goals)
	}
	for _, bad := range [][]string{{"-objects", "1"}, {"-updated", "101"}, {"-pivot", "sideways"}, {"-part", "all"}, {"-rounds", "0"}} {
		if err := dispatch(context.Background(), append([]string{"bench", "vfc"}, bad...), io.Discard, io.Discard); err == nil {
			t.Errorf("bench vfc %v accepted", bad)
		}
	}
}
