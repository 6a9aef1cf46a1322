package main

import (
	"context"
	"crypto/ed25519"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/netip"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/bootstrap/accounts/token"
	"github.com/overworld-p2p/overworld/cmd/overworld/internal/rungroup"
	"github.com/overworld-p2p/overworld/game/webui"
	"github.com/overworld-p2p/overworld/node/crimp"
	"github.com/overworld-p2p/overworld/node/duty"
	"github.com/overworld-p2p/overworld/node/mirror"
)

func init() { extraCommands = append(extraCommands, lanCommand()) }

func lanCommand() command {
	const summary = "play on a LAN: every player is its own mirror, the authority rotates, games are found by multicast"
	return command{name: "lan", summary: summary, run: func(ctx context.Context, args []string, out, errOut io.Writer) error {
		fs := newFlagSet("lan", summary+`.

LAN mode needs no server at all. The player's process runs a mirror (mirror
mode's server) in rotate mode on the LAN's IP multicast: the mirrors of all
players form one CRIMP group, the rotating arbiter moves the authority
(admissions, drops, state transfer, releases, first-come grants) among them,
and when the player holding it quits or crashes the others take it over. A
new player listens on the discovery group (-discovery) for -wait; the
mirror holding the duty announces its game there every second. It joins the
game it hears with the most players, or founds one on a random group. The
page is served on -http as in the other modes (-bot lets a bot play).
Characters live only as long as the game (there is no account server).`, out)
		iface := addInterfaceFlag(fs, "the LAN's network interface (required)")
		discovery := fs.String("discovery", duty.DefaultDiscoveryGroup.String(), "IPv4 multicast group and port where games are announced")
		wait := fs.Duration("wait", 2*time.Second, "how long to listen for announced games before founding one")
		name := fs.String("name", "", "player name (default: a random one)")
		gameName := fs.String("game", "lan game", "name announced for a game this player founds")
		protocol := fs.String("protocol", "command", "for a game this player founds: command (every input reliably to every mirror) or event (moves unreliably, actions decided by the duty holder); a joiner runs the game's")
		shapeF := addWorldShapeFlags(fs, "4x4", "every player of a game must use the same")
		httpAddr := fs.String("http", "127.0.0.1:8670", "address of the page")
		listen := fs.String("listen", "127.0.0.1:0", "address of this player's mirror for its client (/ws) and probes (/metrics, /readyz)")
		bot := fs.Bool("bot", false, "let a bot play instead of the page")
		statusEvery := fs.Duration("status-every", 0, "print a JSON status line this often (0: never)")
		logF := addLogFlags(fs, "info")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		log, err := logF.logger(errOut)
		if err != nil {
			return err
		}
		if *iface == "" {
			return errors.New("-interface is required: the LAN's interface, which carries the multicast")
		}
		ifAddr, err := interfaceIPv4(*iface)
		if err != nil {
			return err
		}
		discGroup, err := netip.ParseAddrPort(*discovery)
		if err != nil {
			return fmt.Errorf("-discovery: %w", err)
		}
		g, err := shapeF.game()
		if err != nil {
			return err
		}
		proto, err := mirror.ParseProtocol(*protocol)
		if err != nil {
			return fmt.Errorf("-protocol: %w", err)
		}

		// No account server: this process signs its own player's token,
		// which only its own mirror checks.
		accountPub, accountKey, err := ed25519.GenerateKey(crand.Reader)
		if err != nil {
			return err
		}
		key, _, err := crypto.GenerateEd25519Key(crand.Reader)
		if err != nil {
			return err
		}
		pid, err := peer.IDFromPrivateKey(key)
		if err != nil {
			return err
		}
		player := *name
		if player == "" {
			player = fmt.Sprintf("player-%s", pid.String()[len(pid.String())-6:])
		}
		tok, err := token.Sign(accountKey, token.Claims{
			Session: "lan-" + pid.String(), Account: "lan-" + pid.String(), Player: player, Peer: pid,
			IssuedAt: time.Now().Add(-time.Minute), Expiry: time.Now().Add(7 * 24 * time.Hour),
		})
		if err != nil {
			return err
		}

		discTr, err := crimp.ListenUDP(crimp.UDPConfig{Group: discGroup, Interface: *iface, Loopback: true, Logger: log})
		if err != nil {
			return fmt.Errorf("discovery group: %w", err)
		}
		// Stop order (lifecycle.go): page, the player's session, the
		// mirror (players leave, the duty moves on), its client listener,
		// the discovery group.
		group := rungroup.New(log)
		group.Add(rungroup.Service{Name: "discovery group", Stop: func() { discTr.Close() }})
		var heard duty.Listener
		if err := discTr.Start(func(b []byte, _ netip.AddrPort) { heard.Hear(time.Now(), b) }); err != nil {
			group.Close()
			return err
		}
		found, err := findLANGame(ctx, &heard, *wait)
		if err != nil {
			group.Close()
			return err
		}
		founder := found == nil
		ann := duty.Announcement{Name: *gameName, Protocol: uint8(proto)}
		if founder {
			ann.Game, ann.Group = newLANGame()
			fmt.Fprintf(out, "no game on the LAN: founding %q on %s (%s protocol)\n", ann.Name, ann.Group, proto)
		} else {
			ann = *found
			proto = mirror.Protocol(ann.Protocol)
			if _, err := mirror.ParseProtocol(proto.String()); err != nil {
				group.Close()
				return fmt.Errorf("the game on the LAN runs %s, which this version does not know", proto)
			}
			fmt.Fprintf(out, "joining %q on %s (%d players, %s protocol)\n", ann.Name, ann.Group, ann.Players, proto)
		}
		tr, err := crimp.ListenUDP(crimp.UDPConfig{Group: ann.Group, Interface: *iface, Loopback: true, Logger: log})
		if err != nil {
			group.Close()
			return fmt.Errorf("game group: %w", err)
		}

		reg := newProcessRegistry()
		cfg := mirror.Config{
			Game: g, Rotate: true, Authority: founder, Protocol: proto, CRIMP: crimp.DefaultConfig(), Transport: tr,
			StateListen: net.JoinHostPort(ifAddr.String(), "0"),
			AccountKey:  accountPub, Characters: &mirror.MemoryCharacters{Key: accountPub},
			Announce: &ann, Discovery: discTr, Registerer: reg, Logger: log,
			// A LAN player whose process is gone does not come back on
			// another mirror: take its avatar out soon.
			ReleaseAfter: 5 * time.Second,
		}
		m, err := mirror.New(cfg)
		if err != nil {
			group.Close()
			return err
		}
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			group.Close()
			return fmt.Errorf("-listen: %w", err)
		}
		if err := m.Start(); err != nil {
			ln.Close()
			group.Close()
			return err
		}
		group.Add(clientListenerService(ln, m, reg))
		group.Add(mirrorService(m, out))
		page, err := mirror.NewPageSession(mirror.PageConfig{
			Mirrors: []string{"ws://" + ln.Addr().String() + "/ws"}, Key: key,
			Token: func(context.Context) (string, error) { return tok, nil }, Bot: *bot, BotSeed: rand.Uint64(), Logger: log,
		})
		if err != nil {
			group.Close()
			return err
		}
		pageLn, err := net.Listen("tcp", *httpAddr)
		if err != nil {
			group.Close()
			return fmt.Errorf("-http: %w", err)
		}
		var secret string
		if webui.NeedsSecret(*httpAddr) {
			secret = webui.NewSecret()
		}
		web, err := webui.NewServer(page, webui.Options{Logger: log, Secret: secret})
		if err != nil {
			pageLn.Close()
			group.Close()
			return err
		}
		group.Add(pageSessionService(page))
		group.Add(pageService(web, pageLn))
		fmt.Fprintf(out, "player %s; open %s in your browser (Ctrl-C stops)\n", player, webui.PageURL(pageLn.Addr(), secret))
		if *statusEvery > 0 {
			group.Add(lanStatusService(out, m, *statusEvery))
		}
		return group.Run(ctx)
	}}
}

// findLANGame listens for announced games for wait and returns the one
// with the most players (nil: none).
func findLANGame(ctx context.Context, heard *duty.Listener, wait time.Duration) (*duty.Announcement, error) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-deadline.C:
	}
	games, _ := heard.Games(time.Now())
	if len(games) == 0 {
		return nil, nil
	}
	return &games[0], nil
}

// newLANGame draws a game ID and a multicast group for a new game (in
// 239.78.0.0/16, administratively scoped).
func newLANGame() (uint64, netip.AddrPort) {
	var b [12]byte
	_, _ = crand.Read(b[:])
	id := binary.BigEndian.Uint64(b[:]) | 1
	addr := netip.AddrFrom4([4]byte{239, 78, b[8], max(b[9], 1)})
	port := 20000 + binary.BigEndian.Uint16(b[10:])%20000
	return id, netip.AddrPortFrom(addr, port)
}

// interfaceIPv4 is the first IPv4 address of the named interface: where this
// player's mirror serves state transfers to the others.
func interfaceIPv4(name string) (netip.Addr, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("-interface: %w", err)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("-interface %s: %w", name, err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP.To4()); ok && n.IP.To4() != nil {
				return ip, nil
			}
		}
	}
	return netip.Addr{}, fmt.Errorf("-interface %s has no IPv4 address", name)
}

// lanStatus is one status line of overworld lan -status-every.
type lanStatus struct {
	Mirror     uint32 `json:"mirror"`
	Holder     uint32 `json:"holder"`
	Epoch      uint64 `json:"epoch"`
	Players    int    `json:"players"`
	Agreed     uint64 `json:"agreed"`
	Mismatched uint64 `json:"mismatched"`
}

// lanStatusService prints a status line every interval until stopped.
func lanStatusService(out io.Writer, m *mirror.Server, every time.Duration) rungroup.Service {
	stop := make(chan struct{})
	return rungroup.Service{
		Name: "status",
		Run:  func() error { printLANStatus(stop, out, m, every); return nil },
		Stop: func() { close(stop) },
	}
}

func printLANStatus(stop <-chan struct{}, out io.Writer, m *mirror.Server, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		self, holder, epoch := m.Duty()
		st := lanStatus{Mirror: uint32(self), Holder: uint32(holder), Epoch: epoch}
		m.Inspect(func(_, last *mirror.State) { st.Players = len(last.World().Players()) })
		ms := m.Metrics()
		st.Agreed, st.Mismatched = ms.Agreed, ms.Mismatched
		b, _ := json.Marshal(st)
		fmt.Fprintf(out, "STATUS %s\n", b)
	}
}
