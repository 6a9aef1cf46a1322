package regions

import (
	"context"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// Serving a player's request: the coordinator's machine takes it, a
// replica or a peer without the region redirects the player (or takes
// the region over), and a peer taking the region over forwards it or
// waits for the take-over.

// serveRequest answers a player's request for region c; gone (nil: never)
// closes when the player stops waiting for the answer.
func (s *Service) serveRequest(from peer.ID, c Coord, req *pb.Request, gone <-chan struct{}) (reply *pb.Reply) {
	start := time.Now()
	defer func() { s.metrics.answered(req, reply, start) }()
	return s.serveRequestOnce(from, c, req, false, gone)
}

// serveRequestOnce is serveRequest; waited says it already waited for an
// acquisition of the region to end.
func (s *Service) serveRequestOnce(from peer.ID, c Coord, req *pb.Request, waited bool, gone <-chan struct{}) *pb.Reply {
	player := from
	if req.Forwarded {
		// A peer taking the region over forwards for the player; only the
		// player's own signature says who that is.
		origin, ok := s.verifyOrigin(c, req)
		if !ok {
			s.refuse(c, from, "forwarded request", refusedOriginUnproven)
			return &pb.Reply{Status: pb.Status_STATUS_DENIED, Error: "forwarded request without the player's signature"}
		}
		player = origin
	}
	sl := s.existingSlot(c)
	if sl == nil {
		return s.redirectOrAcquire(from, c, req, waited, gone)
	}
	sl.mu.Lock()
	switch sl.m.role {
	case pb.Role_ROLE_COORDINATOR:
		sl.mu.Unlock()
		if r, ok := s.submit(c, sl, player, req, gone); ok {
			return r
		}
		// The role changed before the request reached the machine.
		return s.serveRequestOnce(from, c, req, waited, gone)
	case pb.Role_ROLE_REPLICA:
		coord := sl.m.coordinator
		sl.mu.Unlock()
		return s.redirectToCoordinator(c, coord, req)
	}
	acquiring, src, acquired := sl.acquiring, sl.source, sl.acquired
	sl.mu.Unlock()
	if acquiring {
		if src != "" && !req.Forwarded {
			// The transfer is running: the old coordinator still serves
			// until it hands the region over (then it sends the request
			// back here, and it waits below).
			fwd := proto.Clone(req).(*pb.Request)
			fwd.Forwarded, fwd.Origin, fwd.Suspects = true, []byte(player), nil
			// The forwarded request ends when the player goes away, so
			// that the coordinator drops it too.
			fctx, fcancel := context.WithCancel(s.ctx)
			if gone != nil {
				stop := make(chan struct{})
				go func() {
					select {
					case <-gone:
						fcancel()
					case <-stop:
					}
				}()
				defer close(stop)
			}
			reply, err := s.call(fctx, src, c, &pb.Message{Body: &pb.Message_Request{Request: fwd}})
			fcancel()
			if err == nil && reply.GetReply() != nil && reply.GetReply().Status != pb.Status_STATUS_REDIRECT &&
				reply.GetReply().Status != pb.Status_STATUS_RETRY {
				return reply.GetReply()
			}
		}
		// Wait for the acquisition to end rather than send the player
		// away to retry: it ends within a few round trips.
		if !waited {
			timer := time.NewTimer(s.cfg.RequestTimeout)
			defer timer.Stop()
			select {
			case <-acquired:
				return s.serveRequestOnce(from, c, req, true, gone)
			case <-timer.C:
			case <-s.ctx.Done():
			}
		}
		return &pb.Reply{Status: pb.Status_STATUS_RETRY, Error: "state transfer running"}
	}
	return s.redirectOrAcquire(from, c, req, waited, gone)
}

// submit hands player's request to region c's machine, on the Service's
// loop, and waits for its answer; false if this peer no longer
// coordinated the region by then (nothing was submitted).
func (s *Service) submit(c Coord, sl *slot, player peer.ID, req *pb.Request, gone <-chan struct{}) (*pb.Reply, bool) {
	ch := make(chan *pb.Reply, 1)
	key := waitKey{player, string(req.RequestId)}
	submitted := false
	ran := s.onLoop(func() {
		sl.mu.Lock()
		if sl.m.role != pb.Role_ROLE_COORDINATOR {
			sl.mu.Unlock()
			return
		}
		// The request's deadline is when this peer stops waiting for its
		// answer: a lock granted later would go to nobody and block the
		// object's other waiters until its TTL.
		now := time.Now()
		p := &pending{from: player, req: req, deadlineMs: now.Add(s.cfg.RequestTimeout).UnixMilli()}
		sl.wait(key, ch)
		s.feedLease(c, sl)
		eff := sl.m.Submit(p, now)
		sl.mu.Unlock()
		submitted = true
		s.run(c, sl, eff)
	})
	if !ran {
		sl.mu.Lock()
		sl.unwait(key, ch)
		sl.mu.Unlock()
		return &pb.Reply{Status: pb.Status_STATUS_RETRY, Error: "shutting down"}, true
	}
	if !submitted {
		return nil, false
	}
	timer := time.NewTimer(s.cfg.RequestTimeout)
	defer timer.Stop()
	abandon := func() {
		s.onLoop(func() {
			sl.mu.Lock()
			// A retry that took this caller's place waits for it still.
			if sl.unwait(key, ch) {
				sl.m.Abandon(player, req.RequestId, time.Now())
			}
			sl.mu.Unlock()
		})
	}
	select {
	case r := <-ch:
		return r, true
	case <-timer.C:
		abandon()
		return &pb.Reply{Status: pb.Status_STATUS_RETRY, Error: "coordinator busy"}, true
	case <-gone:
		abandon()
		return &pb.Reply{Status: pb.Status_STATUS_RETRY, Error: "the player went away"}, true
	case <-s.ctx.Done():
		sl.mu.Lock()
		sl.unwait(key, ch)
		sl.mu.Unlock()
		return &pb.Reply{Status: pb.Status_STATUS_RETRY, Error: "shutting down"}, true
	}
}

// redirectToCoordinator answers a request that reached this replica of
// region c: it redirects the player to coordinator coord, unless coord is
// dead or, named as a suspect, fails a probe (at most one per
// ProbeTimeout): then this peer takes the region over. The loop decides;
// the probe runs on this goroutine and hands its answer to the loop.
func (s *Service) redirectToCoordinator(c Coord, coord peer.ID, req *pb.Request) *pb.Reply {
	var redirect, probe bool
	takeOver := func() {
		s.markDeadOnLoop(coord)
		s.startAcquire(c)
	}
	if !s.onLoop(func() {
		switch {
		case !s.alive(coord):
			takeOver()
		case !suspected(req, coord) || !s.live.probeDue(coord, time.Now()):
			redirect = true
		default:
			probe = true
		}
	}) {
		return shuttingDown()
	}
	if probe {
		answered := s.ping(coord)
		if !s.onLoop(func() {
			if redirect = answered; !answered {
				takeOver()
			}
		}) {
			return shuttingDown()
		}
	}
	if redirect {
		return redirectReply(coord)
	}
	return &pb.Reply{Status: pb.Status_STATUS_RETRY, Error: "replica taking over"}
}

// redirectOrAcquire answers a request for a region this peer does not
// hold: it redirects to the coordinator in its view, or, being that peer,
// takes the region over. The suspects the client names are probed only
// if they would change that answer (the first two of the region's
// placement), and each at most once per ProbeTimeout: a request cannot
// make this peer dial strangers. The loop decides, one suspect at a time
// (a suspect found dead changes the placement the next is judged by);
// each probe runs on this goroutine and hands its answer to the loop.
func (s *Service) redirectOrAcquire(from peer.ID, c Coord, req *pb.Request, waited bool, gone <-chan struct{}) *pb.Reply {
	if req.Forwarded {
		return &pb.Reply{Status: pb.Status_STATUS_RETRY, Error: "not coordinating"}
	}
	var (
		next     int     // the next of req.Suspects to judge
		probing  peer.ID // the suspect probed last ("": none)
		answered bool    // whether it answered
		target   peer.ID // the coordinator in this peer's view
		take     bool    // this peer takes the region over
	)
	for {
		if !s.onLoop(func() {
			if probing != "" && !answered {
				s.markDeadOnLoop(probing)
			}
			probing, next = s.suspectToProbeOnLoop(c, req.Suspects, next)
			if probing != "" {
				return
			}
			target = s.placement(c)[0]
			// Behind NAT and alone: wait for a reachable peer.
			if take = target == s.h.ID() && s.tr.CanCoordinate(target); take {
				s.startAcquire(c)
			}
		}) {
			return shuttingDown()
		}
		if probing == "" {
			break
		}
		answered = s.ping(probing)
	}
	if take {
		if !waited {
			// Serve it once the region is taken over (or forward it while
			// the state comes), rather than send the player away.
			return s.serveRequestOnce(from, c, req, false, gone)
		}
		return &pb.Reply{Status: pb.Status_STATUS_RETRY, Error: "taking the region over"}
	}
	return redirectReply(target)
}

// suspectToProbeOnLoop is the first of suspects[from:] that redirecting a
// request for region c must probe before it answers: alive in this
// peer's view, among the first two of the region's placement, and not
// probed within ProbeTimeout (the probe is recorded). It returns the
// suspect ("" if none) and where the next search starts.
func (s *Service) suspectToProbeOnLoop(c Coord, suspects [][]byte, from int) (peer.ID, int) {
	order := s.placement(c)
	now := time.Now()
	for i := from; i < len(suspects); i++ {
		p, err := peer.IDFromBytes(suspects[i])
		if err != nil || p == s.h.ID() || !s.alive(p) {
			continue
		}
		if !containsPeer(order[:min(2, len(order))], p) {
			s.metrics.refused.WithLabelValues(refusedSuspectNotPlaced).Inc()
			continue
		}
		if s.live.probeDue(p, now) {
			return p, i + 1
		}
	}
	return "", len(suspects)
}

func shuttingDown() *pb.Reply {
	return &pb.Reply{Status: pb.Status_STATUS_RETRY, Error: "shutting down"}
}

func suspected(req *pb.Request, p peer.ID) bool {
	for _, b := range req.Suspects {
		if peer.ID(b) == p {
			return true
		}
	}
	return false
}
