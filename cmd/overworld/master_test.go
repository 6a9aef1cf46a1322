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
	var masterOut syncBuffer
	masterDone := make(chan error, 1)
	go func() {
		masterDone <- dispatch(ctx, []string{"master", "-listen", "127.0.0.1:0", "-data-dir", dir, "-operator-token-file", tokenFile,
			"-interval", "200ms", "-log-level", "error"}, &masterOut, io.Discard)
	}()
	addrLine := regexp.MustCompile(`master server on (http://127\.0\.0\.1:\d+)`)
	var url string
	for deadline := time.Now().Add(60 * time.Second); ; {
		if m := addrLine.FindStringSubmatch(masterOut.String()); m != nil {
			url = m[1]
			break
		}
		select {
		case err := <-masterDone:
			t.Fatalf("master exited early: %v; output:\n%s", err, masterOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("master never printed its address; output:\n%s", masterOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

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
	reg, err := master.NewRegistrar(master.RegistrarConfig{Master: url, Token: token, Logger: quiet,
		Game:      master.GameInfo{ID: "cmd-game", World: "meadow", Mode: "ffa", Players: 3, Capacity: 16, Mirrors: mirrors},
		StatusURL: "http://" + statusLn.Addr().String() + "/v1/status", StatusListener: statusLn})
	if err != nil {
		t.Fatal(err)
	}
	regCtx, stopReg := context.WithCancel(ctx)
	regDone := make(chan error, 1)
	go func() { regDone <- reg.Run(regCtx) }()
	c, _ := master.NewClient(url, nil)
	for deadline := time.Now().Add(60 * time.Second); ; {
		if _, err := c.Game(ctx, "cmd-game"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the game never showed up at the master")
		}
		time.Sleep(10 * time.Millisecond)
	}

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
	select {
	case err := <-masterDone:
		if err != nil {
			t.Fatalf("master returned %v on shutdown", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("master did not stop after its context ended")
	}
}

func TestMasterRefusesToRunWithoutAToken(t *testing.T) {
	t.Setenv("OVERWORLD_OPERATOR_TOKEN", "")
	err := dispatch(context.Background(), []string{"master", "-listen", "127.0.0.1:0", "-data-dir", t.TempDir()}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "operator token") {
		t.Fatalf("master without a token: %v", err)
	}
}
