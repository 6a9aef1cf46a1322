package guard

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/overworld-p2p/overworld/bootstrap/accounts"
	"github.com/overworld-p2p/overworld/bootstrap/leases"
	"github.com/overworld-p2p/overworld/regions"
)

// Config configures a Guard.
type Config struct {
	// World is the regions' world (regions.Config.World).
	World string
	// Accounts is this peer's account server client, logged in with this
	// peer's ID. Its HTTP client carries the lease calls too.
	Accounts *accounts.Client
	// PublicKey is the account server's token-signing key.
	PublicKey ed25519.PublicKey
	// Holder sets the lease holders' timing (see GateConfig.Holder).
	Holder leases.HolderConfig
	// ProbeEvery: see GateConfig. TokenCheckEvery: see NewTokenSource.
	ProbeEvery      time.Duration
	TokenCheckEvery time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Guard is the account server's side of a region peer: lease gate, token
// check and token source. Apply it to a regions.Config before regions.New;
// Close it after closing the region service.
type Guard struct {
	Gate       *LeaseGate
	Authorizer TokenAuthorizer
	Tokens     *TokenSource

	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// New builds the three parts and starts the token refresh.
func New(cfg Config) (*Guard, error) {
	if cfg.Accounts == nil {
		return nil, errors.New("guard: no accounts client")
	}
	if len(cfg.PublicKey) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("guard: account server public key has %d bytes, want %d", len(cfg.PublicKey), ed25519.PublicKeySize)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	gate, err := NewLeaseGate(GateConfig{World: cfg.World, Client: cfg.Accounts, PublicKey: cfg.PublicKey, Holder: cfg.Holder, ProbeEvery: cfg.ProbeEvery, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("guard: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &Guard{
		Gate:       gate,
		Authorizer: TokenAuthorizer{Key: cfg.PublicKey},
		Tokens:     NewTokenSource(cfg.Accounts, cfg.TokenCheckEvery, cfg.Logger),
		cancel:     cancel,
	}
	g.wg.Go(func() { g.Tokens.Run(ctx) })
	return g, nil
}

// Apply sets rc's Gate, Authorizer and Token, and chains the gate's
// OnRoleChange before any OnRoleChange rc already has.
func (g *Guard) Apply(rc *regions.Config) {
	rc.Gate = g.Gate
	rc.Proofs = g.Gate
	rc.Authorizer = g.Authorizer
	rc.Token = g.Tokens.Token
	prev := rc.OnRoleChange
	rc.OnRoleChange = func(c regions.Coord, r regions.Role) {
		g.Gate.OnRoleChange(c, r)
		if prev != nil {
			prev(c, r)
		}
	}
}

// Close releases the leases held and stops the token refresh.
func (g *Guard) Close() {
	g.once.Do(func() {
		g.Gate.Close()
		g.cancel()
		g.wg.Wait()
	})
}
