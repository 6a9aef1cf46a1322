package demo

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/bootstrap/accounts"
	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/webui"
	"github.com/overworld-p2p/overworld/node/crimp"
	"github.com/overworld-p2p/overworld/node/mirror"
)

// MirrorMirrors is how many mirrors the mirror-mode demo runs.
const MirrorMirrors = 3

// MirrorDemo is mirror mode in one process: the account server, three
// mirrors on an in-memory CRIMP network (mirror 1 the authority, 2 and 3
// joined through it with a state transfer; Config.MirrorProtocol picks the
// command or the event protocol), bots spread over the mirrors,
// each a WebSocket client of its mirror, and the interactive player's page,
// which plays through mirror 2 and moves to the next mirror if it loses
// one. Every character starts in the world's middle region, so there is
// company at once.
type MirrorDemo struct {
	// URL is the interactive player's page; AccountsURL the account
	// server; MirrorURLs the mirrors' client WebSockets.
	URL, AccountsURL string
	MirrorURLs       []string
	Mirrors          []*mirror.Server
	// Page is the interactive player's session; Bots the bot clients.
	Page *mirror.PageSession
	Bots []*mirror.Client

	d       *Demo // the account server and shutdown plumbing
	net     *crimp.MemNetwork
	https   []*http.Server
	mu      sync.Mutex
	killed  []bool
	playCtx context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

// StartMirror starts the mirror-mode demo. cfg is the demo's (Bots, HTTP,
// world, name, data dir, logger); NoAccounts is not possible: mirrors admit
// players by their account token.
func StartMirror(ctx context.Context, cfg Config) (_ *MirrorDemo, err error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if cfg.NoAccounts {
		return nil, errors.New("demo: mirror mode needs the account server")
	}
	g := cfg.GameConfig()
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	d := &Demo{cfg: cfg, log: cfg.Logger, httpErr: make(chan error, 1)}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	d.svcCtx, d.svcCancel = context.WithCancel(context.Background())
	md := &MirrorDemo{d: d, killed: make([]bool, MirrorMirrors)}
	md.playCtx, md.stop = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			md.Close()
		}
	}()
	if cfg.DataDir == "" {
		if d.tmp, err = os.MkdirTemp("", "overworld-mirror-demo-"); err != nil {
			return nil, fmt.Errorf("demo: %w", err)
		}
		d.cfg.DataDir = d.tmp
	}
	if d.passwordKey, err = loadPasswordKey(d.cfg.DataDir); err != nil {
		return nil, err
	}
	if err := d.startAccounts(ctx); err != nil {
		return nil, err
	}
	md.AccountsURL = d.AccountsURL
	pubCl, err := accounts.NewClient(d.AccountsURL)
	if err != nil {
		return nil, err
	}
	pub, err := pubCl.PublicKey(ctx)
	if err != nil {
		return nil, fmt.Errorf("demo: account server key: %w", err)
	}

	// The mirrors' private network: a millisecond or two between them,
	// enough for commands to arrive out of order now and then.
	md.net = crimp.NewMemNetwork(crimp.WallClock{}, int64(cfg.Seed))
	for i := range MirrorMirrors {
		for j := range i {
			md.net.SetLink(fmt.Sprintf("m%d", i+1), fmt.Sprintf("m%d", j+1), crimp.LinkParams{Delay: time.Millisecond, Jitter: 4 * time.Millisecond})
		}
	}
	// The authority's signing key lives as long as the demo: its mirrors
	// check the authority's decisions with the public half.
	authPub, authKey, err := ed25519.GenerateKey(nil)
	if err != nil {
		return nil, fmt.Errorf("demo: mirror authority key: %w", err)
	}
	for i := range MirrorMirrors {
		var key ed25519.PrivateKey
		if i == 0 {
			key = authKey
		}
		m, err := mirror.New(mirror.Config{
			Game: g, Protocol: cfg.MirrorProtocol, Authority: i == 0, AuthorityKey: key, AuthorityPublicKey: authPub, Transport: md.net.Endpoint(fmt.Sprintf("m%d", i+1)),
			AccountKey: pub, Characters: &mirror.AccountServer{URL: d.AccountsURL, Key: pub, Game: g},
			DataDir: fmt.Sprintf("%s/mirror-%d", d.cfg.DataDir, i+1), SaveEvery: 15 * time.Second,
			ReleaseAfter: 15 * time.Second, Logger: d.log.With("mirror", i+1), Registerer: playerMirrorRegisterer(cfg, i),
		})
		if err != nil {
			return nil, fmt.Errorf("demo: mirror %d: %w", i+1, err)
		}
		if err := m.Start(); err != nil {
			return nil, fmt.Errorf("demo: mirror %d: %w", i+1, err)
		}
		md.Mirrors = append(md.Mirrors, m)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("demo: mirror %d: %w", i+1, err)
		}
		hs := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 5 * time.Second}
		md.https = append(md.https, hs)
		go hs.Serve(ln)
		md.MirrorURLs = append(md.MirrorURLs, "ws://"+ln.Addr().String()+"/ws")
		if err := waitReady(ctx, m); err != nil {
			return nil, fmt.Errorf("demo: mirror %d: %w", i+1, err)
		}
	}

	world, err := game.NewWorld(g)
	if err != nil {
		return nil, err
	}
	middle := game.RegionCoord{X: g.RegionsX / 2, Y: g.RegionsY / 2}
	// The interactive player plays through mirror 2 (mirror 1 is the
	// authority, which the demo keeps alive), then 3, then 1.
	key, cl, err := md.account(ctx, cfg.Name, world, middle)
	if err != nil {
		return nil, err
	}
	md.Page, err = mirror.NewPageSession(mirror.PageConfig{
		Mirrors: []string{md.MirrorURLs[1], md.MirrorURLs[2], md.MirrorURLs[0]}, Key: key, Token: cl.AccessToken,
		Logger: d.log.With("part", "page"),
	})
	if err != nil {
		return nil, err
	}
	md.wg.Add(1)
	go func() {
		defer md.wg.Done()
		md.Page.Run(md.playCtx)
	}()

	var errs []error
	var emu sync.Mutex
	sem := make(chan struct{}, 4)
	var bwg sync.WaitGroup
	bots := make([]*mirror.Client, cfg.Bots)
	for i := range cfg.Bots {
		bwg.Add(1)
		sem <- struct{}{}
		go func() {
			defer bwg.Done()
			defer func() { <-sem }()
			c, err := md.startBot(ctx, i, world, middle)
			emu.Lock()
			defer emu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			bots[i] = c
		}()
	}
	bwg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	md.Bots = bots

	ln, err := listenHTTP(cfg.HTTP)
	if err != nil {
		return nil, err
	}
	srv, err := webui.NewServer(md.Page, webui.Options{Logger: d.log.With("part", "web")})
	if err != nil {
		ln.Close()
		return nil, err
	}
	md.URL = "http://" + ln.Addr().String()
	d.svcWG.Add(1)
	go func() {
		defer d.svcWG.Done()
		if err := srv.Serve(d.svcCtx, ln); err != nil {
			d.httpErr <- err
		}
	}()
	return md, nil
}

func waitReady(ctx context.Context, m *mirror.Server) error {
	deadline := time.Now().Add(20 * time.Second)
	for !m.Ready() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return errors.New("not ready after 20 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// account registers and logs in a demo player with a fresh peer key and,
// for a new account, saves a character standing in the middle region.
func (md *MirrorDemo) account(ctx context.Context, name string, w *game.World, middle game.RegionCoord) (crypto.PrivKey, *accounts.Client, error) {
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		return nil, nil, err
	}
	cl, err := mirror.Login(ctx, md.AccountsURL, name, md.d.password(name), key, true)
	if err != nil {
		return nil, nil, fmt.Errorf("demo: %w", err)
	}
	ch, err := cl.LoadCharacter(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("demo: %w", err)
	}
	if ch.Version == 0 {
		pos := w.SpawnPoint(game.PlayerID(name), middle, 0)
		if _, err := cl.SaveCharacter(ctx, accounts.Character{
			Region: fmt.Sprintf("%d,%d", middle.X, middle.Y), X: int64(pos.X), Y: int64(pos.Y),
			Health: game.MaxHealth, Experience: game.StartingSkill,
		}); err != nil {
			return nil, nil, fmt.Errorf("demo: %w", err)
		}
	}
	return key, cl, nil
}

// startBot logs bot i in and lets it play through mirror i mod 3.
func (md *MirrorDemo) startBot(ctx context.Context, i int, w *game.World, middle game.RegionCoord) (*mirror.Client, error) {
	key, cl, err := md.account(ctx, BotName(i), w, middle)
	if err != nil {
		return nil, err
	}
	tok, err := cl.AccessToken(ctx)
	if err != nil {
		return nil, err
	}
	c, err := md.dialReady(ctx, i%MirrorMirrors, key, tok)
	if err != nil {
		return nil, fmt.Errorf("demo: bot %s: %w", BotName(i), err)
	}
	md.wg.Add(2)
	go func() {
		defer md.wg.Done()
		mirror.KeepToken(md.playCtx, c, tok, cl.AccessToken, 30*time.Second)
	}()
	go func() {
		defer md.wg.Done()
		if err := mirror.RunBot(md.playCtx, c, md.d.cfg.Seed+uint64(i)); err != nil && md.playCtx.Err() == nil {
			md.d.log.Info("bot stopped", "bot", BotName(i), "err", err)
		}
		c.Close()
	}()
	return c, nil
}

// dialReady logs a client in at mirror first (0-based) or, while a
// mirror turns it away to another, at the next one, round after round
// until ctx ends. Every mirror is ready when the demo starts its bots, but
// a loaded machine can keep one silent long enough for the authority to
// drop it from the group: it then closes its sessions (a login under way
// among them) and is not ready until it has joined again and fetched the
// state, and a bot must not fail the demo meanwhile.
func (md *MirrorDemo) dialReady(ctx context.Context, first int, key crypto.PrivKey, tok string) (*mirror.Client, error) {
	backoff := 100 * time.Millisecond
	for try := 0; ; try++ {
		c, err := mirror.Dial(ctx, md.MirrorURLs[(first+try)%len(md.MirrorURLs)], key, tok)
		var me *mirror.MirrorError
		if err == nil || !errors.As(err, &me) || !me.ElsewhereNow() {
			return c, err
		}
		md.d.log.Info("mirror turned the login away; trying the next", "err", err)
		if (try+1)%len(md.MirrorURLs) != 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// Kill stops mirror i (0-based) as a crash would: its players stay in the
// world, and its clients (the page among them) move to another mirror.
func (md *MirrorDemo) Kill(i int) {
	md.mu.Lock()
	defer md.mu.Unlock()
	if md.killed[i] {
		return
	}
	md.killed[i] = true
	md.Mirrors[i].Close()
	md.https[i].Close()
}

// Err reports a failure of the page's web server, if any.
func (md *MirrorDemo) Err() <-chan error { return md.d.httpErr }

// Close lets every player leave (their characters saved from the mirrors'
// last trailing states), stops the mirrors and the account server, and
// removes a temporary data dir.
func (md *MirrorDemo) Close() error {
	md.stop()
	md.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md.mu.Lock()
	alive := make([]bool, len(md.Mirrors))
	for i := range md.Mirrors {
		alive[i], md.killed[i] = !md.killed[i], true
	}
	md.mu.Unlock()
	// Every player leaves at once; then the mirrors stop, the authority
	// (the first) last: the others' leave saves wait for its hash to
	// confirm what they read.
	for i, m := range md.Mirrors {
		if alive[i] {
			m.LeaveAll()
		}
	}
	var errs []error
	for i, m := range slices.Backward(md.Mirrors) {
		if alive[i] {
			errs = append(errs, m.Shutdown(ctx))
		}
	}
	for _, hs := range md.https {
		hs.Close()
	}
	if md.net != nil {
		md.net.Close()
	}
	errs = append(errs, md.d.Close())
	return errors.Join(errs...)
}

// playerMirrorRegisterer is cfg.Registerer for the mirror the interactive
// player plays on (mirror 2, index 1), nil for the others.
func playerMirrorRegisterer(cfg Config, i int) prometheus.Registerer {
	if i != 1 {
		return nil
	}
	return cfg.Registerer
}
