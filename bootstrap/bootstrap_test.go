package bootstrap

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/overworld-p2p/overworld/node"
)

func TestBootstrapNodeServesDHTRelayAndAutoNAT(t *testing.T) {
	ctx := context.Background()
	keyFile := filepath.Join(t.TempDir(), "bootstrap.key")
	cfg := Config{KeyFile: keyFile, ListenAddrs: []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/tcp/0")}}
	b, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	id := b.ID()

	// A player joins through it and sees the services it offers.
	player, err := node.New(ctx,
		node.WithDataDir(t.TempDir()),
		node.WithListenAddrs(ma.StringCast("/ip4/127.0.0.1/tcp/0")),
		node.WithBootstrapPeers(b.AddrInfo()),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer player.Close()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := player.WaitJoined(wctx); err != nil {
		t.Fatal(err)
	}
	want := []protocol.ID{
		"/overworld/kad/1.0.0",
		"/libp2p/circuit/relay/0.2.0/hop",
		"/libp2p/autonat/1.0.0",
	}
	// The player learns them by identify, which announces every change on
	// the event bus; subscribed before the first look, no change is missed.
	updates, err := player.Host().EventBus().Subscribe([]any{
		new(event.EvtPeerIdentificationCompleted), new(event.EvtPeerProtocolsUpdated),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer updates.Close()
	timeout := time.After(30 * time.Second)
	for {
		got, err := player.Host().Peerstore().GetProtocols(id)
		if err != nil {
			t.Fatal(err)
		}
		missing := slices.DeleteFunc(slices.Clone(want), func(p protocol.ID) bool { return slices.Contains(got, p) })
		if len(missing) == 0 {
			break
		}
		select {
		case <-updates.Out():
		case <-timeout:
			t.Fatalf("bootstrap node does not offer %v; it offers %v", missing, got)
		}
	}

	// Same key file, same identity.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if again.ID() != id {
		t.Fatalf("restarted bootstrap node has ID %s, want %s", again.ID(), id)
	}
}

func TestBootstrapNodeRejectsBadConfig(t *testing.T) {
	ctx := context.Background()
	if _, err := Start(ctx, Config{}); err == nil {
		t.Error("started without a key file")
	}
	cfg := Config{KeyFile: filepath.Join(t.TempDir(), "k"), Peers: []string{"not a multiaddr"}}
	if _, err := Start(ctx, cfg); err == nil {
		t.Error("started with a malformed peer address")
	}
}
