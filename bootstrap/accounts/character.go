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
	maxCoordinate     = 1<<31 - 1
)

// CharacterRules bound what a save may store and how much it may gain over
// the stored character: a player's own peer saves its character, and the
// server must not take its word for a score of 2^62. Gains are allowed at
// most Burst plus one per Every of the time the saving session could have
// played since the stored save (from the later of that save and the
// session's login). Losses are the player's own business.
type CharacterRules struct {
	MaxHealth, MaxHunger, MaxExperience, MaxScore int64
	ScoreGain, ExperienceGain                     RateLimit
}

// DefaultCharacterRules fit game.DefaultConfig: health and hunger 0..100,
// skill (experience) up to 100; a score that rises by at most ten a second
// (a meal every half second is two, a defeat ten) and skill by one a
// second (one per defeat), with room for a burst.
var DefaultCharacterRules = CharacterRules{
	MaxHealth: 100, MaxHunger: 100, MaxExperience: 100, MaxScore: 1 << 40,
	ScoreGain:      RateLimit{Every: 100 * time.Millisecond, Burst: 100},
	ExperienceGain: RateLimit{Every: time.Second, Burst: 20},
}

// Validate checks the rules' values.
func (r CharacterRules) Validate() error {
	if r.MaxHealth < 1 || r.MaxHunger < 0 || r.MaxExperience < 1 || r.MaxScore < 1 ||
		r.ScoreGain.Every <= 0 || r.ScoreGain.Burst < 0 || r.ExperienceGain.Every <= 0 || r.ExperienceGain.Burst < 0 {
		return fmt.Errorf("character rules %+v: want positive maxima and gain periods, bursts >= 0", r)
	}
	return nil
}

// CheckSave says why next may not replace prev (Version 0: none stored)
// when saved by a session that logged in at login, at now; nil if it may.
func (r CharacterRules) CheckSave(prev, next Character, login, now time.Time) error {
	if next.Health > r.MaxHealth || next.Hunger > r.MaxHunger || next.Experience > r.MaxExperience || next.Score > r.MaxScore {
		return fmt.Errorf("health %d, hunger %d, experience %d, score %d: limits %d, %d, %d, %d",
			next.Health, next.Hunger, next.Experience, next.Score, r.MaxHealth, r.MaxHunger, r.MaxExperience, r.MaxScore)
	}
	since := login
	if prev.Version > 0 && prev.SavedAt.After(since) {
		since = prev.SavedAt
	}
	played := max(now.Sub(since), 0)
	gainAllowed := func(l RateLimit) int64 {
		return int64(l.Burst) + int64(played/l.Every)
	}
	if gain, most := next.Score-prev.Score, gainAllowed(r.ScoreGain); gain > most {
		return fmt.Errorf("score rises by %d in %s of play: at most %d", gain, played.Round(time.Millisecond), most)
	}
	if gain, most := next.Experience-prev.Experience, gainAllowed(r.ExperienceGain); gain > most {
		return fmt.Errorf("experience rises by %d in %s of play: at most %d", gain, played.Round(time.Millisecond), most)
	}
	return nil
}

var (
	kindPattern   = regexp.MustCompile(`^[a-z0-9_.-]{1,64}$`)
	regionPattern = regexp.MustCompile(`^[A-Za-z0-9_.,:=-]{0,128}$`)
)

// Validate checks c before it is saved and returns the first problem.
func (c Character) Validate() error {
	if !regionPattern.MatchString(c.Region) {
		return fmt.Errorf("region %q: want at most %d of A-Z a-z 0-9 _ . , : = -", c.Region, maxRegionLen)
	}
	if c.Health < 0 || c.Hunger < 0 || c.Experience < 0 || c.Score < 0 {
		return fmt.Errorf("health %d, hunger %d, experience %d and score %d must not be negative", c.Health, c.Hunger, c.Experience, c.Score)
	}
	if c.X < 0 || c.Y < 0 || c.X > maxCoordinate || c.Y > maxCoordinate {
		return fmt.Errorf("position %d,%d: want 0..%d each", c.X, c.Y, int64(maxCoordinate))
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
