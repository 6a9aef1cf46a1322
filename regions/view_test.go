package regions

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/overworld-p2p/overworld/regions/memnet"
	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// TestRoleIsTheLoopsView: Role, asked off the loop, reads the view the
// loop publishes; a step taken on the loop shows in it as soon as the
// step's caller goes on, and a region this peer never held has none.
func TestRoleIsTheLoopsView(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := loopTestRegion
		net := memnet.New()
		svcs := loopTestServices(t, net, 2)
		s, other := svcs[0], svcs[1]
		synctest.Wait()
		if got := s.Role(c); got != RoleNone {
			t.Fatalf("role before any step = %v, want none", got)
		}
		makeReplica(s, other.h.ID())
		if got := s.Role(c); got != RoleReplica {
			t.Fatalf("role after the step that made a replica = %v, want replica", got)
		}
		sl := s.existingSlot(c)
		s.onLoop(func() {
			s.feedLeaseTaking(c, sl)
			s.run(c, sl, sl.m.TakeOver(time.Now()))
		})
		if got := s.Role(c); got != RoleCoordinator {
			t.Fatalf("role after the take-over = %v, want coordinator", got)
		}
		var onLoop pb.Role
		inspect(s, func() { onLoop = sl.m.role })
		if roleOf(onLoop) != s.Role(c) {
			t.Fatalf("the view says %v, the machine %v", s.Role(c), onLoop)
		}
		if got := s.Role(Coord{X: 0, Y: 1}); got != RoleNone {
			t.Fatalf("role in a region never held = %v, want none", got)
		}
	})
}
