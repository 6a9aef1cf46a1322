package regions

import (
	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// A region's slot is the Service's loop's alone (loop.go). What is asked
// of it off the loop -- this peer's role (Role, the metrics), a test's
// look -- is read from the view the loop publishes after each of its
// steps: an immutable copy, swapped whole, read without a lock.

// regionView is what the loop last published of one region at this peer:
// what is asked off the loop (this peer's role; placement questions such
// as Coordinator are the dead peers' view's, liveness.go).
type regionView struct {
	role pb.Role
}

// viewOnLoop is sl's view as it stands.
func (sl *slot) viewOnLoop() regionView { return regionView{role: sl.m.role} }

// publishViews publishes the view of each region whose view changed (on
// the loop, after each of its steps, before a caller waiting for the
// step goes on).
func (s *Service) publishViews() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sl := range s.slots {
		v := sl.viewOnLoop()
		if old := sl.view.Load(); old == nil || *old != v {
			sl.view.Store(&v)
		}
	}
}

// viewOf is region c's view as the loop last published it (the zero view
// if this peer has none).
func (s *Service) viewOf(c Coord) regionView {
	sl := s.existingSlot(c)
	if sl == nil {
		return regionView{}
	}
	if v := sl.view.Load(); v != nil {
		return *v
	}
	return regionView{}
}

// Role returns this peer's role in region c, as the Service's loop last
// published it.
func (s *Service) Role(c Coord) Role { return roleOf(s.viewOf(c).role) }
