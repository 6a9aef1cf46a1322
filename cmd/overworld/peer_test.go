package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/play"
	"github.com/overworld-p2p/overworld/node"
	"github.com/overworld-p2p/overworld/node/devnet"
	"github.com/overworld-p2p/overworld/regions"
)

// waitOutput polls out until re matches, failing if done reports first or
// the deadline passes; it returns the submatches.
func waitOutput(t *testing.T, out *syncBuffer, re *regexp.Regexp, done <-chan error, within time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m
		}
		select {
		case err := <-done:
			t.Fatalf("command exited early: %v; output:\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q after %s; output:\n%s", re, within, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runCommand runs an overworld subcommand in this process until the test
// ends; the returned buffer holds what it prints.
func runCommand(t *testing.T, args ...string) (*syncBuffer, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- dispatch(ctx, args, out, io.Discard) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s returned %v", args[0], err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s did not stop", args[0])
		}
	})
	return out, done
}

// regionsHeld reads overworld_regions_held{role} from a /metrics page.
func regionsHeld(t *testing.T, url, role string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line := regexp.MustCompile(`^overworld_regions_held\{role="` + role + `"\} (\d+)`)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if m := line.FindStringSubmatch(sc.Text()); m != nil {
			n, _ := strconv.Atoi(m[1])
			return n
		}
	}
	return -1
}

// `overworld peer -account …` on a fresh devnet is a full peer: with a
// player beside it, it coordinates the regions it is closest to, under
// the lease server's leases (the player's writes there commit), and its
// /metrics shows them in overworld_regions_held.
func TestHeadlessPeerCoordinates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := devnet.Start(ctx, devnet.Config{Peers: 0, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	boot := d.Bootstrap.Addrs()[0].String()

	accOut, accDone := runCommand(t, "accounts", "-listen", "127.0.0.1:0", "-data-dir", t.TempDir(), "-log-level", "error")
	accountURL := waitOutput(t, accOut, regexp.MustCompile(`account server on (http://127\.0\.0\.1:\d+)`), accDone, time.Minute)[1]

	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte("capacity for the world\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const world, size = "capacity", "3x3"
	peerOut, peerDone := runCommand(t, "peer", "-bootstrap", boot, "-listen", "/ip4/127.0.0.1/tcp/0",
		"-data-dir", t.TempDir(), "-account", accountURL, "-user", "operator", "-password-file", pwFile, "-register",
		"-world", world, "-world-size", size, "-metrics", "127.0.0.1:0", "-log-level", "error")
	headlessID, err := peer.Decode(waitOutput(t, peerOut, regexp.MustCompile(`peer (\S+) started`), peerDone, time.Minute)[1])
	if err != nil {
		t.Fatal(err)
	}
	metricsURL := waitOutput(t, peerOut, regexp.MustCompile(`metrics on (\S+)`), peerDone, time.Minute)[1]
	waitOutput(t, peerOut, regexp.MustCompile(`joined the overlay`), peerDone, time.Minute)

	// A player beside it, with the region services a player's peer runs,
	// under an identity that leaves the headless peer some regions and the
	// player others.
	var key crypto.PrivKey
	var theirs []regions.Coord
	for len(theirs) < 2 || len(theirs) > 7 {
		if key, _, err = crypto.GenerateEd25519Key(nil); err != nil {
			t.Fatal(err)
		}
		id, _ := peer.IDFromPrivateKey(key)
		theirs = theirs[:0]
		for x := range 3 {
			for y := range 3 {
				c := regions.Coord{X: x, Y: y}
				if node.KeyDistanceLess(regions.Key(world, c), headlessID, id) {
					theirs = append(theirs, c)
				}
			}
		}
	}
	n, err := node.New(ctx, node.WithIdentity(key), node.WithListenAddrs(ma.StringCast("/ip4/127.0.0.1/tcp/0")),
		node.WithBootstrapPeers(d.Bootstrap.AddrInfo()))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	acct, _, _, err := play.Login(ctx, play.Account{URL: accountURL, User: "player", Password: "a player of the world", Register: true}, n.ID())
	if err != nil {
		t.Fatal(err)
	}
	g := game.DefaultConfig()
	g.RegionsX, g.RegionsY = 3, 3
	rs, err := play.StartRegionServices(ctx, n, play.RegionServicesConfig{
		World: world, Game: g, PositionInterval: 150 * time.Millisecond, Accounts: acct, Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	cl := rs.Regions.Client()
	deadline := time.Now().Add(90 * time.Second)
	for _, c := range theirs {
		for {
			if coord, _ := rs.Regions.Coordinator(c); coord == headlessID {
				// A write commits only under the coordinator's lease.
				wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := cl.ReadWrite(wctx, c, "capacity-test", 0, []byte("written through the headless peer"))
				wcancel()
				if err == nil {
					break
				}
				t.Logf("write to region %s: %v", c, err)
			}
			if time.Now().After(deadline) {
				coord, _ := rs.Regions.Coordinator(c)
				t.Fatalf("region %s: coordinator %s, want the headless peer %s; no committed write", c, coord, headlessID)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for {
		held := regionsHeld(t, metricsURL, "coordinator")
		if held == len(theirs) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("overworld_regions_held{role=\"coordinator\"} = %d on the headless peer, want %d (%v)", held, len(theirs), theirs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("headless peer coordinates %d of 9 regions: %v", len(theirs), theirs)
}
