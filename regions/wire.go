package regions

import (
	"bufio"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/node/pbframe"
	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// ProtocolID is the region protocol's stream protocol.
const ProtocolID = "/overworld/region/1.0.0"

// Bounds of everything the protocol carries. A message outside them is
// refused before it touches any state.
const (
	MaxObjectIDLen     = 64
	MaxValueSize       = 4 << 10
	MaxObjectsInRegion = 256
	MaxMapSize         = 64 << 10
	MaxLockTTL         = 60_000 // milliseconds
	MaxTokenSize       = 2 << 10
	MaxWorldNameLen    = 64
	MaxSuspects        = 4
	MaxEntriesPerSend  = 256
	// maxDone bounds the remembered request IDs per region; a retry older
	// than that many commits is no longer recognised.
	maxDone      = 4096
	requestIDLen = 16
	maxPeerIDLen = 128
	// MaxFrameSize bounds one frame: a snapshot of a full region (objects,
	// remembered request IDs and the map) fits with room to spare.
	MaxFrameSize = 4 << 20
	// maxEventSize bounds one event on a region topic.
	maxEventSize = 256 << 10
)

// writeRequest writes what the opener of a stream sends: its token frame,
// then the message frame (the handler checks the token before it reads
// the message), in one write.
func writeRequest(w io.Writer, token []byte, m *pb.Message) error {
	if len(token) > MaxTokenSize {
		return fmt.Errorf("token of %d bytes: limit %d", len(token), MaxTokenSize)
	}
	buf, err := pbframe.AppendMessage(pbframe.Append(nil, token), m, MaxFrameSize)
	if err != nil {
		return fmt.Errorf("encode message: %w", err)
	}
	_, err = w.Write(buf)
	return err
}

func writeMessage(w io.Writer, m *pb.Message) error {
	_, err := pbframe.WriteMessage(w, m, MaxFrameSize)
	return err
}

// decodeMessage decodes and validates one frame body.
func decodeMessage(body []byte) (*pb.Message, error) {
	if len(body) > MaxFrameSize {
		return nil, fmt.Errorf("%w: %d bytes", pbframe.ErrTooLarge, len(body))
	}
	var m pb.Message
	if err := proto.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("decode message: %w", err)
	}
	if err := validateMessage(&m); err != nil {
		return nil, err
	}
	return &m, nil
}

func readMessage(r *bufio.Reader) (*pb.Message, error) {
	body, err := pbframe.Read(r, MaxFrameSize)
	if err != nil {
		return nil, err
	}
	return decodeMessage(body)
}

// validateMessage checks every field's bounds and shape.
func validateMessage(m *pb.Message) error {
	if len(m.World) == 0 || len(m.World) > MaxWorldNameLen {
		return fmt.Errorf("world name of %d bytes: want 1..%d", len(m.World), MaxWorldNameLen)
	}
	if m.X < 0 || m.Y < 0 {
		return fmt.Errorf("region %d,%d: negative coordinate", m.X, m.Y)
	}
	if len(m.Token) > MaxTokenSize {
		return fmt.Errorf("token of %d bytes: limit %d", len(m.Token), MaxTokenSize)
	}
	switch b := m.Body.(type) {
	case *pb.Message_Request:
		return validateRequest(b.Request)
	case *pb.Message_Reply:
		return validateReply(b.Reply)
	case *pb.Message_Replicate:
		return validateReplicate(b.Replicate)
	case *pb.Message_ReplicateAck:
		if b.ReplicateAck.Epoch > maxEpoch || len(b.ReplicateAck.Grant) > maxGrantLen {
			return errors.New("replicate ack: epoch or grant out of bounds")
		}
		return validatePeerField("coordinator", b.ReplicateAck.Coordinator, true)
	case *pb.Message_InfoReply:
		if _, ok := pb.Role_name[int32(b.InfoReply.Role)]; !ok {
			return fmt.Errorf("info reply: unknown role %d", b.InfoReply.Role)
		}
		if b.InfoReply.Epoch > maxEpoch || len(b.InfoReply.Grant) > maxGrantLen {
			return errors.New("info reply: epoch or grant out of bounds")
		}
		if err := validatePeerField("replica", b.InfoReply.Replica, true); err != nil {
			return err
		}
		if err := validateAssignment(b.InfoReply.Assignment); err != nil {
			return fmt.Errorf("info reply: %w", err)
		}
		return validatePeerField("coordinator", b.InfoReply.Coordinator, true)
	case *pb.Message_HandoffReply:
		if b.HandoffReply.Ok && b.HandoffReply.Snapshot == nil {
			return errors.New("handoff reply: ok without snapshot")
		}
		if len(b.HandoffReply.Grant) > maxGrantLen {
			return errors.New("handoff reply: grant too long")
		}
		if len(b.HandoffReply.Error) > 512 {
			return errors.New("handoff reply: error text too long")
		}
		if err := validateAssignment(b.HandoffReply.Assignment); err != nil {
			return fmt.Errorf("handoff reply: %w", err)
		}
		if err := validateSeal(b.HandoffReply.Seal); err != nil {
			return fmt.Errorf("handoff reply: %w", err)
		}
		if err := validateSnapshot(b.HandoffReply.Snapshot); err != nil {
			return err
		}
		return validatePeerField("redirect", b.HandoffReply.Redirect, true)
	case *pb.Message_CacheReply:
		if b.CacheReply.Epoch > maxEpoch || len(b.CacheReply.Entries) > MaxObjectsInRegion {
			return errors.New("cache reply: epoch or entries out of bounds")
		}
		for i, se := range b.CacheReply.Entries {
			if err := validateSignedEntry(se); err != nil {
				return fmt.Errorf("cache reply entry %d: %w", i, err)
			}
		}
		return validateObjects(b.CacheReply.Objects)
	case *pb.Message_Ack:
		if len(b.Ack.Error) > 512 {
			return errors.New("ack: error text too long")
		}
		return nil
	case *pb.Message_Handoff:
		if len(b.Handoff.Grant) > maxGrantLen {
			return errors.New("handoff: grant too long")
		}
		return nil
	case *pb.Message_Info, *pb.Message_Retire, *pb.Message_Nudge,
		*pb.Message_CacheQuery, *pb.Message_Ping:
		return nil
	case nil:
		return errors.New("message without body")
	default:
		return fmt.Errorf("unknown message body %T", b)
	}
}

// validateAssignment checks an optional assignment's bounds and shape
// (its signature is checked where the claim it proves is believed).
func validateAssignment(a *pb.Assignment) error {
	if a == nil {
		return nil
	}
	if a.Epoch > maxEpoch || len(a.Signature) == 0 || len(a.Signature) > maxSignatureLen {
		return errors.New("assignment: epoch or signature out of bounds")
	}
	return validatePeerField("assignment holder", a.Holder, false)
}

// validateSeal checks an optional seal's bounds and shape (its signature
// is checked where the copy it covers is taken over).
func validateSeal(s *pb.Seal) error {
	if s == nil {
		return nil
	}
	if s.Epoch > maxEpoch || len(s.StateHash) != sha256.Size || len(s.Signature) == 0 || len(s.Signature) > maxSignatureLen {
		return errors.New("seal: epoch, hash or signature out of bounds")
	}
	return nil
}

func validatePeerField(name string, b []byte, optional bool) error {
	if len(b) == 0 {
		if optional {
			return nil
		}
		return fmt.Errorf("%s: missing peer ID", name)
	}
	if len(b) > maxPeerIDLen {
		return fmt.Errorf("%s: peer ID of %d bytes", name, len(b))
	}
	if _, err := peer.IDFromBytes(b); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

func validateObjectID(id string) error {
	if len(id) == 0 || len(id) > MaxObjectIDLen {
		return fmt.Errorf("object ID of %d bytes: want 1..%d", len(id), MaxObjectIDLen)
	}
	return nil
}

func validateRequest(r *pb.Request) error {
	if r == nil {
		return errors.New("empty request")
	}
	if len(r.RequestId) != requestIDLen {
		return fmt.Errorf("request ID of %d bytes: want %d", len(r.RequestId), requestIDLen)
	}
	if len(r.Suspects) > MaxSuspects {
		return fmt.Errorf("%d suspects: limit %d", len(r.Suspects), MaxSuspects)
	}
	for _, s := range r.Suspects {
		if err := validatePeerField("suspect", s, false); err != nil {
			return err
		}
	}
	if err := validatePeerField("origin", r.Origin, true); err != nil {
		return err
	}
	if len(r.OriginSignature) > maxSignatureLen {
		return fmt.Errorf("origin signature of %d bytes", len(r.OriginSignature))
	}
	if len(r.Value) > MaxValueSize {
		return fmt.Errorf("value of %d bytes: limit %d", len(r.Value), MaxValueSize)
	}
	if r.Write && r.Op != pb.Op_OP_RELEASE {
		return fmt.Errorf("write flag on op %s: only a release writes", r.Op)
	}
	switch r.Op {
	case pb.Op_OP_GET:
		return nil
	case pb.Op_OP_INITIALIZE, pb.Op_OP_READ_WRITE, pb.Op_OP_RELEASE:
		return validateObjectID(r.ObjectId)
	case pb.Op_OP_LOCK:
		if r.LockTtlMs == 0 || r.LockTtlMs > MaxLockTTL {
			return fmt.Errorf("lock TTL %d ms: want 1..%d", r.LockTtlMs, MaxLockTTL)
		}
		return validateObjectID(r.ObjectId)
	default:
		return fmt.Errorf("unknown op %d", r.Op)
	}
}

func validateReply(r *pb.Reply) error {
	if r == nil {
		return errors.New("empty reply")
	}
	if _, ok := pb.Status_name[int32(r.Status)]; !ok || r.Status == pb.Status_STATUS_UNSPECIFIED {
		return fmt.Errorf("reply: bad status %d", r.Status)
	}
	if len(r.Map) > MaxMapSize {
		return fmt.Errorf("reply: map of %d bytes", len(r.Map))
	}
	if len(r.Error) > 512 {
		return errors.New("reply: error text too long")
	}
	if r.Object != nil {
		if err := validateObject(r.Object); err != nil {
			return err
		}
	}
	if err := validateObjects(r.Objects); err != nil {
		return err
	}
	if r.Status == pb.Status_STATUS_REDIRECT {
		return validatePeerField("redirect", r.Redirect, false)
	}
	return nil
}

func validateObject(o *pb.Object) error {
	if o == nil {
		return errors.New("nil object")
	}
	if err := validateObjectID(o.Id); err != nil {
		return err
	}
	if o.Version > maxVersion {
		return fmt.Errorf("object %q: version %d over the bound", o.Id, o.Version)
	}
	if len(o.Value) > MaxValueSize {
		return fmt.Errorf("object %q: value of %d bytes, limit %d", o.Id, len(o.Value), MaxValueSize)
	}
	if o.LockSinceMs < 0 || o.LockSinceMs > o.LockExpiresMs {
		return fmt.Errorf("object %q: lock taken at %d ms, expiring at %d ms", o.Id, o.LockSinceMs, o.LockExpiresMs)
	}
	return validatePeerField("lock holder", o.LockHolder, true)
}

func validateObjects(objs []*pb.Object) error {
	if len(objs) > MaxObjectsInRegion {
		return fmt.Errorf("%d objects: limit %d", len(objs), MaxObjectsInRegion)
	}
	seen := make(map[string]bool, len(objs))
	for _, o := range objs {
		if err := validateObject(o); err != nil {
			return err
		}
		if seen[o.Id] {
			return fmt.Errorf("object %q listed twice", o.Id)
		}
		seen[o.Id] = true
	}
	return nil
}

func validateDone(d *pb.Done) error {
	if d == nil {
		return errors.New("nil done record")
	}
	if len(d.RequestId) != requestIDLen {
		return fmt.Errorf("done record: request ID of %d bytes", len(d.RequestId))
	}
	return nil
}

func validateSnapshot(s *pb.Snapshot) error {
	if s == nil {
		return nil
	}
	if s.Epoch > maxEpoch {
		return fmt.Errorf("snapshot: epoch %d over the bound", s.Epoch)
	}
	if err := validateObjects(s.Objects); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if len(s.Done) > maxDone {
		return fmt.Errorf("snapshot: %d done records, limit %d", len(s.Done), maxDone)
	}
	for _, d := range s.Done {
		if err := validateDone(d); err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
	}
	return nil
}

func validateEntries(entries []*pb.Entry) error {
	if len(entries) > MaxEntriesPerSend {
		return fmt.Errorf("%d entries: limit %d", len(entries), MaxEntriesPerSend)
	}
	for i, e := range entries {
		if e == nil || e.Object == nil {
			return fmt.Errorf("entry %d: empty", i)
		}
		if i > 0 && e.Seq != entries[i-1].Seq+1 {
			return fmt.Errorf("entry %d: seq %d after %d", i, e.Seq, entries[i-1].Seq)
		}
		if err := validateObject(e.Object); err != nil {
			return fmt.Errorf("entry %d: %w", i, err)
		}
		if err := validateDone(e.Done); err != nil {
			return fmt.Errorf("entry %d: %w", i, err)
		}
	}
	return nil
}

func validateReplicate(r *pb.Replicate) error {
	if r == nil {
		return errors.New("empty replicate")
	}
	if r.Epoch == 0 || r.Epoch > maxEpoch {
		return fmt.Errorf("replicate: epoch %d out of bounds", r.Epoch)
	}
	if len(r.Grant) > maxGrantLen {
		return errors.New("replicate: grant too long")
	}
	if (r.Snapshot == nil) == (len(r.Entries) == 0) {
		return errors.New("replicate: want either a snapshot or entries")
	}
	if err := validateAssignment(r.Assignment); err != nil {
		return fmt.Errorf("replicate: %w", err)
	}
	if err := validateSeal(r.Seal); err != nil {
		return fmt.Errorf("replicate: %w", err)
	}
	if r.Snapshot != nil && r.Snapshot.Epoch != r.Epoch {
		return fmt.Errorf("replicate: snapshot epoch %d in message of epoch %d", r.Snapshot.Epoch, r.Epoch)
	}
	if err := validateSnapshot(r.Snapshot); err != nil {
		return err
	}
	return validateEntries(r.Entries)
}

// maxGrantLen bounds an encoded lease grant (the lease service's
// leases.MaxProofLen).
const maxGrantLen = 512

func validateSignedEntry(se *pb.SignedEntry) error {
	if se == nil || se.Entry == nil {
		return errors.New("empty signed entry")
	}
	if se.Epoch == 0 || se.Epoch > maxEpoch {
		return fmt.Errorf("signed entry: epoch %d out of bounds", se.Epoch)
	}
	if len(se.Grant) > maxGrantLen || len(se.Signature) == 0 || len(se.Signature) > maxSignatureLen {
		return errors.New("signed entry: grant or signature out of bounds")
	}
	if err := validatePeerField("author", se.Author, false); err != nil {
		return err
	}
	return validateEntries([]*pb.Entry{se.Entry})
}

// decodeEvent decodes and validates a region event from the topic.
func decodeEvent(data []byte) (*pb.Event, error) {
	if len(data) > maxEventSize {
		return nil, fmt.Errorf("event of %d bytes: limit %d", len(data), maxEventSize)
	}
	var ev pb.Event
	if err := proto.Unmarshal(data, &ev); err != nil {
		return nil, fmt.Errorf("decode event: %w", err)
	}
	if len(ev.World) == 0 || len(ev.World) > MaxWorldNameLen || ev.X < 0 || ev.Y < 0 {
		return nil, errors.New("event: bad region name")
	}
	if ev.Epoch == 0 || ev.Epoch > maxEpoch || len(ev.Entries) == 0 {
		return nil, errors.New("event: epoch out of bounds or no entries")
	}
	if len(ev.Grant) > maxGrantLen || len(ev.EntrySignatures) != len(ev.Entries) {
		return nil, errors.New("event: grant too long or entries not each signed")
	}
	for _, sig := range ev.EntrySignatures {
		if len(sig) == 0 || len(sig) > maxSignatureLen {
			return nil, errors.New("event: entry signature out of bounds")
		}
	}
	if err := validateEntries(ev.Entries); err != nil {
		return nil, fmt.Errorf("event: %w", err)
	}
	return &ev, nil
}
