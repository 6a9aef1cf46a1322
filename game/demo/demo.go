// Package demo runs a whole overworld network in one process on 127.0.0.1,
// for trying the game alone: what `overworld demo` starts.
//
// Start brings up, in order: a bootstrap node; the account server (SQLite in
// the data dir) on a free loopback port; the interactive player's peer and
// the bot peers, each a full node (its own libp2p host on a TCP port, DHT,
// gossipsub, region and position services) logged in to the account server
// and running a play.Peer; and the web client for the interactive player
// on the HTTP address (falling back to a free port if it is taken). Every
// player starts in the world's middle region, so there is company at once.
// Close stops everything in reverse order.
//
// A process of 21 full peers is heavier than 21 players: every peer runs its
// own DHT, pubsub router and timers. The demo therefore slows the position
// updates (200 ms) and the region upkeep a little; on two cores it stays
// interactive.
package demo

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/bootstrap"
	"github.com/overworld-p2p/overworld/bootstrap/accounts"
	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/play"
	"github.com/overworld-p2p/overworld/game/webui"
	"github.com/overworld-p2p/overworld/node"
	"github.com/overworld-p2p/overworld/node/mirror"
)

// Config sizes the demo.
type Config struct {
	// Bots is the number of bot players besides the interactive one
	// (default 20 when zero; use -1 for none).
	Bots int
	// HTTP is the web client's address (default 127.0.0.1:8080); if it is
	// taken, a free port on the same host is used. It must be a loopback
	// address.
	HTTP string
	// RegionsX, RegionsY: the world's size in regions (default 8×8).
	RegionsX, RegionsY int
	// Seed is the world seed (default 1).
	Seed uint64
	// Name is the interactive player's name (default "Wanderer").
	Name string
	// DataDir holds identities and the account database; empty means a
	// temporary directory removed by Close.
	DataDir string
	// NoAccounts runs without the account server (no logins, no saves).
	NoAccounts bool
	// PositionInterval is the gap between position updates (default 200 ms).
	PositionInterval time.Duration
	// Aggregate runs every player in aggregated mode (play.Config.Aggregate):
	// positions go to the region's coordinator, which publishes one batch
	// per interval.
	Aggregate bool
	// SaveEvery is the gap between two saves of each character (default
	// play's, 30 s).
	SaveEvery time.Duration
	// MirrorProtocol is the mirror-mode demo's protocol (StartMirror):
	// the command protocol (default) or the event protocol.
	MirrorProtocol mirror.Protocol
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Registerer, if set, takes the interactive player's metrics: its
	// node, region and position services and page in P2P mode, the mirror
	// it plays on in mirror mode.
	Registerer prometheus.Registerer
}

// Demo is a running demo network.
type Demo struct {
	// URL is the page of the interactive player.
	URL string
	// Player is the interactive player; Bots are the others.
	Player *play.Peer
	Bots   []*play.Peer
	// AccountsURL is the embedded account server ("" with NoAccounts).
	AccountsURL string

	cfg Config
	log *slog.Logger
	tmp string
	// passwordKey derives the players' account passwords (see password).
	passwordKey []byte
	boot        *bootstrap.Node
	store       *accounts.Store
	mu          sync.Mutex
	nodes       []*node.Node
	// Players run under ctx, the web page and the account server under
	// svcCtx, so that Close stops the players (who save their characters)
	// before the account server.
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	svcCtx    context.Context
	svcCancel context.CancelFunc
	svcWG     sync.WaitGroup
	closed    sync.Once
	httpErr   chan error
}

var botNames = []string{
	"Ada", "Bram", "Cleo", "Dov", "Esme", "Finn", "Gus", "Hana", "Ivo", "Jun",
	"Kit", "Lux", "Mira", "Nils", "Oona", "Pia", "Quin", "Rosa", "Sami", "Tove",
}

// BotName is the name of bot i (0-based).
func BotName(i int) string {
	n := botNames[i%len(botNames)]
	if i >= len(botNames) {
		n = fmt.Sprintf("%s%d", n, i/len(botNames)+1)
	}
	return n
}

func (c *Config) fill() error {
	switch {
	case c.Bots == 0:
		c.Bots = 20
	case c.Bots < 0:
		c.Bots = 0
	}
	if c.Bots > 200 {
		return fmt.Errorf("demo: %d bots: at most 200 in one process", c.Bots)
	}
	if c.HTTP == "" {
		c.HTTP = "127.0.0.1:8080"
	}
	host, _, err := net.SplitHostPort(c.HTTP)
	if err != nil {
		return fmt.Errorf("demo: http address %q: %w", c.HTTP, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("demo: http address %q: the demo serves on loopback only", c.HTTP)
	}
	if c.RegionsX == 0 && c.RegionsY == 0 {
		c.RegionsX, c.RegionsY = 8, 8
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Name == "" {
		c.Name = "Wanderer"
	}
	if c.PositionInterval == 0 {
		c.PositionInterval = 200 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// GameConfig is the demo's world.
func (c Config) GameConfig() game.Config {
	g := game.DefaultConfig()
	g.Seed, g.RegionsX, g.RegionsY = c.Seed, c.RegionsX, c.RegionsY
	return g
}

var loopback = ma.StringCast("/ip4/127.0.0.1/tcp/0")

// Start starts the demo network. It returns once every peer is up (not yet
// joined: the page shows players as they arrive).
func Start(ctx context.Context, cfg Config) (_ *Demo, err error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	g := cfg.GameConfig()
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	d := &Demo{cfg: cfg, log: cfg.Logger, httpErr: make(chan error, 1)}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	d.svcCtx, d.svcCancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	if cfg.DataDir == "" {
		if d.tmp, err = os.MkdirTemp("", "overworld-demo-"); err != nil {
			return nil, fmt.Errorf("demo: %w", err)
		}
		cfg.DataDir = d.tmp
		d.cfg.DataDir = d.tmp
	}

	if !cfg.NoAccounts {
		if d.passwordKey, err = loadPasswordKey(cfg.DataDir); err != nil {
			return nil, err
		}
	}
	d.boot, err = bootstrap.Start(ctx, bootstrap.Config{
		KeyFile: filepath.Join(cfg.DataDir, "bootstrap.key"), ListenAddrs: []ma.Multiaddr{loopback},
		Logger: d.log.With("node", "bootstrap"),
	})
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	if !cfg.NoAccounts {
		if err := d.startAccounts(ctx); err != nil {
			return nil, err
		}
	}

	start := game.RegionCoord{X: g.RegionsX / 2, Y: g.RegionsY / 2}
	human, err := d.startPeer(ctx, 0, play.Config{Name: cfg.Name}, start)
	if err != nil {
		return nil, err
	}
	d.Player = human
	// Bots start in parallel, a few at a time: each login hashes a password.
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	bots := make([]*play.Peer, cfg.Bots)
	for i := range cfg.Bots {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			p, err := d.startPeer(ctx, i+1, play.Config{
				Name: BotName(i), Bot: true, BotSeed: cfg.Seed + uint64(i),
			}, start)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			bots[i] = p
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	d.Bots = bots

	ln, err := listenHTTP(cfg.HTTP)
	if err != nil {
		return nil, err
	}
	srv, err := webui.NewServer(webui.PeerSession(human), webui.Options{Logger: d.log.With("part", "web"), Registerer: cfg.Registerer})
	if err != nil {
		ln.Close()
		return nil, err
	}
	d.URL = "http://" + ln.Addr().String()
	d.svcWG.Add(1)
	go func() {
		defer d.svcWG.Done()
		if err := srv.Serve(d.svcCtx, ln); err != nil {
			d.httpErr <- err
		}
	}()
	return d, nil
}

// listenHTTP listens on addr, or on a free port of its host if addr's port
// is taken.
func listenHTTP(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		return ln, nil
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("demo: listen %s: %w", addr, err)
	}
	host, _, _ := net.SplitHostPort(addr)
	ln, err2 := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err2 != nil {
		return nil, fmt.Errorf("demo: listen %s: %w; and on a free port: %w", addr, err, err2)
	}
	return ln, nil
}

// startAccounts runs the account server on a free loopback port, with its
// key and SQLite database in the data dir.
func (d *Demo) startAccounts(ctx context.Context) error {
	dir := filepath.Join(d.cfg.DataDir, "accounts")
	key, err := accounts.LoadOrCreateKey(dir)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if d.store, err = accounts.OpenStore(ctx, "", dir); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	srv, err := accounts.New(accounts.Config{
		Key: key, Logger: d.log.With("part", "accounts"), Registry: prometheus.NewRegistry(),
		// Every demo player logs in from 127.0.0.1 at once, with a random
		// password that never leaves the process: a light hash keeps the
		// start quick on a small machine.
		LoginPerSource:  accounts.RateLimit{Every: time.Millisecond, Burst: 10_000},
		Hash:            accounts.HashParams{Memory: 8 * 1024, Time: 1, Threads: 1},
		HashConcurrency: 4,
		// Every peer holds leases on the regions it coordinates; longer
		// leases mean fewer renewals for the one SQLite writer.
		LeaseTTL: 30 * time.Second,
	}, d.store)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("demo: account server: %w", err)
	}
	d.AccountsURL = "http://" + ln.Addr().String()
	d.svcWG.Add(1)
	go func() {
		defer d.svcWG.Done()
		if err := srv.Serve(d.svcCtx, ln); err != nil && d.svcCtx.Err() == nil {
			d.log.Warn("account server stopped", "err", err)
		}
	}()
	return nil
}

// startPeer starts the node and player i and runs it until Close.
func (d *Demo) startPeer(ctx context.Context, i int, pc play.Config, start game.RegionCoord) (*play.Peer, error) {
	log := d.log.With("peer", pc.Name)
	opts := []node.Option{
		node.WithDataDir(filepath.Join(d.cfg.DataDir, fmt.Sprintf("peer-%d", i))),
		node.WithListenAddrs(loopback),
		node.WithBootstrapPeers(d.boot.AddrInfo()),
		node.WithBootstrapBackoff(node.Backoff{Initial: 50 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.2}),
		node.WithLogger(log),
	}
	if i == 0 && d.cfg.Registerer != nil {
		opts = append(opts, node.WithRegisterer(d.cfg.Registerer))
		pc.Registerer = d.cfg.Registerer
	}
	n, err := node.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("demo: peer %s: %w", pc.Name, err)
	}
	d.addNode(n)
	pc.World = "demo"
	pc.Game = d.cfg.GameConfig()
	pc.StartRegion = &start
	pc.PositionInterval = d.cfg.PositionInterval
	pc.Aggregate = d.cfg.Aggregate
	pc.CardInterval = 3 * time.Second
	pc.RegionEvery = 400 * time.Millisecond
	pc.SaveEvery = d.cfg.SaveEvery
	pc.Logger = log
	if d.AccountsURL != "" {
		pc.Account = &play.Account{URL: d.AccountsURL, User: pc.Name, Password: d.password(pc.Name), Register: true}
	}
	p, err := play.New(ctx, n, pc)
	if err != nil {
		return nil, fmt.Errorf("demo: player %s: %w", pc.Name, err)
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if err := p.Run(d.ctx); err != nil {
			log.Warn("player stopped", "err", err)
		}
	}()
	return p, nil
}

// addNode records n for Close (bots start in parallel).
func (d *Demo) addNode(n *node.Node) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.nodes = append(d.nodes, n)
}

// password is the demo account password of player name: derived from a
// random key kept in the data dir, so that a demo started again on the
// same data dir logs its players in to the characters they saved, and
// nobody without the data dir knows them.
func (d *Demo) password(name string) string {
	mac := hmac.New(sha256.New, d.passwordKey)
	mac.Write([]byte(name))
	return hex.EncodeToString(mac.Sum(nil)[:16])
}

// loadPasswordKey reads the data dir's password key, creating it (0600)
// on first use.
func loadPasswordKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, "demo-passwords.key")
	if b, err := os.ReadFile(path); err == nil && len(b) == 32 {
		return b, nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("demo: password key: %w", err)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("demo: password key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("demo: password key: %w", err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, fmt.Errorf("demo: password key: %w", err)
	}
	return b, nil
}

// Err reports a failure of the web server, if any.
func (d *Demo) Err() <-chan error { return d.httpErr }

// Close stops the players (saving their characters), the web client, the
// account server, the nodes and the bootstrap node, and removes a temporary
// data dir.
func (d *Demo) Close() error {
	var errs []error
	d.closed.Do(func() {
		d.cancel()
		d.wg.Wait()
		d.svcCancel()
		d.svcWG.Wait()
		for _, n := range d.nodes {
			errs = append(errs, n.Close())
		}
		if d.boot != nil {
			errs = append(errs, d.boot.Close())
		}
		if d.store != nil {
			errs = append(errs, d.store.Close())
		}
		if d.tmp != "" {
			errs = append(errs, os.RemoveAll(d.tmp))
		}
	})
	return errors.Join(errs...)
}
