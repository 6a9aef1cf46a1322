// Package leases is the coordinator lease of overworld's P2P mode: the rule
// that keeps two coordinators from committing for one region at once, even
// across a network partition (paper 002: the central server refuses
// concurrent coordinators).
//
// The lease service runs inside the account server (package
// bootstrap/accounts). A region coordinator holds a lease per region with a
// short time-to-live and renews it well before it ends; it commits updates
// only while its lease is valid. The server grants a region's lease to one
// holder at a time; another holder gets it only after the current lease has
// expired on the server's clock or was released.
//
// Data flow:
//
//	coordinator ──Holder.Run──► Client (HTTP) ──► account server ──► Acquire/Renew/Release (this
//	     │                                                          package's rules) on the
//	     └─ before each commit: Holder.Valid(time.Now())            stored Record, in one
//	                                                                transaction
//
// Two parts live here:
//
//   - The server's rules, as pure functions on a Record: Acquire, Renew,
//     Release. The store applies them inside a transaction, so the rules
//     hold across several account-server processes sharing one database.
//   - Holder, the client side. It acquires, renews every TTL/3 and answers
//     Valid(now). It fails safe: a lease counts as valid only until the
//     local send time of the request that granted or renewed it plus the
//     TTL, minus a safety margin. The server's expiry is measured from when
//     it received that request, which is later, so the holder always stops
//     before the server would give the lease to someone else (assuming the
//     two clocks run at rates that differ by less than the margin).
//
// The service signs every grant it answers (Proof, proof.go) with the
// account server's token key, so peers check offline who holds a region's
// lease under which ID; it grants a region lease only to a peer placed
// near the region among the peers logged in (Rank; see
// accounts.Config.LeaseCandidates).
//
// Lease IDs are fencing tokens: they increase by one with every new grant of
// a region and never repeat, also across restarts (they are stored). A
// renewal keeps the ID. Coordinators should stamp committed updates with the
// lease ID so that replicas can refuse updates from an older lease.
package leases

import (
	"errors"
	"fmt"
	"regexp"
	"time"
)

// Errors of the lease rules. Clients map the server's answers back to these,
// so errors.Is works on both sides of the wire.
var (
	// ErrHeld: another holder has a valid lease on the region.
	ErrHeld = errors.New("lease held by another peer")
	// ErrLost: the lease being renewed is no longer the caller's (it
	// expired, was released, or another holder has the region now). The
	// caller must stop committing and acquire a new lease.
	ErrLost = errors.New("lease lost")
	// ErrNotEntitled: the service does not let this holder have the
	// region's lease (it is not placed near the region); retrying soon
	// will not help.
	ErrNotEntitled = errors.New("not entitled to the lease")
	// ErrInvalid: a malformed region name, holder or TTL.
	ErrInvalid = errors.New("invalid lease request")
)

// Grant is what a holder learns from a successful acquire or renew.
type Grant struct {
	Region  string
	LeaseID uint64
	Holder  string
	// TTL is how long after the server received the request the lease
	// stays valid on the server. It is a duration, not a time, so that
	// the holder never has to compare clocks with the server.
	TTL time.Duration
	// Proof is the grant signed by the lease service (see Proof), which
	// the holder shows peers; nil from a service that does not sign.
	Proof []byte
}

// Record is the stored state of one region's lease.
type Record struct {
	Region string
	// Holder is the peer ID of the current holder, "" when free.
	Holder string
	// LeaseID is the last ID granted for the region; 0 if never granted.
	LeaseID uint64
	// Granted is when LeaseID was first granted; Expires is when it ends
	// (or ended) on the server's clock.
	Granted time.Time
	Expires time.Time
}

// ActiveAt reports whether the record's lease is valid at now.
func (r Record) ActiveAt(now time.Time) bool {
	return r.Holder != "" && now.Before(r.Expires)
}

// regionPattern bounds region names to what fits in a URL path segment.
var regionPattern = regexp.MustCompile(`^[A-Za-z0-9_.,:=-]{1,128}$`)

// ValidRegion reports whether name can name a region in the lease service.
func ValidRegion(name string) error {
	if !regionPattern.MatchString(name) {
		return fmt.Errorf("%w: region %q (want 1-128 of A-Z a-z 0-9 _ . , : = -)", ErrInvalid, name)
	}
	return nil
}

func checkRequest(r Record, holder string, ttl time.Duration) error {
	if err := ValidRegion(r.Region); err != nil {
		return err
	}
	if holder == "" || len(holder) > 128 {
		return fmt.Errorf("%w: holder %q", ErrInvalid, holder)
	}
	if ttl <= 0 {
		return fmt.Errorf("%w: ttl %v", ErrInvalid, ttl)
	}
	return nil
}

// Acquire grants r's region to holder at now for ttl, under the next lease
// ID. The region must be free or its lease expired, even for the current
// holder: a holder that lost track of its lease (its renewal answers were
// lost) must not be able to extend it blindly, or a half-cut coordinator
// would keep the region forever without committing. A retried acquire whose
// answer was lost therefore waits out one TTL.
func Acquire(r Record, holder string, now time.Time, ttl time.Duration) (Record, error) {
	if err := checkRequest(r, holder, ttl); err != nil {
		return r, err
	}
	if r.ActiveAt(now) {
		return r, fmt.Errorf("%w: region %s lease %d for %v more", ErrHeld, r.Region, r.LeaseID, r.Expires.Sub(now))
	}
	r.Holder = holder
	r.LeaseID++
	r.Granted = now
	r.Expires = now.Add(ttl)
	return r, nil
}

// Renew extends holder's lease leaseID on r's region to now+ttl. It fails
// with ErrLost unless that exact lease is current and unexpired: an expired
// lease is never revived, the holder must acquire a new ID.
func Renew(r Record, holder string, leaseID uint64, now time.Time, ttl time.Duration) (Record, error) {
	if err := checkRequest(r, holder, ttl); err != nil {
		return r, err
	}
	if r.Holder != holder || r.LeaseID != leaseID || !r.ActiveAt(now) {
		return r, fmt.Errorf("%w: region %s lease %d (current %d)", ErrLost, r.Region, leaseID, r.LeaseID)
	}
	r.Expires = now.Add(ttl)
	return r, nil
}

// Release ends holder's lease leaseID at now so that the next holder need
// not wait for it to expire. Releasing a lease that is not current is a
// no-op: release is idempotent. changed reports whether r was modified.
func Release(r Record, holder string, leaseID uint64, now time.Time) (_ Record, changed bool, _ error) {
	if err := checkRequest(r, holder, time.Second); err != nil {
		return r, false, err
	}
	if r.Holder != holder || r.LeaseID != leaseID || !r.ActiveAt(now) {
		return r, false, nil
	}
	r.Holder = ""
	r.Expires = now
	return r, true, nil
}
