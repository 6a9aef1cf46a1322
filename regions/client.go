package regions

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// State is a region's state as its coordinator served it.
type State struct {
	Region  Coord
	Epoch   uint64
	Map     []byte
	Objects []Object
}

// ConflictError rejects a read-write update whose read version is no
// longer current. Current is the object as it is now.
type ConflictError struct {
	Region  Coord
	Current Object
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("region %s object %q: read version is stale, current version %d", e.Region, e.Current.ID, e.Current.Version)
}

// LockedError rejects an update of an object another player has locked.
type LockedError struct {
	Region Coord
	Object Object
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("region %s object %q: locked by %s until %s", e.Region, e.Object.ID, e.Object.LockHolder, e.Object.LockExpires.Format(time.RFC3339Nano))
}

// ErrRejected wraps a request the coordinator refused as invalid.
var ErrRejected = errors.New("request rejected")

// ErrBusy rejects a request that would wait for a locked object when too
// many already wait (per object, region or player): retry later.
var ErrBusy = errors.New("too many requests wait for locked objects")

func errOutside(c Coord, cfg Config) error {
	return fmt.Errorf("region %s is outside the %dx%d world", c, cfg.Width, cfg.Height)
}

// Client is the game's access to the regions. Every call finds the
// region's coordinator, follows redirects, and retries on the next peer
// (the replica, after a fail-over) with the same request ID until ctx
// ends, so that each update is applied at most once.
type Client struct{ s *Service }

// Client returns the service's client.
func (s *Service) Client() *Client { return &Client{s: s} }

// Get returns the region's map and objects.
func (cl *Client) Get(ctx context.Context, c Coord) (State, error) {
	r, err := cl.s.do(ctx, c, &pb.Request{Op: pb.Op_OP_GET})
	if err != nil {
		return State{}, fmt.Errorf("get region %s: %w", c, err)
	}
	st := State{Region: c, Epoch: r.Epoch, Map: r.Map}
	entries := make([]*pb.Entry, 0, len(r.Objects))
	for _, o := range r.Objects {
		st.Objects = append(st.Objects, objectFromPB(o))
		entries = append(entries, &pb.Entry{Object: o})
	}
	cl.s.absorb(c, r.Epoch, 0, entries, false)
	return st, nil
}

// Initialize sets an object's value whatever it was (a blind write).
func (cl *Client) Initialize(ctx context.Context, c Coord, id string, value []byte) (Object, error) {
	return cl.update(ctx, c, &pb.Request{Op: pb.Op_OP_INITIALIZE, ObjectId: id, Value: value}, "initialize")
}

// ReadWrite sets an object's value if its version is still readVersion
// (0 for an object that does not exist yet). Otherwise it fails with a
// *ConflictError carrying the current value and version.
func (cl *Client) ReadWrite(ctx context.Context, c Coord, id string, readVersion uint64, value []byte) (Object, error) {
	return cl.update(ctx, c, &pb.Request{Op: pb.Op_OP_READ_WRITE, ObjectId: id, ReadVersion: readVersion, Value: value}, "read-write")
}

// Lock takes the object's lock for ttl (renew by locking again before it
// runs out): until then only this peer may update it. A lock whose holder
// vanishes runs out by itself.
func (cl *Client) Lock(ctx context.Context, c Coord, id string, ttl time.Duration) (Object, error) {
	ms := ttl.Milliseconds()
	if ms <= 0 || ms > MaxLockTTL {
		return Object{}, fmt.Errorf("lock %q: ttl %s: want 1ms..%dms", id, ttl, MaxLockTTL)
	}
	return cl.update(ctx, c, &pb.Request{Op: pb.Op_OP_LOCK, ObjectId: id, LockTtlMs: uint32(ms)}, "lock")
}

// ReleaseWith is the second step of a two-step write (paper 004): it sets
// the object's value and gives the lock back, in one commit. It fails with
// a *ConflictError carrying the current object if the lock ran out (or
// was never taken) before the release arrived.
func (cl *Client) ReleaseWith(ctx context.Context, c Coord, id string, value []byte) (Object, error) {
	return cl.update(ctx, c, &pb.Request{Op: pb.Op_OP_RELEASE, ObjectId: id, Write: true, Value: value}, "release")
}

// Release gives the object's lock back.
func (cl *Client) Release(ctx context.Context, c Coord, id string) error {
	_, err := cl.update(ctx, c, &pb.Request{Op: pb.Op_OP_RELEASE, ObjectId: id}, "release")
	return err
}

// Subscribe delivers the region's committed updates; see Service.Subscribe.
func (cl *Client) Subscribe(c Coord) (*Subscription, error) { return cl.s.Subscribe(c) }

// Coordinator is Service.Coordinator.
func (cl *Client) Coordinator(c Coord) (coordinator, replica peer.ID) { return cl.s.Coordinator(c) }

func (cl *Client) update(ctx context.Context, c Coord, req *pb.Request, what string) (Object, error) {
	if err := validateObjectID(req.ObjectId); err != nil {
		return Object{}, fmt.Errorf("%s in region %s: %w", what, c, err)
	}
	if len(req.Value) > MaxValueSize {
		return Object{}, fmt.Errorf("%s %q in region %s: value of %d bytes, limit %d", what, req.ObjectId, c, len(req.Value), MaxValueSize)
	}
	r, err := cl.s.do(ctx, c, req)
	if err != nil {
		return Object{}, fmt.Errorf("%s %q in region %s: %w", what, req.ObjectId, c, err)
	}
	obj := objectFromPB(r.Object)
	obj.SingleCopy = r.SingleCopy
	switch r.Status {
	case pb.Status_STATUS_OK:
		if req.Op == pb.Op_OP_INITIALIZE || req.Op == pb.Op_OP_READ_WRITE || req.Write {
			obj.Value = append([]byte(nil), req.Value...)
			cl.s.absorb(c, r.Epoch, 0, []*pb.Entry{{Object: &pb.Object{Id: obj.ID, Value: obj.Value, Version: obj.Version}}}, false)
		}
		return obj, nil
	case pb.Status_STATUS_CONFLICT:
		return obj, &ConflictError{Region: c, Current: obj}
	case pb.Status_STATUS_LOCKED:
		return obj, &LockedError{Region: c, Object: obj}
	case pb.Status_STATUS_BUSY:
		return obj, fmt.Errorf("%s %q in region %s: %w", what, req.ObjectId, c, ErrBusy)
	default:
		return obj, fmt.Errorf("%s %q in region %s: %w: %s", what, req.ObjectId, c, ErrRejected, r.Error)
	}
}

// maxRedirects bounds the hops of one attempt before backing off.
const maxRedirects = 8

// do runs one request to completion: to the coordinator in this peer's
// view, following redirects, and on to the next peer if one fails.
func (s *Service) do(ctx context.Context, c Coord, req *pb.Request) (*pb.Reply, error) {
	if !s.cfg.Contains(c) {
		return nil, errOutside(c, s.cfg)
	}
	req.RequestId = newRequestID()
	// Signed by the player, so that a peer forwarding it while it takes
	// the region over cannot change whose request it is.
	req.OriginSignature = s.sign(requestDigest(s.cfg.World, c, req))
	var suspects []peer.ID
	var target peer.ID
	var lastErr error
	hops, retries := 0, 0
	backoff := 5 * time.Millisecond
	wait := func() error {
		t := time.NewTimer(backoff)
		defer t.Stop()
		backoff = min(2*backoff, 250*time.Millisecond)
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("%w (last: %v)", ctx.Err(), lastErr)
			}
			return ctx.Err()
		case <-s.ctx.Done():
			return errors.New("region service closed")
		case <-t.C:
			return nil
		}
	}
	for {
		if err := ctx.Err(); err != nil {
			// Not wait(): its timer may have fired too by the time it
			// selects (a goroutine held up past the backoff), and it
			// would return nil, a nil reply with no error.
			if lastErr != nil {
				return nil, fmt.Errorf("%w (last: %v)", err, lastErr)
			}
			return nil, err
		}
		if target == "" {
			order := s.placement(c, suspects...)
			if len(order) == 0 {
				order = s.placement(c)
			}
			target = order[0]
		}
		req.Suspects = req.Suspects[:0]
		for _, p := range suspects {
			req.Suspects = append(req.Suspects, []byte(p))
		}
		r, err := s.send(ctx, target, c, req)
		if err != nil {
			lastErr = err
			if !containsPeer(suspects, target) {
				suspects = append(suspects, target)
				if len(suspects) > MaxSuspects {
					suspects = suspects[1:]
				}
			}
			bad := target
			s.spawn(func() { s.probe(bad) })
			target = ""
			if err := wait(); err != nil {
				return nil, err
			}
			continue
		}
		switch r.Status {
		case pb.Status_STATUS_REDIRECT:
			next, err := peer.IDFromBytes(r.Redirect)
			hops++
			if err != nil || next == target || hops > maxRedirects {
				lastErr = fmt.Errorf("redirect loop at %s", target)
				target, hops = "", 0
				if err := wait(); err != nil {
					return nil, err
				}
				continue
			}
			target = next
		case pb.Status_STATUS_RETRY:
			lastErr = fmt.Errorf("%s: %s", target, r.Error)
			retries++
			if retries%4 == 0 {
				target = ""
			}
			if err := wait(); err != nil {
				return nil, err
			}
		case pb.Status_STATUS_DENIED:
			return nil, fmt.Errorf("%w: denied by %s: %s", ErrRejected, target, r.Error)
		case pb.Status_STATUS_BAD_REQUEST:
			return nil, fmt.Errorf("%w by %s: %s", ErrRejected, target, r.Error)
		default:
			return r, nil
		}
	}
}

// send delivers a request to p, or serves it here when p is this peer.
func (s *Service) send(ctx context.Context, p peer.ID, c Coord, req *pb.Request) (*pb.Reply, error) {
	if p == s.h.ID() {
		return s.serveRequest(p, c, req, ctx.Done()), nil
	}
	m, err := s.call(ctx, p, c, &pb.Message{Body: &pb.Message_Request{Request: req}})
	if err != nil {
		return nil, err
	}
	r := m.GetReply()
	if r == nil {
		return nil, fmt.Errorf("peer %s answered a request with %T", p, m.Body)
	}
	return r, nil
}
