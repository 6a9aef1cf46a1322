package accounts

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/argon2"
)

// HashParams are argon2id cost parameters.
type HashParams struct {
	// Memory in KiB, Time in passes, Threads in lanes.
	Memory  uint32
	Time    uint32
	Threads uint8
}

// DefaultHashParams follows OWASP's argon2id recommendation (46 MiB, one
// pass, one lane): about 50 ms on one core.
var DefaultHashParams = HashParams{Memory: 46 * 1024, Time: 1, Threads: 1}

func (p HashParams) validate() error {
	if p.Memory < 8*uint32(p.Threads) || p.Memory > 1<<21 || p.Time < 1 || p.Time > 16 || p.Threads < 1 {
		return fmt.Errorf("argon2id params m=%d t=%d p=%d out of range", p.Memory, p.Time, p.Threads)
	}
	return nil
}

const (
	saltLen = 16
	keyLen  = 32
)

// hasher hashes and checks passwords with argon2id in PHC string form,
// at most `slots` at a time so that a burst of logins cannot take all
// memory.
type hasher struct {
	params HashParams
	slots  chan struct{}
}

func newHasher(p HashParams, concurrency int) (*hasher, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	if concurrency < 1 {
		concurrency = 1
	}
	return &hasher{params: p, slots: make(chan struct{}, concurrency)}, nil
}

func (h *hasher) acquire(ctx context.Context) error {
	select {
	case h.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *hasher) release() { <-h.slots }

// Hash returns the PHC string of password with a fresh salt.
func (h *hasher) Hash(ctx context.Context, password string) (string, error) {
	salt := make([]byte, saltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	if err := h.acquire(ctx); err != nil {
		return "", err
	}
	defer h.release()
	p := h.params
	key := argon2.IDKey([]byte(password), salt, p.Time, p.Memory, p.Threads, keyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, p.Memory, p.Time, p.Threads,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key)), nil
}

var errBadHash = errors.New("stored password hash malformed")

// Check reports whether password matches the PHC string encoded. The
// parameters come from the stored string, so hashes made with older
// parameters keep working.
func (h *hasher) Check(ctx context.Context, encoded, password string) (bool, error) {
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false, errBadHash
	}
	var version int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return false, errBadHash
	}
	var p HashParams
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &p.Memory, &p.Time, &p.Threads); err != nil || p.validate() != nil {
		return false, errBadHash
	}
	salt, err1 := base64.RawStdEncoding.DecodeString(parts[4])
	want, err2 := base64.RawStdEncoding.DecodeString(parts[5])
	if err1 != nil || err2 != nil || len(salt) < 8 || len(want) < 16 || len(want) > 64 {
		return false, errBadHash
	}
	if err := h.acquire(ctx); err != nil {
		return false, err
	}
	defer h.release()
	got := argon2.IDKey([]byte(password), salt, p.Time, p.Memory, p.Threads, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1, nil
}
