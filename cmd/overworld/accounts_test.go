package main

import (
	"context"
	"net/http"
	"regexp"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/bootstrap/accounts"
)

func TestAccountsCommandServesAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	accountsCmd := startCommand(ctx, "accounts", "-listen", "127.0.0.1:0", "-data-dir", t.TempDir(), "-log-level", "error")
	url := accountsCmd.match(t, regexp.MustCompile(`account server on (http://127\.0\.0\.1:\d+)`))[1]

	resp, err := http.Get(url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %s", resp.Status)
	}
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := accounts.NewClient(url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Register(ctx, "wanderer", "correct horse battery"); err != nil {
		t.Fatalf("register: %v", err)
	}
	if _, err := c.Login(ctx, "wanderer", "correct horse battery", id); err != nil {
		t.Fatalf("login: %v", err)
	}

	cancel()
	accountsCmd.stopped(t)
}
