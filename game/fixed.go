package game

import (
	"crypto/sha256"
	"encoding/binary"
	"math/bits"
)

// TileUnits is the number of fixed-point position units along one tile side.
// Positions, speeds and distances are all counted in these units.
const TileUnits = 256

// Vec is a position or velocity in fixed-point units (TileUnits per tile).
type Vec struct {
	X, Y int32
}

// Add returns v+o.
func (v Vec) Add(o Vec) Vec { return Vec{v.X + o.X, v.Y + o.Y} }

// Sub returns v-o.
func (v Vec) Sub(o Vec) Vec { return Vec{v.X - o.X, v.Y - o.Y} }

// LenSq is the squared length, computed in 64 bits so it cannot overflow.
func (v Vec) LenSq() int64 {
	x, y := int64(v.X), int64(v.Y)
	return x*x + y*y
}

// Len is the Euclidean length rounded down.
func (v Vec) Len() int64 { return int64(ISqrt(uint64(v.LenSq()))) }

// DistSq is the squared distance between two points.
func DistSq(a, b Vec) int64 { return a.Sub(b).LenSq() }

// ISqrt returns floor(sqrt(n)) using integer arithmetic only, so every CPU
// gets the same answer.
func ISqrt(n uint64) uint64 {
	if n < 2 {
		return n
	}
	// Start above the root and walk down with Newton steps.
	x := uint64(1) << ((bits.Len64(n) + 1) / 2)
	for {
		y := (x + n/x) / 2
		if y >= x {
			return x
		}
		x = y
	}
}

// ClampLen scales v down so that its length is at most max, keeping its
// direction as well as integer rounding allows. The result never exceeds max.
func ClampLen(v Vec, max int32) Vec {
	if max <= 0 {
		return Vec{}
	}
	m := int64(max)
	if v.LenSq() <= m*m {
		return v
	}
	l := v.Len()
	out := Vec{int32(int64(v.X) * m / l), int32(int64(v.Y) * m / l)}
	// Rounding of l down can leave the result a hair too long; trim it
	// toward zero until it fits.
	for out.LenSq() > m*m {
		if abs32(out.X) >= abs32(out.Y) {
			out.X -= sign32(out.X)
		} else {
			out.Y -= sign32(out.Y)
		}
	}
	return out
}

func abs32(v int32) int32 {
	if v < 0 {
		return -v
	}
	return v
}

func sign32(v int32) int32 {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}

// Rand is a small deterministic pseudo-random generator (SplitMix64). The
// game uses it instead of math/rand so that the sequence, and the bounded
// draws made from it, are fixed by this file alone.
type Rand struct {
	state uint64
}

// NewRand returns a generator seeded with seed.
func NewRand(seed uint64) *Rand { return &Rand{state: seed} }

// Uint64 returns the next 64 pseudo-random bits.
func (r *Rand) Uint64() uint64 {
	r.state += 0x9e3779b97f4a7c15
	z := r.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Uint64N returns a uniform value in [0, n); n must be positive.
func (r *Rand) Uint64N(n uint64) uint64 {
	if n == 0 {
		panic("game: Uint64N with n == 0")
	}
	// Lemire's multiply-and-reject: unbiased and branch-light.
	hi, lo := bits.Mul64(r.Uint64(), n)
	if lo < n {
		threshold := -n % n
		for lo < threshold {
			hi, lo = bits.Mul64(r.Uint64(), n)
		}
	}
	return hi
}

// IntN returns a uniform int in [0, n); n must be positive.
func (r *Rand) IntN(n int) int { return int(r.Uint64N(uint64(n))) }

// Range returns a uniform int in [lo, hi] (inclusive).
func (r *Rand) Range(lo, hi int) int { return lo + r.IntN(hi-lo+1) }

// State returns the generator state, for hashing and cloning.
func (r *Rand) State() uint64 { return r.state }

// derive hashes a domain label and a list of numbers into a 64-bit seed.
// Every independent stream of randomness in the game (a region's map, an
// object's placement, a spawn point) gets its own derived seed so that
// consuming one never shifts another.
func derive(domain string, parts ...uint64) uint64 {
	h := sha256.New()
	h.Write([]byte(domain))
	var b [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(b[:], p)
		h.Write(b[:])
	}
	return binary.BigEndian.Uint64(h.Sum(nil))
}

// deriveString is derive for a domain with a string part (a player ID).
func deriveString(domain string, s string, parts ...uint64) uint64 {
	h := sha256.New()
	h.Write([]byte(domain))
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(len(s)))
	h.Write(b[:])
	h.Write([]byte(s))
	for _, p := range parts {
		binary.BigEndian.PutUint64(b[:], p)
		h.Write(b[:])
	}
	return binary.BigEndian.Uint64(h.Sum(nil))
}
