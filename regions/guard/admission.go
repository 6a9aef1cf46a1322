package guard

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/bootstrap/accounts/token"
)

// Verdict is an Admission's answer about one peer.
type Verdict int

const (
	// Pending: no verified token is at hand yet (the peer is being asked,
	// or could not be reached and will be asked again). Drop the peer's
	// message without blaming anyone.
	Pending Verdict = iota
	// Admitted: the peer presented a current token that the account server
	// signed for its own peer ID.
	Admitted
	// Refused: the peer presented no token, another peer's, an expired, a
	// forged or a malformed one. Drop its message and blame the sender.
	Refused
)

func (v Verdict) String() string {
	switch v {
	case Pending:
		return "pending"
	case Admitted:
		return "admitted"
	case Refused:
		return "refused"
	}
	return fmt.Sprintf("verdict(%d)", int(v))
}

// AdmissionConfig configures an Admission. Zero durations and counts take
// the defaults given.
type AdmissionConfig struct {
	// Key is the account server's token-signing public key.
	Key ed25519.PublicKey
	// Token is this peer's own token, for the peers that ask (usually
	// TokenSource.Token). Nil: this peer does not serve TokenProtocol, and
	// the peers that check tokens refuse it.
	Token func() []byte
	// FetchTimeout bounds one ask, dial included (default 5 s).
	FetchTimeout time.Duration
	// RefetchBefore: a peer is asked again this long before its token
	// expires, at most an eighth of the token's lifetime before, so that
	// the holder has refreshed it (accounts.Client refreshes a minute or a
	// quarter of the lifetime ahead) and honest peers see no gap
	// (default 30 s).
	RefetchBefore time.Duration
	// RetryMin and RetryMax bound the backoff after an ask that got no
	// answer (default 500 ms and 1 min). A peer that does not serve
	// TokenProtocol is asked again on the same schedule, so a peer that
	// registers it a moment after connecting is not refused for long.
	RetryMin, RetryMax time.Duration
	// RecheckRefused is the first wait before a peer that presented a bad
	// token is asked again; it doubles up to RetryMax, if that is longer
	// (default 10 s).
	RecheckRefused time.Duration
	// MaxPeers bounds the book (default 4096); past it the least useful
	// entries are dropped.
	MaxPeers int
	// MaxFetches bounds the asks in flight (default 16), so that a flood
	// of messages from many unknown authors cannot open a storm of
	// streams (or DHT lookups).
	MaxFetches int
	// MaintainEvery is the period of the background upkeep: refetching
	// tokens of connected peers that near their expiry, dropping entries
	// unused for PruneAfter (defaults 2 s and 10 min).
	MaintainEvery, PruneAfter time.Duration
	// Now is the clock tokens are checked against (default time.Now).
	Now func() time.Time
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

func (c *AdmissionConfig) fill() error {
	if len(c.Key) != ed25519.PublicKeySize {
		return fmt.Errorf("admission: account server public key has %d bytes, want %d", len(c.Key), ed25519.PublicKeySize)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.FetchTimeout, 5*time.Second)
	def(&c.RefetchBefore, 30*time.Second)
	def(&c.RetryMin, 500*time.Millisecond)
	def(&c.RetryMax, time.Minute)
	def(&c.RecheckRefused, 10*time.Second)
	def(&c.MaintainEvery, 2*time.Second)
	def(&c.PruneAfter, 10*time.Minute)
	if c.RetryMax < c.RetryMin {
		c.RetryMax = c.RetryMin
	}
	if c.MaxPeers <= 0 {
		c.MaxPeers = 4096
	}
	if c.MaxFetches <= 0 {
		c.MaxFetches = 16
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Admission is the token check of the pubsub topic validators: a book of
// peer ID -> verified token expiry, filled by asking peers for their tokens
// over TokenProtocol and verifying them offline (token.Verify against the
// peer ID libp2p authenticated for the stream). It also answers the peers
// that ask this one.
//
// Check never blocks, so inline validators can call it: an unknown peer is
// Pending while one background ask per peer runs. New connections are asked
// at once, so the first messages of a peer usually find it admitted.
type Admission struct {
	cfg  AdmissionConfig
	h    host.Host
	self peer.ID
	log  *slog.Logger

	ctx    context.Context // ends on Close; bounds every ask
	cancel context.CancelFunc
	wg     sync.WaitGroup
	notify *network.NotifyBundle
	once   sync.Once

	mu       sync.Mutex
	closed   bool
	book     map[peer.ID]*ticket
	fetching int
	stats    AdmissionStats
}

// ticket is the book's entry for one peer.
type ticket struct {
	verdict Verdict
	claims  token.Claims  // Admitted: what the token says
	expiry  time.Time     // Admitted: the token's expiry
	next    time.Time     // earliest next ask
	fails   int           // asks in a row that brought no new valid token
	err     error         // why refused, or the last failed ask
	used    time.Time     // last Check
	done    chan struct{} // non-nil while an ask runs; closed when it ends
}

// verdictAt is the ticket's verdict at now: an admitted peer whose token
// has expired is pending until its next token arrives.
func (t *ticket) verdictAt(now time.Time) Verdict {
	if t.verdict == Admitted && !now.Before(t.expiry) {
		return Pending
	}
	return t.verdict
}

// AdmissionStats are an Admission's counters since it started.
type AdmissionStats struct {
	Asks       uint64 // token asks started
	Unanswered uint64 // asks that got no answer (dial, stream or timeout)
	Admissions uint64 // valid tokens accepted (first or renewed)
	Refusals   uint64 // asks answered with no or a bad token
	Evictions  uint64 // entries dropped because the book was full
	Turned     uint64 // unknown peers left unasked because the book was full
	Peers      int    // entries in the book
}

// PeerStatus is what the book says about one peer.
type PeerStatus struct {
	Verdict Verdict
	Expiry  time.Time // of the admitted token
	Err     error     // why refused, or why the last ask failed
	Asking  bool      // an ask is in flight
}

// NewAdmission starts an Admission on h: it serves TokenProtocol (when
// cfg.Token is set) and asks every peer that connects for its token.
// Close stops it.
func NewAdmission(h host.Host, cfg AdmissionConfig) (*Admission, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Admission{
		cfg: cfg, h: h, self: h.ID(), log: cfg.Logger.With("part", "admission"),
		ctx: ctx, cancel: cancel, book: map[peer.ID]*ticket{},
	}
	if cfg.Token != nil {
		h.SetStreamHandler(TokenProtocol, a.answer)
	}
	a.notify = &network.NotifyBundle{ConnectedF: func(_ network.Network, c network.Conn) { a.Check(c.RemotePeer()) }}
	h.Network().Notify(a.notify)
	a.wg.Go(a.maintain)
	return a, nil
}

// NewAdmission starts an Admission on h that verifies with the guard's key
// and answers with the guard's TokenSource; cfg's Key and Token are
// ignored.
func (g *Guard) NewAdmission(h host.Host, cfg AdmissionConfig) (*Admission, error) {
	cfg.Key = g.Authorizer.Key
	cfg.Token = g.Tokens.Token
	return NewAdmission(h, cfg)
}

// Close stops serving and asking and waits for the asks in flight. Check
// keeps answering from the book afterwards, without asking anyone.
func (a *Admission) Close() {
	a.once.Do(func() {
		a.h.Network().StopNotify(a.notify)
		if a.cfg.Token != nil {
			a.h.RemoveStreamHandler(TokenProtocol)
		}
		a.mu.Lock()
		a.closed = true
		a.mu.Unlock()
		a.cancel()
		a.wg.Wait()
	})
}

// Check is the verdict on peer id now. It never blocks: an unknown peer,
// one whose token is due for renewal and a refused one due for a recheck
// are asked in the background (the last is Pending meanwhile).
func (a *Admission) Check(id peer.ID) Verdict {
	v, _ := a.check(id)
	return v
}

// Wait is Check, except that while the peer's ask is in flight it waits
// for the answer (or ctx). For validators that run on their own goroutine,
// where a first message is worth a short wait rather than a drop.
func (a *Admission) Wait(ctx context.Context, id peer.ID) Verdict {
	v, done := a.check(id)
	if v != Pending || done == nil {
		return v
	}
	select {
	case <-done:
	case <-ctx.Done():
		return Pending
	}
	return a.Status(id).Verdict
}

// Status reports what the book says about id, without asking anyone.
func (a *Admission) Status(id peer.ID) PeerStatus {
	if id == a.self {
		return PeerStatus{Verdict: Admitted}
	}
	now := a.cfg.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.book[id]
	if t == nil {
		return PeerStatus{Verdict: Pending}
	}
	return PeerStatus{Verdict: t.verdictAt(now), Expiry: t.expiry, Err: t.err, Asking: t.done != nil}
}

// Claims returns what id's current token says (its account and player
// name), if the book holds one that has not expired; it asks nobody. A
// game binds the names it shows and whispers to to these, never to a name
// a peer claims in its own messages.
func (a *Admission) Claims(id peer.ID) (token.Claims, bool) {
	now := a.cfg.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.book[id]
	if t == nil || t.verdictAt(now) != Admitted {
		return token.Claims{}, false
	}
	return t.claims, true
}

// Stats returns the counters.
func (a *Admission) Stats() AdmissionStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.stats
	s.Peers = len(a.book)
	return s
}

// check returns the verdict and, while an ask runs, its done channel.
func (a *Admission) check(id peer.ID) (Verdict, <-chan struct{}) {
	if id == a.self {
		return Admitted, nil
	}
	now := a.cfg.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.book[id]
	if t == nil {
		if a.closed || !a.makeRoomLocked(now) {
			return Pending, nil
		}
		t = &ticket{}
		a.book[id] = t
	}
	t.used = now
	if t.done == nil && !now.Before(t.next) {
		a.askLocked(id, t)
	}
	if t.done == nil {
		return t.verdictAt(now), nil
	}
	if t.verdict == Refused {
		// Asked again: the peer may have logged in or started serving
		// its token since (a peer asked in the moment between connecting
		// and registering TokenProtocol). Until the answer, no blame.
		return Pending, t.done
	}
	return t.verdictAt(now), t.done
}

// evictScan bounds the entries makeRoomLocked looks at.
const evictScan = 64

// makeRoomLocked drops one entry if the book is full: among a few, the
// least recently used one that holds no current token and has no ask in
// flight. Peers with a current token leave only by pruning, so a flood of
// unknown authors cannot push honest peers out. False if nothing could go.
func (a *Admission) makeRoomLocked(now time.Time) bool {
	if len(a.book) < a.cfg.MaxPeers {
		return true
	}
	var victim peer.ID
	var vt *ticket
	seen := 0
	for id, t := range a.book {
		if seen++; seen > evictScan {
			break
		}
		if t.done != nil || t.verdictAt(now) == Admitted {
			continue
		}
		if vt == nil || t.used.Before(vt.used) {
			victim, vt = id, t
		}
	}
	if vt == nil {
		a.stats.Turned++
		return false
	}
	delete(a.book, victim)
	a.stats.Evictions++
	return true
}

// askLocked starts an ask of id unless closed or too many are in flight
// (the next Check tries again).
func (a *Admission) askLocked(id peer.ID, t *ticket) {
	if a.closed || a.fetching >= a.cfg.MaxFetches {
		return
	}
	done := make(chan struct{})
	t.done = done
	a.fetching++
	a.stats.Asks++
	a.wg.Go(func() {
		tok, err := a.ask(id)
		now := a.cfg.Now()
		a.mu.Lock()
		a.fetching--
		if t.done == done {
			t.done = nil
			if a.ctx.Err() == nil {
				a.settleLocked(id, t, tok, err, now)
			}
		}
		a.mu.Unlock()
		close(done)
	})
}

// settleLocked records the outcome of an ask.
func (a *Admission) settleLocked(id peer.ID, t *ticket, tok []byte, err error, now time.Time) {
	var claims token.Claims
	if err == nil {
		claims, err = token.Verify(a.cfg.Key, string(tok), id, now)
	}
	switch {
	case err != nil && !isRefusal(err):
		// No answer: keep what is known, try again later.
		a.stats.Unanswered++
		t.fails++
		t.err = err
		t.next = now.Add(backoff(a.cfg.RetryMin, a.cfg.RetryMax, t.fails))
		a.log.Debug("token ask unanswered", "peer", id, "err", err)
	case err != nil:
		a.stats.Refusals++
		t.fails++
		first := a.cfg.RecheckRefused
		if errors.Is(err, errNoService) {
			first = a.cfg.RetryMin
		}
		t.verdict, t.err, t.expiry, t.claims = Refused, err, time.Time{}, token.Claims{}
		t.next = now.Add(backoff(first, max(first, a.cfg.RetryMax), t.fails))
		a.log.Debug("peer refused", "peer", id, "err", err)
	case t.verdict == Admitted && !claims.Expiry.After(t.expiry):
		// The token in hand again: its holder has not refreshed it yet.
		t.fails++
		wait := min(backoff(a.cfg.RetryMin, a.cfg.RetryMax, t.fails), max(t.expiry.Sub(now)/2, a.cfg.RetryMin))
		t.next = now.Add(wait)
	default:
		a.stats.Admissions++
		margin := min(a.cfg.RefetchBefore, claims.Expiry.Sub(claims.IssuedAt)/8)
		t.verdict, t.expiry, t.err, t.fails, t.claims = Admitted, claims.Expiry, nil, 0, claims
		t.next = claims.Expiry.Add(-margin)
		if earliest := now.Add(a.cfg.RetryMin); t.next.Before(earliest) {
			t.next = earliest
		}
	}
}

// errNoService marks a peer that does not serve TokenProtocol: it has no
// token to show.
var errNoService = fmt.Errorf("%w: peer does not serve %s", ErrNoToken, TokenProtocol)

// isRefusal tells an answer that refuses the peer (no token, a bad one, a
// broken answer) from a failure to get one.
func isRefusal(err error) bool {
	return errors.Is(err, ErrNoToken) || errors.Is(err, ErrBadAnswer) ||
		errors.Is(err, token.ErrMalformed) || errors.Is(err, token.ErrBadSignature) ||
		errors.Is(err, token.ErrExpired) || errors.Is(err, token.ErrNotYetValid) ||
		errors.Is(err, token.ErrWrongPeer)
}

// backoff is base doubled for every failure after the first, at most
// limit.
func backoff(base, limit time.Duration, fails int) time.Duration {
	d := base
	for i := 1; i < fails && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// ask fetches id's token over TokenProtocol.
func (a *Admission) ask(id peer.ID) ([]byte, error) {
	ctx, cancel := context.WithTimeout(a.ctx, a.cfg.FetchTimeout)
	defer cancel()
	st, err := a.h.NewStream(network.WithAllowLimitedConn(ctx, "token"), id, TokenProtocol) // one token: fits a relay
	if err != nil {
		if a.lacksService(id) {
			return nil, errNoService
		}
		return nil, fmt.Errorf("ask %s for its token: %w", id, err)
	}
	// Not every transport honours deadlines (the in-memory one does not);
	// the context's end resets the stream, and so does Close.
	stop := context.AfterFunc(ctx, func() { _ = st.Reset() })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		_ = st.SetDeadline(dl)
	}
	_ = st.CloseWrite()
	tok, err := readTokenAnswer(st)
	if err != nil {
		_ = st.Reset()
		if !errors.Is(err, ErrBadAnswer) && a.lacksService(id) {
			return nil, errNoService
		}
		return nil, fmt.Errorf("token answer of %s: %w", id, err)
	}
	_ = st.Close()
	if len(tok) == 0 {
		return nil, fmt.Errorf("%w: %s answered without one", ErrNoToken, id)
	}
	return tok, nil
}

// lacksService reports whether identify says id does not serve
// TokenProtocol (an unknown protocol list says nothing).
func (a *Admission) lacksService(id peer.ID) bool {
	protos, err := a.h.Peerstore().GetProtocols(id)
	if err != nil || len(protos) == 0 {
		return false
	}
	return !slices.Contains(protos, TokenProtocol)
}

// answer serves one ask: this peer's current token, then close.
func (a *Admission) answer(st network.Stream) {
	_ = st.SetDeadline(time.Now().Add(a.cfg.FetchTimeout))
	b, err := AppendTokenAnswer(nil, a.cfg.Token())
	if err != nil {
		a.log.Warn("own token not served", "err", err)
		_ = st.Reset()
		return
	}
	if _, err := st.Write(b); err != nil {
		_ = st.Reset()
		return
	}
	_ = st.Close()
}

// maintain refreshes the tokens of connected peers before they expire,
// even if they are quiet, and drops entries nobody has checked for
// PruneAfter.
func (a *Admission) maintain() {
	tick := time.NewTicker(a.cfg.MaintainEvery)
	defer tick.Stop()
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-tick.C:
		}
		now := a.cfg.Now()
		var due []peer.ID
		a.mu.Lock()
		for id, t := range a.book {
			switch {
			case t.done != nil:
			case now.Sub(t.used) > a.cfg.PruneAfter:
				delete(a.book, id)
			case t.verdict == Admitted && !now.Before(t.next):
				due = append(due, id)
			}
		}
		a.mu.Unlock()
		// Connectedness asks the swarm; not under a.mu, which connection
		// notifications take.
		net := a.h.Network()
		due = slices.DeleteFunc(due, func(id peer.ID) bool { return net.Connectedness(id) != network.Connected })
		a.mu.Lock()
		for _, id := range due {
			if t := a.book[id]; t != nil && t.done == nil && !now.Before(t.next) {
				a.askLocked(id, t)
			}
		}
		a.mu.Unlock()
	}
}
