package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/play"
	"github.com/overworld-p2p/overworld/node"
	"github.com/overworld-p2p/overworld/regions/position"
)

// headlessConfig configures a headless full peer's services.
type headlessConfig struct {
	World      string
	Game       game.Config
	Summaries  position.SummaryConfig // the world's (-summaries)
	Account    *play.Account          // nil: no leases or token checks
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// headless is a full peer without a player: the region services a player's
// peer runs, built by the same constructor (play.StartRegionServices),
// logged in on the account server when given one so that it coordinates
// under leases and checks tokens as players do.
type headless struct {
	rs     *play.RegionServices
	httpc  *http.Client
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// startHeadless logs in (with an account) and starts the region services on
// n; Close stops them and releases the leases. The node stays the caller's.
func startHeadless(ctx context.Context, n *node.Node, cfg headlessConfig) (*headless, error) {
	if cfg.Game == (game.Config{}) {
		cfg.Game = game.DefaultConfig()
	}
	if err := cfg.Game.Validate(); err != nil {
		return nil, fmt.Errorf("headless peer: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = n.Logger()
	}
	hp := &headless{}
	rcfg := play.RegionServicesConfig{
		World: cfg.World, Game: cfg.Game, PositionInterval: 150 * time.Millisecond, Summaries: cfg.Summaries,
		Logger: cfg.Logger, Registerer: cfg.Registerer,
	}
	if cfg.Account != nil {
		cl, hc, _, err := play.Login(ctx, *cfg.Account, n.ID())
		hp.httpc = hc
		if err != nil {
			return nil, fmt.Errorf("headless peer: log in as %s: %w", cfg.Account.User, err)
		}
		rcfg.Accounts = cl
	}
	rs, err := play.StartRegionServices(ctx, n, rcfg)
	if err != nil {
		return nil, fmt.Errorf("headless peer: %w", err)
	}
	hp.rs = rs
	runCtx, cancel := context.WithCancel(context.Background())
	hp.cancel = cancel
	hp.wg.Go(func() {
		if err := rs.Positions.Run(runCtx); err != nil {
			cfg.Logger.Warn("position service stopped", "err", err)
		}
	})
	return hp, nil
}

// Services are the peer's region services (for tests and status).
func (hp *headless) Services() *play.RegionServices { return hp.rs }

// Close stops the position service, then the region services (releasing
// the leases).
func (hp *headless) Close() {
	hp.once.Do(func() {
		hp.cancel()
		hp.wg.Wait()
		hp.rs.Close()
		if hp.httpc != nil {
			hp.httpc.CloseIdleConnections()
		}
	})
}
