package master

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/bootstrap/master/ratelimit"
)

// slowConfig keeps every game alive for the length of a test that does
// not exercise keep-alives.
func slowConfig() Config {
	cfg := testConfig()
	cfg.Interval = time.Hour
	return cfg
}

func pushRegistration(g GameInfo) Registration {
	return Registration{Game: g, Version: 1, Instance: "run1"}
}

// registryDump is everything the registry holds, for before/after checks.
func registryDump(t *testing.T, s *Store) string {
	t.Helper()
	games, _, err := s.List(context.Background(), Filter{Limit: maxPageLimit})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(games)
	return string(b)
}

func rawRequest(t *testing.T, method, url, token, contentType string, body []byte) (int, ErrorBody) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb ErrorBody
	data, _ := io.ReadAll(resp.Body)
	json.Unmarshal(data, &eb)
	return resp.StatusCode, eb
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func TestBadRequestsStoreNothing(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() *Store) {
		cfg := slowConfig()
		tm := startMaster(t, open(), cfg, "")
		c, _ := NewClient(tm.url, nil)
		// One game of the first operator is there already.
		if _, err := c.Register(context.Background(), testToken, pushRegistration(testGame("held", 2))); err != nil {
			t.Fatal(err)
		}
		before := registryDump(t, tm.store)

		valid := pushRegistration(testGame("newcomer", 2))
		with := func(f func(*Registration)) []byte {
			r := pushRegistration(testGame("newcomer", 2))
			f(&r)
			return mustJSON(r)
		}
		huge := with(func(r *Registration) { r.Game.Name = strings.Repeat("x", 70<<10) })
		games := tm.url + "/v1/games"
		cases := []struct {
			name, method, url, token, ctype string
			body                            []byte
			status                          int
			code                            string
		}{
			{"no token", "POST", games, "", "application/json", mustJSON(valid), 401, CodeUnauthorized},
			{"wrong token", "POST", games, "operator-token-nobody-has-000", "application/json", mustJSON(valid), 401, CodeUnauthorized},
			{"malformed JSON", "POST", games, testToken, "application/json", []byte(`{"game":{"id":"newcomer",`), 400, CodeBadRequest},
			{"unknown field", "POST", games, testToken, "application/json", []byte(`{"game":{"id":"newcomer"},"admin":true}`), 400, CodeBadRequest},
			{"two values", "POST", games, testToken, "application/json", append(mustJSON(valid), mustJSON(valid)...), 400, CodeBadRequest},
			{"empty body", "POST", games, testToken, "application/json", nil, 400, CodeBadRequest},
			{"players over capacity", "POST", games, testToken, "", with(func(r *Registration) { r.Game.Players = 17 }), 400, CodeBadRequest},
			{"no mirrors", "POST", games, testToken, "", with(func(r *Registration) { r.Game.Mirrors = nil }), 400, CodeBadRequest},
			{"mirror id twice", "POST", games, testToken, "", with(func(r *Registration) { r.Game.Mirrors[1].ID = 1 }), 400, CodeBadRequest},
			{"bad probe address", "POST", games, testToken, "", with(func(r *Registration) { r.Game.Mirrors[0].ProbeAddr = "10.0.0.1" }), 400, CodeBadRequest},
			{"unspecified client address", "POST", games, testToken, "", with(func(r *Registration) { r.Game.Mirrors[0].ClientAddr = "0.0.0.0:80" }), 400, CodeBadRequest},
			{"bad world", "POST", games, testToken, "", with(func(r *Registration) { r.Game.World = "a b" }), 400, CodeBadRequest},
			{"bad id", "POST", games, testToken, "", with(func(r *Registration) { r.Game.ID = "../etc" }), 400, CodeBadRequest},
			{"status URL not http", "POST", games, testToken, "", with(func(r *Registration) { r.StatusURL = "file:///etc/passwd" }), 400, CodeBadRequest},
			{"status URL with credentials", "POST", games, testToken, "", with(func(r *Registration) { r.StatusURL = "http://u:p@10.0.0.1/v1/status" }), 400, CodeBadRequest},
			{"no instance", "POST", games, testToken, "", with(func(r *Registration) { r.Instance = "" }), 400, CodeBadRequest},
			{"version out of range", "POST", games, testToken, "", with(func(r *Registration) { r.Version = 1 << 63 }), 400, CodeBadRequest},
			{"oversize", "POST", games, testToken, "application/json", huge, 413, CodeTooLarge},
			{"not JSON", "POST", games, testToken, "text/plain", mustJSON(valid), 415, CodeUnsupportedMT},
			{"other operator's game", "POST", games, otherToken, "", mustJSON(pushRegistration(testGame("held", 3))), 403, CodeForbidden},
			{"other operator deregisters", "DELETE", games + "/held", otherToken, "", nil, 403, CodeForbidden},
			{"deregister without token", "DELETE", games + "/held", "", "", nil, 401, CodeUnauthorized},
			{"deregister by an old instance", "DELETE", games + "/held?instance=run0", testToken, "", nil, 409, CodeConflict},
		}
		for _, tc := range cases {
			status, eb := rawRequest(t, tc.method, tc.url, tc.token, tc.ctype, tc.body)
			if status != tc.status || eb.Error.Code != tc.code {
				t.Errorf("%s: %d %q (%s), want %d %q", tc.name, status, eb.Error.Code, eb.Error.Message, tc.status, tc.code)
			}
			if after := registryDump(t, tm.store); after != before {
				t.Fatalf("%s changed the registry:\nbefore %s\nafter  %s", tc.name, before, after)
			}
		}

		// An oversized body sent without a length (chunked) is cut off
		// at the limit too.
		req, _ := http.NewRequest("POST", games, io.MultiReader(bytes.NewReader(huge)))
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.ContentLength = -1
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 413 {
			t.Errorf("chunked oversize: %s, want 413", resp.Status)
		}

		refused := counterValue(tm.metrics.refusals.WithLabelValues(CodeUnauthorized))
		if refused < 3 {
			t.Errorf("refusals{unauthorized} = %v, want at least 3", refused)
		}
		if after := registryDump(t, tm.store); after != before {
			t.Fatalf("bad requests changed the registry:\nbefore %s\nafter  %s", before, after)
		}
	})
}

func TestRateLimitedRequestsStoreNothing(t *testing.T) {
	store := mustOpen(t, "sqlite:"+t.TempDir()+"/m.db")
	cfg := slowConfig()
	cfg.WritesPerSource = ratelimit.Rate{Every: time.Hour, Burst: 3}
	cfg.ReadsPerSource = ratelimit.Rate{Every: time.Hour, Burst: 2}
	tm := startMaster(t, store, cfg, "")
	c, _ := NewClient(tm.url, nil)
	ctx := context.Background()
	for i := range 3 {
		if _, err := c.Register(ctx, testToken, pushRegistration(testGame(fmt.Sprint("g", i), 1))); err != nil {
			t.Fatalf("registration %d within the burst: %v", i, err)
		}
	}
	before := registryDump(t, store)
	_, err := c.Register(ctx, testToken, pushRegistration(testGame("g3", 1)))
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 429 || !errors.Is(err, ErrRateLimited) {
		t.Fatalf("fourth registration: %v, want 429", err)
	}
	if err := c.Deregister(ctx, testToken, "g0", ""); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("deregistration over the limit: %v, want 429", err)
	}
	if after := registryDump(t, store); after != before {
		t.Fatalf("rate-limited requests changed the registry:\nbefore %s\nafter  %s", before, after)
	}
	for i := range 2 {
		if _, err := c.Games(ctx, Filter{}); err != nil {
			t.Fatalf("query %d within the burst: %v", i, err)
		}
	}
	if _, err := c.Games(ctx, Filter{}); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("third query: %v, want 429", err)
	}
	if got := counterValue(tm.metrics.refusals.WithLabelValues(CodeRateLimited)); got != 3 {
		t.Fatalf("refusals{rate_limited} = %v, want 3", got)
	}
	// Health and metrics stay reachable for the operator's monitoring.
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get(tm.url + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %s", p, resp.Status)
		}
	}
}

func TestQueriesFilterAndPage(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() *Store) {
		tm := startMaster(t, open(), slowConfig(), "")
		c, _ := NewClient(tm.url, nil)
		ctx := context.Background()
		type spec struct {
			id, world, mode   string
			players, capacity int
		}
		specs := []spec{
			{"a1", "meadow", "ffa", 0, 8}, {"a2", "meadow", "ffa", 8, 8}, {"a3", "meadow", "team", 3, 8},
			{"b1", "cave", "ffa", 1, 4}, {"b2", "cave", "ffa", 2, 4}, {"b3", "cave", "team", 4, 4}, {"c1", "meadow", "ffa", 5, 8},
		}
		for _, s := range specs {
			g := testGame(s.id, 1)
			g.World, g.Mode, g.Players, g.Capacity = s.world, s.mode, s.players, s.capacity
			if _, err := c.Register(ctx, testToken, pushRegistration(g)); err != nil {
				t.Fatal(err)
			}
		}
		ids := func(f Filter) []string {
			t.Helper()
			games, err := c.AllGames(ctx, f, 0)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, g := range games {
				out = append(out, g.ID)
			}
			return out
		}
		for _, tc := range []struct {
			f    Filter
			want []string
		}{
			{Filter{}, []string{"a1", "a2", "a3", "b1", "b2", "b3", "c1"}},
			{Filter{World: "meadow"}, []string{"a1", "a2", "a3", "c1"}},
			{Filter{World: "meadow", Mode: "ffa"}, []string{"a1", "a2", "c1"}},
			{Filter{World: "meadow", Mode: "ffa", MinFree: 1}, []string{"a1", "c1"}},
			{Filter{MinFree: 3}, []string{"a1", "a3", "b1", "c1"}},
			{Filter{Mode: "team", MinFree: 1}, []string{"a3"}},
			{Filter{World: "nowhere"}, nil},
			{Filter{Limit: 2}, []string{"a1", "a2", "a3", "b1", "b2", "b3", "c1"}},
			{Filter{Limit: 1, World: "cave"}, []string{"b1", "b2", "b3"}},
		} {
			if got := ids(tc.f); !slices.Equal(got, tc.want) {
				t.Errorf("%+v: %v, want %v", tc.f, got, tc.want)
			}
		}
		page, err := c.Games(ctx, Filter{Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Games) != 3 || page.Next != "a3" {
			t.Fatalf("first page of 3: %d games, next %q", len(page.Games), page.Next)
		}
		// has_space and the paper's map= spelling.
		var list GameList
		resp, err := http.Get(tm.url + "/v1/games?map=cave&has_space=true")
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if len(list.Games) != 2 || list.Games[0].ID != "b1" || list.Games[1].ID != "b2" {
			t.Fatalf("map=cave&has_space=true: %+v", list.Games)
		}
		for _, q := range []string{"limit=0", "limit=201", "limit=x", "has_space=maybe", "min_free=-1", "world=a%20b",
			"world=meadow&map=cave", "world=a&world=b", "after=..", "colour=red"} {
			status, eb := rawRequest(t, "GET", tm.url+"/v1/games?"+q, "", "", nil)
			if status != 400 || eb.Error.Code != CodeBadRequest {
				t.Errorf("?%s: %d %s, want 400", q, status, eb.Error.Code)
			}
		}
		if _, err := c.Game(ctx, "zz"); !errors.Is(err, ErrNotFound) {
			t.Errorf("unknown game: %v, want 404", err)
		}
	})
}

func TestDeregistration(t *testing.T) {
	store := mustOpen(t, "sqlite:"+t.TempDir()+"/m.db")
	tm := startMaster(t, store, slowConfig(), "")
	c, _ := NewClient(tm.url, nil)
	ctx := context.Background()
	reg := pushRegistration(testGame("moving", 2))
	if _, err := c.Register(ctx, testToken, reg); err != nil {
		t.Fatal(err)
	}
	// The authority moves: a new instance registers the game again.
	reg.Instance = "run2"
	if resp, err := c.Register(ctx, testToken, reg); err != nil || resp.Created {
		t.Fatalf("second instance: %+v %v, want a refresh", resp, err)
	}
	if err := c.Deregister(ctx, testToken, "moving", "run1"); !errors.Is(err, ErrConflict) {
		t.Fatalf("deregistration by the old instance: %v, want 409", err)
	}
	if err := c.Deregister(ctx, testToken, "moving", "run2"); err != nil {
		t.Fatalf("deregistration by the current instance: %v", err)
	}
	if err := c.Deregister(ctx, testToken, "moving", "run2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second deregistration: %v, want 404", err)
	}
	if got := counterValue(tm.metrics.dropped.WithLabelValues("deregistered")); got != 1 {
		t.Fatalf("removed{deregistered} = %v", got)
	}
}

func TestRegistryIsBounded(t *testing.T) {
	store := mustOpen(t, "sqlite:"+t.TempDir()+"/m.db")
	cfg := slowConfig()
	cfg.MaxGames = 2
	tm := startMaster(t, store, cfg, "")
	c, _ := NewClient(tm.url, nil)
	ctx := context.Background()
	for _, id := range []string{"one", "two"} {
		if _, err := c.Register(ctx, testToken, pushRegistration(testGame(id, 1))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Register(ctx, testToken, pushRegistration(testGame("three", 1))); !errors.Is(err, ErrRegistryFull) {
		t.Fatalf("third game in a registry of 2: %v, want 503", err)
	}
	// A known game may still refresh.
	if _, err := c.Register(ctx, testToken, pushRegistration(testGame("two", 3))); err != nil {
		t.Fatalf("refresh in a full registry: %v", err)
	}
}

// A status endpoint that answers wrongly is a game that missed its
// keep-alive: its stored info never changes and it is dropped.
func TestBadPollAnswersChangeNothing(t *testing.T) {
	var mode atomic.Int32
	answers := []func(w http.ResponseWriter, r *http.Request){
		func(w http.ResponseWriter, r *http.Request) { // another game's answer
			writeJSON(w, 200, StatusAnswer{GameID: "someone-else", Version: 9, Game: ptr(testGame("someone-else", 1))})
		},
		func(w http.ResponseWriter, r *http.Request) { // oversize
			io.WriteString(w, `{"game_id":"victim","version":2,"game":{"id":"victim","name":"`+strings.Repeat("x", 70<<10)+`"}}`)
		},
		func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"game_id":"victim",`) }, // malformed
		func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", 500) },
		func(w http.ResponseWriter, r *http.Request) { // a new version without the info
			writeJSON(w, 200, StatusAnswer{GameID: "victim", Version: 7})
		},
		func(w http.ResponseWriter, r *http.Request) { // invalid info
			g := testGame("victim", 1)
			g.Players = 99
			writeJSON(w, 200, StatusAnswer{GameID: "victim", Version: 8, Game: &g})
		},
		func(w http.ResponseWriter, r *http.Request) { // a redirect elsewhere is not followed
			http.Redirect(w, r, "http://127.0.0.1:1/v1/status", http.StatusFound)
		},
	}
	var polls atomic.Int32
	status := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		polls.Add(1)
		answers[int(mode.Load())%len(answers)](w, r)
		mode.Add(1)
	}))
	defer status.Close()

	store := mustOpen(t, "sqlite:"+t.TempDir()+"/m.db")
	cfg := testConfig()
	cfg.MaxMissed = len(answers)
	tm := startMaster(t, store, cfg, "")
	c, _ := NewClient(tm.url, nil)
	reg := Registration{Game: testGame("victim", 2), Version: 1, Instance: "run1", StatusURL: status.URL + "/v1/status"}
	if _, err := c.Register(context.Background(), testToken, reg); err != nil {
		t.Fatal(err)
	}
	dropped := tm.rounds.waitFor(t, 0, "the game dropped", func(r observedRound) bool { return slices.Contains(r.Dropped, "victim") })
	for _, r := range tm.rounds.all() {
		if r.Round >= dropped.Round {
			break
		}
		g, ok := r.games["victim"]
		if !ok || !sameInfo(g.GameInfo, testGame("victim", 2)) || g.Version != 1 {
			t.Fatalf("after round %d the stored game is %+v", r.Round, g)
		}
		if r.Answers != 0 || len(r.Changed) != 0 {
			t.Fatalf("round %d took a bad answer: %+v", r.Round, r.RoundReport)
		}
	}
	// The registration is word from the game in the first interval; each
	// bad answer after it is a miss.
	if dropped.Round != uint64(len(answers))+1 {
		t.Fatalf("dropped after %d rounds, want %d (the registration, then one miss per bad answer)", dropped.Round, len(answers)+1)
	}
	var bad float64 // a poll that timed out on a stalled machine is a miss too
	for _, result := range []string{"bad_answer", "bad_status", "unreachable"} {
		bad += counterValue(tm.metrics.polls.WithLabelValues(result))
	}
	if uint64(bad) != dropped.Round {
		t.Fatalf("polls counted bad: %v, want %d (one per round)", bad, dropped.Round)
	}
}

func ptr[T any](v T) *T { return &v }

func TestStatusEndpoint(t *testing.T) {
	r, err := NewRegistrar(RegistrarConfig{Master: "http://127.0.0.1:1", Token: testToken, Game: testGame("st", 2),
		StatusURL: "http://127.0.0.1:2/v1/status", StatusKey: "key-of-the-master", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	get := func(query, key string) (int, StatusAnswer) {
		req := httptest.NewRequest("GET", "/v1/status"+query, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		w := httptest.NewRecorder()
		r.Handler().ServeHTTP(w, req)
		var ans StatusAnswer
		json.Unmarshal(w.Body.Bytes(), &ans)
		return w.Code, ans
	}
	if code, _ := get("?since=0", ""); code != 401 {
		t.Fatalf("no key: %d", code)
	}
	if code, _ := get("?since=0", "wrong"); code != 401 {
		t.Fatalf("wrong key: %d", code)
	}
	if code, _ := get("?since=-1", "key-of-the-master"); code != 400 {
		t.Fatalf("bad since: %d", code)
	}
	code, ans := get("?since=0", "key-of-the-master")
	if code != 200 || ans.Version != 1 || ans.Game == nil || ans.Validate("st", 0) != nil {
		t.Fatalf("first poll: %d %+v", code, ans)
	}
	if _, ans := get("?since=1", "key-of-the-master"); ans.Game != nil || ans.Validate("st", 1) != nil {
		t.Fatalf("poll at the current version carries info: %+v", ans)
	}
	r.Update(func(g *GameInfo) { g.Players = 5 })
	if _, ans := get("?since=1", "key-of-the-master"); ans.Version != 2 || ans.Game == nil || ans.Game.Players != 5 {
		t.Fatalf("poll after a change: %+v", ans)
	}
	// A restarted game counts versions from 1 again: a master holding a
	// higher version still gets the info.
	if _, ans := get("?since=40", "key-of-the-master"); ans.Game == nil {
		t.Fatal("poll from ahead of the game's version got no info")
	}
	if err := r.Update(func(g *GameInfo) { g.Players = 100 }); err == nil {
		t.Fatal("update to an invalid info accepted")
	}
	if err := r.Update(func(g *GameInfo) { g.ID = "other" }); err == nil {
		t.Fatal("update of the game ID accepted")
	}
	if info, v := r.Info(); info.Players != 5 || v != 2 {
		t.Fatalf("refused updates changed the info: %+v v%d", info, v)
	}
}

// A hostile or newer master cannot make a finder probe more mirrors or
// stranger addresses than a valid registration allows.
func TestClientDropsInvalidGames(t *testing.T) {
	huge := testGame("huge", 1)
	for i := 2; i <= 500; i++ {
		huge.Mirrors = append(huge.Mirrors, Mirror{ID: uint32(i), ProbeAddr: fmt.Sprintf("10.0.%d.%d:9", i/256, i%256), ClientAddr: "10.0.0.1:9"})
	}
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/games":
			writeJSON(w, 200, GameList{Games: []Game{{GameInfo: huge}, {GameInfo: testGame("fine", 2)}}})
		case "/v1/games/huge":
			writeJSON(w, 200, Game{GameInfo: huge})
		case "/v1/games/fine":
			writeJSON(w, 200, Game{GameInfo: testGame("other", 1)})
		}
	}))
	defer fake.Close()
	c, _ := NewClient(fake.URL, nil)
	page, err := c.Games(context.Background(), Filter{})
	if err != nil || len(page.Games) != 1 || page.Games[0].ID != "fine" {
		t.Fatalf("list with an invalid game: %+v %v", page, err)
	}
	if _, err := c.Game(context.Background(), "huge"); err == nil {
		t.Fatal("a game of 500 mirrors accepted")
	}
	if _, err := c.Game(context.Background(), "fine"); err == nil {
		t.Fatal("an answer about another game accepted")
	}
}
