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

	"github.com/overworld-p2p/overworld/node/await"
	"github.com/overworld-p2p/overworld/node/mirror"
)

// fetch GETs url: its status and body.
func fetch(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// awaitReady waits for the mirror command to log that it is ready (it
// must run at -log-level info or lower), then checks that its /readyz at
// addr says so too.
func awaitReady(t testing.TB, mirrorCmd *runningCommand, addr string) {
	t.Helper()
	mirrorCmd.logged(t, regexp.MustCompile(`msg="mirror ready: serving clients"`))
	if code, body := fetch(t, "http://"+addr+"/readyz"); code != http.StatusOK {
		t.Fatalf("the mirror logged it is ready, but /readyz answers %d: %s", code, body)
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
	accountsCmd := startCommand(ctx, "accounts", "-listen", "127.0.0.1:0", "-data-dir", filepath.Join(dir, "accounts"), "-log-level", "error")
	acctURL := accountsCmd.match(t, regexp.MustCompile(`account server on (http://127\.0\.0\.1:\d+)`))[1]

	err := dispatch(ctx, []string{"mirror", "-account", acctURL, "-crimp", "memory"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-authority-public-key is required") {
		t.Fatalf("a mirror without the authority's key: %v", err)
	}

	mctx, stopMirror := context.WithCancel(ctx)
	defer stopMirror()
	mirrorCmd := startCommand(mctx, "mirror", "-authority", "-crimp", "memory", "-account", acctURL, "-listen", "127.0.0.1:0",
		"-state-listen", "127.0.0.1:0", "-data-dir", filepath.Join(dir, "mirror"), "-world-size", "3x3", "-log-level", "info")
	addr := mirrorCmd.match(t, regexp.MustCompile(`mirror serving clients on ws://(127\.0\.0\.1:\d+)/ws`))[1]
	if !regexp.MustCompile(`authority public key .*: \S+`).MatchString(mirrorCmd.out.String()) {
		t.Fatalf("the authority did not print its public key:\n%s", mirrorCmd.out.String())
	}
	if _, err := loadOrCreateAuthorityKey(filepath.Join(dir, "mirror", "mirror-authority.pem")); err != nil {
		t.Fatalf("the authority key file: %v", err)
	}
	awaitReady(t, mirrorCmd, addr)

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
	// The client counts what it receives and announces nothing.
	if err := await.UntilErr(30*time.Second, "60 updates to the bot", func() bool { return cl.View().Updates >= 60 }); err != nil {
		t.Fatalf("%v: it got %d", err, cl.View().Updates)
	}
	if _, metrics := fetch(t, "http://"+addr+"/metrics"); !strings.Contains(metrics, "mirror_updates_sent_total") {
		t.Fatalf("/metrics lacks the mirror's counters:\n%.2000s", metrics)
	}
	before, err := acct.LoadCharacter(ctx)
	if err != nil {
		t.Fatal(err)
	}

	stopMirror() // SIGTERM: the player leaves and is saved
	mirrorCmd.stopped(t)
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
