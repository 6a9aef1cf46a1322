package main

import (
	"bufio"
	"context"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"sync"
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
	"github.com/overworld-p2p/overworld/regions/position"
)

// metricValue reads an unlabelled sample from a /metrics page (-1: none).
func metricValue(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line := regexp.MustCompile(`^` + regexp.QuoteMeta(name) + ` (\S+)$`)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if m := line.FindStringSubmatch(sc.Text()); m != nil {
			v, _ := strconv.ParseFloat(m[1], 64)
			return v
		}
	}
	return -1
}

// `overworld peer` coordinates a region for players in aggregated mode,
// though it has no player of its own (and needs no flag: a coordinator
// batches what players send it whatever its own mode): the two players of
// the region (the region services a player's peer runs, in aggregated
// mode) send it their positions, it publishes them in batches (counted on
// its /metrics), and the players hear each other without publishing
// directly.
func TestHeadlessPeerAggregates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := devnet.Start(ctx, devnet.Config{Peers: 0, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const world, size = "batches", "2x2"
	peerCmd := runCommand(t, "peer", "-bootstrap", d.Bootstrap.Addrs()[0].String(),
		"-listen", "/ip4/127.0.0.1/tcp/0", "-data-dir", t.TempDir(),
		"-world", world, "-world-size", size, "-metrics", "127.0.0.1:0", "-log-level", "error")
	headlessID, err := peer.Decode(peerCmd.match(t, regexp.MustCompile(`peer (\S+) started`))[1])
	if err != nil {
		t.Fatal(err)
	}
	metricsURL := peerCmd.match(t, regexp.MustCompile(`metrics on (\S+)`))[1]
	peerCmd.match(t, regexp.MustCompile(`joined the overlay`))

	g := game.DefaultConfig()
	g.RegionsX, g.RegionsY = 2, 2
	home := regions.Coord{X: 0, Y: 0}
	type player struct {
		n   *node.Node
		rs  *play.RegionServices
		log *await.Output // its node's and services' debug log
	}
	var players []player
	var wg sync.WaitGroup
	runCtx, stop := context.WithCancel(ctx)
	defer func() {
		stop()
		wg.Wait()
		for _, p := range players {
			p.rs.Close()
			p.n.Close()
		}
	}()
	for i := range 2 {
		// An identity farther from the home region's key than the
		// headless peer's: the headless peer coordinates it.
		var key crypto.PrivKey
		for {
			if key, _, err = crypto.GenerateEd25519Key(nil); err != nil {
				t.Fatal(err)
			}
			id, _ := peer.IDFromPrivateKey(key)
			if node.KeyDistanceLess(regions.Key(world, home), headlessID, id) {
				break
			}
		}
		log := &await.Output{}
		n, err := node.New(ctx, node.WithIdentity(key), node.WithListenAddrs(ma.StringCast("/ip4/127.0.0.1/tcp/0")),
			node.WithBootstrapPeers(d.Bootstrap.AddrInfo()),
			node.WithLogger(slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))))
		if err != nil {
			t.Fatal(err)
		}
		rs, err := play.StartRegionServices(ctx, n, play.RegionServicesConfig{
			World: world, Game: g, PositionInterval: 150 * time.Millisecond, Aggregate: true, Registerer: prometheus.NewRegistry(),
		})
		if err != nil {
			n.Close()
			t.Fatal(err)
		}
		players = append(players, player{n: n, rs: rs, log: log})
		at := position.Vec{X: g.RegionUnits()/2 + int32(i)*position.TileUnits, Y: g.RegionUnits() / 2}
		rs.Positions.Move(at, position.Vec{})
		wg.Go(func() { _ = rs.Positions.Run(runCtx) })
	}

	// Each player logs (at debug) when the coordinator it sends to first
	// publishes its update in a batch: from then on the headless peer
	// carries its positions. One bound for all the waits.
	deadline := time.Now().Add(90 * time.Second)
	answered := regexp.MustCompile(`msg="coordinator publishes our positions" .*region=` + regexp.QuoteMeta(home.String()) + ` coordinator=` + headlessID.String())
	var base [2]uint64 // what each player had heard when the headless peer first answered it
	for i, p := range players {
		if _, err := p.log.MatchErr(time.Until(deadline), answered); err != nil {
			coord, _ := p.rs.Regions.Coordinator(home)
			t.Fatalf("player %d: %v: coordinator %s (want the headless peer %s), stats %+v; log:\n%s", i, err, coord, headlessID,
				p.rs.Positions.Stats(), p.log.String())
		}
		base[i] = p.rs.Positions.Stats().Delivered
	}
	// From here on the players send to the headless peer alone, and hear
	// each other: in its batches. What they heard is a counter of theirs,
	// announced nowhere.
	if err := await.UntilErr(time.Until(deadline), "the players hearing each other through the headless peer", func() bool {
		for i, p := range players {
			if p.rs.Positions.Stats().Delivered < base[i]+5 {
				return false
			}
		}
		return true
	}); err != nil {
		t.Fatalf("%v: %+v, %+v", err, players[0].rs.Positions.Stats(), players[1].rs.Positions.Stats())
	}
	for i, p := range players {
		if st := p.rs.Positions.Stats(); st.PublishingDirect || st.SentUplink == 0 {
			t.Errorf("player %d: %+v", i, st)
		}
	}
	// The headless peer counts its batches on its /metrics, after it
	// published them (the players may hear one first).
	if err := await.UntilErr(time.Until(deadline), "the headless peer's /metrics counting its batches", func() bool {
		return metricValue(t, metricsURL, "overworld_position_batches_published_total") > 0
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("headless coordinator published %v batches carrying %v updates",
		metricValue(t, metricsURL, "overworld_position_batches_published_total"),
		metricValue(t, metricsURL, "overworld_position_batch_entries_total"))
}
