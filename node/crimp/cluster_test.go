package crimp

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"math/rand"
	"net/netip"
	"testing"
	"time"
)

// cluster is a group of members on a MemNetwork driven by a SimClock: the
// in-memory test network of this package's tests.
type cluster struct {
	t       *testing.T
	clock   *SimClock
	net     *MemNetwork
	eps     []*MemEndpoint
	members []*Member
	got     []map[Key]int // per member: deliveries per key
	ages    []time.Duration
	events  [][]Event
	history time.Duration
}

var simStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// testAuthorityKey is the authority's signing key in this package's tests.
var testAuthorityKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{42}, ed25519.SeedSize))

// testAuthorityPub is its public half, which every member is given.
var testAuthorityPub = testAuthorityKey.Public().(ed25519.PublicKey)

// newStaticCluster builds n members with IDs 1..n that know each other from
// the start, on one site whose LAN has the given parameters.
func newStaticCluster(t *testing.T, n int, seed int64, lan LinkParams, tweak func(c *Config)) *cluster {
	t.Helper()
	c := newEmptyCluster(t, seed)
	c.net.SetLAN("lan", lan)
	ids := make([]MemberID, n)
	for i := range ids {
		ids[i] = MemberID(i + 1)
	}
	for i := range n {
		cfg := Config{ID: ids[i]}
		for _, id := range ids {
			if id != ids[i] {
				cfg.Peers = append(cfg.Peers, id)
			}
		}
		if tweak != nil {
			tweak(&cfg)
		}
		c.add(cfg, "lan", seed*100+int64(i))
	}
	return c
}

func newEmptyCluster(t *testing.T, seed int64) *cluster {
	clock := NewSimClock(simStart)
	return &cluster{t: t, clock: clock, net: NewMemNetwork(clock, seed)}
}

// add starts one more member at site.
func (c *cluster) add(cfg Config, site string, seed int64) int {
	c.t.Helper()
	node, err := New(cfg, rand.New(rand.NewSource(seed)))
	if err != nil {
		c.t.Fatal(err)
	}
	if c.history == 0 {
		c.history = node.Config().History
	}
	i := len(c.members)
	ep := c.net.Endpoint(site)
	c.got = append(c.got, map[Key]int{})
	c.events = append(c.events, nil)
	m := NewMember(node, ep, c.clock, MemberOptions{
		OnDeliver: func(d Delivery) {
			c.got[i][d.Key]++
			c.ages = append(c.ages, d.ReceivedAt.Sub(d.SentAt))
			if src, seq := decodeTestPayload(d.Payload); src != d.Source || seq != d.Seq {
				c.t.Errorf("member %d: payload of %v says (%d, %d)", i, d.Key, src, seq)
			}
		},
		OnEvent: func(e Event) { c.events[i] = append(c.events[i], e) },
	})
	if err := m.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.eps = append(c.eps, ep)
	c.members = append(c.members, m)
	c.t.Cleanup(func() { m.Close() })
	return i
}

// testPayload names its own key so that deliveries can be checked.
func testPayload(src MemberID, seq uint32, size int) []byte {
	b := make([]byte, max(size, 8))
	binary.BigEndian.PutUint32(b, uint32(src))
	binary.BigEndian.PutUint32(b[4:], seq)
	return b
}

func decodeTestPayload(b []byte) (MemberID, uint32) {
	if len(b) < 8 {
		return 0, 0
	}
	return MemberID(binary.BigEndian.Uint32(b)), binary.BigEndian.Uint32(b[4:])
}

// sendEvery makes member i send count packets, one per interval, starting
// after delay. Sequence numbers start at 1 for a fresh member.
func (c *cluster) sendEvery(i int, count int, interval, delay time.Duration) {
	m := c.members[i]
	var id MemberID
	m.Inspect(func(n *Node) { id = n.ID() })
	seq := uint32(0)
	var send func()
	send = func() {
		seq++
		if err := m.Send(testPayload(id, seq, 40)); err != nil {
			c.t.Errorf("member %d send: %v", i, err)
			return
		}
		if int(seq) < count {
			c.clock.AfterFunc(interval, send)
		}
	}
	c.clock.AfterFunc(delay, send)
}

func (c *cluster) id(i int) MemberID {
	var id MemberID
	c.members[i].Inspect(func(n *Node) { id = n.ID() })
	return id
}

func (c *cluster) stats(i int) Stats {
	var s Stats
	c.members[i].Inspect(func(n *Node) { s = n.Stats() })
	return s
}

// runUntil advances simulated time in steps until cond holds or limit
// passes; it reports whether cond held.
func (c *cluster) runUntil(limit time.Duration, cond func() bool) bool {
	deadline := c.clock.Now().Add(limit)
	for c.clock.Now().Before(deadline) {
		if cond() {
			return true
		}
		c.clock.RunFor(10 * time.Millisecond)
	}
	return cond()
}

func mustAddrPort(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
