package crimp

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"
)

// Config holds every tunable of a CRIMP member. Zero fields take the value
// of DefaultConfig when passed through New; Validate rejects contradictions
// and names the values involved.
type Config struct {
	// ID is this member's identifier when membership is static (benches,
	// tests, a fixed authority). 0 means the member joins through the
	// authority with Node.Join.
	ID MemberID
	// Peers are the other members known from the start (static membership).
	// Their sequences are expected from 1.
	Peers []MemberID
	// Authority makes this member the group's authority (the paper's
	// überserver): it admits members, assigns IDs and drops silent members.
	// It needs a non-zero ID.
	Authority bool
	// StateAddr is the TCP address the authority advertises for state
	// transfer in its establishment messages (see ServeState).
	StateAddr string
	// AuthorityKey is the authority's signing key: it signs every
	// membership decision (establish, deny, drop) so that members can tell
	// them from a forgery by another member. Only the authority has it, and
	// it needs it.
	AuthorityKey ed25519.PrivateKey
	// AuthorityPublicKey checks the authority's signature. A member that
	// joins needs it; a member without it (a static group with no
	// authority) refuses every membership packet. The authority's own is
	// taken from AuthorityKey.
	AuthorityPublicKey ed25519.PublicKey
	// MaxGroup bounds the number of members (self included); the authority
	// denies joins beyond it. At most MaxMembers (MaxDutyGroup with Key).
	MaxGroup int

	// Key turns on duty mode (duty.go): the authority is then a duty that
	// moves between members (HandOver, Campaign) rather than a fixed
	// member, and each member signs with its own key what it decides while
	// it holds the duty. Authority, AuthorityKey, AuthorityPublicKey and
	// Peers must then be unset.
	Key ed25519.PrivateKey
	// GroupKey certifies the members' keys: a joiner's request must carry
	// KeyCert, GroupKey's signature over its public key, and a joiner
	// accepts an answer only from a holder whose key GroupKey certified (an
	// operator's mirrors). Nil accepts any key (a LAN game without an
	// operator: the joiner trusts the first answer to its own request).
	GroupKey ed25519.PublicKey
	// KeyCert is GroupKey's signature over Key's public key.
	KeyCert []byte
	// Founder starts the group holding the duty in epoch 1 (needs ID and
	// Key); the other members join.
	Founder bool
	// LeaseTimeout: the holder decides (admits, drops, hands over) only
	// while a majority of the members echoed one of its session packets
	// sent within LeaseTimeout. TakeoverAfter: a member votes for a new
	// holder only after hearing nothing from the holder that long; it
	// must exceed LeaseTimeout so that a lease is over before a majority
	// can vote it away. Defaults 3 and 4 SessionIntervals.
	LeaseTimeout, TakeoverAfter time.Duration

	// N is the loss detection threshold: a sequence number is declared lost
	// once N packets with a higher sequence from the same sender arrived.
	N int
	// C1, C2: request timers are drawn uniformly in [C1·d, (C1+C2)·d] where
	// d is the one-way delay estimate to the source.
	C1, C2 float64
	// D1, D2: repair timers are drawn uniformly in [D1·d, (D1+D2)·d] where
	// d is the one-way delay estimate to the requester.
	D1, D2 float64
	// E: after a repair is seen or sent, requests for that packet are
	// ignored for E·d.
	E float64
	// F: a request unanswered after F·d restarts recovery.
	F float64
	// NoImmediateRequest turns off the paper's enhancement by which, on a
	// loss, a member sends its request at once with probability 1/n
	// (n = group size).
	NoImmediateRequest bool
	// Deterministic removes every random draw: timers fire at the lower end
	// of their interval and no immediate requests are sent. For tests.
	Deterministic bool

	// History is how long packets are kept for repair and how long a loss
	// is recovered; packets older than this are never delivered. Mirror mode
	// sets it to the longest TSS delay.
	History time.Duration
	// TickInterval is the length of one history interval: tic() moves the
	// newest interval into the past this often.
	TickInterval time.Duration
	// SessionInterval is how often a member multicasts a session packet
	// (delay estimation, keep-alive, tail-loss detection).
	SessionInterval time.Duration
	// DefaultDelay is the one-way delay assumed before a session exchange
	// has measured one; MinDelay is a floor on every estimate so that timers
	// on a LAN do not collapse to zero.
	DefaultDelay, MinDelay time.Duration
	// FEC is how many earlier payloads each data packet carries (0 = off).
	FEC int
	// MaxRequestsPerTick bounds the requests sent per history interval so
	// that a large gap (a long partition, a forged sequence number) does not
	// flood the group; requests over the limit wait for the next interval.
	MaxRequestsPerTick int
	// MaxWindow bounds, per source, how many sequence numbers may be
	// outstanding between the oldest unresolved one and the newest seen.
	MaxWindow int
	// JoinTimeout is the first retransmission timeout of a request-join;
	// it doubles on every retry up to MaxJoinBackoff.
	JoinTimeout, MaxJoinBackoff time.Duration
	// DropAfter is how long the authority waits on a silent member before
	// dropping it (a member not heard since its establishment may be
	// silent a round trip longer, at most History: its first packet takes
	// a round trip). Default: 3/4 of History, as in the paper.
	DropAfter time.Duration
}

// DefaultConfig returns the paper's parameters (C1=1.5, C2=1, D1=2, D2=1,
// E=3, F=2, history 1 s) with the rest chosen for a LAN of mirrors.
func DefaultConfig() Config {
	return Config{
		MaxGroup:           16,
		N:                  1,
		C1:                 1.5,
		C2:                 1,
		D1:                 2,
		D2:                 1,
		E:                  3,
		F:                  2,
		History:            time.Second,
		TickInterval:       10 * time.Millisecond,
		SessionInterval:    200 * time.Millisecond,
		DefaultDelay:       20 * time.Millisecond,
		MinDelay:           time.Millisecond,
		MaxWindow:          4096,
		MaxRequestsPerTick: 32,
		JoinTimeout:        100 * time.Millisecond,
		MaxJoinBackoff:     5 * time.Second,
	}
}

// withDefaults fills zero fields from DefaultConfig. The timer constants
// are filled only all together (all zero), so that one of them may be set
// to 0 on purpose.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.C1 == 0 && c.C2 == 0 && c.D1 == 0 && c.D2 == 0 && c.E == 0 && c.F == 0 {
		c.C1, c.C2, c.D1, c.D2, c.E, c.F = d.C1, d.C2, d.D1, d.D2, d.E, d.F
	}
	setInt := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	setDur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	setInt(&c.MaxGroup, d.MaxGroup)
	setInt(&c.N, d.N)
	setInt(&c.MaxWindow, d.MaxWindow)
	setInt(&c.MaxRequestsPerTick, d.MaxRequestsPerTick)
	setDur(&c.History, d.History)
	setDur(&c.TickInterval, d.TickInterval)
	setDur(&c.SessionInterval, d.SessionInterval)
	setDur(&c.DefaultDelay, d.DefaultDelay)
	setDur(&c.MinDelay, d.MinDelay)
	setDur(&c.JoinTimeout, d.JoinTimeout)
	setDur(&c.MaxJoinBackoff, d.MaxJoinBackoff)
	if c.DropAfter == 0 {
		c.DropAfter = c.History * 3 / 4
	}
	if c.Key != nil {
		setDur(&c.LeaseTimeout, 3*c.SessionInterval)
		setDur(&c.TakeoverAfter, 4*c.SessionInterval)
	}
	if len(c.AuthorityKey) == ed25519.PrivateKeySize && c.AuthorityPublicKey == nil {
		c.AuthorityPublicKey = c.AuthorityKey.Public().(ed25519.PublicKey)
	}
	return c
}

// Validate reports the first inconsistency in c (after defaults).
func (c Config) Validate() error {
	var errs []error
	if c.MaxGroup < 2 || c.MaxGroup > MaxMembers {
		errs = append(errs, fmt.Errorf("MaxGroup %d outside [2, %d]", c.MaxGroup, MaxMembers))
	}
	if len(c.Peers)+1 > c.MaxGroup {
		errs = append(errs, fmt.Errorf("%d peers do not fit MaxGroup %d", len(c.Peers), c.MaxGroup))
	}
	if c.ID == 0 && len(c.Peers) > 0 {
		errs = append(errs, errors.New("static Peers need a non-zero ID"))
	}
	seen := map[MemberID]bool{c.ID: true}
	for _, p := range c.Peers {
		if p == 0 || seen[p] {
			errs = append(errs, fmt.Errorf("peer %d is zero, a duplicate or this member's ID %d", p, c.ID))
		}
		seen[p] = true
	}
	if c.Key != nil {
		errs = append(errs, c.validateDuty()...)
	} else if c.Founder || c.GroupKey != nil || c.KeyCert != nil || c.LeaseTimeout != 0 || c.TakeoverAfter != 0 {
		errs = append(errs, errors.New("Founder, GroupKey, KeyCert, LeaseTimeout and TakeoverAfter need a Key (duty mode)"))
	}
	if c.Authority && c.ID == 0 {
		errs = append(errs, errors.New("the authority needs a non-zero ID"))
	}
	switch {
	case c.AuthorityKey != nil && len(c.AuthorityKey) != ed25519.PrivateKeySize:
		errs = append(errs, fmt.Errorf("AuthorityKey has %d bytes, want %d", len(c.AuthorityKey), ed25519.PrivateKeySize))
	case c.Authority && c.AuthorityKey == nil:
		errs = append(errs, errors.New("the authority needs an AuthorityKey to sign its membership decisions"))
	case !c.Authority && c.AuthorityKey != nil:
		errs = append(errs, errors.New("AuthorityKey given to a member that is not the authority"))
	case c.AuthorityKey != nil && !bytes.Equal(c.AuthorityPublicKey, c.AuthorityKey.Public().(ed25519.PublicKey)):
		errs = append(errs, errors.New("AuthorityPublicKey does not match AuthorityKey"))
	}
	if c.AuthorityPublicKey != nil && len(c.AuthorityPublicKey) != ed25519.PublicKeySize {
		errs = append(errs, fmt.Errorf("AuthorityPublicKey has %d bytes, want %d", len(c.AuthorityPublicKey), ed25519.PublicKeySize))
	}
	if len(c.StateAddr) > maxAddrLen {
		errs = append(errs, fmt.Errorf("StateAddr is %d bytes, limit %d", len(c.StateAddr), maxAddrLen))
	}
	if c.N < 1 {
		errs = append(errs, fmt.Errorf("N %d below 1", c.N))
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"C1", c.C1}, {"C2", c.C2}, {"D1", c.D1}, {"D2", c.D2}, {"E", c.E}, {"F", c.F}} {
		if f.v < 0 || f.v > 100 {
			errs = append(errs, fmt.Errorf("%s %g outside [0, 100]", f.name, f.v))
		}
	}
	if c.F == 0 {
		errs = append(errs, errors.New("F 0 would retry recovery without waiting"))
	}
	if c.TickInterval <= 0 || c.History < c.TickInterval {
		errs = append(errs, fmt.Errorf("History %v shorter than TickInterval %v", c.History, c.TickInterval))
	} else if c.History/c.TickInterval > 100000 {
		errs = append(errs, fmt.Errorf("History %v over TickInterval %v makes more than 100000 intervals", c.History, c.TickInterval))
	}
	if c.SessionInterval <= 0 || c.SessionInterval >= c.DropAfter {
		errs = append(errs, fmt.Errorf("SessionInterval %v must be positive and below DropAfter %v, or live members get dropped", c.SessionInterval, c.DropAfter))
	}
	if c.MinDelay <= 0 || c.DefaultDelay < c.MinDelay {
		errs = append(errs, fmt.Errorf("DefaultDelay %v below MinDelay %v (which must be positive)", c.DefaultDelay, c.MinDelay))
	}
	if c.FEC < 0 || c.FEC > MaxFEC {
		errs = append(errs, fmt.Errorf("FEC %d outside [0, %d]", c.FEC, MaxFEC))
	}
	if c.MaxWindow < 16 || c.MaxWindow > 1<<20 {
		errs = append(errs, fmt.Errorf("MaxWindow %d outside [16, %d]", c.MaxWindow, 1<<20))
	}
	if c.MaxRequestsPerTick < 1 {
		errs = append(errs, fmt.Errorf("MaxRequestsPerTick %d below 1", c.MaxRequestsPerTick))
	}
	if c.JoinTimeout <= 0 || c.MaxJoinBackoff < c.JoinTimeout {
		errs = append(errs, fmt.Errorf("MaxJoinBackoff %v below JoinTimeout %v", c.MaxJoinBackoff, c.JoinTimeout))
	}
	return errors.Join(errs...)
}

// validateDuty checks the duty-mode fields.
func (c Config) validateDuty() []error {
	var errs []error
	if len(c.Key) != ed25519.PrivateKeySize {
		return []error{fmt.Errorf("Key has %d bytes, want %d", len(c.Key), ed25519.PrivateKeySize)}
	}
	if c.Authority || c.AuthorityKey != nil || c.AuthorityPublicKey != nil || len(c.Peers) > 0 {
		errs = append(errs, errors.New("a Key (duty mode) excludes Authority, AuthorityKey, AuthorityPublicKey and Peers"))
	}
	if c.Founder != (c.ID != 0) {
		errs = append(errs, fmt.Errorf("ID %d: the founder needs an ID, the others get theirs when they join", c.ID))
	}
	if c.MaxGroup > MaxDutyGroup {
		errs = append(errs, fmt.Errorf("MaxGroup %d over MaxDutyGroup %d", c.MaxGroup, MaxDutyGroup))
	}
	pub := c.Key.Public().(ed25519.PublicKey)
	switch {
	case c.GroupKey != nil && len(c.GroupKey) != ed25519.PublicKeySize:
		errs = append(errs, fmt.Errorf("GroupKey has %d bytes, want %d", len(c.GroupKey), ed25519.PublicKeySize))
	case c.GroupKey != nil && (len(c.KeyCert) != CertSize || !ed25519.Verify(c.GroupKey, pub, c.KeyCert)):
		errs = append(errs, errors.New("KeyCert is not GroupKey's certificate of Key"))
	case c.GroupKey == nil && c.KeyCert != nil && len(c.KeyCert) != CertSize:
		errs = append(errs, fmt.Errorf("KeyCert has %d bytes, want %d", len(c.KeyCert), CertSize))
	}
	if c.LeaseTimeout <= c.SessionInterval || c.TakeoverAfter <= c.LeaseTimeout {
		errs = append(errs, fmt.Errorf("want SessionInterval %v < LeaseTimeout %v < TakeoverAfter %v, or leases lapse between sessions or overlap a takeover",
			c.SessionInterval, c.LeaseTimeout, c.TakeoverAfter))
	}
	if c.LeaseTimeout >= c.DropAfter {
		errs = append(errs, fmt.Errorf("LeaseTimeout %v must be below DropAfter %v, or a holder cut off from the majority drops it before its lease ends",
			c.LeaseTimeout, c.DropAfter))
	}
	if size := establishSize(c.MaxGroup, len(c.StateAddr)); size > MaxPacketSize {
		errs = append(errs, fmt.Errorf("an establishment for MaxGroup %d with a %d-byte StateAddr takes %d bytes, over %d",
			c.MaxGroup, len(c.StateAddr), size, MaxPacketSize))
	}
	return errs
}

// establishSize is the largest establishment a duty-mode holder sends in a
// group of maxGroup with a state address of addr bytes.
func establishSize(maxGroup, addr int) int {
	return headerSize + 8 + 4 + 8 + 3*1 + 2*KeySize + CertSize + 1 + addr + 1 + (maxGroup-1)*(4+1+KeySize) + SignatureSize
}
