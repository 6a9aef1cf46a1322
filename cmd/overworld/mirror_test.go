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

// waitForLine waits until out shows re, or done says the command ended.
func waitForLine(t *testing.T, what string, out *syncBuffer, re *regexp.Regexp, done <-chan error) []string {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m
		}
		select {
		case err := <-done:
			t.Fatalf("%s exited early: %v; output:\n%s", what, err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never printed %v; output:\n%s", what, re, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMirrorCommandAsAnOperator runs `overworld accounts` and `overworld
// mirror -authority` (a lone mirror on the in-memory transport) as an
// operator would, plays a bot through it over the WebSocket, and stops it:
// the mirror made its authority key, is ready, counts its updates in
// /metrics, and saves the player's character when it shuts down. A mirror
// that is not the authority refuses to start without the authority's
// public key.
func TestMirrorCommandAsAnOperator(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	var acctOut syncBuffer
	acctDone := make(chan error, 1)
	go func() {
		acctDone <- dispatch(ctx, []string{"accounts", "-listen", "127.0.0.1:0", "-data-dir", filepath.Join(dir, "accounts"), "-log-level", "error"}, &acctOut, io.Discard)
	}()
	acctURL := waitForLine(t, "accounts", &acctOut, regexp.MustCompile(`account server on (http://127\.0\.0\.1:\d+)`), acctDone)[1]

	err := dispatch(ctx, []string{"mirror", "-account", acctURL, "-crimp", "memory"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-authority-public-key is required") {
		t.Fatalf("a mirror without the authority's key: %v", err)
	}

	mctx, stopMirror := context.WithCancel(ctx)
	defer stopMirror()
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- dispatch(mctx, []string{"mirror", "-authority", "-crimp", "memory", "-account", acctURL, "-listen", "127.0.0.1:0",
			"-state-listen", "127.0.0.1:0", "-data-dir", filepath.Join(dir, "mirror"), "-world-size", "3x3", "-log-level", "error"}, &out, io.Discard)
	}()
	addr := waitForLine(t, "mirror", &out, regexp.MustCompile(`mirror serving clients on ws://(127\.0\.0\.1:\d+)/ws`), done)[1]
	if !regexp.MustCompile(`authority public key .*: \S+`).MatchString(out.String()) {
		t.Fatalf("the authority did not print its public key:\n%s", out.String())
	}
	if _, err := loadOrCreateAuthorityKey(filepath.Join(dir, "mirror", "mirror-authority.pem")); err != nil {
		t.Fatalf("the authority key file: %v", err)
	}
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if code, _ := get("/readyz"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			_, body := get("/readyz")
			t.Fatalf("never ready: %s", body)
		}
		time.Sleep(20 * time.Millisecond)
	}

	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	acct, err := mirror.Login(ctx, acctURL, "operator-bot", "correct horse battery", key, true)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := mirror.Dial(ctx, "ws://"+addr+"/ws", key, acct.Tokens().AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	botCtx, stopBot := context.WithCancel(ctx)
	botDone := make(chan error, 1)
	go func() { botDone <- mirror.RunBot(botCtx, cl, 7) }()
	for deadline := time.Now().Add(30 * time.Second); cl.View().Updates < 60; {
		if time.Now().After(deadline) {
			t.Fatalf("the bot got %d updates in 30 s", cl.View().Updates)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, metrics := get("/metrics"); !strings.Contains(metrics, "mirror_updates_sent_total") {
		t.Fatalf("/metrics lacks the mirror's counters:\n%.2000s", metrics)
	}
	before, err := acct.LoadCharacter(ctx)
	if err != nil {
		t.Fatal(err)
	}

	stopMirror() // SIGTERM: the player leaves and is saved
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("mirror returned %v on shutdown", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("mirror did not stop")
	}
	stopBot()
	<-botDone
	after, err := acct.LoadCharacter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Version <= before.Version {
		t.Fatalf("the character was not saved on shutdown: version %d, then %d", before.Version, after.Version)
	}
}
