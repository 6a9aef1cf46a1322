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
// acquisition of the region to end. One step on the loop (requestOnLoop)
// reads the region's role and decides; this goroutine then does what
// waits for the network: the machine's answer (it waits for the
// replica's acknowledgement), a probe, a forward, the acquisition's end.
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
	w := requestWait{key: waitKey{player, string(req.RequestId)}, ch: make(chan *pb.Reply, 1)}
	var next requestNext
	if !s.onLoop(func() { next = s.requestOnLoop(c, sl, player, req, w) }) {
		// The Service closed: nobody answers any more (a wait the step
		// left in the slot's table is garbage with it).
		return shuttingDown()
	}
	switch next.path {
	case pathSubmitted:
		return s.awaitAnswer(sl, player, req, w, gone)
	case pathReplica:
		return s.redirectToCoordinator(c, next)
	case pathAcquiring:
		return s.forwardOrAwaitAcquisition(from, player, c, req, waited, gone, next)
	}
	return s.redirectOrAcquire(from, c, req, waited, gone)
}

// requestPath is the way serving a request goes on after the loop's step.
type requestPath int

const (
	// pathElsewhere: this peer has no role in the region: it redirects
	// the player, or takes the region over (redirectOrAcquire).
	pathElsewhere requestPath = iota
	// pathSubmitted: this peer coordinates; the machine has the request
	// and its answer comes on the request's wait.
	pathSubmitted
	// pathReplica: this peer replicates; it redirects to the coordinator,
	// probes the coordinator first, or takes the region over.
	pathReplica
	// pathAcquiring: this peer is taking the region over; the request is
	// forwarded to the peer handing it over, or waits for the end.
	pathAcquiring
)

// requestNext is what the loop decided for a request, and what the
// request's goroutine needs for it.
type requestNext struct {
	path requestPath
	// pathReplica: the coordinator, and whether the player is redirected
	// to it now, or after a probe of it that answers (neither: this peer
	// takes the region over).
	coord           peer.ID
	redirect, probe bool
	// pathAcquiring: the peer handing the region over ("" if none yet),
	// and what closes when the acquisition ends.
	source   peer.ID
	acquired <-chan struct{}
}

// requestWait is where a request submitted to the machine is answered.
type requestWait struct {
	key waitKey
	ch  chan *pb.Reply
}

// requestOnLoop takes a player's request for region c on the loop: a
// coordinator's machine takes it at once (its answer comes on w); a
// replica decides whether to redirect (replicaRedirectOnLoop); a peer
// acquiring the region says where the transfer comes from.
func (s *Service) requestOnLoop(c Coord, sl *slot, player peer.ID, req *pb.Request, w requestWait) requestNext {
	switch sl.m.role {
	case pb.Role_ROLE_COORDINATOR:
		// The request's deadline is when this peer stops waiting for its
		// answer: a lock granted later would go to nobody and block the
		// object's other waiters until its TTL.
		now := time.Now()
		p := &pending{from: player, req: req, deadlineMs: now.Add(s.cfg.RequestTimeout).UnixMilli()}
		sl.wait(w.key, w.ch)
		s.feedLease(c, sl)
		eff := sl.m.Submit(p, now)
		s.run(c, sl, eff)
		return requestNext{path: pathSubmitted}
	case pb.Role_ROLE_REPLICA:
		coord := sl.m.coordinator
		redirect, probe := s.replicaRedirectOnLoop(c, coord, req)
		return requestNext{path: pathReplica, coord: coord, redirect: redirect, probe: probe}
	}
	acquiring := sl.acquiring
	next := requestNext{path: pathAcquiring, source: sl.source, acquired: sl.acquired}
	if !acquiring {
		return requestNext{path: pathElsewhere}
	}
	return next
}

// awaitAnswer waits for the machine's answer to player's request req,
// submitted on the loop with wait w, until the request times out, the
// player goes away or the Service closes.
func (s *Service) awaitAnswer(sl *slot, player peer.ID, req *pb.Request, w requestWait, gone <-chan struct{}) *pb.Reply {
	timer := time.NewTimer(s.cfg.RequestTimeout)
	defer timer.Stop()
	abandon := func() {
		s.onLoop(func() {
			// A retry that took this caller's place waits for it still.
			if sl.unwait(w.key, w.ch) {
				sl.m.Abandon(player, req.RequestId, time.Now())
			}
		})
	}
	select {
	case r := <-w.ch:
		return r
	case <-timer.C:
		abandon()
		return &pb.Reply{Status: pb.Status_STATUS_RETRY, Error: "coordinator busy"}
	case <-gone:
		abandon()
		return &pb.Reply{Status: pb.Status_STATUS_RETRY, Error: "the player went away"}
	case <-s.ctx.Done():
		return shuttingDown()
	}
}

// forwardOrAwaitAcquisition answers a request that reached this peer
// while it takes region c over (next, as the loop saw it): while the
// transfer runs, the peer handing the region over still serves it;
// otherwise the request waits for the acquisition to end (once) and is
// served again.
func (s *Service) forwardOrAwaitAcquisition(from, player peer.ID, c Coord, req *pb.Request, waited bool, gone <-chan struct{}, next requestNext) *pb.Reply {
	if src := next.source; src != "" && !req.Forwarded {
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
		case <-next.acquired:
			return s.serveRequestOnce(from, c, req, true, gone)
		case <-timer.C:
		case <-s.ctx.Done():
		}
	}
	return &pb.Reply{Status: pb.Status_STATUS_RETRY, Error: "state transfer running"}
}

// replicaRedirectOnLoop decides, on the loop, how this replica of region
// c answers a request: redirect the player to coordinator coord; or,
// coord being named a suspect, probe it first (at most once per
// ProbeTimeout); or, coord being dead, take the region over (neither).
func (s *Service) replicaRedirectOnLoop(c Coord, coord peer.ID, req *pb.Request) (redirect, probe bool) {
	switch {
	case !s.alive(coord):
		s.replicaTakeOverOnLoop(c, coord)
	case !suspected(req, coord) || !s.live.probeDue(coord, time.Now()):
		redirect = true
	default:
		probe = true
	}
	return redirect, probe
}

// replicaTakeOverOnLoop: this replica of region c found its coordinator
// coord gone, and takes the region over.
func (s *Service) replicaTakeOverOnLoop(c Coord, coord peer.ID) {
	s.markDeadOnLoop(coord)
	s.startAcquire(c)
}

// redirectToCoordinator answers a request that reached this replica of
// region c, as the loop decided (replicaRedirectOnLoop): a redirect to
// the coordinator, or a take-over, or the probe of the coordinator, run
// on this goroutine, whose answer the loop takes: one that fails makes
// this peer take the region over.
func (s *Service) redirectToCoordinator(c Coord, next requestNext) *pb.Reply {
	coord, redirect := next.coord, next.redirect
	if next.probe {
		answered := s.ping(coord)
		if !s.onLoop(func() {
			if redirect = answered; !answered {
				s.replicaTakeOverOnLoop(c, coord)
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
