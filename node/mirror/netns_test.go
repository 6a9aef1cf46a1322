package mirror

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/node/await"
	"github.com/overworld-p2p/overworld/node/crimp"
)

// The real-multicast test: three mirrors, each a process (this test binary
// re-executed) in its own network namespace, on a bridge in a fourth,
// speaking CRIMP over UDP IP multicast with 10 % of received datagrams
// dropped on purpose. Mirror 1 is the authority; 2 and 3 join through it
// over the group and fetch the state over TCP. Two bots play on each
// mirror for twenty seconds, then stand still for ten; every checkpoint
// all three made must carry the same hash, unless something was late or
// lost beyond the last delay (netnsCommandAgreement says when that is
// allowed and what must follow). Every namespace, bridge and veth name
// starts with "mr-".
//
// The same again under the event protocol: moves go as real multicast
// datagrams, so one lost with all its copies makes a mirror's state differ
// until the hash exchange repairs it; there every mirror's log of the
// authority's events must be identical, and once the bots stand still the
// last checkpoints must agree.

const netnsEnv = "MIRROR_NETNS_MEMBER"

type netnsSpec struct {
	Index     int
	Interface string
	Group     string
	Addr      string // this member's address
	Authority string // the authority's address
	Signer    []byte // the test's token-signing key (ed25519 seed)
	Seed      int64
	PlaySecs  int
	Protocol  string
}

type netnsReport struct {
	ID          uint32
	Checkpoints map[uint64]string
	Log         map[uint64]string // event protocol: the authority's events by tick
	Decisions   map[string]uint64 // ... and its decisions
	LastTick    uint64
	Stats       Stats
	Err         string
}

func TestMirrorsOverMulticastNetns(t *testing.T) {
	for _, p := range []Protocol{ProtocolCommand, ProtocolEvent} {
		t.Run(p.String(), func(t *testing.T) { multicastNetns(t, p) })
	}
}

func multicastNetns(t *testing.T, protocol Protocol) {
	if os.Getenv(netnsEnv) != "" {
		t.Skip("running as a namespace member")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping the real-multicast mirror test: creating network namespaces, veth pairs and a bridge needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("skipping the real-multicast mirror test: iproute2 'ip' not found")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	tag := fmt.Sprintf("%d%03d", os.Getpid()%10000, rng.Intn(1000))
	subnet := 1 + rng.Intn(250)
	group := fmt.Sprintf("239.98.%d.%d:%d", rng.Intn(256), 1+rng.Intn(254), 20000+rng.Intn(20000))
	bridgeNS := "mr-br-" + tag
	members := []string{"mr-1-" + tag, "mr-2-" + tag, "mr-3-" + tag}
	ip := func(args ...string) error {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	for _, ns := range append([]string{bridgeNS}, members...) {
		ns := ns
		if err := ip("netns", "add", ns); err != nil {
			t.Skipf("skipping the real-multicast mirror test: cannot create a network namespace here: %v", err)
		}
		// Deleting a namespace deletes the veths and the bridge in it.
		t.Cleanup(func() {
			if err := ip("netns", "del", ns); err != nil && !strings.Contains(err.Error(), "No such file") {
				t.Logf("cleanup: %v", err)
			}
		})
	}
	must := func(args ...string) {
		t.Helper()
		if err := ip(args...); err != nil {
			t.Fatal(err)
		}
	}
	must("-n", bridgeNS, "link", "add", "mr-br0", "type", "bridge", "mcast_snooping", "0")
	must("-n", bridgeNS, "link", "set", "mr-br0", "up")
	addr := func(i int) string { return fmt.Sprintf("10.98.%d.%d", subnet, i+1) }
	for i, ns := range members {
		port := fmt.Sprintf("mr-p%d", i+1)
		must("-n", ns, "link", "add", "mr-eth0", "type", "veth", "peer", "name", port, "netns", bridgeNS)
		must("-n", bridgeNS, "link", "set", port, "master", "mr-br0")
		must("-n", bridgeNS, "link", "set", port, "up")
		must("-n", ns, "addr", "add", addr(i)+"/24", "dev", "mr-eth0")
		must("-n", ns, "link", "set", "lo", "up")
		must("-n", ns, "link", "set", "mr-eth0", "up")
		must("-n", ns, "route", "add", "224.0.0.0/4", "dev", "mr-eth0")
	}

	_, signer, _ := ed25519.GenerateKey(rng)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	reports := make([]netnsReport, len(members))
	bar := &barrier{n: len(members), counts: map[string]int{}}
	var wg sync.WaitGroup
	for i, ns := range members {
		spec, _ := json.Marshal(netnsSpec{
			Index: i + 1, Interface: "mr-eth0", Group: group, Addr: addr(i), Authority: addr(0),
			Signer: signer.Seed(), Seed: int64(i + 1), PlaySecs: 20, Protocol: protocol.String(),
		})
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns, exe, "-test.run=^TestMirrorNetnsMember$", "-test.count=1")
		cmd.Env = append(os.Environ(), netnsEnv+"="+string(spec))
		stdout, _ := cmd.StdoutPipe()
		stdin, _ := cmd.StdinPipe()
		bar.add(stdin)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(stdout)
			sc.Buffer(make([]byte, 1<<20), 4<<20)
			rep := netnsReport{Err: "no report"}
			for sc.Scan() {
				if name, ok := strings.CutPrefix(sc.Text(), "BARRIER "); ok {
					bar.arrive(name)
				}
				if line, ok := strings.CutPrefix(sc.Text(), "REPORT "); ok {
					rep = netnsReport{}
					if err := json.Unmarshal([]byte(line), &rep); err != nil {
						rep.Err = err.Error()
					}
				}
			}
			if err := cmd.Wait(); err != nil || rep.Err != "" {
				rep.Err = fmt.Sprintf("%s (process: %v): %s", rep.Err, err, stderr.String())
			}
			if rep.Err != "" {
				bar.abort()
			}
			reports[i] = rep
		}()
	}
	wg.Wait()
	for i, r := range reports {
		if r.Err != "" {
			t.Fatalf("mirror process %d: %s", i+1, r.Err)
		}
		st := r.Stats
		t.Logf("mirror %d: %d checkpoints, sent %d, received %d, agreed %d, mismatched %d, resyncs %d, rollbacks %d, too late %d, repairs %d, via FEC %d, losses given up %d, packets after their history %d, own pauses %d",
			r.ID, len(r.Checkpoints), st.CommandsSent, st.CommandsReceived, st.Agreed, st.Mismatched, st.Resyncs,
			st.TSS["rollbacks"], st.TSS["too_late"], st.CRIMP["delivered_repair"], st.CRIMP["delivered_fec"],
			st.CRIMP["losses"], st.CRIMP["late"], st.CRIMP["pauses"])
	}
	if protocol == ProtocolEvent {
		netnsEventAgreement(t, reports)
		return
	}
	netnsCommandAgreement(t, reports)
}

// netnsCommandAgreement checks the command protocol's bar over real
// multicast. CRIMP and the trailing states deliver every command in time
// unless something is late beyond the last delay: a process stalled
// longer than CRIMP's history (a loaded machine stops all three at once
// for a second or two; the sender has executed its own command, the
// others get it after its history and drop it), a loss given up, or a
// mirror dropped with some of its last commands reaching only some of the
// others. That is the case the paper leaves to the hash check [C §3.5],
// and the mirrors must then find the difference themselves and repair it
// from the authority. So: with no such evidence every checkpoint all
// three made must agree; with it, each difference must have been seen by
// the mirrors and a mirror must have resynced; and either way the last
// checkpoints, made with the bots standing still, agree.
func netnsCommandAgreement(t *testing.T, reports []netnsReport) {
	t.Helper()
	var evidence []string
	for _, r := range reports {
		for _, c := range []struct {
			what string
			n    uint64
		}{
			{"CRIMP losses given up", r.Stats.CRIMP["losses"]},
			{"CRIMP packets after their history", r.Stats.CRIMP["late"]},
			{"CRIMP members dropped", r.Stats.CRIMP["members_dropped"]},
			{"commands too late for the last state", r.Stats.TSS["too_late"]},
		} {
			if c.n > 0 {
				evidence = append(evidence, fmt.Sprintf("mirror %d: %d %s", r.ID, c.n, c.what))
			}
		}
	}
	common := commonCheckpoints(reports)
	var differ []string
	agree := 0
	for _, tick := range common {
		same := true
		for _, r := range reports[1:] {
			if r.Checkpoints[tick] != reports[0].Checkpoints[tick] {
				same = false
				differ = append(differ, fmt.Sprintf("tick %d: mirror %d has %s, mirror %d has %s", tick,
					reports[0].ID, reports[0].Checkpoints[tick][:12], r.ID, r.Checkpoints[tick][:12]))
			}
		}
		if same {
			agree++
		}
	}
	if len(differ) > 0 {
		if len(evidence) == 0 {
			t.Fatalf("checkpoints differ with nothing lost, late or dropped anywhere: %s", strings.Join(differ, "; "))
		}
		var seen, resynced uint64
		for _, r := range reports {
			seen += r.Stats.Mismatched
			resynced += r.Stats.Resyncs
		}
		if seen == 0 || resynced == 0 {
			t.Fatalf("checkpoints differ (%s) but the mirrors counted %d mismatches and %d resyncs", strings.Join(differ, "; "), seen, resynced)
		}
		t.Logf("checkpoints differed where commands were late or lost (%s): %s; the mirrors saw it (%d mismatches) and resynced %d times",
			strings.Join(evidence, ", "), strings.Join(differ, "; "), seen, resynced)
	}
	lastCheckpointsAgree(t, reports, common)
	if agree < 15 {
		t.Fatalf("only %d checkpoints made by all three mirrors agree", agree)
	}
	t.Logf("%d checkpoints agree on all three mirrors over real UDP multicast", agree)
}

// netnsEventAgreement checks the event protocol's bar over real
// multicast: identical logs of the authority's events (ticks old enough to
// have reached everyone), and agreeing last checkpoints once the bots stood
// still.
func netnsEventAgreement(t *testing.T, reports []netnsReport) {
	t.Helper()
	to := reports[0].LastTick
	for _, r := range reports {
		to = min(to, r.LastTick)
		e := r.Stats.Event
		t.Logf("mirror %d: moves sent %d, taken %d, redundant %d; decided %d (late %d), applied %d, undecided %d; %d authoritative events",
			r.ID, e.MovesSent, e.MovesTaken, e.MovesRedundant, e.Decided, e.DecidedLate, e.Applied, e.Undecided, e.Authoritative)
	}
	to -= min(to, 90) // three seconds: what may still have been on its way
	from := uint64(0)
	for _, r := range reports[1:] {
		first := uint64(1 << 62)
		for tick := range r.Log {
			first = min(first, tick)
		}
		from = max(from, first)
	}
	compared := 0
	for tick, want := range reports[0].Log {
		if tick < from || tick > to {
			continue
		}
		compared++
		for _, r := range reports[1:] {
			if got := r.Log[tick]; got != want {
				t.Fatalf("tick %d: mirror %d logged %s, mirror %d %s", tick, reports[0].ID, want, r.ID, got)
			}
		}
	}
	decisions := 0
	for k, tick := range reports[0].Decisions {
		if tick < from || tick > to {
			continue
		}
		decisions++
		for _, r := range reports[1:] {
			if got := r.Decisions[k]; got != tick {
				t.Fatalf("decision %s: tick %d on mirror %d, %d on mirror %d", k, tick, reports[0].ID, got, r.ID)
			}
		}
	}
	if compared+decisions < 10 {
		t.Fatalf("only %d ticks of authoritative events and %d decisions compared", compared, decisions)
	}
	common := commonCheckpoints(reports)
	lastCheckpointsAgree(t, reports, common)
	t.Logf("the authority's events of %d ticks and %d decisions logged alike by all three mirrors over real UDP multicast; the last checkpoints agree", compared, decisions)
}

// commonCheckpoints returns the ticks of the checkpoints every mirror
// made, ascending.
func commonCheckpoints(reports []netnsReport) []uint64 {
	var common []uint64
	for tick := range reports[0].Checkpoints {
		in := true
		for _, r := range reports[1:] {
			_, ok := r.Checkpoints[tick]
			in = in && ok
		}
		if in {
			common = append(common, tick)
		}
	}
	slices.Sort(common)
	return common
}

// lastCheckpointsAgree checks the last three common checkpoints, made with
// the bots standing still: whatever differed has been repaired by then.
func lastCheckpointsAgree(t *testing.T, reports []netnsReport, common []uint64) {
	t.Helper()
	if len(common) < 3 {
		t.Fatalf("only %d checkpoints made by all three mirrors", len(common))
	}
	for _, tick := range common[len(common)-3:] {
		for _, r := range reports[1:] {
			if r.Checkpoints[tick] != reports[0].Checkpoints[tick] {
				t.Fatalf("with the bots standing still, tick %d: mirror %d has %s, mirror %d has %s", tick,
					reports[0].ID, reports[0].Checkpoints[tick][:12], r.ID, r.Checkpoints[tick][:12])
			}
		}
	}
}

// barrier lets the member processes wait for each other.
type barrier struct {
	mu     sync.Mutex
	n      int
	counts map[string]int
	stdins []io.WriteCloser
}

func (b *barrier) add(w io.WriteCloser) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stdins = append(b.stdins, w)
}

func (b *barrier) arrive(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.counts[name]++
	if b.counts[name] == b.n {
		for _, w := range b.stdins {
			io.WriteString(w, name+"\n")
		}
	}
}

func (b *barrier) abort() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.stdins {
		w.Close()
	}
}

// TestMirrorNetnsMember is one mirror of TestMirrorsOverMulticastNetns,
// inside its namespace. It prints one REPORT line.
func TestMirrorNetnsMember(t *testing.T) {
	raw := os.Getenv(netnsEnv)
	if raw == "" {
		t.Skip("helper process of TestMirrorsOverMulticastNetns")
	}
	var spec netnsSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatal(err)
	}
	rep := runNetnsMember(spec)
	out, _ := json.Marshal(rep)
	fmt.Printf("REPORT %s\n", out)
}

func runNetnsMember(spec netnsSpec) (rep netnsReport) {
	fail := func(err error) netnsReport { rep.Err = err.Error(); return rep }
	gaddr, err := netip.ParseAddrPort(spec.Group)
	if err != nil {
		return fail(err)
	}
	tr, err := crimp.ListenUDP(crimp.UDPConfig{Group: gaddr, Interface: spec.Interface, ReceiveLoss: 0.10, LossSeed: spec.Seed})
	if err != nil {
		return fail(err)
	}
	signer := ed25519.NewKeyFromSeed(spec.Signer)
	// The authority's key from the same seed, changed: every member
	// derives the public half, only the authority keeps the private one.
	authSeed := slices.Clone(spec.Signer)
	authSeed[0] ^= 0xff
	authKey := ed25519.NewKeyFromSeed(authSeed)
	authPub := authKey.Public().(ed25519.PublicKey)
	if spec.Index != 1 {
		authKey = nil
	}
	pub := signer.Public().(ed25519.PublicKey)
	protocol, err := ParseProtocol(spec.Protocol)
	if err != nil {
		return fail(err)
	}
	cc := crimp.DefaultConfig()
	cc.History, cc.FEC, cc.SessionInterval, cc.JoinTimeout = time.Second, 3, 100*time.Millisecond, 50*time.Millisecond
	s, err := New(Config{
		Game: testGame(), Protocol: protocol, Authority: spec.Index == 1, Delays: lossyDelays, CRIMP: cc, Transport: tr,
		StateListen: spec.Authority + ":7400", AccountKey: pub, Characters: &MemoryCharacters{Key: pub},
		Logger: testLogger().With("mirror", spec.Index), Seed: spec.Seed,
		AuthorityKey: authKey, AuthorityPublicKey: authPub,
	})
	if err != nil {
		return fail(err)
	}
	if err := s.Start(); err != nil {
		return fail(err)
	}
	defer s.Close()
	// Readiness is a flag the service sets without saying so.
	if err := await.UntilErr(30*time.Second, fmt.Sprintf("mirror %d to be ready", spec.Index), s.Ready); err != nil {
		return fail(err)
	}
	stdin := bufio.NewReader(os.Stdin)
	barrierAt := func(name string) error {
		fmt.Printf("BARRIER %s\n", name)
		line, err := stdin.ReadString('\n')
		if err != nil {
			return fmt.Errorf("barrier %s: %w", name, err)
		}
		if strings.TrimSpace(line) != name {
			return fmt.Errorf("barrier %s: got %q", name, line)
		}
		return nil
	}
	if err := barrierAt("ready"); err != nil {
		return fail(err)
	}
	rng := rand.New(rand.NewSource(spec.Seed))
	var bots []*LocalClient
	for b := range 2 {
		p, err := mintPlayer(rng, signer, fmt.Sprintf("m%db%d", spec.Index, b), time.Now())
		if err != nil {
			return fail(err)
		}
		lc := ConnectLocal(s, p.key, p.tok, crimp.WallClock{}, 0)
		lc.StartBot(uint64(spec.Index*10+b), time.Second/30)
		bots = append(bots, lc)
	}
	all := map[uint64]string{}
	// Collect the checkpoints twice a second while the bots play: often
	// enough that none leaves the service's window unseen.
	collect := func(d time.Duration) {
		every := time.NewTicker(500 * time.Millisecond)
		defer every.Stop()
		for end := time.Now().Add(d); time.Now().Before(end); {
			<-every.C
			for tick, h := range s.Checkpoints() {
				all[tick] = hex.EncodeToString(h[:])
			}
		}
	}
	collect(time.Duration(spec.PlaySecs) * time.Second)
	// The bots stand still (their players stay): no more commands or
	// moves, so whatever made a state differ (a move lost for good, a
	// command that reached the others after their last delay) is repaired
	// by the hash exchange and stays repaired.
	for _, b := range bots {
		b.Drop()
	}
	if err := barrierAt("still"); err != nil {
		return fail(err)
	}
	collect(10 * time.Second)
	if protocol == ProtocolEvent {
		log := s.AuthoritativeLog()
		rep.Log, rep.Decisions = map[uint64]string{}, log.Decisions
		for tick, evs := range log.Ticks {
			rep.Log[tick] = fmt.Sprint(evs)
		}
		s.Inspect(func(_, last *State) { rep.LastTick = last.Tick() })
	}
	for _, b := range bots {
		b.Close()
	}
	_ = barrierAt("done")
	rep.ID, rep.Checkpoints, rep.Stats = s.ID(), all, s.Metrics()
	return rep
}
