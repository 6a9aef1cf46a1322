package regions

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/bootstrap/leases"
)

// testLeases stands in for the account server's lease service: one holder
// per region, taken by the first coordinator that asks, given up when the
// holder stops coordinating (as regions/guard's gate does); every grant
// gets the next lease ID and a proof signed with the service's key
// (leases.SignProof), which the peers check as they would the account
// server's.
type testLeases struct {
	mu     sync.Mutex
	world  string
	pub    ed25519.PublicKey
	key    ed25519.PrivateKey
	holder map[Coord]peer.ID
	ids    map[Coord]uint64
	proofs map[Coord][]byte
}

func newTestLeases(world string) *testLeases {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	return &testLeases{world: world, pub: pub, key: key,
		holder: map[Coord]peer.ID{}, ids: map[Coord]uint64{}, proofs: map[Coord][]byte{}}
}

// grant gives region c's lease to p under the next lease ID.
func (l *testLeases) grant(c Coord, p peer.ID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.grantLocked(c, p)
}

func (l *testLeases) grantLocked(c Coord, p peer.ID) {
	l.ids[c]++
	proof, err := leases.SignProof(l.key, leases.Proof{Region: leases.RegionLease(l.world, c.X, c.Y), Holder: p.String(),
		LeaseID: l.ids[c], Expires: time.Now().Add(time.Hour)})
	if err != nil {
		panic(err)
	}
	l.holder[c], l.proofs[c] = p, proof
}

// proof is region c's current grant (whoever holds it).
func (l *testLeases) proof(c Coord) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.proofs[c]
}

func (l *testLeases) gate(self peer.ID) testGate { return testGate{l: l, self: self} }

// install makes a cluster's new members use the lease service.
func (l *testLeases) install(cfg *Config, self peer.ID) {
	g := l.gate(self)
	cfg.Gate, cfg.Proofs, cfg.OnRoleChange = g, g, g.onRoleChange
}

type testGate struct {
	l    *testLeases
	self peer.ID
}

func (g testGate) Allowed(c Coord) (uint64, bool) {
	g.l.mu.Lock()
	defer g.l.mu.Unlock()
	if g.l.holder[c] == "" {
		g.l.grantLocked(c, g.self)
	}
	return g.l.ids[c], g.l.holder[c] == g.self
}

func (g testGate) Proof(c Coord) []byte {
	g.l.mu.Lock()
	defer g.l.mu.Unlock()
	if g.l.holder[c] == "" {
		g.l.grantLocked(c, g.self)
	}
	if g.l.holder[c] != g.self {
		return nil
	}
	return g.l.proofs[c]
}

func (g testGate) CheckProof(c Coord, proof []byte) (peer.ID, uint64, time.Time, error) {
	p, err := leases.ParseProof(g.l.pub, proof)
	if err != nil {
		return "", 0, time.Time{}, err
	}
	if want := leases.RegionLease(g.l.world, c.X, c.Y); p.Region != want {
		return "", 0, time.Time{}, fmt.Errorf("proof of %s, want %s", p.Region, want)
	}
	holder, err := peer.Decode(p.Holder)
	if err != nil {
		return "", 0, time.Time{}, err
	}
	return holder, p.LeaseID, p.Expires, nil
}

func (g testGate) onRoleChange(c Coord, r Role) {
	g.l.mu.Lock()
	defer g.l.mu.Unlock()
	if r != RoleCoordinator && g.l.holder[c] == g.self {
		delete(g.l.holder, c)
	}
}
