package main

import (
	"bufio"
	"context"
	"fmt"
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
	"github.com/overworld-p2p/overworld/node/await"
	"github.com/overworld-p2p/overworld/node/devnet"
	"github.com/overworld-p2p/overworld/regions"
)

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

	accountsCmd := runCommand(t, "accounts", "-listen", "127.0.0.1:0", "-data-dir", t.TempDir(), "-log-level", "error")
	accountURL := accountsCmd.match(t, regexp.MustCompile(`account server on (http://127\.0\.0\.1:\d+)`))[1]

	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte("capacity for the world\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const world, size = "capacity", "3x3"
	peerCmd := runCommand(t, "peer", "-bootstrap", boot, "-listen", "/ip4/127.0.0.1/tcp/0",
		"-data-dir", t.TempDir(), "-account", accountURL, "-user", "operator", "-password-file", pwFile, "-register",
		"-world", world, "-world-size", size, "-metrics", "127.0.0.1:0", "-log-level", "info")
	headlessID, err := peer.Decode(peerCmd.match(t, regexp.MustCompile(`peer (\S+) started`))[1])
	if err != nil {
		t.Fatal(err)
	}
	metricsURL := peerCmd.match(t, regexp.MustCompile(`metrics on (\S+)`))[1]
	peerCmd.match(t, regexp.MustCompile(`joined the overlay`))

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
	// One bound for the whole wait: the regions come to the headless peer
	// together. A region comes to be when a player first asks for it (the
	// write below), so the write is tried until it commits under the
	// headless peer: the player's routing to it shows nowhere but in the
	// player's own view.
	deadline := time.Now().Add(90 * time.Second)
	for _, c := range theirs {
		committed := func() bool {
			if coord, _ := rs.Regions.Coordinator(c); coord != headlessID {
				return false
			}
			// A write commits only under the coordinator's lease.
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
			defer wcancel()
			_, err := cl.ReadWrite(wctx, c, "capacity-test", 0, []byte("written through the headless peer"))
			if err != nil {
				t.Logf("write to region %s: %v", c, err)
			}
			return err == nil
		}
		if err := await.UntilErr(time.Until(deadline), fmt.Sprintf("a write to region %s committed under the headless peer %s", c, headlessID), committed); err != nil {
			coord, _ := rs.Regions.Coordinator(c)
			t.Fatalf("%v; the player sees coordinator %s", err, coord)
		}
		// The headless peer says it holds the region's lease.
		peerCmd.logged(t, regexp.MustCompile(`msg="lease gained" world=`+world+` region=`+regexp.QuoteMeta(c.String())+` `))
	}
	// Having logged every lease, the headless peer counts the regions on
	// its /metrics (read from its regions when scraped).
	if held := regionsHeld(t, metricsURL, "coordinator"); held != len(theirs) {
		t.Fatalf("overworld_regions_held{role=\"coordinator\"} = %d, want %d (%v)", held, len(theirs), theirs)
	}
	t.Logf("headless peer coordinates %d of 9 regions: %v", len(theirs), theirs)
}
