package accounts

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Character is a player's persistent state, saved on the account server
// between sessions.
type Character struct {
	// Region names the region the player was in (the game's own naming,
	// e.g. "3,4").
	Region string `json:"region"`
	// X, Y: position in the game's fixed-point world units.
	X int64 `json:"x"`
	Y int64 `json:"y"`
	// Health, Hunger, Score, Experience as the game counts them.
	Health     int64 `json:"health"`
	Hunger     int64 `json:"hunger"`
	Score      int64 `json:"score"`
	Experience int64 `json:"experience"`
	// Inventory lists item kinds and how many of each, sorted by kind,
	// each kind at most once, counts positive.
	Inventory []Item `json:"inventory"`
	// Version is set by the server: 0 if never saved, then +1 per save.
	Version int64 `json:"version"`
	// SavedAt is set by the server.
	SavedAt time.Time `json:"saved_at"`
}

// Item is one inventory entry.
type Item struct {
	Kind  string `json:"kind"`
	Count int64  `json:"count"`
}

// Limits on what a character may hold, so a save stays small.
const (
	MaxInventoryKinds = 256
	maxItemKindLen    = 64
	maxRegionLen      = 128
)

var (
	kindPattern   = regexp.MustCompile(`^[a-z0-9_.-]{1,64}$`)
	regionPattern = regexp.MustCompile(`^[A-Za-z0-9_.,:=-]{0,128}$`)
)

// Validate checks c before it is saved and returns the first problem.
func (c Character) Validate() error {
	if !regionPattern.MatchString(c.Region) {
		return fmt.Errorf("region %q: want at most %d of A-Z a-z 0-9 _ . , : = -", c.Region, maxRegionLen)
	}
	if c.Health < 0 || c.Hunger < 0 || c.Experience < 0 {
		return fmt.Errorf("health %d, hunger %d and experience %d must not be negative", c.Health, c.Hunger, c.Experience)
	}
	if len(c.Inventory) > MaxInventoryKinds {
		return fmt.Errorf("inventory has %d kinds, limit %d", len(c.Inventory), MaxInventoryKinds)
	}
	for i, it := range c.Inventory {
		if !kindPattern.MatchString(it.Kind) {
			return fmt.Errorf("inventory item %d: kind %q: want 1-%d of a-z 0-9 _ . -", i, it.Kind, maxItemKindLen)
		}
		if it.Count <= 0 {
			return fmt.Errorf("inventory item %q: count %d must be positive", it.Kind, it.Count)
		}
		if i > 0 && c.Inventory[i-1].Kind >= it.Kind {
			return fmt.Errorf("inventory item %q: kinds must be sorted and unique", it.Kind)
		}
	}
	return nil
}

// Player names: what people type and see. Names compare case-insensitively.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{2,31}$`)

// ValidName checks a player name: 3-32 letters, digits, '_' or '-',
// starting with a letter or digit.
func ValidName(name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("name %q: want 3-32 of A-Z a-z 0-9 _ -, starting with a letter or digit", truncate(name, 40))
	}
	return nil
}

// nameKey is the unique, case-folded form of a name.
func nameKey(name string) string { return strings.ToLower(name) }

// Password length limits: the upper bound keeps hashing cost bounded.
const (
	MinPasswordLen = 8
	MaxPasswordLen = 256
)

// ValidPassword checks a password's length.
func ValidPassword(pw string) error {
	if len(pw) < MinPasswordLen || len(pw) > MaxPasswordLen {
		return fmt.Errorf("password must be %d to %d bytes long", MinPasswordLen, MaxPasswordLen)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
