package master

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// The JSON bodies of the master's /v1 API and of a game's status endpoint.
// Requests and status answers are decoded strictly (unknown fields,
// trailing data and oversized bodies are refused) and validated before
// anything is stored.

// Bounds on what one game may register.
const (
	MaxMirrors    = 64
	MaxIDLen      = 64 // game IDs
	MaxLabelLen   = 64 // world and mode
	MaxNameLen    = 80 // display name, bytes of UTF-8
	MaxCapacity   = 1 << 20
	MaxAddrLen    = 261 // host (253) + ":" + port, or [IPv6]:port
	MaxURLLen     = 512
	MaxKeyLen     = 256
	MaxVersion    = 1<<63 - 1 // versions are stored as signed 64-bit
	maxPageLimit  = 200
	defaultLimit  = 50
	maxFilterFree = MaxCapacity
)

// Mirror is one mirror server of a game: its ID in the game's CRIMP group,
// the UDP address its probe responder answers on (package probe), and the
// address players connect to.
type Mirror struct {
	ID         uint32 `json:"id"`
	ProbeAddr  string `json:"probe_addr"`
	ClientAddr string `json:"client_addr"`
}

// GameInfo is what a game's authority says about its game.
type GameInfo struct {
	// ID names the game in the registry; the registrar picks it, so a
	// game registers under the same ID every time.
	ID       string   `json:"id"`
	Name     string   `json:"name,omitempty"`
	World    string   `json:"world"`
	Mode     string   `json:"mode"`
	Players  int      `json:"players"`
	Capacity int      `json:"capacity"`
	Mirrors  []Mirror `json:"mirrors"`
}

// Validate checks every field against the bounds above.
func (g GameInfo) Validate() error {
	if err := ValidID(g.ID); err != nil {
		return err
	}
	if len(g.Name) > MaxNameLen || !utf8.ValidString(g.Name) || strings.ContainsFunc(g.Name, unicode.IsControl) {
		return fmt.Errorf("name %q: want at most %d bytes of printable UTF-8", truncate(g.Name, 40), MaxNameLen)
	}
	if err := validLabel("world", g.World); err != nil {
		return err
	}
	if err := validLabel("mode", g.Mode); err != nil {
		return err
	}
	if g.Capacity < 1 || g.Capacity > MaxCapacity {
		return fmt.Errorf("capacity %d: want 1-%d", g.Capacity, MaxCapacity)
	}
	if g.Players < 0 || g.Players > g.Capacity {
		return fmt.Errorf("players %d: want 0-%d (the capacity)", g.Players, g.Capacity)
	}
	if len(g.Mirrors) == 0 || len(g.Mirrors) > MaxMirrors {
		return fmt.Errorf("%d mirrors: want 1-%d", len(g.Mirrors), MaxMirrors)
	}
	ids := map[uint32]bool{}
	probes := map[string]bool{}
	for i, m := range g.Mirrors {
		if m.ID == 0 {
			return fmt.Errorf("mirror %d: id 0 (a mirror not yet admitted) cannot be listed", i)
		}
		if ids[m.ID] {
			return fmt.Errorf("mirror %d: id %d listed twice", i, m.ID)
		}
		ids[m.ID] = true
		if err := ValidHostPort(m.ProbeAddr); err != nil {
			return fmt.Errorf("mirror %d probe_addr: %w", m.ID, err)
		}
		if probes[m.ProbeAddr] {
			return fmt.Errorf("mirror %d probe_addr %s: shared with another mirror", m.ID, m.ProbeAddr)
		}
		probes[m.ProbeAddr] = true
		if err := ValidHostPort(m.ClientAddr); err != nil {
			return fmt.Errorf("mirror %d client_addr: %w", m.ID, err)
		}
	}
	return nil
}

// normalized returns a copy with the mirrors ordered by ID, so that stored
// and compared infos do not depend on the order a game listed them in.
func (g GameInfo) normalized() GameInfo {
	ms := append([]Mirror(nil), g.Mirrors...)
	sort.Slice(ms, func(i, j int) bool { return ms[i].ID < ms[j].ID })
	g.Mirrors = ms
	return g
}

// Free is the number of players the game can still take.
func (g GameInfo) Free() int { return max(g.Capacity-g.Players, 0) }

// ValidID checks a game ID: 1-64 of letters, digits, '.', '_' and '-',
// starting with a letter or digit.
func ValidID(id string) error {
	if id == "" || len(id) > MaxIDLen {
		return fmt.Errorf("game id %q: want 1-%d characters", truncate(id, 40), MaxIDLen)
	}
	if !isAlnum(id[0]) || strings.IndexFunc(id, func(r rune) bool { return r > 127 || !isLabelByte(byte(r)) }) >= 0 {
		return fmt.Errorf("game id %q: want letters, digits, '.', '_' and '-', starting with a letter or digit", truncate(id, 40))
	}
	return nil
}

func validLabel(what, v string) error {
	if v == "" || len(v) > MaxLabelLen || strings.IndexFunc(v, func(r rune) bool { return r > 127 || !isLabelByte(byte(r)) }) >= 0 {
		return fmt.Errorf("%s %q: want 1-%d of letters, digits, '.', '_' and '-'", what, truncate(v, 40), MaxLabelLen)
	}
	return nil
}

func isAlnum(b byte) bool {
	return (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9')
}

func isLabelByte(b byte) bool { return isAlnum(b) || b == '.' || b == '_' || b == '-' }

// ValidHostPort checks an address of the form host:port, where host is an
// IP literal or a DNS name and port is 1-65535.
func ValidHostPort(addr string) error {
	if len(addr) > MaxAddrLen {
		return fmt.Errorf("address longer than %d bytes", MaxAddrLen)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %w", truncate(addr, 60), err)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("address %q: port %q is not 1-65535", truncate(addr, 60), port)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" || ip.IsUnspecified() {
			return fmt.Errorf("address %q: want a reachable IP, not %s", truncate(addr, 60), ip)
		}
		return nil
	}
	if !validDNSName(host) {
		return fmt.Errorf("address %q: host is neither an IP nor a DNS name", truncate(addr, 60))
	}
	return nil
}

func validDNSName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			if !isAlnum(label[i]) && label[i] != '-' {
				return false
			}
		}
	}
	return true
}

// validStatusURL checks the URL the master polls: http or https, a host,
// no credentials, no fragment. The master sets its own since parameter.
func validStatusURL(s string) error {
	if len(s) > MaxURLLen {
		return fmt.Errorf("status_url longer than %d bytes", MaxURLLen)
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("status_url: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.Fragment != "" || u.Opaque != "" {
		return fmt.Errorf("status_url %q: want http(s)://host[:port]/path without credentials or fragment", truncate(s, 60))
	}
	return nil
}

// Registration is the body of POST /v1/games: a game's authority announces
// its game (first time) or repeats it (keep-alive by push, or after the
// master lost it). Registering an ID again replaces what was stored.
type Registration struct {
	Game GameInfo `json:"game"`
	// Version of Game; the master polls with since=Version and the game
	// answers with its info only if its version differs.
	Version uint64 `json:"version"`
	// Instance names this run of the registrar: a deregistration from an
	// older instance does not remove a game a newer one registered (the
	// authority moved).
	Instance string `json:"instance"`
	// StatusURL is where the master polls GET ?since=v. Empty: the game
	// cannot be reached (NAT) and keeps itself alive by registering
	// again every interval.
	StatusURL string `json:"status_url,omitempty"`
	// StatusKey, if set, is sent as the bearer credential of polls, so the
	// game answers the master only.
	StatusKey string `json:"status_key,omitempty"`
}

// Validate checks the registration.
func (r Registration) Validate() error {
	if err := r.Game.Validate(); err != nil {
		return err
	}
	if r.Version > MaxVersion {
		return fmt.Errorf("version %d above %d", r.Version, uint64(MaxVersion))
	}
	if err := validLabel("instance", r.Instance); err != nil {
		return err
	}
	if r.StatusURL != "" {
		if err := validStatusURL(r.StatusURL); err != nil {
			return err
		}
	}
	if len(r.StatusKey) > MaxKeyLen || strings.ContainsFunc(r.StatusKey, func(c rune) bool { return c <= ' ' || c > '~' }) {
		return fmt.Errorf("status_key: want at most %d printable ASCII characters", MaxKeyLen)
	}
	if r.StatusKey != "" && r.StatusURL == "" {
		return errors.New("status_key without status_url")
	}
	return nil
}

// Keep-alive kinds, as RegisterResponse and Game report them.
const (
	KeepAlivePoll = "poll" // the master polls the game's status URL
	KeepAlivePush = "push" // the game registers again every interval
)

// RegisterResponse answers a registration: 201 if the game is new, 200 if
// it replaced a stored one.
type RegisterResponse struct {
	GameID    string `json:"game_id"`
	Created   bool   `json:"created"`
	KeepAlive string `json:"keepalive"`
	// IntervalMS is the keep-alive interval; MaxMissed intervals without
	// a poll answer or a push drop the game.
	IntervalMS int64 `json:"interval_ms"`
	MaxMissed  int   `json:"max_missed"`
}

// Interval is IntervalMS as a duration.
func (r RegisterResponse) Interval() time.Duration {
	return time.Duration(r.IntervalMS) * time.Millisecond
}

// StatusAnswer is what a game's status endpoint answers to
// GET ?since=v: its current version, and its info if that version is not v.
type StatusAnswer struct {
	GameID  string    `json:"game_id"`
	Version uint64    `json:"version"`
	Game    *GameInfo `json:"game,omitempty"`
}

// Validate checks an answer to a poll for game id at since.
func (a StatusAnswer) Validate(id string, since uint64) error {
	if a.GameID != id {
		return fmt.Errorf("answer names game %q, polled %q", truncate(a.GameID, 40), id)
	}
	if a.Version > MaxVersion {
		return fmt.Errorf("version %d above %d", a.Version, uint64(MaxVersion))
	}
	if a.Game == nil {
		if a.Version != since {
			return fmt.Errorf("version %d differs from %d but the answer carries no game info", a.Version, since)
		}
		return nil
	}
	if a.Game.ID != id {
		return fmt.Errorf("game info names %q, polled %q", truncate(a.Game.ID, 40), id)
	}
	return a.Game.Validate()
}

// Game is one game as the master lists it.
type Game struct {
	GameInfo
	Free      int    `json:"free"`
	KeepAlive string `json:"keepalive"`
	Version   uint64 `json:"version"`
	// Missed counts keep-alive intervals in a row without word from the
	// game; at MaxMissed it is dropped.
	Missed       int       `json:"missed"`
	RegisteredAt time.Time `json:"registered_at"`
	UpdatedAt    time.Time `json:"updated_at"`
	HeardAt      time.Time `json:"heard_at"`
}

// GameList answers GET /v1/games. Next, if not empty, is the after= value
// of the next page.
type GameList struct {
	Games []Game `json:"games"`
	Next  string `json:"next,omitempty"`
}

// Filter selects games in GET /v1/games. The zero Filter lists every game,
// a page of the default size.
type Filter struct {
	World string // exact; "" any
	Mode  string // exact; "" any
	// MinFree is the number of free player slots a game must have;
	// has_space=true is MinFree 1.
	MinFree int
	// Limit is the page size (default 50, at most 200); After is the last
	// game ID of the previous page.
	Limit int
	After string
}

// Values encodes f as query parameters.
func (f Filter) Values() url.Values {
	v := url.Values{}
	if f.World != "" {
		v.Set("world", f.World)
	}
	if f.Mode != "" {
		v.Set("mode", f.Mode)
	}
	if f.MinFree > 0 {
		v.Set("min_free", strconv.Itoa(f.MinFree))
	}
	if f.Limit > 0 {
		v.Set("limit", strconv.Itoa(f.Limit))
	}
	if f.After != "" {
		v.Set("after", f.After)
	}
	return v
}

// ParseFilter reads a Filter from query parameters: world (or its alias
// map, the paper's word), mode, has_space (true/false/1/0), min_free,
// limit, after. Unknown or repeated parameters are refused.
func ParseFilter(q url.Values) (Filter, error) {
	f := Filter{Limit: defaultLimit}
	for k, vs := range q {
		if len(vs) != 1 {
			return Filter{}, fmt.Errorf("parameter %q given %d times", truncate(k, 20), len(vs))
		}
		v := vs[0]
		switch k {
		case "world", "map":
			if f.World != "" && f.World != v {
				return Filter{}, errors.New("world and map name different worlds")
			}
			if err := validLabel(k, v); err != nil {
				return Filter{}, err
			}
			f.World = v
		case "mode":
			if err := validLabel(k, v); err != nil {
				return Filter{}, err
			}
			f.Mode = v
		case "has_space":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return Filter{}, fmt.Errorf("has_space %q: want true or false", truncate(v, 20))
			}
			if b {
				f.MinFree = max(f.MinFree, 1)
			}
		case "min_free":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > maxFilterFree {
				return Filter{}, fmt.Errorf("min_free %q: want 0-%d", truncate(v, 20), maxFilterFree)
			}
			f.MinFree = max(f.MinFree, n)
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > maxPageLimit {
				return Filter{}, fmt.Errorf("limit %q: want 1-%d", truncate(v, 20), maxPageLimit)
			}
			f.Limit = n
		case "after":
			if err := ValidID(v); err != nil {
				return Filter{}, fmt.Errorf("after: %w", err)
			}
			f.After = v
		default:
			return Filter{}, fmt.Errorf("unknown parameter %q (want world, map, mode, has_space, min_free, limit, after)", truncate(k, 20))
		}
	}
	return f, nil
}

// ErrorBody is every error answer: {"error": {"code": …, "message": …}}.
type ErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// Error codes of the API, each with one HTTP status.
const (
	CodeBadRequest    = "bad_request"            // 400: malformed JSON, invalid field or filter
	CodeUnauthorized  = "unauthorized"           // 401: missing or wrong operator token
	CodeForbidden     = "forbidden"              // 403: the game belongs to another operator
	CodeNotFound      = "not_found"              // 404
	CodeConflict      = "conflict"               // 409: deregistration by an older instance
	CodeTooLarge      = "body_too_large"         // 413
	CodeUnsupportedMT = "unsupported_media_type" // 415
	CodeRateLimited   = "rate_limited"           // 429
	CodeInternal      = "internal"               // 500
	CodeRegistryFull  = "registry_full"          // 503: MaxGames reached
)

// Errors a Client returns, matched by errors.Is against an APIError.
var (
	ErrBadRequest   = errors.New("bad request")
	ErrUnauthorized = errors.New("unauthorized")
	ErrForbidden    = errors.New("forbidden")
	ErrNotFound     = errors.New("not found")
	ErrConflict     = errors.New("conflict")
	ErrTooLarge     = errors.New("request body too large")
	ErrRateLimited  = errors.New("rate limited")
	ErrRegistryFull = errors.New("registry full")
)

// APIError is an error answer from the master.
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("master server: %d %s: %s", e.Status, e.Code, e.Message)
}

// Is matches an APIError against the sentinel errors.
func (e *APIError) Is(target error) bool {
	code, ok := map[error]string{
		ErrBadRequest: CodeBadRequest, ErrUnauthorized: CodeUnauthorized, ErrForbidden: CodeForbidden,
		ErrNotFound: CodeNotFound, ErrConflict: CodeConflict, ErrTooLarge: CodeTooLarge,
		ErrRateLimited: CodeRateLimited, ErrRegistryFull: CodeRegistryFull,
	}[target]
	return ok && e.Code == code
}

// permanent reports whether retrying the same request cannot succeed
// until someone changes the configuration.
func (e *APIError) permanent() bool {
	switch e.Code {
	case CodeBadRequest, CodeUnauthorized, CodeForbidden, CodeTooLarge, CodeUnsupportedMT:
		return true
	}
	return false
}

// statusOf maps an error code to its HTTP status.
func statusOf(code string) int {
	switch code {
	case CodeBadRequest:
		return http.StatusBadRequest
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeForbidden:
		return http.StatusForbidden
	case CodeNotFound:
		return http.StatusNotFound
	case CodeConflict:
		return http.StatusConflict
	case CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeUnsupportedMT:
		return http.StatusUnsupportedMediaType
	case CodeRateLimited:
		return http.StatusTooManyRequests
	case CodeRegistryFull:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
