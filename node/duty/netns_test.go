package duty

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/game/arbiter"
	"github.com/overworld-p2p/overworld/node/await"
	"github.com/overworld-p2p/overworld/node/crimp"
	"github.com/overworld-p2p/overworld/node/netnstest"
)

// The LAN test: four players, each its own process in its own network
// namespace (dy-<n>-<tag>) on a bridge (in dy-br-<tag>), over real IP
// multicast. The first founds a game and announces it on the discovery
// group; the others find it there (no master, no address given) and join
// its CRIMP group; the rotating arbiter moves the CRIMP authority among
// them as they claim contested resources. Then the process serving the
// arbiter is killed: the survivors take both duties over, drop it, and
// every claim made before and after the kill is answered, no resource
// granted twice.

const lanMemberEnv = "DUTY_NETNS_MEMBER"

type lanSpec struct {
	Index     int    // 1..4; 1 founds the game
	Interface string // inside its namespace
	Discovery string // the discovery group
	Group     string // the game's group (the founder's choice)
	Seed      int64
}

// lanStatus is what a member process reports on STATUS.
type lanStatus struct {
	ID        uint32
	Holder    uint32
	Epoch     uint64
	Leased    bool
	ArbHolder uint32
	Serving   bool
	View      int
	Grants    map[uint64]uint32 // resource → grantee: events and log
	Answered  []uint64          // own claims answered
	Found     string            // the game group it found by discovery
	Err       string
}

func TestLANNetns(t *testing.T) {
	if os.Getenv(lanMemberEnv) != "" {
		t.Skip("running as a namespace member")
	}
	if testing.Short() {
		t.Skip("skipping the LAN multicast test in -short mode")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	memberNS := netnstest.LAN(t, "dy-", 4)
	disc, group := netnstest.Group(98), netnstest.Group(97)

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	procs := make([]*lanProc, len(memberNS))
	start := func(i int) {
		spec, _ := json.Marshal(lanSpec{Index: i + 1, Interface: "eth0", Discovery: disc, Group: group, Seed: int64(i + 1)})
		p, err := startLANProc(ctx, exe, memberNS[i], string(spec))
		if err != nil {
			t.Fatal(err)
		}
		procs[i] = p
		t.Cleanup(p.kill)
	}
	// poll waits for a state the players report only when asked (STATUS).
	poll := func(limit time.Duration, what string, cond func() bool) {
		t.Helper()
		if err := await.UntilErr(limit, what, cond); err != nil {
			for i, p := range procs {
				if p != nil && !p.dead {
					st := p.status()
					t.Logf("player %d: %+v", i+1, st)
				}
			}
			t.Fatal(err)
		}
	}
	live := func() []*lanProc {
		var out []*lanProc
		for _, p := range procs {
			if p != nil && !p.dead {
				out = append(out, p)
			}
		}
		return out
	}
	settled := func() bool {
		ps := live()
		var first lanStatus
		for k, p := range ps {
			st := p.status()
			if st.Err != "" {
				t.Fatalf("player: %s", st.Err)
			}
			if st.ID == 0 || st.View != len(ps) || st.ArbHolder != st.Holder {
				return false
			}
			if k == 0 {
				first = st
			} else if st.Holder != first.Holder || st.Epoch != first.Epoch {
				return false
			}
			if st.ID == st.Holder && (!st.Leased || !st.Serving) {
				return false
			}
		}
		return first.Holder != 0
	}
	start(0)
	poll(30*time.Second, "the founder's game", func() bool { return procs[0].status().Holder != 0 })
	for i := 1; i < len(memberNS); i++ {
		start(i)
	}
	poll(30*time.Second, "four players in one game", settled)
	for i, p := range procs[1:] {
		if st := p.status(); st.Found != group {
			t.Fatalf("player %d found %q by discovery, want the founder's %s", i+2, st.Found, group)
		}
	}
	claims := map[*lanProc][]uint64{}
	claimRound := func(base uint64) uint64 {
		ps := live()
		for k, p := range ps {
			for _, r := range []uint64{base + uint64(k), base + uint64((k+1)%len(ps))} {
				p.send(fmt.Sprintf("CLAIM %d", r))
				claims[p] = append(claims[p], r)
			}
		}
		return base + uint64(len(ps))
	}
	answered := func() bool {
		for _, p := range live() {
			st := p.status()
			for _, r := range claims[p] {
				if _, ok := st.Grants[r]; !ok {
					return false
				}
			}
		}
		return true
	}
	next := uint64(1)
	for range 4 {
		next = claimRound(next)
		poll(30*time.Second, "the claims answered", answered)
		poll(30*time.Second, "the duty settled", settled)
	}
	before := live()[0].status()
	if before.Epoch < 2 {
		t.Fatalf("the CRIMP duty never moved (epoch %d)", before.Epoch)
	}
	// Kill the process serving the arbiter, with claims in flight.
	var victim *lanProc
	for _, p := range live() {
		if st := p.status(); st.ID == st.ArbHolder {
			victim = p
		}
	}
	if victim == nil {
		t.Fatal("nobody serves the arbiter")
	}
	victimID := victim.status().ID
	next = claimRound(next)
	victim.kill()
	killed := time.Now()
	delete(claims, victim)
	poll(30*time.Second, "the survivors took the duty over", func() bool {
		return settled() && live()[0].status().Holder != victimID
	})
	tookOver := time.Since(killed)
	poll(30*time.Second, "the claims in flight answered", answered)
	t.Logf("duty taken over and settled %v after the kill; claims in flight answered %v after it", tookOver.Round(10*time.Millisecond), time.Since(killed).Round(10*time.Millisecond))
	for range 2 {
		next = claimRound(next)
		poll(30*time.Second, "claims after the kill answered", answered)
	}
	// No resource granted to two players.
	grantee := map[uint64]uint32{}
	for _, p := range live() {
		for r, m := range p.status().Grants {
			if g, ok := grantee[r]; ok && g != m {
				t.Errorf("resource %d granted to %d and to %d", r, g, m)
			}
			grantee[r] = m
		}
	}
	after := live()[0].status()
	t.Logf("epochs %d → %d, holder %d → %d (killed %d), %d resources granted", before.Epoch, after.Epoch, before.Holder, after.Holder, victimID, len(grantee))
	for _, p := range live() {
		p.send("QUIT")
	}
}

// lanProc is one player process and its STATUS answers.
type lanProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	mu    sync.Mutex
	last  chan lanStatus
	dead  bool
	errs  strings.Builder
}

func startLANProc(ctx context.Context, exe, ns, spec string) (*lanProc, error) {
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns, exe, "-test.run=^TestLANMember$", "-test.count=1")
	cmd.Env = append(os.Environ(), lanMemberEnv+"="+spec)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	p := &lanProc{cmd: cmd, stdin: stdin, last: make(chan lanStatus, 1)}
	cmd.Stderr = &p.errs
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "STATUS "); ok {
				var st lanStatus
				if err := json.Unmarshal([]byte(line), &st); err != nil {
					st.Err = err.Error()
				}
				p.last <- st
			}
		}
		close(p.last)
	}()
	return p, nil
}

func (p *lanProc) send(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = io.WriteString(p.stdin, line+"\n")
}

// status asks the process for its status and waits for the answer.
func (p *lanProc) status() lanStatus {
	p.send("STATUS")
	select {
	case st, ok := <-p.last:
		if !ok {
			return lanStatus{Err: "player process ended: " + p.errs.String()}
		}
		return st
	case <-time.After(30 * time.Second):
		return lanStatus{Err: "no STATUS answer"}
	}
}

// kill ends the process at once (SIGKILL to ip netns exec's child too: it
// execs the test binary in place).
func (p *lanProc) kill() {
	if p.dead {
		return
	}
	p.dead = true
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
}

// TestLANMember is one player of TestLANNetns, run in its namespace: it
// finds (or founds) the game, plays, and answers the test's commands on
// stdin (CLAIM r, STATUS, QUIT).
func TestLANMember(t *testing.T) {
	raw := os.Getenv(lanMemberEnv)
	if raw == "" {
		t.Skip("helper process of TestLANNetns")
	}
	var spec lanSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatal(err)
	}
	if err := runLANMember(spec); err != nil {
		out, _ := json.Marshal(lanStatus{Err: err.Error()})
		fmt.Printf("STATUS %s\n", out)
		// Keep answering so the test reads the error.
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			fmt.Printf("STATUS %s\n", out)
		}
	}
}

func runLANMember(spec lanSpec) error {
	discGroup, err := netip.ParseAddrPort(spec.Discovery)
	if err != nil {
		return err
	}
	discTr, err := crimp.ListenUDP(crimp.UDPConfig{Group: discGroup, Interface: spec.Interface})
	if err != nil {
		return fmt.Errorf("discovery group: %w", err)
	}
	var listener Listener
	heard := make(chan struct{}, 1) // a datagram was heard since the last look
	if err := discTr.Start(func(b []byte, _ netip.AddrPort) {
		listener.Hear(time.Now(), b)
		select {
		case heard <- struct{}{}:
		default: // a look is pending already
		}
	}); err != nil {
		return err
	}
	cfg := Config{
		CRIMP: crimp.Config{History: time.Second, SessionInterval: 100 * time.Millisecond, JoinTimeout: 50 * time.Millisecond,
			Key: ed25519.NewKeyFromSeed(seedBytes(spec.Seed)), MaxGroup: 8},
		Arbiter: arbiter.Config{MaxMembers: 8, Teams: 2},
		Seed:    spec.Seed,
	}
	var found string
	var groupAddr netip.AddrPort
	if spec.Index == 1 {
		groupAddr, err = netip.ParseAddrPort(spec.Group)
		if err != nil {
			return err
		}
		cfg.CRIMP.ID, cfg.CRIMP.Founder = 1, true
	} else {
		// Found without a master: the game's holder announces it.
		timeout := time.After(30 * time.Second)
		for {
			games, _ := listener.Games(time.Now())
			if len(games) > 0 {
				groupAddr = games[0].Group
				break
			}
			select {
			case <-heard:
			case <-timeout:
				return fmt.Errorf("no game announced on %s", discGroup)
			}
		}
		found = groupAddr.String()
	}
	cfg.Announce = &Announcement{Game: 4242, Name: "lan test", Group: groupAddr}
	tr, err := crimp.ListenUDP(crimp.UDPConfig{Group: groupAddr, Interface: spec.Interface})
	if err != nil {
		return fmt.Errorf("game group: %w", err)
	}
	node, err := New(cfg)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	grants := map[uint64]uint32{}
	answered := map[uint64]bool{}
	m := NewMember(node, tr, crimp.WallClock{}, MemberOptions{Discovery: discTr, OnEvent: func(e Event) {
		if e.Arbiter == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		switch e.Arbiter.Kind {
		case arbiter.EventGrant:
			grants[uint64(e.Arbiter.Resource)] = uint32(e.Arbiter.Member)
			answered[uint64(e.Arbiter.Resource)] = true
		case arbiter.EventDeny:
			answered[uint64(e.Arbiter.Resource)] = true
		}
	}})
	if err := m.Start(); err != nil {
		return err
	}
	defer m.Close()
	if spec.Index != 1 {
		if err := m.Join(); err != nil {
			return err
		}
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		switch fields[0] {
		case "QUIT":
			return nil
		case "CLAIM":
			r, err := strconv.ParseUint(fields[1], 10, 64)
			if err != nil {
				return err
			}
			if err := m.Claim(arbiter.ResourceID(r)); err != nil && err != arbiter.ErrNotMember {
				return fmt.Errorf("claim %d: %w", r, err)
			}
		case "STATUS":
			st := lanStatus{Found: found, Grants: map[uint64]uint32{}}
			m.Inspect(func(n *Node) {
				h, e := n.CRIMP().Holder()
				st.ID, st.Holder, st.Epoch, st.Leased = uint32(n.ID()), uint32(h), e, n.CRIMP().Leased()
				if a := n.Arbiter(); a != nil {
					as := a.Status()
					st.ArbHolder, st.Serving, st.View = uint32(as.Holder), as.Serving, len(as.View)
					for _, g := range a.Grants() {
						st.Grants[uint64(g.Resource)] = uint32(g.Member)
					}
				}
			})
			mu.Lock()
			for r, g := range grants {
				if _, ok := st.Grants[r]; !ok {
					st.Grants[r] = g
				}
			}
			for r := range answered {
				st.Answered = append(st.Answered, r)
			}
			mu.Unlock()
			out, _ := json.Marshal(st)
			fmt.Printf("STATUS %s\n", out)
		}
	}
	return nil
}

func seedBytes(seed int64) []byte {
	b := make([]byte, ed25519.SeedSize)
	binary.BigEndian.PutUint64(b, uint64(seed))
	b[31] = 0xd7
	return b
}
