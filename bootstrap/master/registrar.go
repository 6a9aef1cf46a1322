package master

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// RegistrarConfig configures a Registrar.
type RegistrarConfig struct {
	// Master is the master's base URL; Token an operator token it accepts.
	Master string
	Token  string
	// Game is the game's initial info. An empty ID gets a random one.
	Game GameInfo
	// StatusURL is where the master can GET the status endpoint
	// (Handler) of this game, e.g. "http://10.0.0.5:8651/v1/status". Empty:
	// the master cannot reach the game (NAT), which then pushes: it
	// registers again every ¾ interval and at once on a change.
	StatusURL string
	// StatusListener, if set, serves Handler on it while Run runs;
	// otherwise the caller mounts Handler on a server of its own.
	StatusListener net.Listener
	// StatusKey is the bearer credential the master must present when
	// polling; generated if empty.
	StatusKey string
	// HTTPClient talks to the master; default: 5 s timeout per request.
	HTTPClient *http.Client
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Registrar is the game side of the master protocol, run by a game's
// authority: it registers the game, answers the master's keep-alive polls
// (or pushes when the master cannot poll), keeps the registration
// current as players and mirrors come and go, registers again when the
// master has lost the game (a restart with an empty store), and
// deregisters when Run ends.
type Registrar struct {
	cfg      RegistrarConfig
	client   *Client
	instance string
	log      *slog.Logger
	wake     chan struct{}

	mu      sync.Mutex
	info    GameInfo
	version uint64
	ka      keepAlive

	// watchdogContact is the last contact after the last watchdog
	// registration (Run's goroutine only).
	watchdogContact time.Time

	// afterSend, if set (tests), is called after each registration attempt
	// with the version sent, from Run's goroutine.
	afterSend func(version uint64, err error)
}

// NewRegistrar checks cfg and returns a registrar; nothing is sent before
// Run.
func NewRegistrar(cfg RegistrarConfig) (*Registrar, error) {
	if cfg.Token == "" {
		return nil, errors.New("registrar: no operator token")
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 5 * time.Second}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	client, err := NewClient(cfg.Master, cfg.HTTPClient)
	if err != nil {
		return nil, fmt.Errorf("registrar: %w", err)
	}
	if cfg.Game.ID == "" {
		cfg.Game.ID = "g" + randomHex(8)
	}
	if err := cfg.Game.Validate(); err != nil {
		return nil, fmt.Errorf("registrar: game: %w", err)
	}
	if cfg.StatusURL != "" {
		if err := validStatusURL(cfg.StatusURL); err != nil {
			return nil, fmt.Errorf("registrar: %w", err)
		}
		if cfg.StatusKey == "" {
			cfg.StatusKey = randomHex(32)
		}
	} else if cfg.StatusKey != "" || cfg.StatusListener != nil {
		return nil, errors.New("registrar: a status key or listener without a status URL the master could poll")
	}
	r := &Registrar{
		cfg: cfg, client: client, instance: randomHex(8), log: cfg.Logger.With("game", cfg.Game.ID),
		wake: make(chan struct{}, 1), info: cfg.Game.normalized(), version: 1,
	}
	r.ka = newKeepAlive(cfg.StatusURL != "")
	return r, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// ID is the game's ID in the registry.
func (r *Registrar) ID() string { return r.info.ID }

// Info returns the game's current info and its version.
func (r *Registrar) Info() (GameInfo, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.info.normalized(), r.version
}

// Registered reports whether the master accepted the last registration
// (or polled since).
func (r *Registrar) Registered() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ka.registered && !r.ka.failing
}

// Update changes the game's info through f (players joined, a mirror
// added or dropped). An info that fails validation is refused and the old
// one kept. The master learns the change at its next poll, or at once by
// push.
func (r *Registrar) Update(f func(*GameInfo)) error {
	r.mu.Lock()
	next := r.info.normalized()
	f(&next)
	next = next.normalized()
	if next.ID != r.info.ID {
		r.mu.Unlock()
		return fmt.Errorf("registrar: game id cannot change from %s to %s", r.info.ID, next.ID)
	}
	if err := next.Validate(); err != nil {
		r.mu.Unlock()
		return fmt.Errorf("registrar: update refused: %w", err)
	}
	if sameInfo(next, r.info) {
		r.mu.Unlock()
		return nil
	}
	r.info = next
	r.version++
	r.ka.changed(r.version)
	r.mu.Unlock()
	r.poke()
	return nil
}

func (r *Registrar) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Handler is the game's status endpoint: GET ?since=v answers the
// current version, with the info if the version is not v. It answers only
// requests with the status key.
func (r *Registrar) Handler() http.Handler {
	want := sha256.Sum256([]byte(r.cfg.StatusKey))
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, "GET only", http.StatusMethodNotAllowed)
			return
		}
		tok, _ := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
		got := sha256.Sum256([]byte(tok))
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			http.Error(w, "status key required", http.StatusUnauthorized)
			return
		}
		since, err := parseSince(req.URL.Query().Get("since"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		ans := StatusAnswer{GameID: r.info.ID, Version: r.version}
		if since != r.version {
			info := r.info.normalized()
			ans.Game = &info
		}
		r.ka.polled(r.cfg.Now())
		r.mu.Unlock()
		writeJSON(w, http.StatusOK, ans)
	})
}

// parseSince reads the since parameter: empty (never seen) or a version.
func parseSince(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v > MaxVersion {
		return 0, fmt.Errorf("since %q: want a version 0-%d", truncate(s, 24), uint64(MaxVersion))
	}
	return v, nil
}

// Run registers the game and keeps it registered until ctx ends, then
// deregisters it (best effort, within 2 s) and returns nil. Failures to
// reach the master are logged and retried with backoff, never fatal.
func (r *Registrar) Run(ctx context.Context) error {
	if r.cfg.StatusListener != nil {
		srv := &http.Server{Handler: r.Handler(), ReadHeaderTimeout: 5 * time.Second, MaxHeaderBytes: 8 << 10,
			ErrorLog: slog.NewLogLogger(r.log.Handler(), slog.LevelWarn)}
		served := make(chan struct{})
		go func() {
			defer close(served)
			srv.Serve(r.cfg.StatusListener)
		}()
		defer func() {
			srv.Close()
			<-served
		}()
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	// The context is checked before every send, not only while waiting: a
	// send cut short by the context's end records nothing, so the next
	// one is still due at once and the loop would never wait again.
	for ctx.Err() == nil {
		r.mu.Lock()
		now := r.cfg.Now()
		due := r.ka.due()
		r.mu.Unlock()
		if !due.After(now) {
			r.send(ctx)
			continue
		}
		timer.Reset(due.Sub(now))
		select {
		case <-ctx.Done():
		case <-r.wake:
		case <-timer.C:
		}
	}
	r.deregister()
	return nil
}

// send registers the current info once.
func (r *Registrar) send(ctx context.Context) {
	r.mu.Lock()
	reg := Registration{Game: r.info.normalized(), Version: r.version, Instance: r.instance,
		StatusURL: r.cfg.StatusURL, StatusKey: r.cfg.StatusKey}
	why := r.ka.reason()
	contact := r.ka.lastContact
	r.mu.Unlock()
	if why == reasonWatchdog {
		// Loud once per silence: again only if a poll came in between.
		level := slog.LevelWarn
		if contact.Equal(r.watchdogContact) {
			level = slog.LevelDebug
		}
		r.log.Log(ctx, level, "no keep-alive poll from the master; registering again (a restarted master, or one that cannot reach the status URL)",
			"status_url", r.cfg.StatusURL)
	}
	resp, err := r.client.Register(ctx, r.cfg.Token, reg)
	if ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	wasFailing := r.ka.failing
	backoff := r.ka.sent(r.cfg.Now(), reg.Version, resp, err)
	if why == reasonWatchdog {
		r.watchdogContact = r.ka.lastContact
	}
	r.mu.Unlock()
	switch {
	case err != nil:
		// The first failure of a run is a warning (an error if only a
		// configuration change can help); repeats until a success are
		// debug, so a master down for an hour does not flood the log.
		var ae *APIError
		level := slog.LevelWarn
		if errors.As(err, &ae) && ae.permanent() {
			level = slog.LevelError
		}
		if wasFailing {
			level = slog.LevelDebug
		}
		r.log.Log(ctx, level, "registration failed; retrying", "master", r.client.URL(), "err", err, "retry_in", backoff)
	case resp.Created || wasFailing:
		r.log.Info("game registered", "master", r.client.URL(), "keepalive", resp.KeepAlive, "interval", resp.Interval(), "version", reg.Version)
	}
	if r.afterSend != nil {
		r.afterSend(reg.Version, err)
	}
}

func (r *Registrar) deregister() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := r.client.Deregister(ctx, r.cfg.Token, r.info.ID, r.instance); err != nil && !errors.Is(err, ErrNotFound) {
		r.log.Warn("deregistration failed; the master drops the game after its missed keep-alives", "err", err)
		return
	}
	r.log.Info("game deregistered")
}

// keepAlive decides when a registrar sends its next registration. It is a
// pure state machine: told what happened and when, it never reads a clock.
//
//   - Not yet registered, or the last send failed: at once, then after a
//     backoff doubling from 100 ms up to the interval.
//   - Push (the master cannot poll): every ¾ interval, so each of the
//     master's intervals sees one; a change goes out after ¼ interval at
//     most, well within the interval in which it must show.
//   - Poll: only when no poll came for 2 intervals. The master polls every
//     interval, each poll within its timeout (½ interval by default), so
//     polls come at most 1½ intervals apart while the master holds the
//     game; a longer silence means it lost the game (restarted on an
//     empty store) or cannot reach the status URL. A registration too
//     many costs one upsert.
type keepAlive struct {
	poll        bool
	interval    time.Duration // the master's, once it said; a guess before
	registered  bool
	failing     bool
	backoff     time.Duration
	retryAt     time.Time
	lastSend    time.Time
	lastContact time.Time // last accepted registration or poll
	version     uint64    // current
	sentVersion uint64    // last accepted by the master
}

const (
	minBackoff      = 100 * time.Millisecond
	defaultInterval = 5 * time.Second
)

func newKeepAlive(poll bool) keepAlive {
	return keepAlive{poll: poll, interval: defaultInterval, version: 1}
}

// Reasons for a send, for logs and tests.
const (
	reasonRegister = "register"
	reasonRetry    = "retry"
	reasonPush     = "push"
	reasonChange   = "change"
	reasonWatchdog = "watchdog"
)

// due is when the next send should go; the zero time means now.
func (k *keepAlive) due() time.Time {
	switch {
	case k.failing:
		return k.retryAt
	case !k.registered:
		return time.Time{}
	case k.poll:
		return k.lastContact.Add(2 * k.interval)
	}
	if k.version != k.sentVersion {
		return k.lastSend.Add(k.interval / 4)
	}
	return k.lastSend.Add(k.interval * 3 / 4)
}

// reason says why the send due now goes.
func (k *keepAlive) reason() string {
	switch {
	case k.failing:
		return reasonRetry
	case !k.registered:
		return reasonRegister
	case k.poll:
		return reasonWatchdog
	case k.version != k.sentVersion:
		return reasonChange
	}
	return reasonPush
}

// sent records the outcome of sending version at now and returns the
// backoff before a retry (0 after a success).
func (k *keepAlive) sent(now time.Time, version uint64, resp RegisterResponse, err error) time.Duration {
	k.lastSend = now
	if err != nil {
		k.failing = true
		var ae *APIError
		switch {
		case errors.As(err, &ae) && ae.permanent():
			k.backoff = k.interval // only a configuration change helps
		case k.backoff == 0:
			k.backoff = minBackoff
		default:
			k.backoff = min(2*k.backoff, k.interval)
		}
		k.retryAt = now.Add(k.backoff)
		return k.backoff
	}
	k.registered, k.failing, k.backoff = true, false, 0
	k.lastContact = now
	k.sentVersion = version
	if iv := resp.Interval(); iv > 0 {
		// A master's word, but bounded: an absurd interval must not
		// stop the pushes or spin them.
		k.interval = min(max(iv, 10*time.Millisecond), time.Hour)
	}
	k.poll = resp.KeepAlive == KeepAlivePoll
	return 0
}

// polled records a keep-alive poll at now: the master holds the game. A
// poll before the first accepted registration (a master still polling a
// previous run of this game) does not replace that registration.
func (k *keepAlive) polled(now time.Time) {
	if !k.registered {
		return
	}
	k.lastContact = now
	k.failing, k.backoff = false, 0
}

// changed records a new version of the info.
func (k *keepAlive) changed(version uint64) { k.version = version }
