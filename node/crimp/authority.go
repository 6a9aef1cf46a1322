package crimp

import (
	"cmp"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// AuthorityState is what the member holding the authority duty knows and
// the next holder needs: the duty epoch, who holds it, the next ID to
// assign, the members and their keys, and the recent drops. It travels in
// a hand-over packet, so it is bounded (MaxDutyGroup members,
// MaxHandedDrops drops) and versioned; every member can export its own
// view of it (Node.AuthorityState).
type AuthorityState struct {
	Epoch   uint64
	Holder  MemberID
	NextID  MemberID
	Members []MemberKey // ascending by ID, the holder included
	Dropped []MemberID  // ascending; members dropped recently, never to be reused as IDs
}

// MemberKey binds a member ID to the member's ed25519 public key.
type MemberKey struct {
	ID  MemberID
	Key ed25519.PublicKey
}

// Bounds of the duty mode.
const (
	// AuthorityStateVersion is the first byte of an encoded AuthorityState.
	AuthorityStateVersion = 1
	// MaxDutyGroup bounds the group when the authority is a duty: an
	// establishment then lists every member with its key, and a hand-over
	// the whole state, each within one packet.
	MaxDutyGroup = 24
	// MaxHandedDrops bounds the drops a hand-over carries.
	MaxHandedDrops = 16

	maxAuthorityStateSize = 1 + 8 + 4 + 4 + 1 + MaxDutyGroup*(4+KeySize) + 1 + MaxHandedDrops*4
)

// ErrAuthorityState is wrapped by UnmarshalAuthorityState's errors.
var ErrAuthorityState = errors.New("crimp: bad authority state")

// MarshalBinary encodes s:
//
//	version u8 | epoch u64 | holder u32 | nextID u32 | n u8 | n × (id u32 | key [32]) | d u8 | d × id u32
func (s AuthorityState) MarshalBinary() ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	b := make([]byte, 0, 19+len(s.Members)*(4+KeySize)+len(s.Dropped)*4)
	b = append(b, AuthorityStateVersion)
	b = binary.BigEndian.AppendUint64(b, s.Epoch)
	b = binary.BigEndian.AppendUint32(b, uint32(s.Holder))
	b = binary.BigEndian.AppendUint32(b, uint32(s.NextID))
	b = append(b, byte(len(s.Members)))
	for _, m := range s.Members {
		b = binary.BigEndian.AppendUint32(b, uint32(m.ID))
		b = append(b, m.Key...)
	}
	b = append(b, byte(len(s.Dropped)))
	for _, id := range s.Dropped {
		b = binary.BigEndian.AppendUint32(b, uint32(id))
	}
	return b, nil
}

// UnmarshalAuthorityState decodes and validates an encoded AuthorityState;
// it checks every count against its bound before it allocates.
func UnmarshalAuthorityState(b []byte) (AuthorityState, error) {
	if len(b) > maxAuthorityStateSize {
		return AuthorityState{}, fmt.Errorf("%w: %d bytes, limit %d", ErrAuthorityState, len(b), maxAuthorityStateSize)
	}
	r := reader{b: b}
	if v := r.u8(); r.err == nil && v != AuthorityStateVersion {
		return AuthorityState{}, fmt.Errorf("%w: version %d, want %d", ErrAuthorityState, v, AuthorityStateVersion)
	}
	s := AuthorityState{Epoch: r.u64(), Holder: MemberID(r.u32()), NextID: MemberID(r.u32())}
	n := int(r.u8())
	if n > MaxDutyGroup {
		return AuthorityState{}, fmt.Errorf("%w: %d members, limit %d", ErrAuthorityState, n, MaxDutyGroup)
	}
	for i := 0; i < n && r.err == nil; i++ {
		m := MemberKey{ID: MemberID(r.u32())}
		if k := r.take(KeySize); k != nil {
			m.Key = ed25519.PublicKey(slices.Clone(k))
		}
		s.Members = append(s.Members, m)
	}
	d := int(r.u8())
	if d > MaxHandedDrops {
		return AuthorityState{}, fmt.Errorf("%w: %d drops, limit %d", ErrAuthorityState, d, MaxHandedDrops)
	}
	for i := 0; i < d && r.err == nil; i++ {
		s.Dropped = append(s.Dropped, MemberID(r.u32()))
	}
	if r.err != nil {
		return AuthorityState{}, fmt.Errorf("%w: %w", ErrAuthorityState, r.err)
	}
	if r.off != len(b) {
		return AuthorityState{}, fmt.Errorf("%w: %d trailing bytes", ErrAuthorityState, len(b)-r.off)
	}
	if err := s.Validate(); err != nil {
		return AuthorityState{}, err
	}
	return s, nil
}

// Validate checks the rules of a state: a non-zero epoch, a holder among
// the members, members ascending with keys, drops ascending and none a
// member, every ID below NextID, within the bounds.
func (s AuthorityState) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrAuthorityState, fmt.Sprintf(format, args...))
	}
	switch {
	case s.Epoch == 0:
		return bad("epoch 0")
	case len(s.Members) == 0 || len(s.Members) > MaxDutyGroup:
		return bad("%d members outside [1, %d]", len(s.Members), MaxDutyGroup)
	case len(s.Dropped) > MaxHandedDrops:
		return bad("%d drops over %d", len(s.Dropped), MaxHandedDrops)
	}
	holder := false
	for i, m := range s.Members {
		if m.ID == 0 || i > 0 && m.ID <= s.Members[i-1].ID {
			return bad("member %d out of order or zero", m.ID)
		}
		if len(m.Key) != KeySize {
			return bad("member %d has a %d-byte key", m.ID, len(m.Key))
		}
		if m.ID >= s.NextID {
			return bad("member %d not below next ID %d", m.ID, s.NextID)
		}
		holder = holder || m.ID == s.Holder
	}
	if !holder {
		return bad("holder %d is not a member", s.Holder)
	}
	for i, id := range s.Dropped {
		if id == 0 || i > 0 && id <= s.Dropped[i-1] {
			return bad("drop %d out of order or zero", id)
		}
		if _, ok := slices.BinarySearchFunc(s.Members, id, func(m MemberKey, id MemberID) int { return cmp.Compare(m.ID, id) }); ok {
			return bad("member %d is also dropped", id)
		}
	}
	return nil
}
