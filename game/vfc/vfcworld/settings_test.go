package vfcworld

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseSetSettings(t *testing.T) {
	d := DefaultSettings()
	for _, set := range []SetSettings{d.Players, d.Objects} {
		text := set.String()
		got, err := ParseSetSettings(text)
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		if !reflect.DeepEqual(got, set) {
			t.Errorf("%q read back as %+v, want %+v", text, got, set)
		}
	}
	got, err := ParseSetSettings(" 0.5:[0, 0, 0]   *:[1, ., 50] ")
	if err != nil || len(got.Zones) != 1 || got.Zones[0] != Tiles(1)/2 || got.Scale[1].Value != 50 {
		t.Errorf("spaces and half tiles: %+v, %v", got, err)
	}
	if got, err := ParseSetSettings("*:[.,.,.]"); err != nil || len(got.Zones) != 0 || len(got.Scale) != 1 {
		t.Errorf("one global vector: %+v, %v", got, err)
	}
	for _, bad := range []string{"", "0:[0,0,0]", "*:[0,0,0] *:[1,1,1]", "x:[0,0,0] *:[1,1,1]", "-1:[0,0,0] *:[1,1,1]",
		"0:[0,0] *:[1,1,1]", "0:[0,0,0] *:[1,1,NaN]", "0 [0,0,0] *:[1,1,1]", "1e9:[0,0,0] *:[1,1,1]", strings.Repeat("1:[0,0,0] ", 300) + "*:[1,1,1]"} {
		if _, err := ParseSetSettings(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzParseSetSettings(f *testing.F) {
	f.Add(DefaultSettings().Players.String())
	f.Add("0:[0,0,0] *:[.,1,.]")
	f.Fuzz(func(t *testing.T, s string) {
		set, err := ParseSetSettings(s)
		if err != nil {
			return
		}
		if len(set.Scale) != len(set.Zones)+1 {
			t.Fatalf("%q: %d vectors for %d zones", s, len(set.Scale), len(set.Zones))
		}
	})
}
