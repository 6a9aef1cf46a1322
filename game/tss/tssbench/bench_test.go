package tssbench

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/tss"
)

// A short bench: every run that loses no command ends in order, Time Warp
// too, ChooseDelays covers the tail and copies far less than Time Warp,
// and the trace it writes replays with every checkpoint matching.
func TestRunSmall(t *testing.T) {
	cfg := Default()
	cfg.Workload.Commands = 2000
	cfg.Repeats = 1
	var trace bytes.Buffer
	rep, err := Run(context.Background(), cfg, &trace)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != len(PaperTable31)+1 {
		t.Fatalf("%d rows", len(rep.Rows))
	}
	if rep.Arrivals.Local+rep.Arrivals.Remote != rep.Commands || rep.Arrivals.Duplicate != 0 || rep.Arrivals.Remote == 0 {
		t.Fatalf("arrivals %+v for %d commands", rep.Arrivals, rep.Commands)
	}
	for _, row := range rep.Rows {
		if row.TooLate == 0 && !row.InOrder {
			t.Errorf("%s: no command too late, yet the last state is off the in-order run", row.Label)
		}
		if row.Executed < uint64(rep.Commands) {
			t.Errorf("%s: %d executions for %d commands", row.Label, row.Executed, rep.Commands)
		}
	}
	if !rep.Warp.InOrder || rep.Warp.Copies == 0 {
		t.Errorf("time warp %+v", rep.Warp)
	}
	choice := rep.Rows[len(rep.Rows)-1]
	if choice.TooLate != 0 || !choice.InOrder || choice.Rollbacks*10 > rep.Warp.Copies {
		t.Errorf("ChooseDelays row %+v vs Time Warp %d copies", choice, rep.Warp.Copies)
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	for _, want := range []string{"0,100,1000", "331687", "Time Warp", "ChooseDelays picked", "25ms one-way"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, text.String())
		}
	}

	res, err := ReplayWorld(bytes.NewReader(trace.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if res.Checkpoints == 0 || res.Deliveries != rep.Commands || res.Counters["rollbacks"] != choice.Rollbacks {
		t.Fatalf("replay %+v, run %+v", res, choice)
	}
	bad := bytes.Clone(trace.Bytes())
	bad[len(bad)/2] ^= 0xff
	_, err = ReplayWorld(bytes.NewReader(bad))
	var te *tss.TraceError
	if !errors.As(err, &te) || te.Offset <= 0 || te.Offset > int64(len(bad)/2) {
		t.Fatalf("corrupt trace: %v", err)
	}
}

// Generate is deterministic, and Bots join once and then send inputs.
func TestGenerateDeterministic(t *testing.T) {
	wl := Default().Workload
	wl.Commands = 500
	a, err := Generate(wl)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate(wl)
	if len(a) != 500 || len(b) != 500 {
		t.Fatalf("%d and %d commands", len(a), len(b))
	}
	joins := 0
	for i := range a {
		if game.CompareCommands(a[i], b[i]) != 0 {
			t.Fatalf("command %d differs between two runs", i)
		}
		if a[i].Op == game.CommandJoin {
			joins++
		}
		if i > 0 && a[i].Stamp < a[i-1].Stamp {
			t.Fatal("commands out of stamp order")
		}
	}
	if joins != wl.Mirrors*wl.BotsPerMirror {
		t.Fatalf("%d joins", joins)
	}
	if gap := time.Duration(a[len(a)-1].Stamp - a[0].Stamp); gap < 2*time.Second {
		t.Fatalf("500 commands of 6 players every 30 ms span %v", gap)
	}
}
