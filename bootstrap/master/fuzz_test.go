package master

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"testing"
)

// decodeBounded runs the request decoder on body with a small limit, as
// the server and the keep-alive poll do; every refusal must be a 4xx.
func decodeBounded(t *testing.T, body []byte, dst any) bool {
	err := decodeStrict(http.MaxBytesReader(nil, io.NopCloser(bytes.NewReader(body)), 4096), dst)
	if err == nil {
		return true
	}
	var he *httpError
	if !errors.As(err, &he) || statusOf(he.code) < 400 || statusOf(he.code) >= 500 {
		t.Fatalf("decode %T: %v is not a 4xx API error", dst, err)
	}
	return false
}

func FuzzRegistration(f *testing.F) {
	for _, seed := range []any{
		pushRegistration(testGame("seed", 2)),
		Registration{Game: testGame("p", 1), Version: 3, Instance: "i", StatusURL: "http://10.0.0.1:8651/v1/status", StatusKey: "k"},
	} {
		f.Add(mustJSON(seed))
	}
	for _, s := range []string{`{"game":{"mirrors":[{"id":0}]}}`, `{"game":{"id":"a","capacity":-1}}`, `[`, ``, `null`, `{"game":null} {}`,
		`{"game":{"id":"x","world":"w","mode":"m","capacity":1,"mirrors":[{"id":1,"probe_addr":"[::1]:1","client_addr":"h-1.example:65535"}]},"instance":"i"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var reg Registration
		if !decodeBounded(t, body, &reg) || reg.Validate() != nil {
			return
		}
		// What validates must survive the store's round trip unchanged
		// and stay valid when normalized.
		if err := reg.Game.normalized().Validate(); err != nil {
			t.Fatalf("valid registration invalid once normalized: %v", err)
		}
		again, _ := json.Marshal(reg)
		var back Registration
		if !decodeBounded(t, again, &back) || back.Validate() != nil {
			t.Fatalf("re-encoded valid registration refused: %s", again)
		}
	})
}

func FuzzStatusAnswer(f *testing.F) {
	g := testGame("polled", 2)
	f.Add(mustJSON(StatusAnswer{GameID: "polled", Version: 4, Game: &g}), uint64(3))
	f.Add(mustJSON(StatusAnswer{GameID: "polled", Version: 3}), uint64(3))
	f.Add([]byte(`{"game_id":"polled","version":18446744073709551615}`), uint64(0))
	f.Fuzz(func(t *testing.T, body []byte, since uint64) {
		var ans StatusAnswer
		if !decodeBounded(t, body, &ans) || ans.Validate("polled", since) != nil {
			return
		}
		if ans.Game == nil && ans.Version != since {
			t.Fatal("accepted a version change without info")
		}
		if ans.Game != nil && ans.Game.ID != "polled" {
			t.Fatal("accepted another game's info")
		}
	})
}

func FuzzParseFilter(f *testing.F) {
	for _, s := range []string{"world=meadow&mode=ffa&has_space=1", "map=cave&min_free=3&limit=2&after=b1", "limit=0", "a=b&a=c", "%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		flt, err := ParseFilter(q)
		if err != nil {
			return
		}
		if flt.Limit < 1 || flt.Limit > maxPageLimit || flt.MinFree < 0 || flt.MinFree > maxFilterFree {
			t.Fatalf("filter out of bounds: %+v", flt)
		}
		// A parsed filter encodes to one that parses to itself.
		back, err := ParseFilter(flt.Values())
		if err != nil {
			t.Fatalf("filter %+v re-encoded as %q refused: %v", flt, flt.Values().Encode(), err)
		}
		if flt.Limit == defaultLimit {
			back.Limit = defaultLimit
		}
		if back != flt {
			t.Fatalf("round trip %+v → %+v", flt, back)
		}
	})
}

func FuzzParseSince(f *testing.F) {
	for _, s := range []string{"", "0", "9223372036854775807", "9223372036854775808", "-1", "1e3", "０"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseSince(s)
		if err == nil && v > MaxVersion {
			t.Fatalf("since %q parsed to %d, above the bound", s, v)
		}
	})
}

// FuzzGameListAnswer decodes what a master answers a finder: what passes
// is bounded like a registration.
func FuzzGameListAnswer(f *testing.F) {
	g := Game{GameInfo: testGame("listed", 3), Free: 14, KeepAlive: KeepAlivePoll}
	f.Add(mustJSON(GameList{Games: []Game{g}, Next: "listed"}))
	f.Add([]byte(`{"games":[{"id":"x","mirrors":[{"id":1,"probe_addr":"10.0.0.1:1"}]}],"next":"../x"}`))
	f.Add([]byte(`{"games":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		page, err := decodeGameList(data)
		if err != nil {
			return
		}
		if len(page.Games) > maxPageLimit {
			t.Fatalf("%d games on a page", len(page.Games))
		}
		for _, g := range page.Games {
			if err := g.GameInfo.Validate(); err != nil || len(g.Mirrors) > MaxMirrors {
				t.Fatalf("invalid game passed: %v", err)
			}
		}
	})
}
