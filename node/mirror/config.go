package mirror

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/arbiter"
	"github.com/overworld-p2p/overworld/game/tss"
	"github.com/overworld-p2p/overworld/game/vfc/vfcworld"
	"github.com/overworld-p2p/overworld/node/crimp"
	"github.com/overworld-p2p/overworld/node/duty"
)

// Config configures a mirror server. Zero fields take the defaults noted;
// Validate names every value it rejects.
type Config struct {
	// Game is the world every mirror of the group runs; a state transfer
	// of another config is refused.
	Game game.Config
	// Authority makes this mirror the group's authority (the paper's
	// überserver): it starts the game, admits the other mirrors, serves
	// state transfers and releases the players of dropped mirrors. The
	// authority has CRIMP member ID 1; the others join through it.
	Authority bool
	// Rotate makes the authority a duty that rotates among the mirrors
	// with the rotating arbiter (node/duty) instead of staying on the
	// mirror that started the game: CRIMP runs in duty mode, each mirror
	// signs with its own MemberKey what it decides while it holds the duty
	// (admissions, drops, releases, reference checkpoints, state
	// transfers), every mirror serves state transfers, and when the holder
	// dies the others take the duty over. Authority then marks the mirror
	// that starts the game; AuthorityKey and AuthorityPublicKey stay unset.
	Rotate bool
	// MemberKey is this mirror's own signing key in rotate mode (default:
	// a fresh one at Start).
	MemberKey ed25519.PrivateKey
	// Arbiter configures the rotating arbiter (rotate mode; zero fields
	// take its defaults).
	Arbiter arbiter.Config
	// Announce, in rotate mode, makes the mirror holding the duty announce
	// the game on Discovery (a LAN without a master server: overworld
	// lan). Players, Holder and Epoch are filled in.
	Announce  *duty.Announcement
	Discovery crimp.Transport
	// Protocol is how the mirrors keep one world: the command protocol
	// (default: every input reliably to every mirror) or the event
	// protocol (moves unreliably, actions decided by the authority; see
	// event.go). Every mirror of a group runs the same one: a state
	// transfer from a group of the other protocol is refused.
	Protocol Protocol
	// MoveRedundancy is how many earlier moves of the same player each
	// move datagram repeats (event protocol; default 3, at most 7; -1 for
	// none).
	MoveRedundancy int
	// DecideWithin is how long after an action's tick the authority still
	// decides it in that tick (event protocol; default half the last
	// delay); a later action is decided in the tick it arrives in.
	DecideWithin time.Duration
	// Delays are the synchronizer's delays (default 0, 50 ms, 150 ms).
	// Only the authority's count: a joining mirror takes the group's from
	// the state transfer.
	Delays []time.Duration
	// AutoDelays re-tunes the inner delays online from the arrival
	// latencies this mirror observes (tss.Retuner); the last delay stays
	// the group's.
	AutoDelays bool
	// AuthorityKey is the authority's ed25519 signing key (the authority
	// only). CRIMP signs its membership decisions with it (admit, deny,
	// drop), and the mirror its own: the release of a dropped mirror's
	// players, the checkpoints other mirrors resync to, the state
	// transfer.
	AuthorityKey ed25519.PrivateKey
	// AuthorityPublicKey checks those signatures: every mirror but the
	// authority needs it (the authority's is taken from AuthorityKey).
	AuthorityPublicKey ed25519.PublicKey
	// MaxSkew bounds how far in the future a command's stamp may be and
	// how far another mirror's clock may be from ours before /readyz fails
	// (default 5 ms).
	MaxSkew time.Duration
	// CRIMP is the multicast member's configuration. ID, Peers, Authority
	// and StateAddr are set by the server; History defaults to the larger
	// of one second and the last delay.
	CRIMP crimp.Config
	// Transport carries CRIMP's datagrams (UDP multicast, or a MemNetwork
	// endpoint).
	Transport crimp.Transport
	// StateListen is the TCP address the authority serves state transfers
	// on (default 127.0.0.1:0); StateAdvertise is the address it tells
	// joining mirrors (default: the listener's).
	StateListen, StateAdvertise string
	// Clock is the server's time (default crimp.WallClock); on a
	// crimp.SimClock a whole run takes simulated time.
	Clock crimp.Clock
	// Seed seeds CRIMP's timer draws (0: a random seed). Simulations set
	// it to replay a run.
	Seed int64
	// Spawn runs work that waits on the network (account server calls,
	// state transfers) off the server's lock. Default: a new goroutine.
	// Simulations run it on the simulation's goroutine.
	Spawn func(func())
	// AccountKey is the account server's public key; tokens are verified
	// offline with it.
	AccountKey ed25519.PublicKey
	// Characters loads and saves characters (the account server).
	Characters Characters
	// DataDir receives the state dumps of hash mismatches (empty: no
	// dumps).
	DataDir string
	// FrameTicks is how many ticks apart a client gets its updates
	// (default 1: every tick).
	FrameTicks int
	// SaveEvery is how often the characters of this mirror's sessions are
	// saved from the last trailing state (default 30 s).
	SaveEvery time.Duration
	// ReleaseAfter is how long the authority waits, after dropping a
	// mirror, for that mirror's players to reconnect elsewhere before it
	// takes them out of the world (default 30 s).
	ReleaseAfter time.Duration
	// HelloTimeout bounds the time from connect to Hello (default 10 s).
	HelloTimeout time.Duration
	// MaxSessions bounds this mirror's clients (default 1024).
	MaxSessions int
	// MaxBadFrames is how many refused frames a client may send before it
	// is disconnected (default 16).
	MaxBadFrames int
	// Egress selects what each client is sent each frame (default
	// EgressVFC); Consistency configures vector-field consistency (default
	// vfcworld.DefaultSettings()); Interest is EgressArea's area (default
	// NeighbourInterest).
	Egress      EgressMode
	Consistency vfcworld.Settings
	Interest    Interest
	// Logger defaults to slog.Default(); Registerer, if set, gets the
	// server's metrics.
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// DefaultDelays are the synchronizer delays MIRROR_MODE.md starts from
// for mirrors on a LAN.
func DefaultDelays() []time.Duration { return tss.DefaultConfig().Delays }

func (c Config) withDefaults() Config {
	if len(c.Delays) == 0 {
		c.Delays = DefaultDelays()
	}
	if len(c.AuthorityKey) == ed25519.PrivateKeySize && c.AuthorityPublicKey == nil {
		c.AuthorityPublicKey = c.AuthorityKey.Public().(ed25519.PublicKey)
	}
	if c.MaxSkew == 0 {
		c.MaxSkew = 5 * time.Millisecond
	}
	if c.CRIMP.History == 0 {
		c.CRIMP.History = max(time.Second, c.Delays[len(c.Delays)-1])
	}
	if c.MoveRedundancy == 0 {
		c.MoveRedundancy = 3
	}
	if c.DecideWithin == 0 {
		c.DecideWithin = c.Delays[len(c.Delays)-1] / 2
	}
	if c.StateListen == "" {
		c.StateListen = "127.0.0.1:0"
	}
	if c.Clock == nil {
		c.Clock = crimp.WallClock{}
	}
	if c.Spawn == nil {
		c.Spawn = func(f func()) { go f() }
	}
	if c.FrameTicks == 0 {
		c.FrameTicks = 1
	}
	if c.SaveEvery == 0 {
		c.SaveEvery = 30 * time.Second
	}
	if c.ReleaseAfter == 0 {
		c.ReleaseAfter = 30 * time.Second
	}
	if c.HelloTimeout == 0 {
		c.HelloTimeout = 10 * time.Second
	}
	if c.MaxSessions == 0 {
		c.MaxSessions = 1024
	}
	if c.MaxBadFrames == 0 {
		c.MaxBadFrames = 16
	}
	if c.Interest == nil {
		c.Interest = NeighbourInterest
	}
	if c.Consistency.Players.Scale == nil && c.Consistency.Objects.Scale == nil {
		c.Consistency = vfcworld.DefaultSettings()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// tssConfig is the synchronizer configuration the authority starts the
// game with.
func (c Config) tssConfig(epoch int64) tss.Config {
	return tss.Config{
		Epoch:      epoch,
		TickPeriod: time.Second / time.Duration(c.Game.TickRate),
		Delays:     c.Delays,
		WeakMargin: game.TileUnits / 4,
		MaxSkew:    c.MaxSkew,
		History:    c.CRIMP.History,
	}
}

// Validate reports every problem with c (after defaults).
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if err := c.Game.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("game: %w", err))
	} else if err := c.tssConfig(0).WithDefaults().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("delays: %w", err))
	}
	switch {
	case c.Rotate && (c.AuthorityKey != nil || c.AuthorityPublicKey != nil):
		errs = append(errs, errors.New("rotate mode takes no AuthorityKey or AuthorityPublicKey: each mirror signs with its own MemberKey"))
	case c.Rotate && c.MemberKey != nil && len(c.MemberKey) != ed25519.PrivateKeySize:
		errs = append(errs, fmt.Errorf("MemberKey of %d bytes, want %d", len(c.MemberKey), ed25519.PrivateKeySize))
	case !c.Rotate && (c.Announce != nil || c.Discovery != nil):
		errs = append(errs, errors.New("Announce and Discovery need Rotate: only a rotating group is found without a master"))
	case c.Rotate:
	case !c.Rotate && c.MemberKey != nil:
		errs = append(errs, errors.New("MemberKey without Rotate: a fixed authority signs with AuthorityKey"))
	case c.Authority && len(c.AuthorityKey) != ed25519.PrivateKeySize:
		errs = append(errs, fmt.Errorf("the authority needs an ed25519 AuthorityKey (%d bytes), got %d bytes", ed25519.PrivateKeySize, len(c.AuthorityKey)))
	case !c.Authority && c.AuthorityKey != nil:
		errs = append(errs, errors.New("AuthorityKey given to a mirror that is not the authority (give it AuthorityPublicKey)"))
	case len(c.AuthorityPublicKey) != ed25519.PublicKeySize:
		errs = append(errs, fmt.Errorf("AuthorityPublicKey of %d bytes, want an ed25519 public key (%d)", len(c.AuthorityPublicKey), ed25519.PublicKeySize))
	case c.Authority && !c.AuthorityPublicKey.Equal(c.AuthorityKey.Public()):
		errs = append(errs, errors.New("AuthorityPublicKey does not match AuthorityKey"))
	}
	if c.Protocol != ProtocolCommand && c.Protocol != ProtocolEvent {
		errs = append(errs, fmt.Errorf("Protocol %d: want ProtocolCommand or ProtocolEvent", c.Protocol))
	}
	if c.MoveRedundancy < -1 || c.MoveRedundancy > maxMoves-1 {
		errs = append(errs, fmt.Errorf("MoveRedundancy %d outside [-1, %d]", c.MoveRedundancy, maxMoves-1))
	}
	if last := c.Delays[len(c.Delays)-1]; c.DecideWithin < 0 || c.DecideWithin > last {
		errs = append(errs, fmt.Errorf("DecideWithin %v outside [0, the last delay %v]: a decision must reach the mirrors before their last state runs its tick", c.DecideWithin, last))
	}
	if c.MaxSkew < 0 || c.MaxSkew > time.Second {
		errs = append(errs, fmt.Errorf("MaxSkew %v outside [0, 1s]", c.MaxSkew))
	}
	if c.Transport == nil {
		errs = append(errs, errors.New("no CRIMP Transport"))
	}
	if len(c.AccountKey) != ed25519.PublicKeySize {
		errs = append(errs, fmt.Errorf("AccountKey of %d bytes, want an ed25519 public key (%d)", len(c.AccountKey), ed25519.PublicKeySize))
	}
	if c.Characters == nil {
		errs = append(errs, errors.New("no Characters store (the account server)"))
	}
	if c.FrameTicks < 1 || c.FrameTicks > 30 {
		errs = append(errs, fmt.Errorf("FrameTicks %d outside [1, 30]", c.FrameTicks))
	}
	if c.SaveEvery < time.Second {
		errs = append(errs, fmt.Errorf("SaveEvery %v below 1s", c.SaveEvery))
	}
	if c.ReleaseAfter < 0 {
		errs = append(errs, fmt.Errorf("ReleaseAfter %v negative", c.ReleaseAfter))
	}
	if c.HelloTimeout <= 0 {
		errs = append(errs, fmt.Errorf("HelloTimeout %v not positive", c.HelloTimeout))
	}
	if c.MaxSessions < 1 || c.MaxSessions > 1<<16 {
		errs = append(errs, fmt.Errorf("MaxSessions %d outside [1, 65536]", c.MaxSessions))
	}
	if c.MaxBadFrames < 1 {
		errs = append(errs, fmt.Errorf("MaxBadFrames %d below 1", c.MaxBadFrames))
	}
	if err := c.validateEgress(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
