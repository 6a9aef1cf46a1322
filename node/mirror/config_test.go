package mirror

import (
	"bytes"
	"crypto/ed25519"
	"strings"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/tss"
	"github.com/overworld-p2p/overworld/node/crimp"
)

// TestConfigValidate: every value Validate rejects is named in its error,
// among them the two: delays that do not increase and a last
// delay longer than CRIMP's history (CRIMP never delivers a command that
// old, so the last state could not wait for it).
func TestConfigValidate(t *testing.T) {
	authKey := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, ed25519.SeedSize))
	authPub := authKey.Public().(ed25519.PublicKey)
	_, otherKey, _ := ed25519.GenerateKey(nil)
	base := func() Config {
		cc := crimp.DefaultConfig()
		cc.History = time.Second
		return Config{
			Game: testGame(), Authority: true, AuthorityKey: authKey, CRIMP: cc,
			Transport:  crimp.NewMemNetwork(crimp.WallClock{}, 1).Endpoint("x"),
			AccountKey: authPub, Characters: &MemoryCharacters{Key: authPub},
		}
	}
	if err := base().Validate(); err != nil {
		t.Fatalf("the base config: %v", err)
	}
	member := base()
	member.Authority, member.AuthorityKey, member.AuthorityPublicKey = false, nil, authPub
	if err := member.Validate(); err != nil {
		t.Fatalf("a member with the authority's public key: %v", err)
	}
	ms := time.Millisecond
	for _, tc := range []struct {
		name  string
		tweak func(c *Config)
		want  string
	}{
		{"equal delays", func(c *Config) { c.Delays = []time.Duration{0, 50 * ms, 50 * ms} }, "Delays[2] 50ms not above Delays[1] 50ms"},
		{"decreasing delays", func(c *Config) { c.Delays = []time.Duration{0, 200 * ms, 100 * ms} }, "Delays[2] 100ms not above Delays[1] 200ms"},
		{"negative leading delay", func(c *Config) { c.Delays = []time.Duration{-ms, 100 * ms} }, "Delays[0] -1ms is negative"},
		{"last delay beyond the history", func(c *Config) { c.Delays = []time.Duration{0, 100 * ms, 1500 * ms} },
			"last delay 1.5s longer than CRIMP's History 1s"},
		{"authority without a key", func(c *Config) { c.AuthorityKey = nil }, "the authority needs an ed25519 AuthorityKey"},
		{"a member with the private key", func(c *Config) { c.Authority = false }, "AuthorityKey given to a mirror that is not the authority"},
		{"a member without the public key", func(c *Config) { c.Authority, c.AuthorityKey = false, nil }, "AuthorityPublicKey of 0 bytes"},
		{"keys that do not match", func(c *Config) { c.AuthorityPublicKey = otherKey.Public().(ed25519.PublicKey) }, "AuthorityPublicKey does not match AuthorityKey"},
		{"skew", func(c *Config) { c.MaxSkew = 2 * time.Second }, "MaxSkew 2s outside [0, 1s]"},
		{"frame ticks", func(c *Config) { c.FrameTicks = 31 }, "FrameTicks 31 outside [1, 30]"},
		{"no transport", func(c *Config) { c.Transport = nil }, "no CRIMP Transport"},
		{"no world", func(c *Config) { c.Game = game.Config{} }, "game:"},
		{"unknown protocol", func(c *Config) { c.Protocol = 7 }, "Protocol 7"},
		{"move redundancy", func(c *Config) { c.MoveRedundancy = 8 }, "MoveRedundancy 8 outside [-1, 7]"},
		{"deciding after the last state", func(c *Config) { c.DecideWithin = 200 * ms }, "DecideWithin 200ms outside [0, the last delay 150ms]"},
	} {
		c := base()
		tc.tweak(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error naming %q", tc.name, err, tc.want)
		}
		if _, nerr := New(c); nerr == nil {
			t.Errorf("%s: New took the config", tc.name)
		}
	}
}

// TestTransferSignature: a state transfer counts only as the authority
// signed it: one signed with another key, or altered on the way, is
// refused before anything in it is decoded.
func TestTransferSignature(t *testing.T) {
	authKey := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{5}, ed25519.SeedSize))
	pub := authKey.Public().(ed25519.PublicKey)
	_, otherKey, _ := ed25519.GenerateKey(nil)
	st := NewState(mustWorld(t), 1)
	cfg := tss.Config{Epoch: 1000, TickPeriod: time.Second / 30, Delays: DefaultDelays(), MaxSkew: time.Millisecond}
	b, err := encodeTransfer(1, ProtocolCommand, cfg, st, nil, 2000)
	if err != nil {
		t.Fatal(err)
	}
	good, err := signedTransfer(authKey, b)
	if err != nil {
		t.Fatal(err)
	}
	body, err := openTransfer(pub, good)
	if err != nil || !bytes.Equal(body, b) {
		t.Fatalf("the authority's own transfer: %v", err)
	}
	if _, err := decodeTransfer(body, testGame()); err != nil {
		t.Fatal(err)
	}
	forged, _ := signedTransfer(otherKey, b)
	altered := bytes.Clone(good)
	altered[len(altered)/2] ^= 1
	for name, bad := range map[string][]byte{"signed by another key": forged, "altered": altered, "unsigned": b} {
		if _, err := openTransfer(pub, bad); err == nil {
			t.Errorf("a transfer %s was taken", name)
		}
	}
}
