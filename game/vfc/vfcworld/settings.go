package vfcworld

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/vfc"
)

// ParseSetSettings reads a set's zones and scale written as its zones from
// the inside out, each as the zone's outer bound in tiles, a colon and its
// consistency vector, the last zone's bound '*' (everything beyond):
//
//	0:[0,0,0] 12:[0.25,.,10] 48:[1,.,50] *:[3,.,200]
//
// Spaces inside a vector are allowed. The result is not validated beyond
// its syntax; Settings.Validate checks order and weakening.
func ParseSetSettings(s string) (SetSettings, error) {
	var out SetSettings
	// Take spaces out of vectors so that fields split on spaces.
	var b strings.Builder
	depth := 0
	for _, r := range s {
		switch {
		case r == '[':
			depth++
		case r == ']':
			depth--
		case depth > 0 && (r == ' ' || r == '\t'):
			continue
		}
		b.WriteRune(r)
	}
	fields := strings.Fields(b.String())
	if len(fields) == 0 {
		return out, fmt.Errorf("zones %q: empty", s)
	}
	if len(fields) > vfc.MaxZones {
		return out, fmt.Errorf("zones %q: %d zones, at most %d", s, len(fields), vfc.MaxZones)
	}
	for i, f := range fields {
		bound, vec, ok := strings.Cut(f, ":")
		if !ok {
			return out, fmt.Errorf("zones %q: %q is not bound:[time,sequence,value]", s, f)
		}
		v, err := vfc.ParseVector(vec)
		if err != nil {
			return out, fmt.Errorf("zones %q: %w", s, err)
		}
		last := i == len(fields)-1
		switch {
		case last && bound != "*":
			return out, fmt.Errorf("zones %q: the last zone's bound is %q, want * (everything beyond)", s, bound)
		case !last && bound == "*":
			return out, fmt.Errorf("zones %q: only the last zone has the bound *", s)
		case !last:
			tiles, err := strconv.ParseFloat(bound, 64)
			if err != nil || !(tiles >= 0 && tiles <= maxZoneTiles) {
				return out, fmt.Errorf("zones %q: bound %q is not a distance in tiles in [0, %d]", s, bound, maxZoneTiles)
			}
			out.Zones = append(out.Zones, int32(math.Round(tiles*game.TileUnits)))
		}
		out.Scale = append(out.Scale, v)
	}
	return out, nil
}

// maxZoneTiles bounds a zone's bound: a world is at most 64 regions of 256
// tiles across.
const maxZoneTiles = 64 * game.MaxRegionTiles

// String writes s as ParseSetSettings reads it.
func (s SetSettings) String() string {
	parts := make([]string, len(s.Scale))
	for i, v := range s.Scale {
		bound := "*"
		if i < len(s.Zones) {
			bound = strconv.Itoa(int(s.Zones[i] / game.TileUnits))
			if s.Zones[i]%game.TileUnits != 0 {
				bound = strconv.FormatFloat(float64(s.Zones[i])/game.TileUnits, 'g', -1, 64)
			}
		}
		parts[i] = bound + ":" + strings.ReplaceAll(v.String(), " ", "")
	}
	return strings.Join(parts, " ")
}
