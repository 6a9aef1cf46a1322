package vfc

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func goodConfig() Config[int32] {
	return Config[int32]{
		Objects: 6,
		Sets: []SetConfig[int32]{
			{Name: "players", Objects: []ObjectID{0, 1, 2}, Zones: []int32{1, 2, 3}, Scale: slices.Clone(fig5Scale)},
			{Name: "food", Objects: []ObjectID{3, 4, 5}, Zones: []int32{4}, Scale: []Vector{V(0.5, 1, 10), V(2, 5, Unbounded)}},
		},
		Views: []ViewConfig{{Name: "A", Pivots: []ObjectID{0}}, {Name: "B", SetPivots: [][]ObjectID{{1}, {1, 2}}}},
	}
}

func TestValidateAcceptsGoodConfigs(t *testing.T) {
	if err := goodConfig().Validate(); err != nil {
		t.Fatalf("good config rejected: %v", err)
	}
	// §2.2's example of a valid scale: only the sequence bound weakens.
	c := goodConfig()
	c.Sets[1].Scale = []Vector{MustParseVector("[0.2, 2, 10]"), MustParseVector("[0.2, 5, 10]")}
	if err := c.Validate(); err != nil {
		t.Errorf("§2.2's ⟨[0.2,2,10],[0.2,5,10]⟩ rejected: %v", err)
	}
	// All zones alike: the scale neither weakens nor strengthens; the v1
	// equivalence (all [., 1, .]) needs it.
	c.Sets[1].Scale = []Vector{MustParseVector("[., 1, .]"), MustParseVector("[., 1, .]")}
	if err := c.Validate(); err != nil {
		t.Errorf("equal zones rejected: %v", err)
	}
	// One zone: a global vector (version 2).
	c.Sets[1].Zones, c.Sets[1].Scale = nil, []Vector{V(0.1, 6, 20)}
	if err := c.Validate(); err != nil {
		t.Errorf("one global vector rejected: %v", err)
	}
}

func TestValidateRejects(t *testing.T) {
	nan := math.NaN()
	cases := []struct {
		name   string
		change func(c *Config[int32])
		want   []string // every fragment must be in the error
	}{
		{"scale strengthens outward in time", func(c *Config[int32]) {
			c.Sets[1].Scale = []Vector{V(2, 1, 10), V(0.5, 5, Unbounded)}
		}, []string{"set 1 (food)", "does not weaken outward", "zone 2 [0.5, 5, .] binds time more tightly than zone 1 [2, 1, 10]"}},
		{"scale strengthens outward in sequence", func(c *Config[int32]) {
			c.Sets[0].Scale = []Vector{Strongest, V(Unbounded, 3, Unbounded), V(Unbounded, 2, Unbounded), Weakest}
		}, []string{"set 0 (players)", "zone 3 [., 2, .] binds sequence more tightly than zone 2 [., 3, .]"}},
		{"scale strengthens outward in value", func(c *Config[int32]) {
			c.Sets[1].Scale = []Vector{V(0.5, 1, 10), V(2, 5, 9)}
		}, []string{"binds value more tightly", "[2, 5, 9]"}},
		{"innermost zone unbounded, next bounded (the text's reading of κM as highest)", func(c *Config[int32]) {
			c.Sets[1].Scale = []Vector{Weakest, Strongest}
		}, []string{"does not weaken outward", "zone 2 [0, 0, 0]"}},
		{"too few vectors", func(c *Config[int32]) {
			c.Sets[0].Scale = c.Sets[0].Scale[:3]
		}, []string{"set 0 (players)", "3 consistency vectors", "for 3 zone bounds [1 2 3]", "need 4", "#C = #Z + 1"}},
		{"too many vectors", func(c *Config[int32]) {
			c.Sets[1].Scale = append(c.Sets[1].Scale, Weakest)
		}, []string{"3 consistency vectors", "1 zone bounds [4]", "need 2"}},
		{"negative time bound", func(c *Config[int32]) {
			c.Sets[1].Scale[0] = V(-0.5, 1, 10)
		}, []string{"set 1 (food): zone 1", "time bound -0.5 is negative"}},
		{"negative sequence bound", func(c *Config[int32]) {
			c.Sets[1].Scale[1] = V(2, -1, Unbounded)
		}, []string{"zone 2", "sequence bound -1 is negative"}},
		{"NaN value bound", func(c *Config[int32]) {
			c.Sets[1].Scale[0] = V(0.5, 1, nan)
		}, []string{"zone 1", "value bound is NaN"}},
		{"NaN time bound", func(c *Config[int32]) {
			c.Sets[0].Scale[1] = V(nan, 1, Unbounded)
		}, []string{"set 0 (players): zone 2", "time bound is NaN"}},
		{"zone list out of order", func(c *Config[int32]) {
			c.Sets[0].Zones = []int32{1, 3, 2}
		}, []string{"zone list [1 3 2] out of order", "λ3 = 2 is not above λ2 = 3"}},
		{"zone list repeats a bound", func(c *Config[int32]) {
			c.Sets[0].Zones = []int32{1, 1, 3}
		}, []string{"λ2 = 1 is not above λ1 = 1"}},
		{"negative zone bound", func(c *Config[int32]) {
			c.Sets[1].Zones = []int32{-4}
		}, []string{"zone list [-4]", "λ1 = -4 is negative"}},
		{"sets overlap", func(c *Config[int32]) {
			c.Sets[1].Objects = []ObjectID{2, 3, 4, 5}
		}, []string{"object 2 is in both set 0 (players) and set 1 (food)", "must not overlap"}},
		{"a set lists an object twice", func(c *Config[int32]) {
			c.Sets[1].Objects = []ObjectID{3, 4, 4, 5}
		}, []string{"set 1 (food) lists object 4 twice"}},
		{"sets do not cover", func(c *Config[int32]) {
			c.Sets[1].Objects = []ObjectID{3}
		}, []string{"objects 4, 5 (2 in all) are in no set", "cover the pool of 6"}},
		{"many objects uncovered", func(c *Config[int32]) {
			c.Objects = 40
		}, []string{"objects 6, 7, 8, 9, 10, 11, 12, 13, … (34 in all) are in no set"}},
		{"set lists an unknown object", func(c *Config[int32]) {
			c.Sets[1].Objects = []ObjectID{3, 4, 5, 9}
		}, []string{"set 1 (food) lists object 9, outside the pool of 6 objects (0..5)"}},
		{"pivot on an unknown object", func(c *Config[int32]) {
			c.Views[0].Pivots = []ObjectID{0, 17}
		}, []string{"view 0 (A): pivot on unknown object 17 (the pool has 6 objects)"}},
		{"set pivot on an unknown object", func(c *Config[int32]) {
			c.Views[1].SetPivots[1] = []ObjectID{-1}
		}, []string{"view 1 (B): pivot of set 1 on unknown object -1"}},
		{"set pivots for the wrong number of sets", func(c *Config[int32]) {
			c.Views[1].SetPivots = [][]ObjectID{{1}}
		}, []string{"view 1 (B): pivots for 1 sets, but there are 2 sets"}},
		{"no sets", func(c *Config[int32]) {
			c.Sets, c.Objects, c.Views = nil, 0, nil
		}, []string{"no object sets"}},
		{"negative pool", func(c *Config[int32]) {
			c.Objects = -1
		}, []string{"pool of -1 objects"}},
		{"pool over its limit", func(c *Config[int32]) {
			c.MaxObjects = 4
		}, []string{"pool of 6 objects: need 0..4"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := goodConfig()
			c.change(&cfg)
			err := cfg.Validate()
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not say %q", err, w)
				}
			}
			if _, nerr := New[int32, int](cfg, func(int, int) float64 { return 0 }); nerr == nil {
				t.Error("New accepted the config Validate rejects")
			}
		})
	}
}

func TestNewWantsDiffForValueBounds(t *testing.T) {
	_, err := New[int32, int](goodConfig(), nil)
	if err == nil || !strings.Contains(err.Error(), "set 0 (players) zone 1 bounds the value ([0, 0, 0]) but no value-difference function") {
		t.Fatalf("err = %v", err)
	}
}

func TestParseVector(t *testing.T) {
	good := map[string]Vector{
		"[0.1, 6, 20]":    V(0.1, 6, 20),
		"[., 1, .]":       V(Unbounded, 1, Unbounded),
		"0,0,0":           Strongest,
		" [ . , . , . ] ": Weakest,
	}
	for s, want := range good {
		got, err := ParseVector(s)
		if err != nil || got != want {
			t.Errorf("ParseVector(%q) = %v, %v; want %v", s, got, err, want)
		}
		if back, err := ParseVector(got.String()); err != nil || back != got {
			t.Errorf("%v does not round-trip through %q: %v, %v", got, got.String(), back, err)
		}
	}
	bad := map[string]string{
		"[1, 2]":       "got 2 fields",
		"[1, x, 3]":    `sequence "x" is neither a number nor '.'`,
		"[-1, 2, 3]":   "time bound -1 is negative",
		"[1, 2, NaN]":  "value bound is NaN",
		"[1, 2, 3, 4]": "got 4 fields",
		"[1, -inf, 3]": "sequence bound -Inf is negative",
	}
	for s, want := range bad {
		if _, err := ParseVector(s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseVector(%q) error %v, want %q", s, err, want)
		}
	}
}

func TestAddViewRejectsUnknownPivot(t *testing.T) {
	m, err := New[int32, int](goodConfig(), func(a, b int) float64 { return float64(b - a) })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.AddView(ViewConfig{Name: "late", Pivots: []ObjectID{99}}); err == nil || !strings.Contains(err.Error(), "pivot on unknown object 99") {
		t.Errorf("AddView with pivot 99: %v", err)
	}
	if err := m.RemoveObject(4); err != nil {
		t.Fatal(err)
	}
	if _, err := m.AddView(ViewConfig{Pivots: []ObjectID{4}}); err == nil {
		t.Error("AddView with a pivot on a removed object accepted")
	}
	if err := m.SetPivots(0, AllSets, 4); err == nil || !strings.Contains(err.Error(), "pivot on unknown object 4") {
		t.Errorf("SetPivots on a removed object: %v", err)
	}
	if err := m.SetPivots(0, 7, 1); err == nil || !strings.Contains(err.Error(), "no set 7") {
		t.Errorf("SetPivots on set 7: %v", err)
	}
	if err := m.Update(4, pt(0, 0), 1); err == nil || !strings.Contains(err.Error(), "update of unknown object 4") {
		t.Errorf("update of a removed object: %v", err)
	}
	if _, err := m.AddObject(2, pt(0, 0), 0); err == nil || !strings.Contains(err.Error(), "set 2: there are 2 sets") {
		t.Errorf("AddObject to set 2: %v", err)
	}
	if err := m.Round(-1); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("round at -1ns: %v", err)
	}
	if err := m.Round(10); err != nil {
		t.Fatal(err)
	}
	if err := m.Round(9); err == nil || !strings.Contains(err.Error(), "round at 9ns after a round at 10ns") {
		t.Errorf("round going backwards: %v", err)
	}
}
