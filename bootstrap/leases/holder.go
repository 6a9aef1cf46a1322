package leases

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Client is the lease service as a holder sees it. accounts.Client
// implements it over HTTP; its errors wrap ErrHeld and ErrLost.
type Client interface {
	AcquireLease(ctx context.Context, region string) (Grant, error)
	RenewLease(ctx context.Context, region string, leaseID uint64) (Grant, error)
	ReleaseLease(ctx context.Context, region string, leaseID uint64) error
}

// HolderConfig configures a Holder. Durations left zero are derived from
// the TTL the server grants.
type HolderConfig struct {
	// Region whose lease to hold.
	Region string
	// Client talks to the lease service.
	Client Client
	// RenewEvery is the time from one renewal's send to the next.
	// Default: TTL/3, so two renewals can fail before the lease ends.
	RenewEvery time.Duration
	// SafetyMargin is taken off the local validity to cover clock rate
	// differences and the time between Valid and the commit it guards.
	// Default: TTL/5.
	SafetyMargin time.Duration
	// RetryEvery is the pause between attempts to acquire a lease that
	// is held by someone else or when the service cannot be reached.
	// Default: 1s.
	RetryEvery time.Duration
	// RequestTimeout bounds each request. Default: RenewEvery (or 1s
	// before the first grant).
	RequestTimeout time.Duration
	// OnChange, if set, is called from Run's goroutine whenever the
	// lease is gained, lost or replaced. It must not block.
	OnChange func(Status)
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Status is a holder's view of its lease.
type Status struct {
	Region  string
	Held    bool
	LeaseID uint64
	// ValidUntil is the local time after which the lease no longer
	// counts (zero when not held).
	ValidUntil time.Time
	// Proof is the lease service's signed grant of the current lease as
	// last renewed (nil when not held or not signed).
	Proof []byte
}

// Holder keeps a lease on one region for as long as Run runs. Use Valid
// before every commit.
type Holder struct {
	cfg HolderConfig
	log *slog.Logger

	mu         sync.Mutex
	leaseID    uint64
	validUntil time.Time // zero: not held
	ttl        time.Duration
	proof      []byte
}

// NewHolder checks cfg and returns a holder; call Run to start it.
func NewHolder(cfg HolderConfig) (*Holder, error) {
	if err := ValidRegion(cfg.Region); err != nil {
		return nil, fmt.Errorf("lease holder: %w", err)
	}
	if cfg.Client == nil {
		return nil, errors.New("lease holder: no client")
	}
	if cfg.RenewEvery < 0 || cfg.SafetyMargin < 0 || cfg.RetryEvery < 0 || cfg.RequestTimeout < 0 {
		return nil, fmt.Errorf("lease holder: negative duration in %+v", cfg)
	}
	if cfg.RetryEvery == 0 {
		cfg.RetryEvery = time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Holder{cfg: cfg, log: log.With("region", cfg.Region)}, nil
}

// Valid reports whether commits are allowed at now (a time.Now reading)
// and under which lease ID. Stamp the commit with that ID.
func (h *Holder) Valid(now time.Time) (leaseID uint64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.leaseID == 0 || !now.Before(h.validUntil) {
		return 0, false
	}
	return h.leaseID, true
}

// Proof returns the signed grant of the lease valid at now, nil when no
// lease is (or the service does not sign).
func (h *Holder) Proof(now time.Time) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.leaseID == 0 || !now.Before(h.validUntil) {
		return nil
	}
	return h.proof
}

// Status returns the holder's current view of its lease.
func (h *Holder) Status() Status {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.statusLocked()
}

func (h *Holder) statusLocked() Status {
	if h.leaseID == 0 {
		return Status{Region: h.cfg.Region}
	}
	return Status{Region: h.cfg.Region, Held: true, LeaseID: h.leaseID, ValidUntil: h.validUntil, Proof: h.proof}
}

// durations derived from the granted TTL.
func (h *Holder) renewEvery(ttl time.Duration) time.Duration {
	if h.cfg.RenewEvery > 0 {
		return h.cfg.RenewEvery
	}
	return ttl / 3
}

func (h *Holder) margin(ttl time.Duration) time.Duration {
	if h.cfg.SafetyMargin > 0 {
		return h.cfg.SafetyMargin
	}
	return ttl / 5
}

func (h *Holder) requestTimeout() time.Duration {
	if h.cfg.RequestTimeout > 0 {
		return h.cfg.RequestTimeout
	}
	h.mu.Lock()
	ttl := h.ttl
	h.mu.Unlock()
	if ttl > 0 {
		return h.renewEvery(ttl)
	}
	return time.Second
}

// granted records a grant answered to a request sent at sentAt.
func (h *Holder) granted(g Grant, sentAt time.Time) {
	h.mu.Lock()
	changed := g.LeaseID != h.leaseID
	h.leaseID = g.LeaseID
	h.ttl = g.TTL
	h.proof = g.Proof
	h.validUntil = sentAt.Add(g.TTL - h.margin(g.TTL))
	st := h.statusLocked()
	h.mu.Unlock()
	if changed {
		h.log.Info("lease gained", "lease", g.LeaseID, "ttl", g.TTL)
		h.notify(st)
	}
}

// drop forgets the lease; commits stop at once. A lease lost while the
// holder still wanted it is a warning; one let go on purpose is not.
func (h *Holder) drop(reason string) { h.forget(slog.LevelWarn, "lease dropped", reason) }

func (h *Holder) forget(level slog.Level, msg, reason string) {
	h.mu.Lock()
	had := h.leaseID
	h.leaseID = 0
	h.validUntil = time.Time{}
	h.proof = nil
	st := h.statusLocked()
	h.mu.Unlock()
	if had != 0 {
		h.log.Log(context.Background(), level, msg, "lease", had, "reason", reason)
		h.notify(st)
	}
}

func (h *Holder) notify(st Status) {
	if h.cfg.OnChange != nil {
		h.cfg.OnChange(st)
	}
}

// Run acquires and renews the lease until ctx is cancelled, then stops
// committing and releases the lease. It returns nil after a clean stop.
// Stop the region's commit path before cancelling ctx: a commit that passed
// Valid just before the release would otherwise finish after it.
func (h *Holder) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			h.release()
			return nil
		case <-timer.C:
		}
		timer.Reset(h.step(ctx))
	}
}

// step does one acquire or renew and returns how long to wait before the
// next.
func (h *Holder) step(ctx context.Context) time.Duration {
	st := h.Status()
	now := time.Now()
	if st.Held && !now.Before(st.ValidUntil) {
		h.drop("validity ran out before a renewal succeeded")
		st = Status{}
	}
	reqCtx, cancel := context.WithTimeout(ctx, h.requestTimeout())
	defer cancel()
	sentAt := time.Now()
	if !st.Held {
		g, err := h.cfg.Client.AcquireLease(reqCtx, h.cfg.Region)
		if err != nil {
			if errors.Is(err, ErrHeld) || errors.Is(err, ErrNotEntitled) {
				h.log.Debug("lease not granted", "err", err)
			} else if ctx.Err() == nil {
				h.log.Warn("lease acquire failed", "err", err)
			}
			return h.cfg.RetryEvery
		}
		if err := h.checkGrant(g); err != nil {
			h.log.Error("lease acquire", "err", err)
			return h.cfg.RetryEvery
		}
		h.granted(g, sentAt)
		return h.untilNext(sentAt, g.TTL)
	}
	g, err := h.cfg.Client.RenewLease(reqCtx, h.cfg.Region, st.LeaseID)
	switch {
	case errors.Is(err, ErrLost):
		h.drop(err.Error())
		return 0 // try to acquire again at once
	case err != nil:
		if ctx.Err() == nil {
			h.log.Warn("lease renew failed", "lease", st.LeaseID, "err", err)
		}
		// Keep the lease until its local validity runs out; retry
		// sooner than a normal renewal.
		retry := min(h.cfg.RetryEvery, h.renewEvery(h.ttl)/2)
		if left := time.Until(st.ValidUntil); left < retry {
			retry = max(left, 0)
		}
		return retry
	}
	if err := h.checkGrant(g); err != nil || g.LeaseID != st.LeaseID {
		h.drop(fmt.Sprintf("renewal answered lease %d: %v", g.LeaseID, err))
		return 0
	}
	h.granted(g, sentAt)
	return h.untilNext(sentAt, g.TTL)
}

func (h *Holder) checkGrant(g Grant) error {
	if g.Region != h.cfg.Region || g.LeaseID == 0 || g.TTL <= 0 {
		return fmt.Errorf("bad grant %+v for region %s", g, h.cfg.Region)
	}
	if h.margin(g.TTL) >= g.TTL {
		return fmt.Errorf("granted ttl %v is not longer than the safety margin %v", g.TTL, h.margin(g.TTL))
	}
	return nil
}

func (h *Holder) untilNext(sentAt time.Time, ttl time.Duration) time.Duration {
	return max(time.Until(sentAt.Add(h.renewEvery(ttl))), 0)
}

// release stops commits, then tells the server so the next coordinator
// need not wait for the TTL.
func (h *Holder) release() {
	st := h.Status()
	h.forget(slog.LevelInfo, "lease released", "holder stopped")
	if !st.Held {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.requestTimeout())
	defer cancel()
	if err := h.cfg.Client.ReleaseLease(ctx, h.cfg.Region, st.LeaseID); err != nil {
		h.log.Warn("lease release failed; it will expire on its own", "lease", st.LeaseID, "err", err)
	}
}
