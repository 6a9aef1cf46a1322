package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bench tss -trace writes a trace that overworld replay replays with every
// checkpoint; a damaged byte makes replay fail naming its offset.
func TestBenchTSSTraceReplays(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tss.trace")
	var out bytes.Buffer
	if err := dispatch(context.Background(), []string{"bench", "tss", "-commands", "1200", "-repeats", "1", "-trace", file}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"0,50,500,1000", "Time Warp", "ChooseDelays picked", "goal"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("bench tss output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := dispatch(context.Background(), []string{"replay", file}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "checkpoints match") {
		t.Fatalf("replay printed %q", out.String())
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)*2/3] ^= 0x5a
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	err = dispatch(context.Background(), []string{"replay", file}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "corrupt at byte") {
		t.Fatalf("replay of a damaged trace: %v", err)
	}
	if err := dispatch(context.Background(), []string{"replay"}, io.Discard, io.Discard); err == nil {
		t.Fatal("replay without a file succeeded")
	}
}

func TestBenchTSSJSON(t *testing.T) {
	var out bytes.Buffer
	if err := dispatch(context.Background(), []string{"bench", "tss", "-commands", "600", "-repeats", "1", "-delays", "0,100,300", "-json"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"time_warp"`) || !strings.Contains(out.String(), `"rollback_over_command_cost"`) {
		t.Fatalf("json: %s", out.String())
	}
}
