package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/bootstrap/master"
	"github.com/overworld-p2p/overworld/bootstrap/master/finder"
	"github.com/overworld-p2p/overworld/bootstrap/master/probe"
	"github.com/overworld-p2p/overworld/bootstrap/master/probe/probetest"
	"github.com/overworld-p2p/overworld/node/await"
)

// TestMasterAndFindAsAUser runs `overworld master` and `overworld find` as
// an operator and a player would, with a game whose authority registers
// through the library a mirror server uses, and three mirrors 10, 40 and
// 80 ms away.
func TestMasterAndFindAsAUser(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "operators")
	const token = "operator-token-for-the-cmd-test"
	if err := os.WriteFile(tokenFile, []byte("# operators\n"+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	masterCmd := startCommand(ctx, "master", "-listen", "127.0.0.1:0", "-data-dir", dir, "-operator-token-file", tokenFile,
		"-interval", "200ms", "-log-level", "error")
	url := masterCmd.match(t, regexp.MustCompile(`master server on (http://127\.0\.0\.1:\d+)`))[1]

	// The game's authority and its mirrors' probe responders.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var mirrors []master.Mirror
	var responders sync.WaitGroup
	defer func() {
		cancel()
		responders.Wait()
	}()
	for id, delay := range map[uint32]time.Duration{1: 80 * time.Millisecond, 2: 10 * time.Millisecond, 3: 40 * time.Millisecond} {
		r, err := probe.NewResponder(probe.ResponderConfig{GameID: "cmd-game", MirrorID: id, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		responders.Go(func() { r.Serve(ctx, conn) })
		relay, err := probetest.NewRelay(conn.LocalAddr().String(), delay)
		if err != nil {
			t.Fatal(err)
		}
		defer relay.Close()
		mirrors = append(mirrors, master.Mirror{ID: id, ProbeAddr: relay.Addr(), ClientAddr: fmt.Sprintf("127.0.0.1:%d", 9000+id)})
	}
	statusLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The registrar logs when the master has taken the game in.
	var regLog await.Output
	reg, err := master.NewRegistrar(master.RegistrarConfig{Master: url, Token: token, Logger: slog.New(slog.NewTextHandler(&regLog, nil)),
		Game:      master.GameInfo{ID: "cmd-game", World: "meadow", Mode: "ffa", Players: 3, Capacity: 16, Mirrors: mirrors},
		StatusURL: "http://" + statusLn.Addr().String() + "/v1/status", StatusListener: statusLn})
	if err != nil {
		t.Fatal(err)
	}
	regCtx, stopReg := context.WithCancel(ctx)
	regDone := make(chan error, 1)
	go func() { regDone <- reg.Run(regCtx) }()
	regLog.Match(t, 60*time.Second, regexp.MustCompile(`msg="game registered"`))

	var js bytes.Buffer
	if err := dispatch(ctx, []string{"find", "-master", url, "-world", "meadow", "-has-space", "-json", "-silence", "20s"}, &js, io.Discard); err != nil {
		t.Fatalf("find -json: %v\n%s", err, js.String())
	}
	var rep finder.Report
	if err := json.Unmarshal(js.Bytes(), &rep); err != nil {
		t.Fatalf("find -json printed %q: %v", js.String(), err)
	}
	if rep.Best == nil || rep.Best.MirrorID != 2 || rep.Best.ClientAddr != "127.0.0.1:9002" || len(rep.Ranked) != 3 {
		t.Fatalf("find picked %+v from %s", rep.Best, js.String())
	}

	var table bytes.Buffer
	if err := dispatch(ctx, []string{"find", "-master", url, "-game", "cmd-game", "-silence", "20s"}, &table, io.Discard); err != nil {
		t.Fatalf("find: %v\n%s", err, table.String())
	}
	if !strings.Contains(table.String(), "best: game cmd-game mirror 2") {
		t.Fatalf("find printed:\n%s", table.String())
	}
	t.Logf("overworld find:\n%s", table.String())

	// The authority shuts down: it deregisters, and find says so.
	stopReg()
	<-regDone
	err = dispatch(ctx, []string{"find", "-master", url, "-world", "meadow"}, io.Discard, io.Discard)
	if !errors.Is(err, finder.ErrNoGames) {
		t.Fatalf("find after the game left: %v, want no game", err)
	}
	if err := dispatch(ctx, []string{"find"}, io.Discard, io.Discard); err == nil {
		t.Fatal("find without -master accepted")
	}

	cancel()
	masterCmd.stopped(t)
}

func TestMasterRefusesToRunWithoutAToken(t *testing.T) {
	t.Setenv("OVERWORLD_OPERATOR_TOKEN", "")
	err := dispatch(context.Background(), []string{"master", "-listen", "127.0.0.1:0", "-data-dir", t.TempDir()}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "operator token") {
		t.Fatalf("master without a token: %v", err)
	}
}
