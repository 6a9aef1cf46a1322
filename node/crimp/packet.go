package crimp

import (
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
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
//	session      nextSeq u32 | oldestSeq u32 | n u8 | n × (peer u32 | time i64 | hold µs u32)
//	request-join nonce u64
//	establish    nonce u64 | member u32 | addrLen u8 | addr | n u8 | n × member u32 | signature
//	deny         nonce u64 | reason u8 | signature
//	drop         member u32 | signature
//
// The membership decisions (establish, deny, drop) are the authority's alone:
// each ends with the authority's ed25519 signature (64 bytes) over every
// byte before it, header included, so no other member can forge or alter
// one. The Node checks it (Config.AuthorityPublicKey); Decode only takes it.
//
// A packet must be consumed exactly: trailing bytes are an error.

// Version is the wire format version carried in every packet's first byte.
// Version 2 added the authority's signature to establish, deny and drop.
const Version = 2

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
	kindEnd
)

var kindNames = [...]string{"invalid", "data", "request", "repair", "session", "request-join", "establish", "deny", "drop"}

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

// Packet is one decoded CRIMP packet. Which fields are meaningful depends on
// Kind; the others are zero.
type Packet struct {
	Kind   Kind
	Sender MemberID
	Time   int64 // when the packet was sent, sender's clock, Unix ns

	Source  MemberID // request, repair: the original sender of the data
	Seq     uint32   // data, request, repair
	SentAt  int64    // repair: original send time of the data
	Payload []byte   // data, repair
	FEC     []Redundant

	NextSeq   uint32 // session: the next sequence number the sender will use
	OldestSeq uint32 // session: the oldest of its own packets it still holds
	Echoes    []Echo

	Nonce     uint64     // request-join, establish, deny
	Member    MemberID   // establish, drop
	StateAddr string     // establish: where the authority serves state over TCP
	Members   []MemberID // establish: the members the newcomer should know
	Reason    DenyReason // deny

	// Signature is the authority's signature over the encoded packet
	// before it (establish, deny, drop): SignatureSize bytes.
	Signature []byte
}

// AuthoritySigned reports whether packets of kind k carry the authority's
// signature: the membership decisions only the authority may take.
func AuthoritySigned(k Kind) bool {
	return k == KindEstablish || k == KindDeny || k == KindDrop
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
		n := int(r.u8())
		if r.err == nil && n > MaxMembers {
			return nil, fmt.Errorf("%w: %d echoes, limit %d", ErrMalformed, n, MaxMembers)
		}
		for i := 0; i < n && r.err == nil; i++ {
			p.Echoes = append(p.Echoes, Echo{Peer: MemberID(r.u32()), Time: int64(r.u64()), HoldMicros: r.u32()})
		}
	case KindRequestJoin:
		p.Nonce = r.u64()
	case KindEstablish:
		p.Nonce, p.Member = r.u64(), MemberID(r.u32())
		p.StateAddr = string(r.bytes8())
		n := int(r.u8())
		if r.err == nil && n > MaxMembers {
			return nil, fmt.Errorf("%w: %d members, limit %d", ErrMalformed, n, MaxMembers)
		}
		for i := 0; i < n && r.err == nil; i++ {
			p.Members = append(p.Members, MemberID(r.u32()))
		}
	case KindDeny:
		p.Nonce, p.Reason = r.u64(), DenyReason(r.u8())
	case KindDrop:
		p.Member = MemberID(r.u32())
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
	case KindEstablish:
		if p.Member == 0 {
			return bad("member 0")
		}
		for _, m := range p.Members {
			if m == 0 || m == p.Member {
				return bad("member list holds %d", m)
			}
		}
	case KindDeny:
		if p.Reason == 0 {
			return bad("reason 0")
		}
	case KindDrop:
		if p.Member == 0 {
			return bad("member 0")
		}
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
		len(p.Members) > MaxMembers || len(p.StateAddr) > maxAddrLen {
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
		dst = append(dst, byte(len(p.Echoes)))
		for _, e := range p.Echoes {
			dst = binary.BigEndian.AppendUint32(dst, uint32(e.Peer))
			dst = binary.BigEndian.AppendUint64(dst, uint64(e.Time))
			dst = binary.BigEndian.AppendUint32(dst, e.HoldMicros)
		}
	case KindRequestJoin:
		dst = binary.BigEndian.AppendUint64(dst, p.Nonce)
	case KindEstablish:
		dst = binary.BigEndian.AppendUint64(dst, p.Nonce)
		dst = binary.BigEndian.AppendUint32(dst, uint32(p.Member))
		dst = append(dst, byte(len(p.StateAddr)))
		dst = append(dst, p.StateAddr...)
		dst = append(dst, byte(len(p.Members)))
		for _, m := range p.Members {
			dst = binary.BigEndian.AppendUint32(dst, uint32(m))
		}
	case KindDeny:
		dst = binary.BigEndian.AppendUint64(dst, p.Nonce)
		dst = append(dst, byte(p.Reason))
	case KindDrop:
		dst = binary.BigEndian.AppendUint32(dst, uint32(p.Member))
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

func (r *reader) bytes8() []byte {
	n := int(r.u8())
	s := r.take(n)
	if s == nil {
		return nil
	}
	return append([]byte(nil), s...)
}
