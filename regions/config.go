package regions

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
)

// CommitGate is consulted before each batch of commits. A coordinator that
// does not hold its region's lease (see bootstrap/leases) must not commit:
// that is what keeps two sides of a partition from both coordinating. The
// lease ID is recorded with every commit.
type CommitGate interface {
	Allowed(region Coord) (leaseID uint64, ok bool)
}

// Eligibility is an optional extension of a CommitGate. A gate that knows
// this peer cannot coordinate a region for now (it lost the region's lease
// and cannot reach the lease service) says so with Eligible false; the
// service then ranks itself last in that region's placement and reports
// itself as stepping aside, so that a coordinator cut off from the lease
// service hands its region to the next peer instead of blocking it. It is
// called often and must be cheap and must not block.
type Eligibility interface {
	Eligible(region Coord) bool
}

// LeaseProofs is an optional extension of a CommitGate whose lease service
// signs its grants (regions/guard's lease gate over the account server).
// With it, every role a peer claims in a region is checked offline: a
// coordinator's replication, deposal, hand-off, copy and events are taken
// only with a grant of the region's lease that names that coordinator and
// is not older than the newest grant this peer knows of (lease IDs are
// fencing tokens); see trust.go. Both methods must be cheap and must not
// block.
type LeaseProofs interface {
	// Proof returns this peer's signed grant of region c's lease, valid
	// now; nil when it holds none.
	Proof(c Coord) []byte
	// CheckProof verifies proof as a grant of region c's lease and returns
	// whom it was granted to, under which lease ID, and when it ends on
	// the lease service's clock.
	CheckProof(c Coord, proof []byte) (holder peer.ID, leaseID uint64, expires time.Time, err error)
}

// Authorizer admits a remote peer to the region protocol by its login
// token (the account server's signed token naming the peer ID).
type Authorizer interface {
	Authorize(remote peer.ID, token []byte) error
}

type allowAll struct{}

func (allowAll) Allowed(Coord) (uint64, bool)    { return 0, true }
func (allowAll) Authorize(peer.ID, []byte) error { return nil }

// AllowAll is the default CommitGate and Authorizer: every commit and
// every peer is allowed.
var AllowAll = allowAll{}

// Role is a peer's part in a region.
type Role int

const (
	RoleNone        Role = iota // holds nothing (may be a member with a cache)
	RoleCoordinator             // serializes and commits the region's updates
	RoleReplica                 // holds the backup copy
)

func (r Role) String() string {
	switch r {
	case RoleCoordinator:
		return "coordinator"
	case RoleReplica:
		return "replica"
	default:
		return "none"
	}
}

// Config configures a Service.
type Config struct {
	// World names the world; it is part of every region key and topic.
	World string
	// Width and Height: the world has Width×Height regions.
	Width, Height int
	// Map returns a region's static map, served with its state (optional).
	Map func(Coord) []byte
	// Gate is consulted before commits. Default AllowAll.
	Gate CommitGate
	// Proofs, if set, checks every role claim against the lease service's
	// signed grants and supplies this peer's own (see LeaseProofs); it is
	// usually the Gate too. Nil: roles are checked by placement alone.
	Proofs LeaseProofs
	// Authorizer checks the token of every remote peer. Default AllowAll.
	Authorizer Authorizer
	// Token returns this peer's own login token, sent with every message
	// (optional).
	Token func() []byte
	// RequestTimeout bounds one exchange with one peer. Default 5s.
	RequestTimeout time.Duration
	// ProbeTimeout bounds the check that a peer suspected dead is. Default 1s.
	ProbeTimeout time.Duration
	// MaintainEvery is the period of the placement check of the regions
	// this peer holds. Default 500ms.
	MaintainEvery time.Duration
	// DeadFor is how long a peer found unreachable is left out of
	// placement unless it shows up again. Default 30s.
	DeadFor time.Duration
	// MaxLockHold is how long a player may keep a lock by renewing it
	// while other players wait for the object: past it the lock is not
	// renewed, and the waiters get the object when it runs out. Default
	// one minute (MaxLockTTL).
	MaxLockHold time.Duration
	// OnRoleChange, if set, is told when this peer starts or stops
	// coordinating or replicating a region (within a maintenance period),
	// e.g. to acquire the region's lease before the gate is consulted. It
	// runs on the Service's loop (loop.go) and must not block.
	OnRoleChange func(region Coord, role Role)
	// Logger; default the node's logger.
	Logger *slog.Logger
	// Registerer receives the service's Prometheus metrics (requests by
	// operation and status, their duration, take-overs, held regions);
	// nil keeps them unregistered.
	Registerer prometheus.Registerer
}

func (c *Config) fill() error {
	var errs []error
	if c.World == "" || len(c.World) > MaxWorldNameLen {
		errs = append(errs, fmt.Errorf("world name %q: want 1..%d bytes", c.World, MaxWorldNameLen))
	}
	if c.Width <= 0 || c.Height <= 0 || c.Width > 1<<15 || c.Height > 1<<15 {
		errs = append(errs, fmt.Errorf("world size %dx%d: want 1..32768 each way", c.Width, c.Height))
	}
	if c.Gate == nil {
		c.Gate = AllowAll
	}
	if c.Authorizer == nil {
		c.Authorizer = AllowAll
	}
	if c.Token == nil {
		c.Token = func() []byte { return nil }
	}
	def := func(d *time.Duration, v time.Duration, name string) {
		if *d == 0 {
			*d = v
		} else if *d < 0 {
			errs = append(errs, fmt.Errorf("%s %s: want > 0", name, *d))
		}
	}
	def(&c.RequestTimeout, 5*time.Second, "request timeout")
	def(&c.ProbeTimeout, time.Second, "probe timeout")
	def(&c.MaintainEvery, 500*time.Millisecond, "maintain period")
	def(&c.DeadFor, 30*time.Second, "dead-for period")
	def(&c.MaxLockHold, MaxLockTTL*time.Millisecond, "longest lock hold")
	if c.ProbeTimeout > c.RequestTimeout {
		errs = append(errs, fmt.Errorf("probe timeout %s longer than request timeout %s", c.ProbeTimeout, c.RequestTimeout))
	}
	return errors.Join(errs...)
}

// Contains reports whether c is a region of the configured world.
func (c Config) Contains(r Coord) bool {
	return r.X >= 0 && r.Y >= 0 && r.X < c.Width && r.Y < c.Height
}
