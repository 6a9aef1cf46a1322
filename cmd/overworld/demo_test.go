package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// TestDemoAggregateFlag runs `overworld demo -aggregate` until it prints
// its page, then stops it as Ctrl-C does. Behaviour in aggregated mode is
// game/demo's TestAggregatedDemo.
func TestDemoAggregateFlag(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- dispatch(ctx, []string{"demo", "-aggregate", "-bots", "2", "-no-accounts", "-http", "127.0.0.1:0"}, &out, io.Discard)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "open http://") {
		select {
		case err := <-done:
			t.Fatalf("demo -aggregate returned %v; output:\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("demo -aggregate printed no page; output:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("demo -aggregate returned %v", err)
	}
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
