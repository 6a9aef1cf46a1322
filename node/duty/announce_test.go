package duty

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/game/arbiter"
)

func sampleAnnouncement() Announcement {
	return Announcement{Game: 77, Name: "cave duel", Group: netip.MustParseAddrPort("239.78.1.2:9000"),
		Players: 3, Capacity: 8, Holder: 2, Epoch: 5, Protocol: 1}
}

func TestAnnouncementRoundTrip(t *testing.T) {
	a := sampleAnnouncement()
	b, err := a.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeAnnouncement(b)
	if err != nil || got != a {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for i := range len(b) {
		if _, err := DecodeAnnouncement(b[:i]); err == nil {
			t.Fatalf("%d-byte prefix decoded", i)
		}
	}
	bad := map[string]func(a *Announcement){
		"game 0":         func(a *Announcement) { a.Game = 0 },
		"long name":      func(a *Announcement) { a.Name = strings.Repeat("x", MaxGameName+1) },
		"unicast group":  func(a *Announcement) { a.Group = netip.MustParseAddrPort("10.0.0.1:9000") },
		"over capacity":  func(a *Announcement) { a.Players = 9 },
		"no holder":      func(a *Announcement) { a.Holder = 0 },
		"invalid UTF-8":  func(a *Announcement) { a.Name = "\xff" },
		"IPv6 group":     func(a *Announcement) { a.Group = netip.MustParseAddrPort("[ff02::1]:9000") },
		"zero port":      func(a *Announcement) { a.Group = netip.AddrPortFrom(a.Group.Addr(), 0) },
		"epoch 0":        func(a *Announcement) { a.Epoch = 0 },
		"capacity > 255": func(a *Announcement) { a.Capacity = 256 },
	}
	for name, f := range bad {
		x := sampleAnnouncement()
		f(&x)
		if _, err := x.Encode(); !errors.Is(err, ErrAnnouncement) {
			t.Errorf("%s: encoded (%v)", name, err)
		}
	}
}

func TestListener(t *testing.T) {
	var l Listener
	now := simStart
	a := sampleAnnouncement()
	b1, _ := a.Encode()
	other := a
	other.Game, other.Players = 5, 1
	b2, _ := other.Encode()
	older := a
	older.Epoch, older.Players = 4, 7
	b3, _ := older.Encode()
	l.Hear(now, b1)
	l.Hear(now, b2)
	l.Hear(now, b3) // a former holder's late word: ignored
	l.Hear(now, []byte("junk"))
	games, bad := l.Games(now)
	if len(games) != 2 || games[0] != a || games[1] != other || bad != 1 {
		t.Fatalf("games %+v bad %d", games, bad)
	}
	l.Hear(now.Add(2*time.Second), b2)
	if games, _ := l.Games(now.Add(4 * time.Second)); len(games) != 1 || games[0].Game != 5 {
		t.Fatalf("after expiry: %+v", games)
	}
	for i := range 2 * maxGamesListened {
		x := a
		x.Game = uint64(1000 + i)
		b, _ := x.Encode()
		l.Hear(now.Add(4*time.Second), b)
	}
	if games, bad := l.Games(now.Add(4 * time.Second)); len(games) != maxGamesListened || bad != 1+uint64(maxGamesListened)+1 {
		t.Fatalf("%d games heard, %d bad", len(games), bad)
	}
}

func FuzzDecodeAnnouncement(f *testing.F) {
	b, _ := sampleAnnouncement().Encode()
	f.Add(b)
	f.Add([]byte("OWLA\x02"))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := DecodeAnnouncement(b)
		if err != nil {
			return
		}
		again, err := a.Encode()
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("re-encoding: %v\n in %x\nout %x", err, b, again)
		}
	})
}

// Only the member holding the duty announces, so the announcer follows the
// duty round the group and the game is announced about once per interval.
func TestAnnouncedByTheHolder(t *testing.T) {
	var mu sync.Mutex
	var heard []Announcement
	g := newGroupWith(t, 4, func(i int, c *Config) {
		ann := sampleAnnouncement()
		c.Announce = &ann
	}, func(g *group) {
		listen := g.disc.Endpoint("lan")
		if err := listen.Start(func(b []byte, _ netip.AddrPort) {
			a, err := DecodeAnnouncement(b)
			if err != nil {
				t.Errorf("undecodable announcement: %v", err)
				return
			}
			mu.Lock()
			heard = append(heard, a)
			mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	})
	next := arbiter.ResourceID(1)
	for range 6 {
		g.claimRound(next)
		next += 4
		if !g.runUntil(10*time.Second, g.settled) {
			g.dump()
			t.Fatal("no settle")
		}
	}
	g.runUntil(2*time.Second, func() bool { return false })
	mu.Lock()
	defer mu.Unlock()
	holders := map[uint32]bool{}
	for _, a := range heard {
		holders[a.Holder] = true
		if a.Game != 77 || a.Players < 1 || a.Players > 4 || a.Capacity != 8 || a.Group != sampleAnnouncement().Group {
			t.Fatalf("announcement %+v", a)
		}
	}
	secs := g.clock.Now().Sub(simStart).Seconds()
	// About one per second, plus one at each change of holder.
	if len(heard) < int(secs)-1 || float64(len(heard)) > secs+float64(len(holders))+4 || len(holders) < 2 {
		t.Fatalf("%d announcements in %.1f s from %d holders", len(heard), secs, len(holders))
	}
	if last := heard[len(heard)-1]; last.Players != 4 {
		t.Fatalf("last announcement %+v", last)
	}
}

func TestCollector(t *testing.T) {
	var m Metrics
	m.HandOvers.Add(2)
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(m.Collector(prometheus.Labels{"member": "1"})); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "duty_handovers_total" {
			found = mf.GetMetric()[0].GetCounter().GetValue() == 2
		}
	}
	if !found || len(mfs) != len(m.counters()) {
		t.Fatalf("gathered %d families, handovers found %v", len(mfs), found)
	}
	if m.Counters()["handovers"] != 2 {
		t.Fatalf("counters %v", m.Counters())
	}
}
