package position

import (
	"context"
	"errors"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/regions"
)

// WithLookup has the Service refresh the view WithCoordinators' function
// reads with f, a network lookup of the region's key (a region service
// passes its Locate), before it registers with a region's coordinator,
// at most once per CoordinatorTTL per region. Without it a peer's view is
// its routing table and connections, which hold the peers near its own
// place in the keyspace rather than near a region's key: two players of
// a region each took the closest peer they happened to know, and the
// batches of one's coordinator were ignored by the other (as not its
// region's coordinator).
func WithLookup(f func(ctx context.Context, c regions.Coord) error) Option {
	return func(s *Service) error {
		if f == nil {
			return errors.New("lookup function is nil")
		}
		s.lookup = f
		return nil
	}
}

// RegionPlacement is what WithRegionPlacement asks of a region service
// (package regions' Service): the coordinator of a region as this peer
// sees it, and a network lookup that refreshes that view.
type RegionPlacement interface {
	Coordinator(c regions.Coord) (coordinator, replica peer.ID)
	Locate(ctx context.Context, c regions.Coord) (coordinator, replica peer.ID, err error)
}

// WithRegionPlacement has positions aggregated by the peer that
// coordinates the region's objects in rp's view (WithCoordinators over
// rp.Coordinator), refreshed by rp.Locate before a rendezvous
// (WithLookup): what a peer that runs the region service passes.
func WithRegionPlacement(rp RegionPlacement) Option {
	return func(s *Service) error {
		if rp == nil {
			return errors.New("region placement is nil")
		}
		s.coordinatorOf = func(c regions.Coord) peer.ID {
			coord, _ := rp.Coordinator(c)
			return coord
		}
		s.lookup = func(ctx context.Context, c regions.Coord) error {
			_, _, err := rp.Locate(ctx, c)
			return err
		}
		return nil
	}
}

// lookUp runs the WithLookup function for region c if it is due, and then
// takes the coordinator the refreshed view names. A failed lookup leaves
// the view as it was: the coordinator it names is still the best known.
func (s *Service) lookUp(ctx context.Context, c regions.Coord) {
	if s.lookup == nil || s.coordinatorOf == nil {
		return
	}
	now := s.cfg.Now()
	s.mu.Lock()
	last, done := s.lookedUp[c]
	due := !done || now.Sub(last) >= s.cfg.CoordinatorTTL
	if due {
		s.lookedUp[c] = now
	}
	s.mu.Unlock()
	if !due {
		return
	}
	if err := s.lookup(ctx, c); err != nil {
		s.log.Debug("coordinator lookup failed", "region", c, "err", err)
		return
	}
	coord := s.coordinatorOf(c)
	if coord == "" {
		return
	}
	s.mu.Lock()
	s.coordinator[c] = coordinatorEntry{id: coord, until: now.Add(s.cfg.CoordinatorTTL)}
	s.mu.Unlock()
}

// forgetLookups drops the lookup times past which a lookup is due anyway,
// so that the regions a peer left do not pile up. Called with s.mu held.
func (s *Service) forgetLookups(now time.Time) {
	for c, at := range s.lookedUp {
		if now.Sub(at) > 2*s.cfg.CoordinatorTTL {
			delete(s.lookedUp, c)
		}
	}
}
