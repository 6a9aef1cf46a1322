package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"

	"github.com/overworld-p2p/overworld/node/mirror"
)

// overworld mirror -authority-mode rotate: the flags it refuses, and a
// lone founding mirror that comes up ready with the duty's metrics.
func TestMirrorRotateCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	var acctOut syncBuffer
	acctDone := make(chan error, 1)
	go func() {
		acctDone <- dispatch(ctx, []string{"accounts", "-listen", "127.0.0.1:0", "-data-dir", filepath.Join(dir, "accounts"), "-log-level", "error"}, &acctOut, io.Discard)
	}()
	acctURL := waitForLine(t, "accounts", &acctOut, regexp.MustCompile(`account server on (http://127\.0\.0\.1:\d+)`), acctDone)[1]
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
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- dispatch(mctx, []string{"mirror", "-authority", "-authority-mode", "rotate", "-crimp", "memory", "-account", acctURL,
			"-listen", "127.0.0.1:0", "-state-listen", "127.0.0.1:0", "-data-dir", filepath.Join(dir, "mirror"), "-world-size", "3x3", "-log-level", "error"}, &out, io.Discard)
	}()
	addr := waitForLine(t, "mirror", &out, regexp.MustCompile(`mirror serving clients on ws://(127\.0\.0\.1:\d+)/ws`), done)[1]
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if code, _ := get("/readyz"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			_, body := get("/readyz")
			t.Fatalf("never ready: %s", body)
		}
	}
	if _, m := get("/metrics"); !strings.Contains(m, "duty_handovers_total") || !strings.Contains(m, "crimp_takeovers_total") {
		t.Fatalf("/metrics lacks the duty's counters:\n%.2000s", m)
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("mirror returned %v on shutdown", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("mirror did not stop")
	}
}

// overworld mirror -protocol event: an unknown protocol is refused; a lone
// founding mirror of a rotating group runs the event protocol, a bot plays
// through it over the WebSocket, and /metrics shows the authority deciding
// its actions.
func TestMirrorEventCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	var acctOut syncBuffer
	acctDone := make(chan error, 1)
	go func() {
		acctDone <- dispatch(ctx, []string{"accounts", "-listen", "127.0.0.1:0", "-data-dir", filepath.Join(dir, "accounts"), "-log-level", "error"}, &acctOut, io.Discard)
	}()
	acctURL := waitForLine(t, "accounts", &acctOut, regexp.MustCompile(`account server on (http://127\.0\.0\.1:\d+)`), acctDone)[1]
	if err := dispatch(ctx, []string{"mirror", "-account", acctURL, "-crimp", "memory", "-authority", "-protocol", "gossip"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "-protocol") {
		t.Fatalf("-protocol gossip: %v", err)
	}
	mctx, stop := context.WithCancel(ctx)
	defer stop()
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- dispatch(mctx, []string{"mirror", "-authority", "-authority-mode", "rotate", "-protocol", "event", "-crimp", "memory", "-account", acctURL,
			"-listen", "127.0.0.1:0", "-state-listen", "127.0.0.1:0", "-data-dir", filepath.Join(dir, "mirror"), "-world-size", "3x3", "-log-level", "error"}, &out, io.Discard)
	}()
	addr := waitForLine(t, "mirror", &out, regexp.MustCompile(`mirror serving clients on ws://(127\.0\.0\.1:\d+)/ws`), done)[1]
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if code, _ := get("/readyz"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			_, body := get("/readyz")
			t.Fatalf("never ready: %s", body)
		}
	}
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
	decided := regexp.MustCompile(`(?m)^mirror_event_decided_total ([1-9]\d*)$`)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, m := get("/metrics")
		if d := decided.FindStringSubmatch(m); d != nil {
			t.Logf("the authority decided %s of the bot's actions", d[1])
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no action decided in 60 s:\n%.3000s", m)
		}
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("mirror returned %v on shutdown", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("mirror did not stop")
	}
}
