package guard

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/bootstrap/accounts"
	"github.com/overworld-p2p/overworld/bootstrap/leases"
	"github.com/overworld-p2p/overworld/regions"
)

// LeaseName is the name of region c's lease in the lease service.
func LeaseName(world string, c regions.Coord) string {
	return leases.RegionLease(world, c.X, c.Y)
}

// GateConfig configures a LeaseGate.
type GateConfig struct {
	// World is the regions' world; it is part of every lease name.
	World string
	// Client talks to the lease service (an *accounts.Client).
	Client leases.Client
	// PublicKey is the lease service's signing key (the account server's
	// token key): with it the gate checks other coordinators' lease
	// proofs (regions.LeaseProofs). Nil: proofs are neither shown nor
	// checked.
	PublicKey ed25519.PublicKey
	// Holder sets the timing of each region's holder (RenewEvery,
	// SafetyMargin, RetryEvery, RequestTimeout); Region, Client, OnChange
	// and Logger are set by the gate.
	Holder leases.HolderConfig
	// ProbeEvery is the pause between checks that the lease service
	// answers again, while it does not. Default: Holder.RetryEvery, or 1s.
	ProbeEvery time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// LeaseGate is a regions.CommitGate and regions.Eligibility backed by the
// lease service. Its OnRoleChange goes into regions.Config.OnRoleChange.
// Close it after the region service.
type LeaseGate struct {
	cfg    GateConfig
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	holders map[regions.Coord]*running
	// unreachable: the last unansweredLimit calls to the lease service
	// got no answer (unanswered counts them).
	unreachable bool
	unanswered  int
	// refused: regions whose lease the service refused this peer as not
	// placed near them, until when this peer steps aside from them.
	refused map[regions.Coord]time.Time
	probing bool
	closed  bool
}

type running struct {
	h    *leases.Holder
	stop context.CancelFunc
}

// NewLeaseGate checks cfg and returns a gate that holds no lease yet.
func NewLeaseGate(cfg GateConfig) (*LeaseGate, error) {
	if cfg.Client == nil {
		return nil, errors.New("lease gate: no lease client")
	}
	// The longest name the world can have must be a valid lease name.
	if err := leases.ValidRegion(LeaseName(cfg.World, regions.Coord{X: 1 << 15, Y: 1 << 15})); err != nil {
		return nil, fmt.Errorf("lease gate: world %q: %w", cfg.World, err)
	}
	if cfg.ProbeEvery < 0 {
		return nil, fmt.Errorf("lease gate: probe period %v: want >= 0", cfg.ProbeEvery)
	}
	if cfg.ProbeEvery == 0 {
		cfg.ProbeEvery = cfg.Holder.RetryEvery
		if cfg.ProbeEvery <= 0 {
			cfg.ProbeEvery = time.Second
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &LeaseGate{
		cfg: cfg, log: cfg.Logger.With("world", cfg.World),
		ctx: ctx, cancel: cancel,
		holders: map[regions.Coord]*running{},
		refused: map[regions.Coord]time.Time{},
	}, nil
}

// Allowed reports whether this peer holds region c's lease now, and its ID.
func (g *LeaseGate) Allowed(c regions.Coord) (uint64, bool) {
	g.mu.Lock()
	r := g.holders[c]
	g.mu.Unlock()
	if r == nil {
		return 0, false
	}
	return r.h.Valid(time.Now())
}

// Eligible reports whether this peer may coordinate region c: it holds the
// region's lease, or it can reach the lease service to get it.
// A peer the service refused the lease as not placed near the region
// steps aside from it for notEntitledFor.
func (g *LeaseGate) Eligible(c regions.Coord) bool {
	if _, ok := g.Allowed(c); ok {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if until, ok := g.refused[c]; ok {
		if time.Now().Before(until) {
			return false
		}
		delete(g.refused, c)
	}
	return !g.unreachable
}

// unansweredLimit is how many lease calls in a row must go unanswered
// before the lease service counts as unreachable.
const unansweredLimit = 2

// notEntitledFor is how long a peer the lease service found not placed
// near a region steps aside from it: long enough for placement views to
// catch up, short enough that a peer whose view was right gets its turn.
const notEntitledFor = 10 * time.Second

// Proof returns this peer's signed grant of region c's lease valid now
// (regions.LeaseProofs).
func (g *LeaseGate) Proof(c regions.Coord) []byte {
	if g.cfg.PublicKey == nil {
		return nil
	}
	g.mu.Lock()
	r := g.holders[c]
	g.mu.Unlock()
	if r == nil {
		return nil
	}
	return r.h.Proof(time.Now())
}

// CheckProof verifies a grant of region c's lease (regions.LeaseProofs).
func (g *LeaseGate) CheckProof(c regions.Coord, proof []byte) (peer.ID, uint64, time.Time, error) {
	if g.cfg.PublicKey == nil {
		return "", 0, time.Time{}, errors.New("no lease service key")
	}
	p, err := leases.ParseProof(g.cfg.PublicKey, proof)
	if err != nil {
		return "", 0, time.Time{}, err
	}
	if want := LeaseName(g.cfg.World, c); p.Region != want {
		return "", 0, time.Time{}, fmt.Errorf("lease proof of %q, want %q", p.Region, want)
	}
	holder, err := peer.Decode(p.Holder)
	if err != nil {
		return "", 0, time.Time{}, fmt.Errorf("lease proof holder: %w", err)
	}
	return holder, p.LeaseID, p.Expires, nil
}

// OnRoleChange starts a lease holder for a region this peer now
// coordinates and stops (releasing the lease) the holder of a region it no
// longer coordinates. It does not block.
func (g *LeaseGate) OnRoleChange(c regions.Coord, role regions.Role) {
	if role == regions.RoleCoordinator {
		g.start(c)
	} else {
		g.stop(c)
	}
}

func (g *LeaseGate) start(c regions.Coord) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.holders[c] != nil {
		return
	}
	hc := g.cfg.Holder
	hc.Region = LeaseName(g.cfg.World, c)
	hc.Client = observed{g.cfg.Client, g, c}
	hc.OnChange = nil
	hc.Logger = g.log.With("region", c)
	h, err := leases.NewHolder(hc)
	if err != nil {
		// The name was checked in NewLeaseGate and the timings are the
		// caller's; this peer simply cannot commit in the region.
		g.log.Error("cannot hold region lease", "region", c, "err", err)
		return
	}
	ctx, stop := context.WithCancel(g.ctx)
	g.holders[c] = &running{h: h, stop: stop}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		_ = h.Run(ctx)
	}()
	g.log.Debug("holding region lease", "region", c)
}

func (g *LeaseGate) stop(c regions.Coord) {
	g.mu.Lock()
	r := g.holders[c]
	delete(g.holders, c)
	g.mu.Unlock()
	if r != nil {
		r.stop() // Run drops the lease at once, then releases it
		g.log.Debug("releasing region lease", "region", c)
	}
}

// Close stops every holder, releasing their leases, and waits for them.
// Close the region service first, so no commit runs while leases end.
func (g *LeaseGate) Close() {
	g.mu.Lock()
	g.closed = true
	g.holders = map[regions.Coord]*running{}
	g.mu.Unlock()
	g.cancel()
	g.wg.Wait()
}

// Holding returns the regions whose lease this peer holds now (tests,
// status pages).
func (g *LeaseGate) Holding() []regions.Coord {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []regions.Coord
	now := time.Now()
	for c, r := range g.holders {
		if _, ok := r.h.Valid(now); ok {
			out = append(out, c)
		}
	}
	return out
}

// answered reports whether err (from a lease call) shows that the lease
// service answered: a refusal is an answer, a timeout or a broken
// connection is not.
func answered(err error) bool {
	var apiErr *accounts.APIError
	return err == nil || errors.As(err, &apiErr) ||
		errors.Is(err, leases.ErrHeld) || errors.Is(err, leases.ErrLost) || errors.Is(err, leases.ErrInvalid) ||
		errors.Is(err, leases.ErrNotEntitled)
}

// observe records whether the lease service answered a call, and starts
// the probe when it did not.
func (g *LeaseGate) observe(err error) {
	ok := answered(err)
	g.mu.Lock()
	defer g.mu.Unlock()
	// One call without an answer is what a busy machine looks like (the
	// account server on 127.0.0.1 in the demo, behind a loaded CPU); the
	// service counts as unreachable after unansweredLimit in a row, so
	// that one slow answer does not make this peer step aside from every
	// region it holds no lease on.
	if ok {
		g.unanswered = 0
	} else if g.unanswered++; g.unanswered < unansweredLimit {
		return
	}
	if ok == !g.unreachable {
		return
	}
	g.unreachable = !ok
	if ok {
		g.log.Info("lease service answers again; eligible to coordinate")
		return
	}
	g.log.Warn("lease service unreachable; stepping aside from regions without a valid lease", "err", err)
	if !g.probing && !g.closed {
		g.probing = true
		g.wg.Add(1)
		go g.probe()
	}
}

// probe asks the lease service for a renewal that cannot succeed (no lease
// has ID 0) until it answers, so that a peer that coordinates nothing
// learns when it may again.
func (g *LeaseGate) probe() {
	defer g.wg.Done()
	tick := time.NewTicker(g.cfg.ProbeEvery)
	defer tick.Stop()
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-tick.C:
		}
		g.mu.Lock()
		if !g.unreachable {
			g.probing = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		ctx, cancel := context.WithTimeout(g.ctx, g.cfg.ProbeEvery)
		_, err := g.cfg.Client.RenewLease(ctx, LeaseName(g.cfg.World, regions.Coord{}), 0)
		cancel()
		if g.ctx.Err() != nil {
			return
		}
		if answered(err) {
			g.observe(nil)
		}
	}
}

// observed is the lease client as the holders use it, telling the gate
// whether each call was answered.
type observed struct {
	leases.Client
	g      *LeaseGate
	region regions.Coord
}

func (o observed) AcquireLease(ctx context.Context, region string) (leases.Grant, error) {
	gr, err := o.Client.AcquireLease(ctx, region)
	o.note(ctx, err)
	if errors.Is(err, leases.ErrNotEntitled) {
		o.g.mu.Lock()
		if _, held := o.g.holders[o.region]; held {
			o.g.refused[o.region] = time.Now().Add(notEntitledFor)
		}
		o.g.mu.Unlock()
		o.g.log.Info("lease refused: the lease service does not place this peer near the region; stepping aside", "region", o.region)
	}
	return gr, err
}

func (o observed) RenewLease(ctx context.Context, region string, id uint64) (leases.Grant, error) {
	gr, err := o.Client.RenewLease(ctx, region, id)
	o.note(ctx, err)
	return gr, err
}

func (o observed) ReleaseLease(ctx context.Context, region string, id uint64) error {
	err := o.Client.ReleaseLease(ctx, region, id)
	o.note(ctx, err)
	return err
}

// note ignores calls cut short because their holder stopped.
func (o observed) note(ctx context.Context, err error) {
	if err != nil && errors.Is(ctx.Err(), context.Canceled) {
		return
	}
	o.g.observe(err)
}

var (
	_ regions.CommitGate  = (*LeaseGate)(nil)
	_ regions.Eligibility = (*LeaseGate)(nil)
	_ regions.LeaseProofs = (*LeaseGate)(nil)
	_ regions.Authorizer  = TokenAuthorizer{}
)
