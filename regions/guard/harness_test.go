package guard

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/bootstrap/accounts"
	"github.com/overworld-p2p/overworld/bootstrap/leases"
	"github.com/overworld-p2p/overworld/bootstrap/leases/leasetest"
	"github.com/overworld-p2p/overworld/node"
	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
	"github.com/overworld-p2p/overworld/regions"
)

const world = "guardtest"

func testLogger() *slog.Logger {
	if os.Getenv("GUARD_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// accountServer is a real account server with its SQLite store in the
// test's temporary directory, whose HTTP handler the peers' clients call
// in memory (vnettest.HandlerTransport): a server on a socket would keep a synctest bubble
// from ever advancing its clock (a goroutine waiting on the network is
// not durably blocked), and its lease times would not be the peers'.
type accountServer struct {
	url     string
	handler http.Handler
	key     ed25519.PrivateKey
	pub     ed25519.PublicKey
	rec     *leasetest.Recorder
}

func newAccountServer(t testing.TB, leaseTTL time.Duration) *accountServer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := accounts.OpenStore(ctx, "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rec := leasetest.NewRecorder()
	srv, err := accounts.New(accounts.Config{
		Key:            key,
		LeaseTTL:       leaseTTL,
		Hash:           accounts.HashParams{Memory: 256, Time: 1, Threads: 1},
		LoginPerSource: accounts.RateLimit{Every: time.Millisecond, Burst: 10000},
		Logger:         testLogger(),
		OnLease:        rec.Granted,
	}, store)
	if err != nil {
		t.Fatal(err)
	}
	return &accountServer{url: "http://accounts.test", handler: srv.Handler(), key: key, pub: pub, rec: rec}
}

// cuttable sits between one peer's accounts client and the server. Cut,
// a request hangs until its deadline, like a black-holed connection.
type cuttable struct {
	base http.RoundTripper
	cut  atomic.Bool
}

func (c *cuttable) RoundTrip(req *http.Request) (*http.Response, error) {
	if c.cut.Load() {
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	return c.base.RoundTrip(req)
}

// login registers an account for peer id and logs it in from id, over
// link.
func (as *accountServer) login(t testing.TB, name string, id peer.ID, link http.RoundTripper) *accounts.Client {
	t.Helper()
	c, err := accounts.NewClient(as.url, accounts.WithHTTPClient(&http.Client{Transport: link}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Register(ctx, name, "password-"+name); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Login(ctx, name, "password-"+name, id); err != nil {
		t.Fatal(err)
	}
	return c
}

// recordingGate logs every commit the gate allows, under the peer ID the
// lease service grants leases to, for leasetest.
type recordingGate struct {
	*LeaseGate
	self peer.ID
	rec  *leasetest.Recorder
}

func (g recordingGate) Allowed(c regions.Coord) (uint64, bool) {
	id, ok := g.LeaseGate.Allowed(c)
	if ok {
		g.rec.Committed(leasetest.Commit{Region: LeaseName(world, c), Holder: g.self.String(), LeaseID: id, At: time.Now()})
	}
	return id, ok
}

// cluster is a set of region peers on a virtual network (vnettest) with
// a bootstrap node, each peer logged in to the account server over its own
// cuttable link.
type cluster struct {
	*vnettest.Cluster
	as      *accountServer
	members []*member
}

type member struct {
	name  string
	n     *node.Node
	svc   *regions.Service
	guard *Guard
	link  *cuttable
	token atomic.Pointer[[]byte] // overrides the token presented when set
	once  sync.Once
}

func (m *member) id() peer.ID { return m.n.ID() }

// close stops the peer's services; the cluster closes its node after.
func (m *member) close() {
	m.once.Do(func() {
		if m.svc != nil {
			m.svc.Close()
		}
		if m.guard != nil {
			m.guard.Close()
		}
	})
}

func regionConfig() regions.Config {
	return regions.Config{World: world, Width: 4, Height: 4,
		RequestTimeout: 2 * time.Second, ProbeTimeout: 500 * time.Millisecond,
		MaintainEvery: 100 * time.Millisecond}
}

func newCluster(t *testing.T, as *accountServer) *cluster {
	t.Helper()
	return &cluster{Cluster: vnettest.New(t, 0, vnettest.Options{Latency: time.Millisecond, Logger: testLogger()}), as: as}
}

// add starts a region peer. withLeases: its gate is a LeaseGate (and its
// commits are logged); otherwise commits are not gated. Every peer checks
// tokens with TokenAuthorizer and presents its own unless m.token is set.
func (cl *cluster) add(t *testing.T, name string, withLeases bool) *member {
	t.Helper()
	p := cl.Add()
	n := p.Node
	log := testLogger().With("peer", name)
	m := &member{name: name, n: n, link: &cuttable{base: vnettest.HandlerTransport{Handler: cl.as.handler}}}
	p.OnClose(m.close)
	client := cl.as.login(t, name, n.ID(), m.link)
	g, err := New(Config{World: world, Accounts: client, PublicKey: cl.as.pub,
		Holder:     leases.HolderConfig{RetryEvery: 100 * time.Millisecond},
		ProbeEvery: 100 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	m.guard = g
	cfg := regionConfig()
	cfg.Logger = log
	g.Apply(&cfg)
	if withLeases {
		cfg.Gate = recordingGate{LeaseGate: g.Gate, self: n.ID(), rec: cl.as.rec}
	} else {
		cfg.Gate = regions.AllowAll
	}
	cfg.Token = func() []byte {
		if tok := m.token.Load(); tok != nil {
			return *tok
		}
		return g.Tokens.Token()
	}
	if m.svc, err = regions.New(n, cfg); err != nil {
		t.Fatal(err)
	}
	cl.members = append(cl.members, m)
	return m
}

func (cl *cluster) ids() []peer.ID {
	var out []peer.ID
	for _, m := range cl.members {
		out = append(out, m.id())
	}
	return out
}

// settle waits until every peer's view of region c names the coordinator
// and replica the full set of peers gives.
func (cl *cluster) settle(t *testing.T, c regions.Coord) {
	t.Helper()
	wantC, wantR := regions.Placement(regions.Key(world, c), cl.ids())
	vnettest.EventuallyWithin(t, 30*time.Second, "placement of "+c.String()+" agreed", func() bool {
		agreed := true
		for _, m := range cl.members {
			if gotC, gotR := m.svc.Coordinator(c); gotC != wantC || gotR != wantR {
				agreed = false
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, _, _ = m.svc.Locate(ctx, c)
				cancel()
			}
		}
		return agreed
	})
}

func (cl *cluster) byID(p peer.ID) *member {
	for _, m := range cl.members {
		if m.id() == p {
			return m
		}
	}
	return nil
}
