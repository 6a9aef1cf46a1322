package guard

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/bootstrap/accounts"
	"github.com/overworld-p2p/overworld/bootstrap/accounts/token"
)

// ErrNoToken refuses a peer that presented no login token.
var ErrNoToken = errors.New("no login token")

// TokenAuthorizer is a regions.Authorizer: it admits a remote peer whose
// token the account server signed for that very peer ID and that has not
// expired. It verifies offline, with the server's public key.
type TokenAuthorizer struct {
	// Key is the account server's token-signing public key
	// (accounts.Client.PublicKey, or the key file).
	Key ed25519.PublicKey
	// Now is the verifier's clock; default time.Now.
	Now func() time.Time
}

// Authorize checks tok as presented by remote.
func (a TokenAuthorizer) Authorize(remote peer.ID, tok []byte) error {
	if len(tok) == 0 {
		return fmt.Errorf("authorize %s: %w", remote, ErrNoToken)
	}
	if len(tok) > token.MaxLen {
		return fmt.Errorf("authorize %s: %w: %d bytes, at most %d", remote, token.ErrMalformed, len(tok), token.MaxLen)
	}
	now := time.Now()
	if a.Now != nil {
		now = a.Now()
	}
	if _, err := token.Verify(a.Key, string(tok), remote, now); err != nil {
		return fmt.Errorf("authorize %s: %w", remote, err)
	}
	return nil
}

// TokenSource hands this peer's access token to regions.Config.Token
// without waiting for the network: Token returns the client's current
// token, and Run refreshes it in the background before it expires.
type TokenSource struct {
	client *accounts.Client
	log    *slog.Logger
	every  time.Duration

	mu   sync.Mutex
	last string
}

// NewTokenSource returns a source for c, which must be logged in;
// checkEvery is the period of the refresh check (default 10s).
func NewTokenSource(c *accounts.Client, checkEvery time.Duration, log *slog.Logger) *TokenSource {
	if checkEvery <= 0 {
		checkEvery = 10 * time.Second
	}
	if log == nil {
		log = slog.Default()
	}
	return &TokenSource{client: c, log: log, every: checkEvery, last: c.Tokens().AccessToken}
}

// Token returns the current access token (nil before a login).
func (ts *TokenSource) Token() []byte {
	if t := ts.client.Tokens().AccessToken; t != "" {
		return []byte(t)
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.last == "" {
		return nil
	}
	return []byte(ts.last)
}

// Run refreshes the token when it nears its expiry, until ctx ends.
func (ts *TokenSource) Run(ctx context.Context) {
	tick := time.NewTicker(ts.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rctx, cancel := context.WithTimeout(ctx, ts.every)
		t, err := ts.client.AccessToken(rctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				ts.log.Warn("access token refresh failed; presenting the last one", "err", err)
			}
			continue
		}
		ts.mu.Lock()
		ts.last = t
		ts.mu.Unlock()
	}
}
