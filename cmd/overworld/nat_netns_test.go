package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/p2p/protocol/holepunch"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/bootstrap"
	"github.com/overworld-p2p/overworld/bootstrap/accounts"
	"github.com/overworld-p2p/overworld/bootstrap/accounts/token"
	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/play"
	"github.com/overworld-p2p/overworld/node"
	"github.com/overworld-p2p/overworld/node/await"
	"github.com/overworld-p2p/overworld/regions"
	"github.com/overworld-p2p/overworld/regions/guard"
	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// Players behind NAT, end to end, in network namespaces:
//
//	cn-pub   11.0.0.10  bootstrap node (DHT server, relay v2, AutoNAT),
//	                    account server, public player "alice", headless
//	                    full peer "operator" (overworld peer -account)
//	cn-nat1  11.0.0.1 | 192.168.1.1  MASQUERADE          cn-p1 192.168.1.2 "bob"
//	cn-nat2  11.0.0.2 | 192.168.2.1  MASQUERADE --random-fully (symmetric)
//	                                                     cn-p2 192.168.2.2 "carol"
//	cn-nat3  11.0.0.3 | 192.168.3.1  MASQUERADE          cn-p3 192.168.3.2 "dave"
//
// The 11.0.0.0/24 side is a bridge in cn-inet; 11/8 counts as public to
// libp2p (AutoNAT and hole punching ignore private ranges), and nothing
// leaves the namespaces. Each host is this test binary re-executed in its
// namespace (natRoleEnv), driven over stdin/stdout.
//
// What it shows: the NATed players find out they are private (AutoNAT),
// reserve a relay slot and switch the DHT to client mode; no peer, public
// or NATed, ever places a NATed player as a region's coordinator or replica,
// and the NATed players hold no region; carol, whose symmetric NAT defeats
// hole punching, opens a stream of each protocol (region, fight, whisper,
// token) to bob over the relay only; alice, public, reaches bob knowing only
// his advertised addresses (the relay's lead in); dave, behind a
// port-preserving NAT like bob's, reaches bob through the relay and the
// connection is upgraded to a direct one by hole punching (DCUtR's
// simultaneous open through both NATs). The NATed players reach the public
// peers directly, as any client behind NAT does.

const natRoleEnv = "OVERWORLD_NAT_ROLE"

// natSpec tells a re-executed test binary what to be.
type natSpec struct {
	Role     string // "public" or "player"
	Dir      string
	User     string
	Boot     string // player: the bootstrap node's full multiaddr
	Accounts string // player: the account server's URL
}

// natCommand is one request to a role process, one JSON line on its stdin.
type natCommand struct {
	Op    string   // "status", "streams", "punch", "reach"
	To    string   // streams, punch: the target peer
	Addrs []string // its addresses
	IDs   []string // status: peers to tell CanCoordinate of
}

// natStatus is a process's answer to "status".
type natStatus struct {
	Boot, Accounts string            // public only
	IDs            map[string]string // name -> peer ID of its peers
	ServesDHT      map[string]bool   // name -> does it serve the DHT now
	BehindNAT      map[string]bool   // name -> has it seen its address translated
	HolePunching   map[string]bool   // name -> does it answer DCUtR (once it knows a public address)
	Reachability   map[string]string // name -> AutoNAT's verdict
	Addrs          map[string][]string
	Held           map[string]int             // name -> regions held (any role)
	Views          map[string][][2]string     // name -> per region: coordinator, replica
	CanCoordinate  map[string]map[string]bool // name -> peer ID -> placeable
}

// natStreams is a player's answer to "streams": per protocol, the error
// ("" = the stream opened and the other side answered), and the
// connections it had to the target afterwards.
type natStreams struct {
	Results map[string]string
	Conns   []natConn
}

type natConn struct {
	Remote  string
	Limited bool
}

// natPunch is a player's answer to "punch".
type natPunch struct {
	Relayed bool // a relayed connection came up first
	Direct  bool // a direct one followed
	Rounds  int  // relayed connections made until then
	Conns   []natConn
	Err     string
}

const natWorld = "nat"

func natGame() game.Config {
	g := game.DefaultConfig()
	g.RegionsX, g.RegionsY = 2, 2
	return g
}

func TestNATPlayerNetns(t *testing.T) {
	if os.Getenv(natRoleEnv) != "" {
		t.Skip("running as a namespace host")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping the NAT test: creating network namespaces, veths, a bridge and NAT rules needs root")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping the NAT test: %s not found (Debian packages iproute2, iptables)", tool)
		}
	}
	if testing.Short() {
		t.Skip("skipping the NAT test in -short mode")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("%d%03d", os.Getpid()%100000, rand.IntN(1000))
	ns := func(name string) string { return "cn-" + name + "-" + tag }
	inet, pub := ns("inet"), ns("pub")
	nats := []string{ns("nat1"), ns("nat2"), ns("nat3")}
	hosts := []string{ns("p1"), ns("p2"), ns("p3")}

	run := func(args ...string) error {
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	must := func(args ...string) {
		t.Helper()
		if err := run(args...); err != nil {
			t.Fatal(err)
		}
	}
	// Deleting a namespace deletes the veths and the bridge inside it.
	for _, name := range append(append([]string{inet, pub}, nats...), hosts...) {
		if err := run("ip", "netns", "add", name); err != nil {
			t.Skipf("skipping the NAT test: cannot make network namespaces here: %v", err)
		}
		t.Cleanup(func() {
			if err := run("ip", "netns", "del", name); err != nil {
				t.Logf("cleanup: %v", err)
			}
		})
		must("ip", "-n", name, "link", "set", "lo", "up")
	}
	must("ip", "-n", inet, "link", "add", "cn-br0", "type", "bridge")
	must("ip", "-n", inet, "link", "set", "cn-br0", "up")
	// link puts a veth between namespace a (interface an, address aAddr)
	// and the bridge in cn-inet.
	toBridge := func(a, an, port, addr string) {
		must("ip", "-n", a, "link", "add", an, "type", "veth", "peer", "name", port, "netns", inet)
		must("ip", "-n", inet, "link", "set", port, "master", "cn-br0")
		must("ip", "-n", inet, "link", "set", port, "up")
		must("ip", "-n", a, "addr", "add", addr, "dev", an)
		must("ip", "-n", a, "link", "set", an, "up")
	}
	toBridge(pub, "cn-eth0", "cn-pub", "11.0.0.10/24")
	for i, router := range nats {
		lan := fmt.Sprintf("192.168.%d", i+1)
		toBridge(router, "cn-wan", fmt.Sprintf("cn-wan%d", i+1), fmt.Sprintf("11.0.0.%d/24", i+1))
		must("ip", "-n", router, "link", "add", "cn-lan", "type", "veth", "peer", "name", "cn-eth0", "netns", hosts[i])
		must("ip", "-n", router, "addr", "add", lan+".1/24", "dev", "cn-lan")
		must("ip", "-n", router, "link", "set", "cn-lan", "up")
		must("ip", "-n", hosts[i], "addr", "add", lan+".2/24", "dev", "cn-eth0")
		must("ip", "-n", hosts[i], "link", "set", "cn-eth0", "up")
		must("ip", "-n", hosts[i], "route", "add", "default", "via", lan+".1")
		must("ip", "netns", "exec", router, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward")
		// Linux's MASQUERADE keeps the source port when it is free: one
		// mapping per inside socket whatever the destination (endpoint-
		// independent in practice), while conntrack lets in only what
		// answers a packet sent out. --random-fully gives every
		// connection its own port: a symmetric NAT.
		rule := []string{"ip", "netns", "exec", router, "iptables", "-t", "nat", "-A", "POSTROUTING", "-o", "cn-wan", "-j", "MASQUERADE"}
		if i == 1 {
			rule = append(rule, "--random-fully")
		}
		must(rule...)
		// Like a home router, drop what nobody inside asked for (Linux
		// would answer an unsolicited SYN with a reset, which kills the
		// hole punch whose other half is still on its way).
		must("ip", "netns", "exec", router, "iptables", "-A", "INPUT", "-i", "cn-wan", "-m", "conntrack", "--ctstate", "NEW,INVALID", "-j", "DROP")
	}

	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel) // after the processes' own cleanups, which stop them gently
	start := func(netns string, spec natSpec) *natProc {
		t.Helper()
		raw, _ := json.Marshal(spec)
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", netns, exe, "-test.run=^TestNATRole$", "-test.count=1", "-test.timeout=5m")
		cmd.Env = append(os.Environ(), natRoleEnv+"="+string(raw))
		p, err := startNATProc(cmd, spec.User)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := p.stop(); err != nil {
				t.Errorf("%s: %v", spec.User, err)
			}
			if t.Failed() {
				t.Logf("log of %s (last 60 lines):\n%s", spec.User, p.logTail(60))
			}
			if d := os.Getenv("OVERWORLD_NAT_LOG_DIR"); d != "" {
				_ = os.WriteFile(filepath.Join(d, spec.User+".log"), []byte(p.log.String()), 0o644)
			}
		})
		return p
	}
	public := start(pub, natSpec{Role: "public", Dir: filepath.Join(dir, "pub"), User: "alice"})
	var hello natStatus
	if err := public.call(natCommand{Op: "status"}, &hello, time.Minute); err != nil {
		t.Fatalf("public host: %v", err)
	}
	names := []string{"bob", "carol", "dave"}
	players := map[string]*natProc{}
	for i, name := range names {
		players[name] = start(hosts[i], natSpec{Role: "player", Dir: filepath.Join(dir, name), User: name, Boot: hello.Boot, Accounts: hello.Accounts})
	}

	// Each NATed player learns it is private, reserves a relay slot and
	// runs the DHT as a client.
	st := map[string]natStatus{}
	for _, name := range names {
		// These states come from several parts of libp2p (AutoNAT, the
		// relay client, the DHT's mode, the hole punching service); the
		// role's status answer is the one place that shows them together.
		var s natStatus
		var callErr error
		err := await.UntilErr(2*time.Minute, name+" private, a DHT client, with a relay address and hole punching", func() bool {
			s = natStatus{}
			if callErr = players[name].call(natCommand{Op: "status"}, &s, time.Minute); callErr != nil {
				return true
			}
			// Hole punching starts on a relayed connection only once the
			// service knows a public address of its own (observed by a
			// peer); a relayed connection older than that stays relayed.
			return !s.ServesDHT[name] && s.BehindNAT[name] && s.Reachability[name] == "private" && hasCircuit(s.Addrs[name]) && s.HolePunching[name]
		})
		if callErr != nil {
			t.Fatalf("%s: %v", name, callErr)
		}
		if err != nil {
			t.Fatalf("%v: serves DHT %v, behind NAT %v, reachability %s, hole punching %v, addrs %v", err, s.ServesDHT[name], s.BehindNAT[name], s.Reachability[name], s.HolePunching[name], s.Addrs[name])
		}
		st[name] = s
		t.Logf("%s %s: private, DHT client, relay addresses %v", name, st[name].IDs[name], circuits(st[name].Addrs[name]))
	}
	bob := st["bob"].IDs["bob"]

	// Carol, behind a symmetric NAT, opens each protocol to bob: only the
	// relay can carry them.
	var streams natStreams
	if err := players["carol"].call(natCommand{Op: "streams", To: bob, Addrs: st["bob"].Addrs["bob"]}, &streams, 2*time.Minute); err != nil {
		t.Fatalf("carol: %v", err)
	}
	for _, proto := range []string{"region", "fight", "whisper", "token"} {
		res, ok := streams.Results[proto]
		if !ok || res != "" {
			t.Errorf("carol -> bob over the relay, %s: %q", proto, res)
		}
	}
	if len(streams.Conns) == 0 || slices.ContainsFunc(streams.Conns, func(c natConn) bool { return !c.Limited }) {
		t.Errorf("carol's connections to bob: %+v, want relayed (limited) ones only", streams.Conns)
	}
	t.Logf("carol -> bob: %v over %+v", streams.Results, streams.Conns)

	// Dave, behind a port-preserving NAT like bob's, reaches bob through
	// the relay; hole punching then opens a direct connection.
	var punch natPunch
	if err := players["dave"].call(natCommand{Op: "punch", To: bob, Addrs: st["bob"].Addrs["bob"]}, &punch, 4*time.Minute); err != nil {
		t.Fatalf("dave: %v", err)
	}
	if punch.Err != "" || !punch.Relayed || !punch.Direct {
		t.Errorf("dave -> bob: relayed %v, direct %v, err %q, conns %+v", punch.Relayed, punch.Direct, punch.Err, punch.Conns)
	}
	t.Logf("dave -> bob: relayed, then direct (relayed connection %d): %+v", punch.Rounds, punch.Conns)

	// A public player reaches a NATed one knowing only its advertised
	// addresses (its private ones lead nowhere from outside): through the
	// relay, which bob answers by dialing back directly (DCUtR's first
	// step, since alice is public) unless he is connected already.
	var reached natPunch
	if err := public.call(natCommand{Op: "reach", To: bob, Addrs: st["bob"].Addrs["bob"]}, &reached, 2*time.Minute); err != nil {
		t.Fatalf("alice: %v", err)
	}
	if reached.Err != "" {
		t.Errorf("alice -> bob: %s (conns %+v)", reached.Err, reached.Conns)
	}
	t.Logf("alice -> bob whispered; connections now %+v", reached.Conns)

	// Nobody places a NATed player, and the NATed players hold nothing.
	natted := map[string]bool{}
	var ids []string
	for _, name := range names {
		natted[st[name].IDs[name]] = true
		ids = append(ids, st[name].IDs[name])
	}
	var final natStatus
	if err := public.call(natCommand{Op: "status", IDs: ids}, &final, time.Minute); err != nil {
		t.Fatal(err)
	}
	views := map[string]natStatus{"public": final}
	for _, name := range names {
		var s natStatus
		if err := players[name].call(natCommand{Op: "status", IDs: ids}, &s, time.Minute); err != nil {
			t.Fatal(err)
		}
		views[name] = s
	}
	heldPublic := 0
	for host, s := range views {
		for who, view := range s.Views {
			for i, cr := range view {
				if natted[cr[0]] {
					t.Errorf("%s's view (%s): region %d coordinated by NATed peer %s", who, host, i, cr[0])
				}
				if host == "public" && natted[cr[1]] {
					t.Errorf("%s's view: region %d replicated by NATed peer %s", who, i, cr[1])
				}
			}
		}
		for who, can := range s.CanCoordinate {
			for id, ok := range can {
				if ok && natted[id] && id != s.IDs[who] {
					t.Errorf("%s counts NATed %s as a coordinator candidate", who, id)
				}
			}
		}
		for who, held := range s.Held {
			if host != "public" && held != 0 {
				t.Errorf("NATed %s holds %d regions", who, held)
			}
			if host == "public" {
				heldPublic += held
			}
		}
	}
	if heldPublic == 0 {
		t.Error("the public peers hold no region: the NATed players' regions went nowhere")
	}
	t.Logf("public peers hold %d region roles: %v", heldPublic, final.Held)
}

func hasCircuit(addrs []string) bool { return len(circuits(addrs)) > 0 }

func circuits(addrs []string) []string {
	var out []string
	for _, a := range addrs {
		if strings.Contains(a, "/p2p-circuit") {
			out = append(out, a)
		}
	}
	return out
}

// natProc is a role process: commands go to its stdin, "REPLY <json>"
// lines come back on its stdout, its log goes to a buffer.
type natProc struct {
	name    string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	replies chan string
	exited  chan error
	log     *await.Output
	mu      sync.Mutex
}

func startNATProc(cmd *exec.Cmd, name string) (*natProc, error) {
	p := &natProc{name: name, cmd: cmd, replies: make(chan string, 4), exited: make(chan error, 1), log: &await.Output{}}
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = p.log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "REPLY "); ok {
				p.replies <- line
			} else {
				fmt.Fprintln(p.log, sc.Text())
			}
		}
		p.exited <- cmd.Wait()
	}()
	return p, nil
}

func (p *natProc) call(c natCommand, reply any, within time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, _ := json.Marshal(c)
	if _, err := fmt.Fprintf(p.stdin, "%s\n", b); err != nil {
		return fmt.Errorf("send %s: %w", c.Op, err)
	}
	select {
	case line := <-p.replies:
		if msg, ok := strings.CutPrefix(line, "ERROR "); ok {
			return fmt.Errorf("%s: %s", c.Op, msg)
		}
		return json.Unmarshal([]byte(line), reply)
	case err := <-p.exited:
		p.exited <- err
		return fmt.Errorf("%s exited: %v", p.name, err)
	case <-time.After(within):
		return fmt.Errorf("no answer to %s within %s", c.Op, within)
	}
}

// stop closes stdin, which ends the role, and waits for the process.
func (p *natProc) stop() error {
	p.stdin.Close()
	select {
	case err := <-p.exited:
		p.exited <- err
		if err != nil {
			return fmt.Errorf("exited: %v", err)
		}
		return nil
	case <-time.After(time.Minute):
		p.cmd.Process.Kill()
		return fmt.Errorf("did not stop within a minute of its stdin closing")
	}
}

func (p *natProc) logTail(lines int) string {
	all := strings.Split(strings.TrimRight(p.log.String(), "\n"), "\n")
	return strings.Join(all[max(len(all)-lines, 0):], "\n")
}

// TestNATRole is one host of TestNATPlayerNetns, run in its namespace.
func TestNATRole(t *testing.T) {
	raw := os.Getenv(natRoleEnv)
	if raw == "" {
		t.Skip("helper process of TestNATPlayerNetns")
	}
	var spec natSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatal(err)
	}
	level := slog.LevelInfo
	if os.Getenv("OVERWORLD_NAT_LOG_DIR") != "" {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var h *natHost
	var err error
	if spec.Role == "public" {
		h, err = startPublicHost(ctx, spec, log)
	} else {
		h, err = startPlayerHost(ctx, spec, log)
	}
	if err != nil {
		fmt.Printf("REPLY ERROR %v\n", err)
		t.Fatal(err)
	}
	defer h.close()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var c natCommand
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			fmt.Printf("REPLY ERROR %v\n", err)
			continue
		}
		var reply any
		switch c.Op {
		case "status":
			reply = h.status(c.IDs)
		case "streams":
			reply, err = h.streams(ctx, c.To, c.Addrs)
		case "punch":
			reply = h.punch(ctx, c.To, c.Addrs)
		case "reach":
			reply = h.reach(ctx, c.To, c.Addrs)
		default:
			err = fmt.Errorf("unknown op %q", c.Op)
		}
		if err != nil {
			fmt.Printf("REPLY ERROR %v\n", err)
			continue
		}
		b, _ := json.Marshal(reply)
		fmt.Printf("REPLY %s\n", b)
	}
}

// natHost is what runs in one namespace: full peers (name -> node and the
// region services it runs), and for the public host the bootstrap node
// and the account server.
type natHost struct {
	boot     *bootstrap.Node
	accounts string
	names    []string
	nodes    map[string]*node.Node
	regions  map[string]*regions.Service
	player   *play.Peer // the players' own (for streams and punch)
	// connLog has a line "connected <peer> relayed|direct" for every
	// connection of the player's node as it comes up (however briefly it
	// lasts), and the rounds of punch: what punch waits for and checks.
	connLog  await.Output
	verdicts map[string]*reachability
	closers  []func()
}

// reachability follows AutoNAT's verdict on one host.
type reachability struct {
	mu sync.Mutex
	r  network.Reachability
}

func watchReachability(n *node.Node) (*reachability, func(), error) {
	sub, err := n.Host().EventBus().Subscribe(new(event.EvtLocalReachabilityChanged))
	if err != nil {
		return nil, nil, err
	}
	r := &reachability{}
	go func() {
		for e := range sub.Out() {
			r.mu.Lock()
			r.r = e.(event.EvtLocalReachabilityChanged).Reachability
			r.mu.Unlock()
		}
	}()
	return r, func() { sub.Close() }, nil
}

func (r *reachability) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.ToLower(r.r.String())
}

func (h *natHost) close() {
	for i := len(h.closers) - 1; i >= 0; i-- {
		h.closers[i]()
	}
}

// addNode starts a full peer named name listening on listen, watching its
// reachability.
func (h *natHost) addNode(ctx context.Context, name, dir string, listen []ma.Multiaddr, boot []peer.AddrInfo, log *slog.Logger) (*node.Node, error) {
	n, err := node.New(ctx, node.WithDataDir(dir), node.WithListenAddrs(listen...), node.WithBootstrapPeers(boot...),
		node.WithLogger(log.With("peer", name)))
	if err != nil {
		return nil, err
	}
	h.closers = append(h.closers, func() { n.Close() })
	n.Host().Network().Notify(&network.NotifyBundle{ConnectedF: func(_ network.Network, c network.Conn) {
		log.Debug("connection", "peer", name, "remote", c.RemotePeer(), "addr", c.RemoteMultiaddr(), "dir", c.Stat().Direction, "limited", c.Stat().Limited)
	}})
	r, stop, err := watchReachability(n)
	if err != nil {
		return nil, err
	}
	h.closers = append(h.closers, stop)
	h.names = append(h.names, name)
	h.nodes[name], h.verdicts[name] = n, r
	return n, nil
}

// runPlayer starts a play.Peer (logged in as user) on n and runs it.
func (h *natHost) runPlayer(ctx context.Context, n *node.Node, user, accountsURL string, log *slog.Logger) (*play.Peer, error) {
	n.Host().Network().Notify(&network.NotifyBundle{ConnectedF: func(_ network.Network, c network.Conn) {
		kind := "direct"
		if c.Stat().Limited || isCircuit(c.RemoteMultiaddr()) {
			kind = "relayed"
		}
		fmt.Fprintf(&h.connLog, "connected %s %s\n", c.RemotePeer(), kind)
	}})
	p, err := play.New(ctx, n, play.Config{
		World: natWorld, Game: natGame(), Name: user, Logger: log.With("player", user), Registerer: prometheus.NewRegistry(),
		Account: &play.Account{URL: accountsURL, User: user, Password: "the password of " + user, Register: true},
	})
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.Run(runCtx)
	}()
	h.closers = append(h.closers, func() { cancel(); <-done })
	h.regions[user] = p.Regions()
	return p, nil
}

func newNATHost() *natHost {
	return &natHost{nodes: map[string]*node.Node{}, regions: map[string]*regions.Service{}, verdicts: map[string]*reachability{}}
}

func startPublicHost(ctx context.Context, spec natSpec, log *slog.Logger) (_ *natHost, err error) {
	h := newNATHost()
	defer func() {
		if err != nil {
			h.close()
		}
	}()
	h.boot, err = bootstrap.Start(ctx, bootstrap.Config{
		KeyFile:     filepath.Join(spec.Dir, "bootstrap.key"),
		ListenAddrs: []ma.Multiaddr{ma.StringCast("/ip4/11.0.0.10/tcp/4001"), ma.StringCast("/ip4/11.0.0.10/udp/4001/quic-v1")},
		Logger:      log.With("node", "bootstrap"),
	})
	if err != nil {
		return nil, err
	}
	h.closers = append(h.closers, func() { h.boot.Close() })

	key, err := accounts.LoadOrCreateKey(filepath.Join(spec.Dir, "accounts"))
	if err != nil {
		return nil, err
	}
	store, err := accounts.OpenStore(ctx, "", filepath.Join(spec.Dir, "accounts"))
	if err != nil {
		return nil, err
	}
	h.closers = append(h.closers, func() { store.Close() })
	srv, err := accounts.New(accounts.Config{
		Key: key, Logger: log.With("part", "accounts"), Registry: prometheus.NewRegistry(),
		LoginPerSource: accounts.RateLimit{Every: time.Millisecond, Burst: 1000},
		Hash:           accounts.HashParams{Memory: 8 * 1024, Time: 1, Threads: 1},
	}, store)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "11.0.0.10:8640")
	if err != nil {
		return nil, err
	}
	h.accounts = "http://" + ln.Addr().String()
	srvCtx, stopSrv := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(srvCtx, ln)
	}()
	h.closers = append(h.closers, func() { stopSrv(); <-served })

	boot := []peer.AddrInfo{h.boot.AddrInfo()}
	alice, err := h.addNode(ctx, "alice", filepath.Join(spec.Dir, "alice"),
		[]ma.Multiaddr{ma.StringCast("/ip4/11.0.0.10/tcp/4002"), ma.StringCast("/ip4/11.0.0.10/udp/4002/quic-v1")}, boot, log)
	if err != nil {
		return nil, err
	}
	if h.player, err = h.runPlayer(ctx, alice, "alice", h.accounts, log); err != nil {
		return nil, err
	}
	op, err := h.addNode(ctx, "operator", filepath.Join(spec.Dir, "operator"),
		[]ma.Multiaddr{ma.StringCast("/ip4/11.0.0.10/tcp/4003"), ma.StringCast("/ip4/11.0.0.10/udp/4003/quic-v1")}, boot, log)
	if err != nil {
		return nil, err
	}
	hp, err := startHeadless(ctx, op, headlessConfig{
		World: natWorld, Game: natGame(), Logger: log.With("peer", "operator"), Registerer: prometheus.NewRegistry(),
		Account: &play.Account{URL: h.accounts, User: "operator", Password: "the operator's password", Register: true},
	})
	if err != nil {
		return nil, err
	}
	h.closers = append(h.closers, hp.Close)
	h.regions["operator"] = hp.Services().Regions
	return h, nil
}

func startPlayerHost(ctx context.Context, spec natSpec, log *slog.Logger) (_ *natHost, err error) {
	h := newNATHost()
	defer func() {
		if err != nil {
			h.close()
		}
	}()
	boot, err := node.ParseBootstrapAddrs([]string{spec.Boot})
	if err != nil {
		return nil, err
	}
	h.accounts = spec.Accounts
	n, err := h.addNode(ctx, spec.User, filepath.Join(spec.Dir, "node"),
		[]ma.Multiaddr{ma.StringCast("/ip4/0.0.0.0/tcp/0"), ma.StringCast("/ip4/0.0.0.0/udp/0/quic-v1")}, boot, log)
	if err != nil {
		return nil, err
	}
	if h.player, err = h.runPlayer(ctx, n, spec.User, spec.Accounts, log); err != nil {
		return nil, err
	}
	return h, nil
}

func (h *natHost) status(ids []string) natStatus {
	s := natStatus{
		IDs: map[string]string{}, ServesDHT: map[string]bool{}, BehindNAT: map[string]bool{}, HolePunching: map[string]bool{}, Reachability: map[string]string{},
		Addrs: map[string][]string{}, Held: map[string]int{}, Views: map[string][][2]string{},
		CanCoordinate: map[string]map[string]bool{},
	}
	if h.boot != nil {
		s.Boot = h.boot.Addrs()[0].String()
		s.Accounts = h.accounts
	}
	g := natGame()
	for _, name := range h.names {
		n := h.nodes[name]
		s.IDs[name] = n.ID().String()
		s.ServesDHT[name] = n.ServesDHT(n.ID())
		s.BehindNAT[name] = n.BehindNAT()
		s.HolePunching[name] = slices.Contains(n.Host().Mux().Protocols(), holepunch.Protocol)
		s.Reachability[name] = h.verdicts[name].String()
		for _, a := range n.Addrs() {
			s.Addrs[name] = append(s.Addrs[name], a.String())
		}
		s.CanCoordinate[name] = map[string]bool{}
		for _, id := range ids {
			if p, err := peer.Decode(id); err == nil {
				s.CanCoordinate[name][id] = n.CanCoordinate(p)
			}
		}
		rs := h.regions[name]
		for x := range g.RegionsX {
			for y := range g.RegionsY {
				c := regions.Coord{X: x, Y: y}
				coord, replica := rs.Coordinator(c)
				s.Views[name] = append(s.Views[name], [2]string{coord.String(), replica.String()})
				if rs.Role(c) != regions.RoleNone {
					s.Held[name]++
				}
			}
		}
	}
	return s
}

// streams opens a stream of each protocol to the peer to, reachable (for
// a peer behind a symmetric NAT) only through its relay addresses.
func (h *natHost) streams(ctx context.Context, to string, addrs []string) (natStreams, error) {
	target, err := peer.Decode(to)
	if err != nil {
		return natStreams{}, err
	}
	self := h.nodes[h.names[0]]
	hst := self.Host()
	hst.Peerstore().AddAddrs(target, parseAddrs(addrs), peerstore.TempAddrTTL)
	res := natStreams{Results: map[string]string{}}
	errText := func(err error) string {
		if err == nil {
			return ""
		}
		return err.Error()
	}
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()

	// Region: the region protocol's own framing, a ping; any reply proves
	// the stream (without a token, bob answers with a refusal).
	res.Results["region"] = errText(func() error {
		st, err := hst.NewStream(network.WithAllowLimitedConn(ctx, "test region"), target, regions.ProtocolID)
		if err != nil {
			return err
		}
		defer st.Close()
		_ = st.SetDeadline(time.Now().Add(30 * time.Second))
		body, _ := proto.Marshal(&pb.Message{World: natWorld, Body: &pb.Message_Ping{Ping: &pb.Ping{}}})
		if _, err := st.Write(append(binary.AppendUvarint(nil, uint64(len(body))), body...)); err != nil {
			return err
		}
		r := bufio.NewReader(st)
		size, err := binary.ReadUvarint(r)
		if err != nil {
			return fmt.Errorf("reply: %w", err)
		}
		buf := make([]byte, min(size, regions.MaxFrameSize))
		if _, err := io.ReadFull(r, buf); err != nil {
			return err
		}
		return proto.Unmarshal(buf, &pb.Message{})
	}())

	// Whisper, through the game's own call: bob acknowledges only after his
	// admission fetched carol's token, over the same relay.
	res.Results["whisper"] = errText(func() error {
		// Bob's admission of carol shows only in his answer: try until
		// he acknowledges or the streams' time is up.
		var last error
		deadline, _ := ctx.Deadline()
		_ = await.UntilErr(time.Until(deadline), "bob acknowledging a whisper", func() bool {
			wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
			defer wcancel()
			last = h.player.Whisper(wctx, to, "hello over the relay")
			return last == nil
		})
		return last
	}())

	// Fight, through the fight protocol's own call: bob answers (refusing,
	// since carol is not in sight; the answer is what counts here).
	res.Results["fight"] = errText(func() error {
		me := game.Fighter{Skill: 10, Health: game.MaxHealth}
		_, err := play.SendAttack(ctx, hst, target, play.NewAttack(game.PlayerID(self.ID().String()), game.PlayerID(to), 1, me, me))
		return err
	}())

	// Token: bob's answer on the token protocol, checked as an admission
	// checks it.
	res.Results["token"] = errText(func() error {
		st, err := hst.NewStream(network.WithAllowLimitedConn(ctx, "test token"), target, guard.TokenProtocol)
		if err != nil {
			return err
		}
		defer st.Close()
		_ = st.SetDeadline(time.Now().Add(30 * time.Second))
		_ = st.CloseWrite()
		b, err := io.ReadAll(io.LimitReader(st, 8<<10))
		if err != nil {
			return err
		}
		tok, err := guard.DecodeTokenAnswer(b)
		if err != nil {
			return err
		}
		cl, err := accounts.NewClient(h.accounts)
		if err != nil {
			return err
		}
		pub, err := cl.PublicKey(ctx)
		if err != nil {
			return err
		}
		_, err = token.Verify(pub, string(tok), target, time.Now())
		return err
	}())
	res.Conns = conns(hst.Network().ConnsToPeer(target))
	return res, nil
}

// target is this host's first peer and the peer to.
func (h *natHost) target(to string) (host.Host, peer.ID, error) {
	id, err := peer.Decode(to)
	return h.nodes[h.names[0]].Host(), id, err
}

// punch reaches to through its relay addresses and waits for hole
// punching to add a direct connection.
func (h *natHost) punch(ctx context.Context, to string, addrs []string) natPunch {
	var out natPunch
	hst, target, err := h.target(to)
	if err != nil {
		out.Err = err.Error()
		return out
	}
	// DCUtR makes three attempts on each new inbound relayed connection; on
	// a loaded machine all three can miss the moment, as they can on the
	// internet, and a client would try again on its next relayed
	// connection. So does this, a few times.
	for round := 1; round <= 3 && !out.Direct; round++ {
		out.Rounds = round
		// Start afresh: DCUtR starts on a new inbound relayed connection,
		// and one the players made while starting (rendezvous) may predate
		// bob's hole punching service, which waits for a public address
		// first (see HolePunching in the status).
		fmt.Fprintf(&h.connLog, "\npunch round %d\n", round)
		_ = hst.Network().ClosePeer(target)
		cctx, cancel := context.WithTimeout(network.WithAllowLimitedConn(ctx, "test punch"), 30*time.Second)
		err := hst.Connect(cctx, peer.AddrInfo{ID: target, Addrs: parseAddrs(addrs)})
		cancel()
		if err != nil {
			out.Err = err.Error()
			return out
		}
		// Wait for the direct connection hole punching opens, announced
		// by the node as it comes up; only one from this round counts.
		direct := regexp.MustCompile(`(?s)\npunch round ` + strconv.Itoa(round) + `\n.*connected ` + regexp.QuoteMeta(target.String()) + ` direct`)
		if _, err := h.connLog.MatchErr(40*time.Second, direct); err == nil {
			out.Direct = true
		}
	}
	// A relayed connection can be replaced by DCUtR's direct one at once;
	// and a NAT mapping an earlier punch opened (libp2p dials from its
	// listening port) can still let this round's dial through directly.
	// Either way the player did reach the peer over the relay.
	out.Relayed = strings.Contains(h.connLog.String(), "connected "+target.String()+" relayed")
	out.Conns = conns(hst.Network().ConnsToPeer(target))
	return out
}

// reach drops every connection to the peer to and whispers to it, knowing
// only its advertised addresses: for a peer behind NAT, only the relay
// ones lead anywhere.
func (h *natHost) reach(ctx context.Context, to string, addrs []string) natPunch {
	var out natPunch
	hst, target, err := h.target(to)
	if err != nil {
		out.Err = err.Error()
		return out
	}
	_ = hst.Network().ClosePeer(target)
	hst.Peerstore().AddAddrs(target, parseAddrs(addrs), peerstore.TempAddrTTL)
	// The whisper's acknowledgement is the only sign bob was reached.
	_ = await.UntilErr(60*time.Second, "bob acknowledging a whisper", func() bool {
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		err = h.player.Whisper(wctx, to, "hello from the public side")
		return err == nil
	})
	if err != nil {
		out.Err = err.Error()
	}
	out.note(hst.Network().ConnsToPeer(target))
	out.Conns = conns(hst.Network().ConnsToPeer(target))
	return out
}

// note records which kinds of connection cs are.
func (p *natPunch) note(cs []network.Conn) {
	for _, c := range cs {
		if c.Stat().Limited || isCircuit(c.RemoteMultiaddr()) {
			p.Relayed = true
		} else {
			p.Direct = true
		}
	}
}

func isCircuit(a ma.Multiaddr) bool {
	_, err := a.ValueForProtocol(ma.P_CIRCUIT)
	return err == nil
}

func conns(cs []network.Conn) []natConn {
	var out []natConn
	for _, c := range cs {
		out = append(out, natConn{Remote: c.RemoteMultiaddr().String(), Limited: c.Stat().Limited})
	}
	return out
}

func parseAddrs(list []string) []ma.Multiaddr {
	var out []ma.Multiaddr
	for _, s := range list {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			continue
		}
		// Drop the trailing /p2p/<id>: the peer store wants bare addresses.
		a, _ = ma.SplitLast(a)
		out = append(out, a)
	}
	return out
}
