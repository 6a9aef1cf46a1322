package mirror

import (
	"crypto/ed25519"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/bootstrap/accounts/token"
	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/node/crimp"
)

// cluster is mirrors on a crimp.MemNetwork driven by a crimp.SimClock:
// whole runs take simulated time. Each mirror sits at its own site; links
// between sites have the given delay, jitter and loss.
type cluster struct {
	t      testing.TB
	clock  *crimp.SimClock
	net    *crimp.MemNetwork
	signer ed25519.PrivateKey
	pub    ed25519.PublicKey
	// authKey is the mirror authority's signing key.
	authKey ed25519.PrivateKey
	chars   *MemoryCharacters
	game    game.Config
	mirrors []*Server
	eps     []*crimp.MemEndpoint
	rng     *rand.Rand
	// seen accumulates every checkpoint each mirror made.
	seen []map[uint64][32]byte
}

type clusterOpts struct {
	mirrors int
	link    crimp.LinkParams
	// links overrides link between mirrors i > j ({i, j}), from before the
	// first mirror joins.
	links   map[[2]int]crimp.LinkParams
	delays  []time.Duration
	history time.Duration
	fec     int
	seed    int64
	tweak   func(i int, c *Config)
}

func testLogger() *slog.Logger {
	if os.Getenv("MIRROR_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func testGame() game.Config {
	g := game.DefaultConfig()
	g.RegionsX, g.RegionsY = 3, 3
	g.Seed = 11
	return g
}

func newCluster(t testing.TB, o clusterOpts) *cluster {
	t.Helper()
	clock := crimp.NewSimClock(time.Unix(1_700_000_000, 0))
	rng := rand.New(rand.NewSource(o.seed))
	pub, priv, err := ed25519.GenerateKey(rng)
	if err != nil {
		t.Fatal(err)
	}
	_, authKey, err := ed25519.GenerateKey(rng)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{
		t: t, clock: clock, net: crimp.NewMemNetwork(clock, o.seed), signer: priv, pub: pub, authKey: authKey,
		chars: &MemoryCharacters{Key: pub}, game: testGame(), rng: rng,
	}
	for i := range o.mirrors {
		for j := range i {
			l, ok := o.links[[2]int{i, j}]
			if !ok {
				l = o.link
			}
			c.net.SetLink(site(i), site(j), l)
		}
	}
	t.Cleanup(c.close)
	for i := range o.mirrors {
		c.addMirror(o, i)
	}
	return c
}

func site(i int) string { return fmt.Sprintf("m%d", i+1) }

// addMirror starts mirror i (0 is the authority) and lets the simulation
// run until it is ready.
func (c *cluster) addMirror(o clusterOpts, i int) *Server {
	c.t.Helper()
	ep := c.net.Endpoint(site(i))
	cc := crimp.DefaultConfig()
	cc.History = o.history
	cc.FEC = o.fec
	cfg := Config{
		Game: c.game, Authority: i == 0, Delays: o.delays, CRIMP: cc, Transport: ep,
		Clock: c.clock, Spawn: func(f func()) { c.clock.AfterFunc(0, f) },
		AccountKey: c.pub, Characters: c.chars, Logger: testLogger().With("mirror", i+1),
		SaveEvery: 5 * time.Second, ReleaseAfter: 3 * time.Second, Seed: o.seed*100 + int64(i) + 1,
	}
	c.keys(&cfg)
	if o.tweak != nil {
		o.tweak(i, &cfg)
	}
	s, err := New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.mirrors = append(c.mirrors, s)
	c.eps = append(c.eps, ep)
	c.seen = append(c.seen, map[uint64][32]byte{})
	c.runUntil(10*time.Second, fmt.Sprintf("mirror %d ready", i+1), s.Ready)
	return s
}

// keys gives cfg the authority's key (the authority) or its public key.
func (c *cluster) keys(cfg *Config) {
	cfg.AuthorityPublicKey = c.authPub()
	if cfg.Authority {
		cfg.AuthorityKey = c.authKey
	}
}

func (c *cluster) authPub() ed25519.PublicKey { return c.authKey.Public().(ed25519.PublicKey) }

func (c *cluster) close() {
	for _, s := range c.mirrors {
		s.Close()
	}
	c.net.Close()
}

// run advances simulated time by d in steps, collecting checkpoints.
func (c *cluster) run(d time.Duration) {
	end := c.clock.Now().Add(d)
	for c.clock.Now().Before(end) {
		step := min(end.Sub(c.clock.Now()), time.Second)
		c.clock.RunFor(step)
		c.collect()
	}
}

func (c *cluster) collect() {
	for i, s := range c.mirrors {
		for t, h := range s.Checkpoints() {
			c.seen[i][t] = h
		}
	}
}

// runUntil advances simulated time until cond holds, failing after limit.
func (c *cluster) runUntil(limit time.Duration, what string, cond func() bool) {
	c.t.Helper()
	end := c.clock.Now().Add(limit)
	for !cond() {
		if !c.clock.Now().Before(end) {
			c.t.Fatalf("waited %v of simulated time for %s", limit, what)
		}
		c.clock.RunFor(50 * time.Millisecond)
		c.collect()
	}
}

// player is a test account: a peer key and a token for it.
type player struct {
	account string
	name    string
	key     crypto.PrivKey
	id      peer.ID
	tok     string
}

func (c *cluster) player(name string) player {
	c.t.Helper()
	p, err := mintPlayer(c.rng, c.signer, name, c.clock.Now())
	if err != nil {
		c.t.Fatal(err)
	}
	return p
}

// mintPlayer makes an account with a fresh peer key and a token for it
// valid for an hour from now.
func mintPlayer(rng io.Reader, signer ed25519.PrivateKey, name string, now time.Time) (player, error) {
	key, _, err := crypto.GenerateEd25519Key(rng)
	if err != nil {
		return player{}, err
	}
	id, _ := peer.IDFromPrivateKey(key)
	p := player{account: "acct-" + name, name: name, key: key, id: id}
	p.tok, err = signToken(signer, p, now, time.Hour)
	return p, err
}

func signToken(signer ed25519.PrivateKey, p player, at time.Time, ttl time.Duration) (string, error) {
	return token.Sign(signer, token.Claims{
		Session: "s-" + p.name, Account: p.account, Player: p.name, Peer: p.id,
		IssuedAt: at.Add(-time.Second), Expiry: at.Add(ttl),
	})
}

func (c *cluster) token(p player, at time.Time, ttl time.Duration) string {
	c.t.Helper()
	tok, err := signToken(c.signer, p, at, ttl)
	if err != nil {
		c.t.Fatal(err)
	}
	return tok
}

// connect attaches a local client of p to mirror i.
func (c *cluster) connect(i int, p player) *LocalClient {
	return ConnectLocal(c.mirrors[i], p.key, p.tok, c.clock, time.Millisecond)
}

// bot connects a bot-driven client and waits until it plays.
func (c *cluster) bot(i int, p player, seed uint64) *LocalClient {
	c.t.Helper()
	lc := c.connect(i, p)
	lc.StartBot(seed, time.Second/time.Duration(c.game.TickRate))
	c.runUntil(5*time.Second, p.name+" playing", func() bool { return lc.View().HasSelf })
	return lc
}

// agreement compares every checkpoint tick the mirrors all made; it
// returns how many ticks were compared and the first disagreement.
func (c *cluster) agreement(mirrors ...int) (int, string) {
	if len(mirrors) == 0 {
		for i := range c.mirrors {
			mirrors = append(mirrors, i)
		}
	}
	var ticks []uint64
	for t := range c.seen[mirrors[0]] {
		ticks = append(ticks, t)
	}
	sort.Slice(ticks, func(a, b int) bool { return ticks[a] < ticks[b] })
	n := 0
	for _, t := range ticks {
		h := c.seen[mirrors[0]][t]
		all := true
		for _, m := range mirrors[1:] {
			g, ok := c.seen[m][t]
			if !ok {
				all = false
				continue
			}
			if g != h {
				return n, fmt.Sprintf("tick %d: mirror %d has %x, mirror %d has %x", t, mirrors[0]+1, h[:6], m+1, g[:6])
			}
		}
		if all {
			n++
		}
	}
	return n, ""
}
