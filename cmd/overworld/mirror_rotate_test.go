package main

import (
	"context"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"

	"github.com/overworld-p2p/overworld/node/mirror"
)

// overworld mirror -authority-mode rotate: the flags it refuses, and a
// lone founding mirror that comes up ready with the duty's metrics.
func TestMirrorRotateCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	accountsCmd := startCommand(ctx, "accounts", "-listen", "127.0.0.1:0", "-data-dir", filepath.Join(dir, "accounts"), "-log-level", "error")
	acctURL := accountsCmd.match(t, regexp.MustCompile(`account server on (http://127\.0\.0\.1:\d+)`))[1]
	for _, bad := range [][]string{
		{"-authority-mode", "sideways"},
		{"-authority-mode", "rotate", "-authority-public-key", "AAAA"},
	} {
		args := append([]string{"mirror", "-account", acctURL, "-crimp", "memory", "-authority"}, bad...)
		if err := dispatch(ctx, args, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "-authority-mode") {
			t.Fatalf("%v: %v", bad, err)
		}
	}
	mctx, stop := context.WithCancel(ctx)
	defer stop()
	mirrorCmd := startCommand(mctx, "mirror", "-authority", "-authority-mode", "rotate", "-crimp", "memory", "-account", acctURL,
		"-listen", "127.0.0.1:0", "-state-listen", "127.0.0.1:0", "-data-dir", filepath.Join(dir, "mirror"), "-world-size", "3x3", "-log-level", "info")
	addr := mirrorCmd.match(t, regexp.MustCompile(`mirror serving clients on ws://(127\.0\.0\.1:\d+)/ws`))[1]
	awaitReady(t, mirrorCmd, addr)
	if _, m := fetch(t, "http://"+addr+"/metrics"); !strings.Contains(m, "duty_handovers_total") || !strings.Contains(m, "crimp_takeovers_total") {
		t.Fatalf("/metrics lacks the duty's counters:\n%.2000s", m)
	}
	stop()
	mirrorCmd.stopped(t)
}

// overworld mirror -protocol event: an unknown protocol is refused; a lone
// founding mirror of a rotating group runs the event protocol, a bot plays
// through it over the WebSocket, and /metrics shows the authority deciding
// its actions.
func TestMirrorEventCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	accountsCmd := startCommand(ctx, "accounts", "-listen", "127.0.0.1:0", "-data-dir", filepath.Join(dir, "accounts"), "-log-level", "error")
	acctURL := accountsCmd.match(t, regexp.MustCompile(`account server on (http://127\.0\.0\.1:\d+)`))[1]
	if err := dispatch(ctx, []string{"mirror", "-account", acctURL, "-crimp", "memory", "-authority", "-protocol", "gossip"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "-protocol") {
		t.Fatalf("-protocol gossip: %v", err)
	}
	mctx, stop := context.WithCancel(ctx)
	defer stop()
	mirrorCmd := startCommand(mctx, "mirror", "-authority", "-authority-mode", "rotate", "-protocol", "event", "-crimp", "memory", "-account", acctURL,
		"-listen", "127.0.0.1:0", "-state-listen", "127.0.0.1:0", "-data-dir", filepath.Join(dir, "mirror"), "-world-size", "3x3", "-log-level", "debug")
	addr := mirrorCmd.match(t, regexp.MustCompile(`mirror serving clients on ws://(127\.0\.0\.1:\d+)/ws`))[1]
	awaitReady(t, mirrorCmd, addr)
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	acct, err := mirror.Login(ctx, acctURL, "event-bot", "correct horse battery", key, true)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := mirror.Dial(ctx, "ws://"+addr+"/ws", key, acct.Tokens().AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	botCtx, stopBot := context.WithCancel(ctx)
	defer stopBot()
	go mirror.RunBot(botCtx, cl, 9)
	// The authority logs each decision at debug; /metrics counts them.
	mirrorCmd.logged(t, regexp.MustCompile(`msg="decided an action"`))
	decided := regexp.MustCompile(`(?m)^mirror_event_decided_total ([1-9]\d*)$`)
	_, metrics := fetch(t, "http://"+addr+"/metrics")
	d := decided.FindStringSubmatch(metrics)
	if d == nil {
		t.Fatalf("the authority logged a decision, but /metrics does not count it:\n%.3000s", metrics)
	}
	t.Logf("the authority decided %s of the bot's actions", d[1])
	stop()
	mirrorCmd.stopped(t)
}
