package duty

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"
	"unicode/utf8"
)

// LAN discovery. Without a master server, the member holding the duty
// multicasts an Announcement of its game every AnnounceInterval on a
// well-known discovery group (DefaultDiscoveryGroup); a new player listens
// there for a while, picks a game and joins its CRIMP group. Only the
// holder announces, so a game is announced once per interval whoever holds
// the duty, and a game whose members are all gone stops being announced.
//
// Announcements are not signed: a player on the LAN can announce a game
// that does not exist or point at another group, and a joiner that follows
// it finds nobody (or, in a game without a GroupKey, the announcer's own
// group). The wire format, all integers big-endian:
//
//	"OWLA" | version u8 | game u64 | name len u8 | name | group IPv4 [4] | port u16 |
//	players u8 | capacity u8 | holder u32 | epoch u64 | protocol u8

// DefaultDiscoveryGroup is where LAN games are announced.
var DefaultDiscoveryGroup = netip.MustParseAddrPort("239.77.7.7:7777")

// AnnounceVersion is the announcement format's version (2 added the
// protocol).
const AnnounceVersion = 2

// Bounds of an announcement.
const (
	MaxGameName      = 64
	maxAnnounceSize  = 4 + 1 + 8 + 1 + MaxGameName + 4 + 2 + 1 + 1 + 4 + 8 + 1
	announceMagic    = "OWLA"
	maxGamesListened = 64
)

// Announcement describes a running LAN game.
type Announcement struct {
	Game     uint64         // the game's ID, random, chosen by its founder
	Name     string         // shown to players; valid UTF-8, at most MaxGameName bytes
	Group    netip.AddrPort // the game's CRIMP multicast group (IPv4)
	Players  int            // members now
	Capacity int            // the most it admits
	Holder   uint32         // the member announcing (holding the duty)
	Epoch    uint64         // its duty epoch
	// Protocol is how the game's mirrors keep one world, as the mirror
	// package numbers its protocols; every joiner must run the same.
	Protocol uint8
}

// ErrAnnouncement is wrapped by DecodeAnnouncement's errors.
var ErrAnnouncement = errors.New("duty: bad announcement")

// Validate checks the bounds of a.
func (a Announcement) Validate() error {
	switch {
	case a.Game == 0:
		return fmt.Errorf("%w: game 0", ErrAnnouncement)
	case len(a.Name) > MaxGameName || !utf8.ValidString(a.Name):
		return fmt.Errorf("%w: name of %d bytes (limit %d, UTF-8)", ErrAnnouncement, len(a.Name), MaxGameName)
	case !a.Group.Addr().Is4() || !a.Group.Addr().IsMulticast() || a.Group.Port() == 0:
		return fmt.Errorf("%w: group %v is not an IPv4 multicast address and port", ErrAnnouncement, a.Group)
	case a.Players < 1 || a.Capacity < a.Players || a.Capacity > 255:
		return fmt.Errorf("%w: %d players of capacity %d", ErrAnnouncement, a.Players, a.Capacity)
	case a.Holder == 0 || a.Epoch == 0:
		return fmt.Errorf("%w: holder %d epoch %d", ErrAnnouncement, a.Holder, a.Epoch)
	}
	return nil
}

// Encode returns the wire form of a.
func (a Announcement) Encode() ([]byte, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	b := make([]byte, 0, maxAnnounceSize)
	b = append(b, announceMagic...)
	b = append(b, AnnounceVersion)
	b = binary.BigEndian.AppendUint64(b, a.Game)
	b = append(b, byte(len(a.Name)))
	b = append(b, a.Name...)
	ip := a.Group.Addr().As4()
	b = append(b, ip[:]...)
	b = binary.BigEndian.AppendUint16(b, a.Group.Port())
	b = append(b, byte(a.Players), byte(a.Capacity))
	b = binary.BigEndian.AppendUint32(b, a.Holder)
	b = binary.BigEndian.AppendUint64(b, a.Epoch)
	return append(b, a.Protocol), nil
}

// DecodeAnnouncement parses and validates one announcement.
func DecodeAnnouncement(b []byte) (Announcement, error) {
	bad := func(format string, args ...any) (Announcement, error) {
		return Announcement{}, fmt.Errorf("%w: %s", ErrAnnouncement, fmt.Sprintf(format, args...))
	}
	if len(b) > maxAnnounceSize {
		return bad("%d bytes, limit %d", len(b), maxAnnounceSize)
	}
	if len(b) < 14 || string(b[:4]) != announceMagic || b[4] != AnnounceVersion {
		return bad("not a version %d announcement", AnnounceVersion)
	}
	a := Announcement{Game: binary.BigEndian.Uint64(b[5:])}
	n := int(b[13])
	rest := b[14:]
	if n > MaxGameName || len(rest) != n+4+2+1+1+4+8+1 {
		return bad("name of %d bytes in a %d-byte announcement", n, len(b))
	}
	a.Name, rest = string(rest[:n]), rest[n:]
	a.Group = netip.AddrPortFrom(netip.AddrFrom4([4]byte(rest[:4])), binary.BigEndian.Uint16(rest[4:]))
	a.Players, a.Capacity = int(rest[6]), int(rest[7])
	a.Holder = binary.BigEndian.Uint32(rest[8:])
	a.Epoch = binary.BigEndian.Uint64(rest[12:])
	a.Protocol = rest[20]
	if err := a.Validate(); err != nil {
		return Announcement{}, err
	}
	return a, nil
}

// Listener collects the announcements heard on a discovery transport:
// the newest of each game (by epoch, then arrival), at most
// maxGamesListened games, each forgotten once silent for Expire.
type Listener struct {
	// Expire forgets a game not announced this long (default 3 s).
	Expire time.Duration

	mu    sync.Mutex
	games map[uint64]heard
	bad   uint64
}

type heard struct {
	a  Announcement
	at time.Time
}

// Hear takes one datagram received at now; undecodable ones are counted.
func (l *Listener) Hear(now time.Time, b []byte) {
	a, err := DecodeAnnouncement(b)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.bad++
		return
	}
	if l.games == nil {
		l.games = map[uint64]heard{}
	}
	l.expire(now)
	old, known := l.games[a.Game]
	if !known && len(l.games) >= maxGamesListened {
		l.bad++
		return
	}
	if known && old.a.Epoch > a.Epoch {
		return // a former holder's late announcement
	}
	l.games[a.Game] = heard{a: a, at: now}
}

func (l *Listener) expire(now time.Time) {
	exp := l.Expire
	if exp == 0 {
		exp = 3 * time.Second
	}
	for id, h := range l.games {
		if now.Sub(h.at) > exp {
			delete(l.games, id)
		}
	}
}

// Games returns the games heard and not expired at now, with the most
// players first (ties: lower game ID), and how many datagrams were bad.
func (l *Listener) Games(now time.Time) ([]Announcement, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expire(now)
	out := make([]Announcement, 0, len(l.games))
	for _, h := range l.games {
		out = append(out, h.a)
	}
	sortGames(out)
	return out, l.bad
}

func sortGames(gs []Announcement) {
	slices.SortFunc(gs, func(a, b Announcement) int {
		if c := cmp.Compare(b.Players, a.Players); c != 0 {
			return c
		}
		return cmp.Compare(a.Game, b.Game)
	})
}
