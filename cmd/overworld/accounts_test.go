package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/bootstrap/accounts"
)

func TestAccountsCommandServesAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- dispatch(ctx, []string{"accounts", "-listen", "127.0.0.1:0", "-data-dir", t.TempDir(), "-log-level", "error"}, &out, io.Discard)
	}()
	addrLine := regexp.MustCompile(`account server on (http://127\.0\.0\.1:\d+)`)
	deadline := time.Now().Add(60 * time.Second)
	var url string
	for {
		if m := addrLine.FindStringSubmatch(out.String()); m != nil {
			url = m[1]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("accounts exited early: %v; output:\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("accounts never printed its address; output:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

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
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("accounts returned %v on shutdown", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("accounts did not stop after its context ended")
	}
}
