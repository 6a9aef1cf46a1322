package main

import (
	"context"
	"io"
	"regexp"
	"strings"
	"testing"
)

// TestDemoAggregateFlag runs `overworld demo -aggregate` until it prints
// its page, then stops it as Ctrl-C does. Behaviour in aggregated mode is
// game/demo's TestAggregatedDemo.
func TestDemoAggregateFlag(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	demo := startCommand(ctx, "demo", "-aggregate", "-bots", "2", "-no-accounts", "-http", "127.0.0.1:0")
	demo.match(t, regexp.MustCompile(`open http://`))
	cancel()
	demo.stopped(t)
}

// -aggregate is position multicast's: with mirror mode it is refused, not
// ignored.
func TestAggregateRefusedInMirrorMode(t *testing.T) {
	for _, args := range [][]string{
		{"demo", "-mode", "mirror", "-aggregate"},
		{"play", "-mirror", "ws://127.0.0.1:1/ws", "-aggregate"},
	} {
		err := dispatch(context.Background(), args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "-aggregate") {
			t.Errorf("%v: %v, want an error naming -aggregate", args, err)
		}
	}
}
