package leases

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A Proof is a lease grant the lease service signed with its ed25519 key
// (the account server's token key), so that any peer holding the public key
// checks offline who holds a region's lease and under which fencing token:
// a coordinator shows it with everything it claims as coordinator.
//
// Wire format (binary, at most MaxProofLen bytes):
//
//	"owg1" | uvarint len | region | uvarint len | holder | u64 lease ID | i64 expiry (unix ms) | 64-byte signature
//
// The signature covers every byte before it, the prefix included. Tokens
// sign bytes that start "ow1.", so neither kind of signature passes for the
// other.
type Proof struct {
	Region  string
	Holder  string // the holder's peer ID, as in Record
	LeaseID uint64
	// Expires is when the lease ends on the server's clock, at millisecond
	// precision; a renewal brings a new proof.
	Expires time.Time
}

const proofPrefix = "owg1"

// MaxProofLen bounds an encoded proof: longer input is refused before any
// decoding.
const MaxProofLen = 512

// Errors of ParseProof and Proof checks; test with errors.Is.
var (
	ErrProofMalformed = errors.New("lease proof malformed")
	ErrProofSignature = errors.New("lease proof signature invalid")
)

// SignProof encodes p and signs it with key.
func SignProof(key ed25519.PrivateKey, p Proof) ([]byte, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("sign lease proof: private key has %d bytes", len(key))
	}
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("sign lease proof: %w", err)
	}
	b := []byte(proofPrefix)
	b = binary.AppendUvarint(b, uint64(len(p.Region)))
	b = append(b, p.Region...)
	b = binary.AppendUvarint(b, uint64(len(p.Holder)))
	b = append(b, p.Holder...)
	b = binary.BigEndian.AppendUint64(b, p.LeaseID)
	b = binary.BigEndian.AppendUint64(b, uint64(p.Expires.UnixMilli()))
	return append(b, ed25519.Sign(key, b)...), nil
}

func (p Proof) validate() error {
	if err := ValidRegion(p.Region); err != nil {
		return fmt.Errorf("%w: %v", ErrProofMalformed, err)
	}
	if p.Holder == "" || len(p.Holder) > 128 {
		return fmt.Errorf("%w: holder of %d bytes", ErrProofMalformed, len(p.Holder))
	}
	if p.LeaseID == 0 {
		return fmt.Errorf("%w: lease ID 0", ErrProofMalformed)
	}
	return nil
}

// ParseProof decodes b and checks its signature against pub. It looks at
// neither time nor holder: callers compare Region, Holder, LeaseID and
// Expires with what they expect.
func ParseProof(pub ed25519.PublicKey, b []byte) (Proof, error) {
	if len(pub) != ed25519.PublicKeySize {
		return Proof{}, fmt.Errorf("parse lease proof: public key has %d bytes", len(pub))
	}
	if len(b) > MaxProofLen {
		return Proof{}, fmt.Errorf("%w: %d bytes, limit %d", ErrProofMalformed, len(b), MaxProofLen)
	}
	if len(b) < len(proofPrefix)+ed25519.SignatureSize || !bytes.HasPrefix(b, []byte(proofPrefix)) {
		return Proof{}, fmt.Errorf("%w: no %q prefix or too short", ErrProofMalformed, proofPrefix)
	}
	signed, sig := b[:len(b)-ed25519.SignatureSize], b[len(b)-ed25519.SignatureSize:]
	if !ed25519.Verify(pub, signed, sig) {
		return Proof{}, ErrProofSignature
	}
	rest := signed[len(proofPrefix):]
	field := func(what string) (string, error) {
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > 128 || uint64(len(rest)-k) < n {
			return "", fmt.Errorf("%w: %s length", ErrProofMalformed, what)
		}
		s := string(rest[k : k+int(n)])
		rest = rest[k+int(n):]
		return s, nil
	}
	var p Proof
	var err error
	if p.Region, err = field("region"); err != nil {
		return Proof{}, err
	}
	if p.Holder, err = field("holder"); err != nil {
		return Proof{}, err
	}
	if len(rest) != 16 {
		return Proof{}, fmt.Errorf("%w: %d trailing bytes, want 16", ErrProofMalformed, len(rest))
	}
	p.LeaseID = binary.BigEndian.Uint64(rest)
	p.Expires = time.UnixMilli(int64(binary.BigEndian.Uint64(rest[8:])))
	if err := p.validate(); err != nil {
		return Proof{}, err
	}
	return p, nil
}

// Region lease names. A region's lease is named after its world and grid
// cell; PlacementKey maps the name back to the region's key in the DHT
// keyspace (the key package regions hashes), so that the lease service can
// check placement without knowing the game.
const regionLeasePrefix = "region:"

// RegionLease is the lease name of region (x, y) of world.
func RegionLease(world string, x, y int) string {
	return fmt.Sprintf("%s%s:%d,%d", regionLeasePrefix, world, x, y)
}

// PlacementKey returns the DHT key of the region a lease name names, as
// regions.Key spells it, and false for a name that is not a region lease.
func PlacementKey(lease string) (string, bool) {
	rest, ok := strings.CutPrefix(lease, regionLeasePrefix)
	if !ok {
		return "", false
	}
	colon := strings.LastIndexByte(rest, ':')
	if colon <= 0 {
		return "", false
	}
	world, cell := rest[:colon], rest[colon+1:]
	xs, ys, ok := strings.Cut(cell, ",")
	x, errX := strconv.Atoi(xs)
	y, errY := strconv.Atoi(ys)
	if !ok || errX != nil || errY != nil || x < 0 || y < 0 || strconv.Itoa(x) != xs || strconv.Itoa(y) != ys {
		return "", false
	}
	return fmt.Sprintf("overworld/%s/region/%d,%d", world, x, y), true
}

// Rank is holder's place among peers ordered by XOR distance of the
// SHA-256 of each peer ID's bytes to the SHA-256 of key, closest first (0),
// the order in which the DHT and the region service place a region; holder
// counts whether or not peers lists it. Peer IDs are the binary IDs
// (string(peer.ID)).
func Rank(key string, holder string, peers []string) int {
	target := sha256.Sum256([]byte(key))
	dist := func(p string) [sha256.Size]byte {
		h := sha256.Sum256([]byte(p))
		for i := range h {
			h[i] ^= target[i]
		}
		return h
	}
	mine := dist(holder)
	rank := 0
	for _, p := range peers {
		if p == holder {
			continue
		}
		d := dist(p)
		if bytes.Compare(d[:], mine[:]) < 0 {
			rank++
		}
	}
	return rank
}
