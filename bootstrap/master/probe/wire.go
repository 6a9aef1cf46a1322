package probe

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
)

//go:generate protoc --go_out=. --go_opt=paths=source_relative probe.proto

// Datagram bounds. A ping is padded to MinPingSize, which is above the
// largest pong, so a responder never sends more bytes than it received.
const (
	MaxPacketSize = 256
	MinPingSize   = 128
	MaxGameIDLen  = 64
	headerSize    = 5
	wireVersion   = 1
	kindPing      = 1
	kindPong      = 2
)

var magic = [3]byte{'o', 'w', 'p'}

// Decoding errors, distinguished for the refusal metric.
var (
	ErrShort     = errors.New("datagram shorter than its minimum")
	ErrOversize  = errors.New("datagram over MaxPacketSize")
	ErrNotProbe  = errors.New("not a probe datagram (header)")
	ErrMalformed = errors.New("malformed probe message")
)

func header(kind byte) []byte {
	return []byte{magic[0], magic[1], magic[2], wireVersion, kind}
}

// body checks the size and header of a datagram of the given kind and
// returns the message bytes after the header.
func body(b []byte, kind byte, min int) ([]byte, error) {
	switch {
	case len(b) > MaxPacketSize:
		return nil, ErrOversize
	case len(b) < headerSize:
		return nil, ErrShort
	case b[0] != magic[0] || b[1] != magic[1] || b[2] != magic[2] || b[3] != wireVersion || b[4] != kind:
		return nil, ErrNotProbe
	case len(b) < min:
		return nil, ErrShort
	}
	return b[headerSize:], nil
}

// EncodePing returns a padded ping datagram carrying nonce.
func EncodePing(nonce uint64) []byte {
	msg := &Ping{Nonce: nonce}
	// Nonce field: 1 tag + 8 bytes; padding field: 1 tag + 1 length
	// byte (under 128) + the padding.
	msg.Padding = make([]byte, MinPingSize-headerSize-9-2)
	out, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(header(kindPing), msg)
	if err != nil {
		panic(fmt.Sprintf("probe: encode ping: %v", err)) // cannot fail for this message
	}
	return out
}

// DecodePing reads a ping datagram.
func DecodePing(b []byte) (*Ping, error) {
	rest, err := body(b, kindPing, MinPingSize)
	if err != nil {
		return nil, err
	}
	var p Ping
	if err := proto.Unmarshal(rest, &p); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return &p, nil
}

// EncodePong returns a pong datagram. The game ID must be at most
// MaxGameIDLen bytes.
func EncodePong(p *Pong) ([]byte, error) {
	if len(p.GameId) > MaxGameIDLen {
		return nil, fmt.Errorf("probe: game id of %d bytes over %d", len(p.GameId), MaxGameIDLen)
	}
	out, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(header(kindPong), p)
	if err != nil {
		return nil, fmt.Errorf("probe: encode pong: %w", err)
	}
	if len(out) > MinPingSize {
		return nil, fmt.Errorf("probe: pong of %d bytes over the ping size %d", len(out), MinPingSize)
	}
	return out, nil
}

// DecodePong reads a pong datagram.
func DecodePong(b []byte) (*Pong, error) {
	rest, err := body(b, kindPong, headerSize)
	if err != nil {
		return nil, err
	}
	var p Pong
	if err := proto.Unmarshal(rest, &p); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if len(p.GameId) > MaxGameIDLen {
		return nil, fmt.Errorf("%w: game id of %d bytes", ErrMalformed, len(p.GameId))
	}
	return &p, nil
}
