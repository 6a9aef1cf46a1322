// Package token is the login token of the overworld account server and its
// offline verifier.
//
// The account server signs a token with its ed25519 key when a player logs
// in. The token names the account, the player, the session it belongs to, the
// libp2p peer ID the player logged in from, and an expiry. Anyone holding the
// server's public key (GET /v1/pubkey on the account server) checks a token
// without talking to the server:
//
//	claims, err := token.Verify(serverPub, tok, remotePeerID, time.Now())
//
// Region coordinators call Verify with the peer ID of the libp2p stream the
// token arrived on, and pubsub validators with the message's author. Because
// libp2p authenticates peer IDs on every connection, a token copied by
// another peer is useless: its peer ID does not match.
//
// Wire format (text, at most MaxLen bytes):
//
//	ow1.<base64url(JSON claims)>.<base64url(ed25519 signature)>
//
// The signature covers the ASCII bytes "ow1.<base64url(JSON claims)>", so the
// version prefix is signed too. Base64 is unpadded URL-safe. The claims JSON
// is decoded strictly (unknown fields are rejected).
//
// Offline verification cannot see a logout or a disabled account; that is
// what the short token lifetime is for. The account server's own endpoints do
// check the session on every request.
package token

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// MaxLen bounds the length of an encoded token; longer input is rejected
// before any decoding.
const MaxLen = 2048

// prefix names the format version; it is part of the signed bytes.
const prefix = "ow1."

// IssuedAtLeeway is how far in the future a token's issue time may be on
// the verifier's clock, to tolerate small clock differences between the
// account server and peers.
const IssuedAtLeeway = time.Minute

// Errors returned by Parse, Check and Verify. Each is wrapped with detail;
// test with errors.Is.
var (
	ErrMalformed    = errors.New("token malformed")
	ErrBadSignature = errors.New("token signature invalid")
	ErrExpired      = errors.New("token expired")
	ErrNotYetValid  = errors.New("token not yet valid")
	ErrWrongPeer    = errors.New("token issued to another peer")
)

// Claims is what a token says.
type Claims struct {
	// Session is the account server's session ID: logout and refresh act
	// on it.
	Session string
	// Account is the stable account ID.
	Account string
	// Player is the player's name as registered.
	Player string
	// Peer is the libp2p peer ID the token was issued to.
	Peer peer.ID
	// IssuedAt and Expiry bound the token's validity, at second precision.
	IssuedAt time.Time
	Expiry   time.Time
}

// wireClaims is the JSON form of Claims.
type wireClaims struct {
	Session  string `json:"sid"`
	Account  string `json:"acc"`
	Player   string `json:"name"`
	Peer     string `json:"peer"`
	IssuedAt int64  `json:"iat"`
	Expiry   int64  `json:"exp"`
}

// Sign encodes and signs c with key.
func Sign(key ed25519.PrivateKey, c Claims) (string, error) {
	if len(key) != ed25519.PrivateKeySize {
		return "", fmt.Errorf("sign token: private key has %d bytes, want %d", len(key), ed25519.PrivateKeySize)
	}
	if err := c.validate(); err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	payload, err := json.Marshal(wireClaims{
		Session:  c.Session,
		Account:  c.Account,
		Player:   c.Player,
		Peer:     c.Peer.String(),
		IssuedAt: c.IssuedAt.Unix(),
		Expiry:   c.Expiry.Unix(),
	})
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	signed := prefix + base64.RawURLEncoding.EncodeToString(payload)
	sig := ed25519.Sign(key, []byte(signed))
	tok := signed + "." + base64.RawURLEncoding.EncodeToString(sig)
	if len(tok) > MaxLen {
		return "", fmt.Errorf("sign token: encoded token is %d bytes, limit %d", len(tok), MaxLen)
	}
	return tok, nil
}

// field limits keep a token's claims small and printable.
const (
	maxIDLen   = 64
	maxNameLen = 64
)

func (c Claims) validate() error {
	switch {
	case c.Session == "" || len(c.Session) > maxIDLen:
		return fmt.Errorf("%w: session ID length %d", ErrMalformed, len(c.Session))
	case c.Account == "" || len(c.Account) > maxIDLen:
		return fmt.Errorf("%w: account ID length %d", ErrMalformed, len(c.Account))
	case c.Player == "" || len(c.Player) > maxNameLen:
		return fmt.Errorf("%w: player name length %d", ErrMalformed, len(c.Player))
	case c.Peer == "":
		return fmt.Errorf("%w: no peer ID", ErrMalformed)
	case !c.Expiry.After(c.IssuedAt):
		return fmt.Errorf("%w: expiry %v not after issue time %v", ErrMalformed, c.Expiry, c.IssuedAt)
	}
	if err := c.Peer.Validate(); err != nil {
		return fmt.Errorf("%w: peer ID: %v", ErrMalformed, err)
	}
	return nil
}

// Parse decodes a token and checks its signature against pub, without
// looking at time or peer. Most callers want Verify.
func Parse(pub ed25519.PublicKey, tok string) (Claims, error) {
	if len(pub) != ed25519.PublicKeySize {
		return Claims{}, fmt.Errorf("parse token: public key has %d bytes, want %d", len(pub), ed25519.PublicKeySize)
	}
	if len(tok) > MaxLen {
		return Claims{}, fmt.Errorf("%w: %d bytes, limit %d", ErrMalformed, len(tok), MaxLen)
	}
	if !strings.HasPrefix(tok, prefix) {
		return Claims{}, fmt.Errorf("%w: unknown format (want prefix %q)", ErrMalformed, prefix)
	}
	dot := strings.LastIndexByte(tok, '.')
	if dot < len(prefix) {
		return Claims{}, fmt.Errorf("%w: no signature part", ErrMalformed)
	}
	signed, sigText := tok[:dot], tok[dot+1:]
	sig, err := base64.RawURLEncoding.DecodeString(sigText)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return Claims{}, fmt.Errorf("%w: signature encoding", ErrMalformed)
	}
	payload, err := base64.RawURLEncoding.DecodeString(signed[len(prefix):])
	if err != nil {
		return Claims{}, fmt.Errorf("%w: payload encoding", ErrMalformed)
	}
	// The signature is checked before the payload is decoded, so only
	// the server's own JSON ever reaches the decoder on the happy path.
	if !ed25519.Verify(pub, []byte(signed), sig) {
		return Claims{}, ErrBadSignature
	}
	var w wireClaims
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return Claims{}, fmt.Errorf("%w: claims: %v", ErrMalformed, err)
	}
	if dec.More() {
		return Claims{}, fmt.Errorf("%w: trailing data after claims", ErrMalformed)
	}
	id, err := peer.Decode(w.Peer)
	if err != nil {
		return Claims{}, fmt.Errorf("%w: peer ID %q: %v", ErrMalformed, w.Peer, err)
	}
	c := Claims{
		Session:  w.Session,
		Account:  w.Account,
		Player:   w.Player,
		Peer:     id,
		IssuedAt: time.Unix(w.IssuedAt, 0),
		Expiry:   time.Unix(w.Expiry, 0),
	}
	if err := c.validate(); err != nil {
		return Claims{}, err
	}
	return c, nil
}

// Check parses tok and checks its signature and validity at now, but not
// whom it was issued to. The account server uses it for bearer tokens on its
// HTTP API; peers use Verify.
func Check(pub ed25519.PublicKey, tok string, now time.Time) (Claims, error) {
	c, err := Parse(pub, tok)
	if err != nil {
		return Claims{}, err
	}
	if !now.Before(c.Expiry) {
		return Claims{}, fmt.Errorf("%w: at %v (now %v)", ErrExpired, c.Expiry.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	if c.IssuedAt.After(now.Add(IssuedAtLeeway)) {
		return Claims{}, fmt.Errorf("%w: issued at %v (now %v)", ErrNotYetValid, c.IssuedAt.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return c, nil
}

// Verify checks that tok is signed by pub, valid at now, and issued to
// holder. It is the check every peer runs on a token presented to it.
func Verify(pub ed25519.PublicKey, tok string, holder peer.ID, now time.Time) (Claims, error) {
	c, err := Check(pub, tok, now)
	if err != nil {
		return Claims{}, err
	}
	if c.Peer != holder {
		return Claims{}, fmt.Errorf("%w: issued to %s, presented by %s", ErrWrongPeer, c.Peer, holder)
	}
	return c, nil
}

// EncodePublicKey renders pub as `overworld accounts` prints it (standard
// base64), for configuration files and flags.
func EncodePublicKey(pub ed25519.PublicKey) string {
	return base64.StdEncoding.EncodeToString(pub)
}

// DecodePublicKey parses a public key as EncodePublicKey renders it.
func DecodePublicKey(s string) (ed25519.PublicKey, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("account server public key: %w", err)
	}
	if len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("account server public key: %d bytes, want %d", len(b), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}
