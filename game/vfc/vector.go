package vfc

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Unbounded is the paper's '.': no bound in that dimension.
var Unbounded = math.Inf(1)

// Vector is a consistency degree κ = [θ, σ, ν] [S §2.2]: a copy in a view
// stays unsent while it has been stale for less than Time seconds, misses
// fewer than Sequence updates and differs from the primary by less than
// Value (in the unit of the set's value-difference function, by convention
// percent). Any dimension reaching its bound makes the copy due. Unbounded
// (+Inf) stands for the paper's '.'.
type Vector struct {
	Time     float64 // seconds
	Sequence float64 // updates
	Value    float64 // value-difference units
}

// Strongest is κm = [0, 0, 0]: every update goes out in the next round.
var Strongest = Vector{0, 0, 0}

// Weakest is κM = [., ., .]: nothing forces a send; the view gets the
// object once and then only when it comes closer.
var Weakest = Vector{Unbounded, Unbounded, Unbounded}

// V is shorthand for Vector{time, sequence, value}.
func V(time, sequence, value float64) Vector { return Vector{time, sequence, value} }

// ParseVector reads the paper's notation, e.g. "[0.1, 6, 20]" or
// "[., 1, .]"; the brackets are optional.
func ParseVector(s string) (Vector, error) {
	body := strings.TrimSpace(s)
	body = strings.TrimSuffix(strings.TrimPrefix(body, "["), "]")
	parts := strings.Split(body, ",")
	if len(parts) != 3 {
		return Vector{}, fmt.Errorf("consistency vector %q: want [time, sequence, value], got %d fields", s, len(parts))
	}
	var out [3]float64
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "." {
			out[i] = Unbounded
			continue
		}
		f, err := strconv.ParseFloat(p, 64)
		if err != nil {
			return Vector{}, fmt.Errorf("consistency vector %q: %s %q is neither a number nor '.'", s, dimensionNames[i], p)
		}
		out[i] = f
	}
	v := Vector{out[0], out[1], out[2]}
	if err := v.Validate(); err != nil {
		return Vector{}, err
	}
	return v, nil
}

// MustParseVector is ParseVector for literals known to be good; it panics
// on a bad one.
func MustParseVector(s string) Vector {
	v, err := ParseVector(s)
	if err != nil {
		panic(err)
	}
	return v
}

var dimensionNames = [3]string{"time", "sequence", "value"}

func (v Vector) dims() [3]float64 { return [3]float64{v.Time, v.Sequence, v.Value} }

// String prints v in the paper's notation, '.' for an unbounded dimension.
func (v Vector) String() string {
	var b strings.Builder
	b.WriteByte('[')
	for i, d := range v.dims() {
		if i > 0 {
			b.WriteString(", ")
		}
		if math.IsInf(d, 1) {
			b.WriteByte('.')
		} else {
			b.WriteString(strconv.FormatFloat(d, 'g', -1, 64))
		}
	}
	b.WriteByte(']')
	return b.String()
}

// Validate rejects NaN and negative bounds.
func (v Vector) Validate() error {
	var errs []error
	for i, d := range v.dims() {
		switch {
		case math.IsNaN(d):
			errs = append(errs, fmt.Errorf("consistency vector %v: %s bound is NaN", v, dimensionNames[i]))
		case d < 0:
			errs = append(errs, fmt.Errorf("consistency vector %v: %s bound %g is negative", v, dimensionNames[i], d))
		}
	}
	return errors.Join(errs...)
}

// strongerDimension names the first dimension in which outer binds more
// tightly than inner, or returns "" if outer is at least as weak in all
// three (κouter ≥ κinner componentwise).
func strongerDimension(inner, outer Vector) string {
	in, out := inner.dims(), outer.dims()
	for i := range in {
		if out[i] < in[i] {
			return dimensionNames[i]
		}
	}
	return ""
}

// bound is a Vector in the units the round algorithm compares: the time
// bound in nanoseconds and the sequence bound as a count, both rounded up
// (a copy stale for t with t ≥ 0.5 s has reached a 0.5 s bound; Sσ ≥ 2.5
// means Sσ ≥ 3), and saturated so that '.' can never be reached.
type bound struct {
	time         int64 // nanoseconds; never for '.'
	seq          uint32
	value        float64
	valueBounded bool
	vector       Vector
}

// never is a time no round reaches: the due time of a copy nothing can
// make due, and the time bound '.'.
const never = math.MaxInt64

// now is a due time every round has reached: a dirty copy.
const dirty = math.MinInt64

// unsent marks a copy the view never received.
const unsent = math.MinInt64

// seqNever is the sequence count '.' stands for; counts stop one short.
const seqNever = math.MaxUint32

func boundOf(v Vector) bound {
	b := bound{vector: v, value: v.Value, valueBounded: !math.IsInf(v.Value, 1)}
	ns := math.Ceil(v.Time * float64(time.Second))
	if ns >= float64(never) {
		b.time = never
	} else {
		b.time = int64(ns)
	}
	if s := math.Ceil(v.Sequence); s >= seqNever {
		b.seq = seqNever
	} else {
		b.seq = uint32(s)
	}
	return b
}

// addTime returns at+d, saturating at never; a copy never sent stays due.
// Round times are never negative, so never-at cannot overflow.
func addTime(at, d int64) int64 {
	if at == unsent {
		return dirty
	}
	if d >= never-at {
		return never
	}
	return at + d
}
