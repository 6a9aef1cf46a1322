package play

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/bootstrap/accounts"
	"github.com/overworld-p2p/overworld/bootstrap/leases"
	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/node"
	"github.com/overworld-p2p/overworld/regions"
	"github.com/overworld-p2p/overworld/regions/guard"
	"github.com/overworld-p2p/overworld/regions/position"
)

// RegionServices are what every full peer runs for the regions of the
// world, a player's peer (New) and a headless one (`overworld peer`) alike:
// the region object store, region position multicast (whose coordinator
// duties, rendezvous and aggregation, go with the region's objects), and,
// when logged in on an account server, the guard (leases, token checks)
// and the topic admission. One construction, so that both kinds of peer
// coordinate a region the same way.
type RegionServices struct {
	Regions   *regions.Service
	Positions *position.Service
	Guard     *guard.Guard     // nil without an account
	Admission *guard.Admission // nil without an account
}

// RegionServicesConfig configures StartRegionServices.
type RegionServicesConfig struct {
	// World and Game: as in Config; every peer of a network agrees on them.
	World string
	Game  game.Config
	// PositionInterval is the gap between position updates.
	PositionInterval time.Duration
	// Aggregate puts this peer's player in aggregated mode
	// (position.Config.Aggregate): it sends its positions to its region's
	// coordinator instead of publishing them. The coordinator's side does
	// not depend on it: every full peer, a headless one included, publishes
	// one batch per interval of what players send it for each region it
	// coordinates, so players of both modes mix in a network.
	Aggregate bool
	// Summaries is the world's position summary setting
	// (position.Config.Summaries): every peer of a world gives the same.
	// With summaries on every player aggregates, since coordinators
	// summarise what players send them.
	Summaries position.SummaryConfig
	// Accounts is this peer's client of the account server, logged in with
	// its peer ID; nil runs without leases and token checks.
	Accounts *accounts.Client
	Logger   *slog.Logger
	// Registerer receives the region and position metrics.
	Registerer prometheus.Registerer

	// positionOptions are added to the position service's (tests).
	positionOptions []position.Option
}

// StartRegionServices builds the region services on n. The position
// service is not running yet: its owner runs Positions.Run.
func StartRegionServices(ctx context.Context, n *node.Node, cfg RegionServicesConfig) (_ *RegionServices, err error) {
	rs := &RegionServices{}
	defer func() {
		if err != nil {
			rs.Close()
		}
	}()
	rcfg := regions.Config{
		World: cfg.World, Width: cfg.Game.RegionsX, Height: cfg.Game.RegionsY,
		Logger: cfg.Logger, Registerer: cfg.Registerer,
	}
	if cfg.Accounts != nil {
		pub, err := cfg.Accounts.PublicKey(ctx)
		if err != nil {
			return nil, fmt.Errorf("account server key: %w", err)
		}
		// The guard makes the region service present this peer's token,
		// demand everyone else's, and commit only under the region's lease.
		// Lease requests get 5 s (the holder's default before the first
		// grant is 1 s): a busy account server must not keep a coordinator
		// from ever committing. Validity counts from the send, so a slow
		// answer is still safe.
		rs.Guard, err = guard.New(guard.Config{
			World: cfg.World, Accounts: cfg.Accounts, PublicKey: pub, Logger: cfg.Logger,
			Holder: leases.HolderConfig{RequestTimeout: 5 * time.Second},
		})
		if err != nil {
			return nil, err
		}
		rs.Guard.Apply(&rcfg)
		// The admission asks every author on the position and chat topics
		// for its token (and shows this peer's to those who ask): players
		// without a valid token for their own peer ID are not heard.
		if rs.Admission, err = rs.Guard.NewAdmission(n.Host(), guard.AdmissionConfig{Logger: cfg.Logger}); err != nil {
			return nil, err
		}
	}
	if rs.Regions, err = regions.New(n, rcfg); err != nil {
		return nil, err
	}

	pcfg := position.DefaultConfig()
	pcfg.World, pcfg.Width, pcfg.Height = cfg.World, cfg.Game.RegionsX, cfg.Game.RegionsY
	pcfg.RegionUnits = cfg.Game.RegionUnits()
	pcfg.Interval = cfg.PositionInterval
	pcfg.Aggregate = cfg.Aggregate || cfg.Summaries.Enabled
	pcfg.Summaries = cfg.Summaries
	pcfg.Expire = max(pcfg.Expire, 4*cfg.PositionInterval)
	pcfg.MaxDelay = max(pcfg.MaxDelay, 2*cfg.PositionInterval)
	pcfg.Rendezvous = max(pcfg.Rendezvous, cfg.PositionInterval)
	pcfg.MaxSpeed = cfg.Game.MaxSpeed * int32(cfg.Game.TickRate)
	pcfg.SpeedTolerance = max(pcfg.SpeedTolerance, cfg.Game.MaxSpeed*2)
	// Two respawns are at least the respawn time apart; half of it leaves
	// room for when the updates announcing them were sent.
	pcfg.MinRelocationInterval = time.Duration(cfg.Game.RespawnTicks) * time.Second / time.Duration(cfg.Game.TickRate) / 2
	// Positions are aggregated and rendezvous held by the peer that
	// coordinates the region's objects, as this peer's region service sees it.
	popts := []position.Option{position.WithRegionPlacement(rs.Regions)}
	if rs.Admission != nil {
		popts = append(popts, position.WithAdmission(positionAdmission(rs.Admission)))
	}
	popts = append(popts, cfg.positionOptions...)
	if rs.Positions, err = position.New(n, pcfg, popts...); err != nil {
		return nil, err
	}
	if err := node.RegisterShared(cfg.Registerer, position.NewCollector(rs.Positions)); err != nil {
		return nil, fmt.Errorf("position metrics: %w", err)
	}
	return rs, nil
}

// Close stops the region service, then the admission (after the topics),
// then the guard, which releases the leases. The position service stops
// when its Run returns. Safe on a partly built RegionServices.
func (rs *RegionServices) Close() {
	if rs.Regions != nil {
		rs.Regions.Close()
	}
	if rs.Admission != nil {
		rs.Admission.Close()
	}
	if rs.Guard != nil {
		rs.Guard.Close()
	}
}

// Login logs in on the account server at a.URL with a token bound to id,
// creating the account first if a.Register allows and it does not exist.
// It returns the client, the HTTP client it uses (a.HTTPClient, or one
// with a 10 s timeout) and the account's name as registered, which is what
// other players read on the token (names compare case-insensitively).
func Login(ctx context.Context, a Account, id peer.ID) (*accounts.Client, *http.Client, string, error) {
	hc := a.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	cl, err := accounts.NewClient(a.URL, accounts.WithHTTPClient(hc))
	if err != nil {
		return nil, hc, "", fmt.Errorf("account server: %w", err)
	}
	tokens, err := cl.Login(ctx, a.User, a.Password, id)
	if err != nil && a.Register && errors.Is(err, accounts.ErrUnauthorized) {
		// Name taken: another process of the same player registered it
		// first (several starting at once); the login decides.
		if _, rerr := cl.Register(ctx, a.User, a.Password); rerr == nil || errors.Is(rerr, accounts.ErrNameTaken) {
			tokens, err = cl.Login(ctx, a.User, a.Password, id)
		} else {
			err = rerr
		}
	}
	if err != nil {
		return nil, hc, "", err
	}
	return cl, hc, tokens.Name, nil
}
