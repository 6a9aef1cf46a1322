package crimp

import (
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// The wire format is a fixed little binary layout rather than protobuf: CRIMP
// packets are tiny game commands on a UDP multicast group, every byte of the
// header is paid on every packet (and k times over with FEC), and a fixed
// layout decodes with exact bounds checks and no reflection.
//
// Every packet starts with the same 14-byte header:
//
//	version u8 | kind u8 | sender u32 | time i64 (sender's clock, Unix ns)
//
// followed by a body that depends on the kind (all integers big-endian):
//
//	data         seq u32 | len u16 | payload | nfec u8 | nfec × (seq u32 | sentAt i64 | len u16 | payload)
//	request      source u32 | seq u32
//	repair       source u32 | seq u32 | sentAt i64 | len u16 | payload
//	session      nextSeq u32 | oldestSeq u32 | epoch u64 | follows u8 | keys u64 | n u8 | n × (peer u32 | time i64 | hold µs u32) |
//	             m u8 | m × (source u32 | next u32)
//	request-join nonce u64 | key | cert
//	establish    nonce u64 | member u32 | epoch u64 | key | holderKey | cert | addrLen u8 | addr | n u8 | n × (member u32 | key) | signature
//	deny         nonce u64 | reason u8 | epoch u64 | holderKey | cert | signature
//	drop         member u32 | epoch u64 | signature
//	handover     len u16 | authority state (AuthorityState.MarshalBinary) | signature
//	vote         epoch u64 | candidate u32 | vote signature
//	takeover     epoch u64 | nextID u32 | n u8 | n × (voter u32 | vote signature) | signature
//	datagram     len u16 | payload
//
// where key and holderKey are len u8 (0 or 32) | ed25519 public key, and
// cert is len u8 (0 or 64) | the group key's signature over the key.
//
// The membership decisions (establish, deny, drop) are the authority's alone:
// each ends with the authority's ed25519 signature (64 bytes) over every
// byte before it, header included, so no other member can forge or alter
// one. With a fixed authority the Node checks it with
// Config.AuthorityPublicKey; when the authority is a duty that moves (see
// duty.go) the decisions also carry the duty epoch and are signed with the
// key of the member holding the duty in that epoch, and so are the
// hand-over (signed by the holder that gives the duty up) and the takeover
// (signed by the new holder, carrying the votes of a majority, each signed
// by its voter). Decode only takes the signatures.
//
// A packet must be consumed exactly: trailing bytes are an error.

// Version is the wire format version carried in every packet's first byte.
// Version 2 added the authority's signature to establish, deny and drop;
// version 3 the duty epoch, member keys, hand-over, vote and takeover;
// version 4 the tails of dropped members in session packets.
const Version = 4

// SignatureSize is the length of the authority's signature on membership
// packets.
const SignatureSize = ed25519.SignatureSize

// Wire bounds. A decoder rejects anything beyond them before it allocates.
const (
	// MaxPacketSize is the largest datagram CRIMP sends or accepts; it keeps
	// a packet inside one Ethernet frame.
	MaxPacketSize = 1400
	// MaxPayload is the largest application payload of one data packet.
	MaxPayload = 1200
	// MaxFEC is the most earlier payloads a data packet may carry.
	MaxFEC = 8
	// MaxMembers bounds the group size, the session echo list and the
	// member list of an establishment.
	MaxMembers = 64
	// maxAddrLen bounds the state-transfer address in an establishment.
	maxAddrLen = 255
	// KeySize is the length of a member's ed25519 public key on the wire;
	// CertSize that of the group key's certificate of it.
	KeySize  = ed25519.PublicKeySize
	CertSize = ed25519.SignatureSize

	headerSize = 14
)

// MemberID names a member of the group. 0 means "not yet established".
type MemberID uint32

// Kind is the type of a packet.
type Kind uint8

// Packet kinds.
const (
	KindData Kind = iota + 1
	KindRequest
	KindRepair
	KindSession
	KindRequestJoin
	KindEstablish
	KindDeny
	KindDrop
	KindHandover
	KindVote
	KindTakeover
	// KindDatagram is an unreliable payload: multicast once, never
	// numbered, stored, requested or repaired (Node.SendUnreliable).
	KindDatagram
	kindEnd
)

var kindNames = [...]string{"invalid", "data", "request", "repair", "session", "request-join", "establish", "deny", "drop",
	"handover", "vote", "takeover", "datagram"}

func (k Kind) String() string {
	if k < kindEnd {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// DenyReason says why the authority refused a join.
type DenyReason uint8

// Deny reasons.
const (
	DenyFull DenyReason = iota + 1
	DenyClosed
)

func (r DenyReason) String() string {
	switch r {
	case DenyFull:
		return "group full"
	case DenyClosed:
		return "group closed to new members"
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Redundant is an earlier payload piggybacked on a data packet (FEC).
type Redundant struct {
	Seq     uint32
	SentAt  int64
	Payload []byte
}

// Echo is one entry of a session packet: the time of the last session packet
// heard from Peer (in Peer's clock) and how long the reporter held it before
// this session, so that Peer can compute the round trip without synchronized
// clocks (as SRM's session messages do).
type Echo struct {
	Peer       MemberID
	Time       int64
	HoldMicros uint32
}

// Tail is one entry of a session packet: how far the reporter has heard a
// dropped member whose packets it still recovers and repairs (draining):
// Next is the sequence number after the highest it knows that member sent.
// A member that missed the dropped member's last packets learns of them
// here, since the dropped member itself says nothing any more.
type Tail struct {
	Source MemberID
	Next   uint32
}

// Packet is one decoded CRIMP packet. Which fields are meaningful depends on
// Kind; the others are zero.
type Packet struct {
	Kind   Kind
	Sender MemberID
	Time   int64 // when the packet was sent, sender's clock, Unix ns

	Source  MemberID // request, repair: the original sender of the data
	Seq     uint32   // data, request, repair
	SentAt  int64    // repair: original send time of the data
	Payload []byte   // data, repair, datagram
	FEC     []Redundant

	NextSeq   uint32 // session: the next sequence number the sender will use
	OldestSeq uint32 // session: the oldest of its own packets it still holds
	Echoes    []Echo
	Tails     []Tail // session: the dropped members the sender drains, ascending

	Nonce     uint64     // request-join, establish, deny
	Member    MemberID   // establish, drop
	StateAddr string     // establish: where the authority serves state over TCP
	Members   []MemberID // establish: the members the newcomer should know
	Reason    DenyReason // deny

	// Duty mode (see duty.go).
	Epoch     uint64          // session, establish, deny, drop, vote, takeover: the duty epoch
	Follows   bool            // session: the sender follows the holder of Epoch (has not voted it out)
	KeysSum   uint64          // session: a digest of the member keys the sender knows
	Key       []byte          // request-join: the joiner's public key; establish: the new member's
	HolderKey []byte          // establish, deny: the holder's public key (for a joiner)
	Cert      []byte          // request-join: the joiner's certificate; establish, deny: the holder's
	Keys      [][]byte        // establish: the keys of Members, in order
	Authority *AuthorityState // handover: the duty state the next holder takes
	NextID    MemberID        // takeover: the next ID the new holder assigns
	VoteSig   []byte          // vote: the voter's signature of VoteMessage(Epoch, Member)
	Votes     []Vote          // takeover: the majority's votes for the sender

	// Signature is the signature of the member holding the authority over
	// the encoded packet before it (establish, deny, drop, handover,
	// takeover): SignatureSize bytes.
	Signature []byte
}

// Vote is one member's signed vote in a takeover.
type Vote struct {
	Voter MemberID
	Sig   []byte
}

// AuthoritySigned reports whether packets of kind k carry the authority's
// signature: the membership decisions only the authority may take, and the
// moves of the duty itself.
func AuthoritySigned(k Kind) bool {
	return k == KindEstablish || k == KindDeny || k == KindDrop || k == KindHandover || k == KindTakeover
}

// VoteMessage is what a voter signs: its vote for candidate to hold the
// duty in epoch.
func VoteMessage(epoch uint64, candidate MemberID) []byte {
	b := append([]byte(nil), "crimp-vote"...)
	b = binary.BigEndian.AppendUint64(b, epoch)
	return binary.BigEndian.AppendUint32(b, uint32(candidate))
}

// SignedPart is the part of an encoded authority-signed packet that its
// signature covers: everything but the trailing signature.
func SignedPart(b []byte) []byte {
	if len(b) < SignatureSize {
		return nil
	}
	return b[:len(b)-SignatureSize]
}

// Errors returned by Decode; wrapped with detail.
var (
	ErrShort     = errors.New("crimp: packet truncated")
	ErrTrailing  = errors.New("crimp: trailing bytes after packet")
	ErrVersion   = errors.New("crimp: unsupported version")
	ErrKind      = errors.New("crimp: unknown packet kind")
	ErrTooLarge  = errors.New("crimp: packet too large")
	ErrMalformed = errors.New("crimp: malformed packet")
)

// Decode parses and validates one packet. The returned packet does not alias
// b: payloads are copied, so the caller may reuse its receive buffer.
func Decode(b []byte) (*Packet, error) {
	if len(b) > MaxPacketSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(b), MaxPacketSize)
	}
	r := reader{b: b}
	version := r.u8()
	kind := Kind(r.u8())
	p := &Packet{Kind: kind, Sender: MemberID(r.u32()), Time: int64(r.u64())}
	if r.err != nil {
		return nil, fmt.Errorf("header: %w", r.err)
	}
	if version != Version {
		return nil, fmt.Errorf("%w: %d (want %d)", ErrVersion, version, Version)
	}
	if kind == 0 || kind >= kindEnd {
		return nil, fmt.Errorf("%w: %d", ErrKind, uint8(kind))
	}
	if p.Sender == 0 && kind != KindRequestJoin {
		return nil, fmt.Errorf("%w: %s from member 0", ErrMalformed, kind)
	}
	switch kind {
	case KindData:
		p.Seq = r.u32()
		p.Payload = r.bytes16(MaxPayload)
		n := int(r.u8())
		if r.err == nil && n > MaxFEC {
			return nil, fmt.Errorf("%w: %d FEC entries, limit %d", ErrMalformed, n, MaxFEC)
		}
		for i := 0; i < n && r.err == nil; i++ {
			red := Redundant{Seq: r.u32(), SentAt: int64(r.u64())}
			red.Payload = r.bytes16(MaxPayload)
			p.FEC = append(p.FEC, red)
		}
	case KindRequest:
		p.Source, p.Seq = MemberID(r.u32()), r.u32()
	case KindRepair:
		p.Source, p.Seq, p.SentAt = MemberID(r.u32()), r.u32(), int64(r.u64())
		p.Payload = r.bytes16(MaxPayload)
	case KindSession:
		p.NextSeq, p.OldestSeq = r.u32(), r.u32()
		p.Epoch = r.u64()
		switch f := r.u8(); {
		case f > 1 && r.err == nil:
			return nil, fmt.Errorf("%w: session flags %d", ErrMalformed, f)
		case f == 1:
			p.Follows = true
		}
		p.KeysSum = r.u64()
		n := int(r.u8())
		if r.err == nil && n > MaxMembers {
			return nil, fmt.Errorf("%w: %d echoes, limit %d", ErrMalformed, n, MaxMembers)
		}
		for i := 0; i < n && r.err == nil; i++ {
			p.Echoes = append(p.Echoes, Echo{Peer: MemberID(r.u32()), Time: int64(r.u64()), HoldMicros: r.u32()})
		}
		m := int(r.u8())
		if r.err == nil && m > MaxMembers {
			return nil, fmt.Errorf("%w: %d tails, limit %d", ErrMalformed, m, MaxMembers)
		}
		for i := 0; i < m && r.err == nil; i++ {
			p.Tails = append(p.Tails, Tail{Source: MemberID(r.u32()), Next: r.u32()})
		}
	case KindRequestJoin:
		p.Nonce = r.u64()
		p.Key, p.Cert = r.sized(KeySize), r.sized(CertSize)
	case KindEstablish:
		p.Nonce, p.Member, p.Epoch = r.u64(), MemberID(r.u32()), r.u64()
		p.Key, p.HolderKey, p.Cert = r.sized(KeySize), r.sized(KeySize), r.sized(CertSize)
		p.StateAddr = string(r.bytes8())
		n := int(r.u8())
		if r.err == nil && n > MaxMembers {
			return nil, fmt.Errorf("%w: %d members, limit %d", ErrMalformed, n, MaxMembers)
		}
		for i := 0; i < n && r.err == nil; i++ {
			p.Members = append(p.Members, MemberID(r.u32()))
			p.Keys = append(p.Keys, r.sized(KeySize))
		}
		if !slices.ContainsFunc(p.Keys, func(k []byte) bool { return k != nil }) {
			p.Keys = nil // a fixed authority's group has no member keys
		}
	case KindDeny:
		p.Nonce, p.Reason, p.Epoch = r.u64(), DenyReason(r.u8()), r.u64()
		p.HolderKey, p.Cert = r.sized(KeySize), r.sized(CertSize)
	case KindDrop:
		p.Member, p.Epoch = MemberID(r.u32()), r.u64()
	case KindDatagram:
		p.Payload = r.bytes16(MaxPayload)
	case KindHandover:
		if st := r.bytes16(maxAuthorityStateSize); r.err == nil {
			a, err := UnmarshalAuthorityState(st)
			if err != nil {
				return nil, fmt.Errorf("%w: handover: %w", ErrMalformed, err)
			}
			p.Authority = &a
		}
	case KindVote:
		p.Epoch, p.Member = r.u64(), MemberID(r.u32())
		if sig := r.take(SignatureSize); sig != nil {
			p.VoteSig = append([]byte(nil), sig...)
		}
	case KindTakeover:
		p.Epoch, p.NextID = r.u64(), MemberID(r.u32())
		n := int(r.u8())
		if r.err == nil && n > MaxDutyGroup {
			return nil, fmt.Errorf("%w: %d votes, limit %d", ErrMalformed, n, MaxDutyGroup)
		}
		for i := 0; i < n && r.err == nil; i++ {
			v := Vote{Voter: MemberID(r.u32())}
			if sig := r.take(SignatureSize); sig != nil {
				v.Sig = append([]byte(nil), sig...)
			}
			p.Votes = append(p.Votes, v)
		}
	}
	if AuthoritySigned(kind) {
		if sig := r.take(SignatureSize); sig != nil {
			p.Signature = append([]byte(nil), sig...)
		}
	}
	if r.err != nil {
		return nil, fmt.Errorf("%s body: %w", kind, r.err)
	}
	if r.off != len(b) {
		return nil, fmt.Errorf("%w: %s has %d extra bytes", ErrTrailing, kind, len(b)-r.off)
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// validate checks the semantic rules a well-formed packet must follow.
func (p *Packet) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrMalformed, p.Kind, fmt.Sprintf(format, args...))
	}
	switch p.Kind {
	case KindData:
		if p.Seq == 0 {
			return bad("sequence 0")
		}
		prev := p.Seq
		for _, red := range p.FEC {
			if red.Seq == 0 || red.Seq >= prev {
				return bad("FEC sequence %d not below %d", red.Seq, prev)
			}
			if p.Seq-red.Seq > 255 {
				return bad("FEC sequence %d too far behind %d", red.Seq, p.Seq)
			}
			prev = red.Seq
		}
	case KindRequest, KindRepair:
		if p.Source == 0 || p.Seq == 0 {
			return bad("source %d sequence %d", p.Source, p.Seq)
		}
	case KindSession:
		if p.NextSeq == 0 || p.OldestSeq == 0 || p.OldestSeq > p.NextSeq {
			return bad("oldest %d next %d", p.OldestSeq, p.NextSeq)
		}
		for i, t := range p.Tails {
			if t.Source == 0 || t.Source == p.Sender || t.Next == 0 || i > 0 && t.Source <= p.Tails[i-1].Source {
				return bad("tail %d of member %d at %d (tails must be ascending, of other members)", i, t.Source, t.Next)
			}
		}
	case KindRequestJoin:
		if err := checkKeyCert(p.Key, p.Cert); err != nil {
			return bad("%v", err)
		}
	case KindEstablish:
		if p.Member == 0 {
			return bad("member 0")
		}
		if len(p.Keys) != 0 && len(p.Keys) != len(p.Members) {
			return bad("%d keys for %d members", len(p.Keys), len(p.Members))
		}
		for i, m := range p.Members {
			if m == 0 || m == p.Member {
				return bad("member list holds %d", m)
			}
			if l := len(p.keyOf(i)); l != 0 && l != KeySize {
				return bad("key of %d bytes", l)
			}
		}
		if l := len(p.Key); l != 0 && l != KeySize {
			return bad("key of %d bytes", l)
		}
		if err := checkKeyCert(p.HolderKey, p.Cert); err != nil {
			return bad("%v", err)
		}
	case KindDeny:
		if p.Reason == 0 {
			return bad("reason 0")
		}
		if err := checkKeyCert(p.HolderKey, p.Cert); err != nil {
			return bad("%v", err)
		}
	case KindDrop:
		if p.Member == 0 {
			return bad("member 0")
		}
	case KindHandover:
		if p.Authority == nil {
			return bad("no authority state")
		}
		if err := p.Authority.Validate(); err != nil {
			return bad("%v", err)
		}
	case KindVote:
		if p.Epoch == 0 || p.Member == 0 || len(p.VoteSig) != SignatureSize {
			return bad("epoch %d candidate %d with a %d-byte signature", p.Epoch, p.Member, len(p.VoteSig))
		}
	case KindTakeover:
		if p.Epoch == 0 || p.NextID == 0 || len(p.Votes) == 0 || len(p.Votes) > MaxDutyGroup {
			return bad("epoch %d next ID %d with %d votes", p.Epoch, p.NextID, len(p.Votes))
		}
		for i, v := range p.Votes {
			if v.Voter == 0 || len(v.Sig) != SignatureSize || i > 0 && v.Voter <= p.Votes[i-1].Voter {
				return bad("vote %d of member %d (votes must be ascending, signed)", i, v.Voter)
			}
		}
	}
	if p.Kind != KindSession && p.Follows {
		return bad("follows flag")
	}
	return nil
}

// keyOf is the key of the i-th of an establishment's Members (nil when the
// group has no member keys).
func (p *Packet) keyOf(i int) []byte {
	if i < len(p.Keys) {
		return p.Keys[i]
	}
	return nil
}

// checkKeyCert checks the sizes of a key and its certificate: a key is
// absent or KeySize bytes, a certificate absent or CertSize bytes, and no
// certificate without a key.
func checkKeyCert(key, cert []byte) error {
	switch {
	case len(key) != 0 && len(key) != KeySize:
		return fmt.Errorf("key of %d bytes", len(key))
	case len(cert) != 0 && len(cert) != CertSize:
		return fmt.Errorf("certificate of %d bytes", len(cert))
	case len(cert) != 0 && len(key) == 0:
		return errors.New("certificate without a key")
	}
	return nil
}

// Encode appends the wire form of p to dst. It fails if p would not decode
// (out of bounds or malformed), so CRIMP never sends what it would refuse.
func (p *Packet) Encode(dst []byte) ([]byte, error) {
	if p.Kind == 0 || p.Kind >= kindEnd {
		return dst, fmt.Errorf("%w: %d", ErrKind, uint8(p.Kind))
	}
	if err := p.validate(); err != nil {
		return dst, err
	}
	if len(p.Payload) > MaxPayload || len(p.FEC) > MaxFEC || len(p.Echoes) > MaxMembers ||
		len(p.Tails) > MaxMembers || len(p.Members) > MaxMembers || len(p.StateAddr) > maxAddrLen {
		return dst, fmt.Errorf("%w: %s field over its bound", ErrTooLarge, p.Kind)
	}
	if signed := AuthoritySigned(p.Kind); signed && len(p.Signature) != SignatureSize || !signed && len(p.Signature) != 0 {
		return dst, fmt.Errorf("%w: %s with a %d-byte signature", ErrMalformed, p.Kind, len(p.Signature))
	}
	start := len(dst)
	dst = append(dst, Version, byte(p.Kind))
	dst = binary.BigEndian.AppendUint32(dst, uint32(p.Sender))
	dst = binary.BigEndian.AppendUint64(dst, uint64(p.Time))
	switch p.Kind {
	case KindData:
		dst = binary.BigEndian.AppendUint32(dst, p.Seq)
		dst = appendBytes16(dst, p.Payload)
		dst = append(dst, byte(len(p.FEC)))
		for _, red := range p.FEC {
			if len(red.Payload) > MaxPayload {
				return dst[:start], fmt.Errorf("%w: FEC payload %d bytes", ErrTooLarge, len(red.Payload))
			}
			dst = binary.BigEndian.AppendUint32(dst, red.Seq)
			dst = binary.BigEndian.AppendUint64(dst, uint64(red.SentAt))
			dst = appendBytes16(dst, red.Payload)
		}
	case KindRequest:
		dst = binary.BigEndian.AppendUint32(dst, uint32(p.Source))
		dst = binary.BigEndian.AppendUint32(dst, p.Seq)
	case KindRepair:
		dst = binary.BigEndian.AppendUint32(dst, uint32(p.Source))
		dst = binary.BigEndian.AppendUint32(dst, p.Seq)
		dst = binary.BigEndian.AppendUint64(dst, uint64(p.SentAt))
		dst = appendBytes16(dst, p.Payload)
	case KindSession:
		dst = binary.BigEndian.AppendUint32(dst, p.NextSeq)
		dst = binary.BigEndian.AppendUint32(dst, p.OldestSeq)
		dst = binary.BigEndian.AppendUint64(dst, p.Epoch)
		dst = append(dst, boolByte(p.Follows))
		dst = binary.BigEndian.AppendUint64(dst, p.KeysSum)
		dst = append(dst, byte(len(p.Echoes)))
		for _, e := range p.Echoes {
			dst = binary.BigEndian.AppendUint32(dst, uint32(e.Peer))
			dst = binary.BigEndian.AppendUint64(dst, uint64(e.Time))
			dst = binary.BigEndian.AppendUint32(dst, e.HoldMicros)
		}
		dst = append(dst, byte(len(p.Tails)))
		for _, t := range p.Tails {
			dst = binary.BigEndian.AppendUint32(dst, uint32(t.Source))
			dst = binary.BigEndian.AppendUint32(dst, t.Next)
		}
	case KindRequestJoin:
		dst = binary.BigEndian.AppendUint64(dst, p.Nonce)
		dst = appendBytes8(appendBytes8(dst, p.Key), p.Cert)
	case KindEstablish:
		dst = binary.BigEndian.AppendUint64(dst, p.Nonce)
		dst = binary.BigEndian.AppendUint32(dst, uint32(p.Member))
		dst = binary.BigEndian.AppendUint64(dst, p.Epoch)
		dst = appendBytes8(appendBytes8(appendBytes8(dst, p.Key), p.HolderKey), p.Cert)
		dst = appendBytes8(dst, []byte(p.StateAddr))
		dst = append(dst, byte(len(p.Members)))
		for i, m := range p.Members {
			dst = binary.BigEndian.AppendUint32(dst, uint32(m))
			dst = appendBytes8(dst, p.keyOf(i))
		}
	case KindDeny:
		dst = binary.BigEndian.AppendUint64(dst, p.Nonce)
		dst = append(dst, byte(p.Reason))
		dst = binary.BigEndian.AppendUint64(dst, p.Epoch)
		dst = appendBytes8(appendBytes8(dst, p.HolderKey), p.Cert)
	case KindDrop:
		dst = binary.BigEndian.AppendUint32(dst, uint32(p.Member))
		dst = binary.BigEndian.AppendUint64(dst, p.Epoch)
	case KindDatagram:
		dst = appendBytes16(dst, p.Payload)
	case KindHandover:
		st, err := p.Authority.MarshalBinary()
		if err != nil {
			return dst[:start], fmt.Errorf("%w: handover: %w", ErrMalformed, err)
		}
		dst = appendBytes16(dst, st)
	case KindVote:
		dst = binary.BigEndian.AppendUint64(dst, p.Epoch)
		dst = binary.BigEndian.AppendUint32(dst, uint32(p.Member))
		dst = append(dst, p.VoteSig...)
	case KindTakeover:
		dst = binary.BigEndian.AppendUint64(dst, p.Epoch)
		dst = binary.BigEndian.AppendUint32(dst, uint32(p.NextID))
		dst = append(dst, byte(len(p.Votes)))
		for _, v := range p.Votes {
			dst = binary.BigEndian.AppendUint32(dst, uint32(v.Voter))
			dst = append(dst, v.Sig...)
		}
	}
	dst = append(dst, p.Signature...)
	if len(dst)-start > MaxPacketSize {
		return dst[:start], fmt.Errorf("%w: %s encodes to %d bytes, limit %d", ErrTooLarge, p.Kind, len(dst)-start, MaxPacketSize)
	}
	return dst, nil
}

// dataSize is the encoded size of a data packet with the given payload and
// FEC entries; the sender uses it to fit FEC into MaxPacketSize.
func dataSize(payload int, fec []Redundant) int {
	n := headerSize + 4 + 2 + payload + 1
	for _, red := range fec {
		n += 4 + 8 + 2 + len(red.Payload)
	}
	return n
}

// sessionSize is the encoded size of a session packet with the given
// numbers of echoes and tails.
func sessionSize(echoes, tails int) int {
	return headerSize + 4 + 4 + 8 + 1 + 8 + 1 + echoes*(4+8+4) + 1 + tails*(4+4)
}

// appendBytes8 appends b with a one-byte length; callers keep b within 255
// bytes (validate checks keys and certificates, Encode the address).
func appendBytes8(dst, b []byte) []byte {
	dst = append(dst, byte(len(b)))
	return append(dst, b...)
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func appendBytes16(dst, b []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(b)))
	return append(dst, b...)
}

// reader is a bounds-checked cursor; after the first error every read
// returns zero and the error sticks.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || len(r.b)-r.off < n {
		r.err = fmt.Errorf("%w: need %d bytes at offset %d, have %d", ErrShort, n, r.off, len(r.b)-r.off)
		return nil
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s
}

func (r *reader) u8() uint8 {
	if s := r.take(1); s != nil {
		return s[0]
	}
	return 0
}

func (r *reader) u32() uint32 {
	if s := r.take(4); s != nil {
		return binary.BigEndian.Uint32(s)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if s := r.take(8); s != nil {
		return binary.BigEndian.Uint64(s)
	}
	return 0
}

func (r *reader) bytes16(limit int) []byte {
	l := r.take(2)
	if l == nil {
		return nil
	}
	n := int(binary.BigEndian.Uint16(l))
	if n > limit {
		r.err = fmt.Errorf("%w: length %d, limit %d", ErrTooLarge, n, limit)
		return nil
	}
	s := r.take(n)
	if s == nil {
		return nil
	}
	return append([]byte(nil), s...)
}

// sized reads a one-byte length that must be 0 or size, and that many
// bytes (nil when 0).
func (r *reader) sized(size int) []byte {
	n := int(r.u8())
	if r.err == nil && n != 0 && n != size {
		r.err = fmt.Errorf("%w: field of %d bytes, want 0 or %d", ErrMalformed, n, size)
		return nil
	}
	if n == 0 {
		return nil
	}
	s := r.take(n)
	if s == nil {
		return nil
	}
	return append([]byte(nil), s...)
}

func (r *reader) bytes8() []byte {
	n := int(r.u8())
	s := r.take(n)
	if s == nil {
		return nil
	}
	return append([]byte(nil), s...)
}
