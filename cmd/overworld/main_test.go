package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"regexp"
	"strings"
	"testing"
)

func TestHelpForEverySubcommand(t *testing.T) {
	for _, c := range commands() {
		var out bytes.Buffer
		err := dispatch(context.Background(), []string{"help", c.name}, &out, io.Discard)
		if !errors.Is(err, flag.ErrHelp) {
			t.Errorf("help %s: err %v, want flag.ErrHelp", c.name, err)
		}
		if !strings.Contains(out.String(), "Usage: overworld "+c.name) {
			t.Errorf("help %s printed %q", c.name, out.String())
		}
	}
	var out bytes.Buffer
	if err := dispatch(context.Background(), []string{"help"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, c := range commands() {
		if !strings.Contains(out.String(), c.name) {
			t.Errorf("usage does not list %s", c.name)
		}
	}
	if err := dispatch(context.Background(), []string{"nonsense"}, io.Discard, io.Discard); err == nil {
		t.Error("unknown subcommand accepted")
	}
}

func TestFlagsFromEnvironment(t *testing.T) {
	newSet := func() (*flag.FlagSet, *int, *string) {
		fs := newFlagSet("x", "test", io.Discard)
		return fs, fs.Int("listen-port", 1, ""), fs.String("log-level", "info", "")
	}
	t.Setenv("OVERWORLD_LISTEN_PORT", "4242")
	t.Setenv("OVERWORLD_LOG_LEVEL", "debug")

	fs, port, level := newSet()
	if err := parseFlags(fs, nil); err != nil {
		t.Fatal(err)
	}
	if *port != 4242 || *level != "debug" {
		t.Fatalf("from env: port %d level %s", *port, *level)
	}

	fs, port, _ = newSet()
	if err := parseFlags(fs, []string{"-listen-port", "7"}); err != nil {
		t.Fatal(err)
	}
	if *port != 7 {
		t.Fatalf("command line should win over env: port %d", *port)
	}

	t.Setenv("OVERWORLD_LISTEN_PORT", "not-a-number")
	fs, _, _ = newSet()
	if err := parseFlags(fs, nil); err == nil || !strings.Contains(err.Error(), "OVERWORLD_LISTEN_PORT") {
		t.Fatalf("bad env value: err %v, want one naming the variable", err)
	}
}

func TestDevnetCommandJoinsAllPeers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	devnet := startCommand(ctx, "devnet", "-peers", "4", "-report", "100ms", "-data-dir", t.TempDir())
	devnet.match(t, regexp.MustCompile(`all 4 peers joined`))
	devnet.match(t, regexp.MustCompile(`dht table sizes: bootstrap=4`))
	cancel()
	devnet.stopped(t)
}

func TestPeerCommandRejectsBadBootstrap(t *testing.T) {
	err := dispatch(context.Background(), []string{"peer", "-bootstrap", "/ip4/127.0.0.1/tcp/1", "-data-dir", t.TempDir()}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-bootstrap") {
		t.Fatalf("err %v, want a -bootstrap error", err)
	}
	err = dispatch(context.Background(), []string{"peer", "-data-dir", t.TempDir()}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-bootstrap") {
		t.Fatalf("err %v, want a missing -bootstrap error", err)
	}
}
