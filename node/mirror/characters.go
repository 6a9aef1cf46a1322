package mirror

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/overworld-p2p/overworld/bootstrap/accounts"
	"github.com/overworld-p2p/overworld/bootstrap/accounts/token"
	"github.com/overworld-p2p/overworld/game"
)

// Characters loads and saves a player's character on the account server,
// acting with the player's own access token (a mirror has no account of its
// own; the token it verified is the player's consent).
type Characters interface {
	// Load returns the saved character and its version; version 0 means
	// none was saved (a new character).
	Load(ctx context.Context, tok string) (game.Character, int64, error)
	// Save stores the character over version (0: whatever is stored) and
	// returns the new version.
	Save(ctx context.Context, tok string, ch game.Character, version int64) (int64, error)
}

// AccountServer is Characters over the account server's HTTP API.
type AccountServer struct {
	URL  string
	Key  ed25519.PublicKey // to read a token's lifetime
	HTTP *http.Client      // default: 10 s timeout
	// Game names the region of a saved position (the account server keeps
	// it beside the coordinates, as P2P players save it).
	Game game.Config
}

func (a *AccountServer) client(tok string) (*accounts.Client, error) {
	hc := a.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	cl, err := accounts.NewClient(a.URL, accounts.WithHTTPClient(hc))
	if err != nil {
		return nil, err
	}
	// The client refreshes a token close to its expiry; a mirror cannot
	// (it has no refresh token), so it states the token's real lifetime
	// and the player's client keeps the session's token fresh (Reauth).
	claims, err := token.Parse(a.Key, tok)
	if err != nil {
		return nil, err
	}
	cl.SetTokens(accounts.Tokens{AccessToken: tok, AccessIssuedAt: claims.IssuedAt, AccessExpiresAt: claims.Expiry})
	return cl, nil
}

// Load implements Characters.
func (a *AccountServer) Load(ctx context.Context, tok string) (game.Character, int64, error) {
	cl, err := a.client(tok)
	if err != nil {
		return game.Character{}, 0, err
	}
	ch, err := cl.LoadCharacter(ctx)
	if err != nil {
		return game.Character{}, 0, err
	}
	return fromAccount(ch), ch.Version, nil
}

// Save implements Characters. A conflict (another mirror saved since we
// loaded) is resolved in favour of this save, which reads the confirmed
// state every mirror agrees on.
func (a *AccountServer) Save(ctx context.Context, tok string, ch game.Character, version int64) (int64, error) {
	cl, err := a.client(tok)
	if err != nil {
		return 0, err
	}
	ac := toAccount(ch)
	ac.Version = version
	if a.Game.Validate() == nil {
		ac.Region = regionName(a.Game, ch.Pos)
	}
	v, err := cl.SaveCharacter(ctx, ac)
	if errors.Is(err, accounts.ErrConflict) {
		cur, lerr := cl.LoadCharacter(ctx)
		if lerr != nil {
			return 0, fmt.Errorf("%w; reload: %w", err, lerr)
		}
		ac.Version = cur.Version
		v, err = cl.SaveCharacter(ctx, ac)
	}
	return v, err
}

func fromAccount(c accounts.Character) game.Character {
	clamp := func(v int64) int32 { return int32(max(min(v, 1<<30), -(1 << 30))) }
	return game.Character{
		Pos:    game.Vec{X: clamp(c.X), Y: clamp(c.Y)},
		Health: clamp(c.Health), Hunger: clamp(c.Hunger), Score: clamp(c.Score), Skill: clamp(c.Experience),
	}
}

func toAccount(c game.Character) accounts.Character {
	return accounts.Character{
		X: int64(c.Pos.X), Y: int64(c.Pos.Y),
		Health: int64(max(c.Health, 0)), Hunger: int64(max(c.Hunger, 0)), Score: int64(c.Score), Experience: int64(max(c.Skill, 0)),
	}
}

// regionName is how the account server's Region field names a region.
func regionName(cfg game.Config, p game.Vec) string {
	rc := game.RegionOf(cfg, p)
	return strconv.Itoa(rc.X) + "," + strconv.Itoa(rc.Y)
}

// MemoryCharacters is Characters in memory, keyed by the token's account
// (verified with Key): for simulations and tests that run without an
// account server.
type MemoryCharacters struct {
	Key ed25519.PublicKey
	mu  sync.Mutex
	m   map[string]memoryCharacter
}

type memoryCharacter struct {
	ch      game.Character
	version int64
}

func (m *MemoryCharacters) account(tok string) (string, error) {
	c, err := token.Parse(m.Key, tok)
	if err != nil {
		return "", err
	}
	return c.Account, nil
}

// Load implements Characters.
func (m *MemoryCharacters) Load(_ context.Context, tok string) (game.Character, int64, error) {
	acct, err := m.account(tok)
	if err != nil {
		return game.Character{}, 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.m[acct]
	return c.ch, c.version, nil
}

// Save implements Characters.
func (m *MemoryCharacters) Save(_ context.Context, tok string, ch game.Character, _ int64) (int64, error) {
	acct, err := m.account(tok)
	if err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[string]memoryCharacter{}
	}
	c := m.m[acct]
	c.ch, c.version = ch, c.version+1
	m.m[acct] = c
	return c.version, nil
}

// Get returns what is saved for an account.
func (m *MemoryCharacters) Get(account string) (game.Character, int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.m[account]
	return c.ch, c.version
}
