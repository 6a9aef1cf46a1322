package crimp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/node/await"
)

// The real-multicast test: three network namespaces on a bridge (inside a
// fourth namespace), one member process per namespace (this test binary
// re-executed with netnsMemberEnv set), IP multicast on 239.x, 10% of
// received datagrams dropped on purpose. Member 1 is the authority; 2 and 3
// join through it over the group. Each sends 1000 packets; all must arrive.

const netnsMemberEnv = "CRIMP_NETNS_MEMBER"

const netnsPackets = 1000

type netnsMemberSpec struct {
	Index     int    // 1..3; 1 is the authority
	Interface string // inside its namespace
	Group     string
	Seed      int64
}

type netnsResult struct {
	ID        MemberID
	Delivered map[MemberID]int // distinct sequence numbers per source
	Dups      int
	Metrics   map[string]uint64
	Err       string
}

func TestMulticastNetns(t *testing.T) {
	if os.Getenv(netnsMemberEnv) != "" {
		t.Skip("running as a namespace member")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping real-multicast test: creating network namespaces, veth pairs and a bridge needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("skipping real-multicast test: iproute2 'ip' not found")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	tag := fmt.Sprintf("%d%04d", os.Getpid()%10000, rng.Intn(10000))
	subnet := 1 + rng.Intn(250)
	group := fmt.Sprintf("239.99.%d.%d:%d", rng.Intn(256), 1+rng.Intn(254), 20000+rng.Intn(20000))
	bridgeNS := "crimpbr" + tag
	memberNS := []string{"crimp1-" + tag, "crimp2-" + tag, "crimp3-" + tag}

	ip := func(args ...string) {
		t.Helper()
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	// Deleting a namespace deletes the veths and the bridge inside it.
	for _, ns := range append([]string{bridgeNS}, memberNS...) {
		ns := ns
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
				t.Logf("cleanup: ip netns del %s: %v: %s", ns, err, out)
			}
		})
		ip("netns", "add", ns)
	}
	ip("-n", bridgeNS, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0")
	ip("-n", bridgeNS, "link", "set", "br0", "up")
	for i, ns := range memberNS {
		port := fmt.Sprintf("p%d", i+1)
		ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", bridgeNS)
		ip("-n", bridgeNS, "link", "set", port, "master", "br0")
		ip("-n", bridgeNS, "link", "set", port, "up")
		ip("-n", ns, "addr", "add", fmt.Sprintf("10.99.%d.%d/24", subnet, i+1), "dev", "eth0")
		ip("-n", ns, "link", "set", "lo", "up")
		ip("-n", ns, "link", "set", "eth0", "up")
		ip("-n", ns, "route", "add", "224.0.0.0/4", "dev", "eth0")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	results := make([]netnsResult, len(memberNS))
	bar := &netnsBarrier{members: len(memberNS), counts: map[string]int{}}
	var wg sync.WaitGroup
	for i, ns := range memberNS {
		spec, _ := json.Marshal(netnsMemberSpec{Index: i + 1, Interface: "eth0", Group: group, Seed: int64(i) + 1})
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns, exe, "-test.run=^TestMulticastMember$", "-test.count=1")
		cmd.Env = append(os.Environ(), netnsMemberEnv+"="+string(spec))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
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
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			var res netnsResult
			res.Err = "no result line"
			for sc.Scan() {
				if name, ok := strings.CutPrefix(sc.Text(), "BARRIER "); ok {
					bar.arrive(name)
				}
				if line, ok := strings.CutPrefix(sc.Text(), "RESULT "); ok {
					res = netnsResult{}
					if err := json.Unmarshal([]byte(line), &res); err != nil {
						res.Err = err.Error()
					}
				}
			}
			if err := cmd.Wait(); err != nil && res.Err == "" {
				res.Err = fmt.Sprintf("member process: %v: %s", err, stderr.String())
			}
			if res.Err != "" {
				bar.abort() // the others must not wait for this one
			}
			results[i] = res
		}()
	}
	wg.Wait()
	for i, res := range results {
		if res.Err != "" {
			t.Fatalf("member %d: %s", i+1, res.Err)
		}
		if res.Dups != 0 {
			t.Errorf("member %d (ID %d): %d duplicate deliveries", i+1, res.ID, res.Dups)
		}
		if len(res.Delivered) != 2 {
			t.Errorf("member %d (ID %d) heard from %d members: %v", i+1, res.ID, len(res.Delivered), res.Delivered)
		}
		for src, n := range res.Delivered {
			if n != netnsPackets {
				t.Errorf("member %d (ID %d) got %d of %d packets from %d", i+1, res.ID, n, netnsPackets, src)
			}
		}
		t.Logf("member ID %d: delivered %v, requests %d, repairs %d, losses detected %d, via repair %d",
			res.ID, res.Delivered, res.Metrics["requests_sent"], res.Metrics["repairs_sent"], res.Metrics["losses_detected"], res.Metrics["delivered_repair"])
	}
}

// netnsBarrier lets the member processes wait for each other: a member
// prints "BARRIER name" and reads a line from its stdin; once every member
// has arrived at name, each is sent the name back. Closing the pipes (when
// a member failed) ends every wait.
type netnsBarrier struct {
	mu      sync.Mutex
	members int
	counts  map[string]int
	stdins  []io.WriteCloser
}

func (b *netnsBarrier) add(w io.WriteCloser) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stdins = append(b.stdins, w)
}

func (b *netnsBarrier) arrive(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.counts[name]++
	if b.counts[name] == b.members {
		for _, w := range b.stdins {
			_, _ = io.WriteString(w, name+"\n")
		}
	}
}

func (b *netnsBarrier) abort() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.stdins {
		_ = w.Close()
	}
}

// TestMulticastMember is one member of TestMulticastNetns, run inside its
// namespace. It prints one RESULT line.
func TestMulticastMember(t *testing.T) {
	raw := os.Getenv(netnsMemberEnv)
	if raw == "" {
		t.Skip("helper process of TestMulticastNetns")
	}
	var spec netnsMemberSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatal(err)
	}
	res := runNetnsMember(spec)
	out, _ := json.Marshal(res)
	fmt.Printf("RESULT %s\n", out)
}

func runNetnsMember(spec netnsMemberSpec) (res netnsResult) {
	res.Delivered = map[MemberID]int{}
	fail := func(err error) netnsResult { res.Err = err.Error(); return res }
	group, err := netip.ParseAddrPort(spec.Group)
	if err != nil {
		return fail(err)
	}
	tr, err := ListenUDP(UDPConfig{Group: group, Interface: spec.Interface, Loopback: false, ReceiveLoss: 0.10, LossSeed: spec.Seed})
	if err != nil {
		return fail(err)
	}
	cfg := Config{History: 3 * time.Second, SessionInterval: 100 * time.Millisecond, JoinTimeout: 50 * time.Millisecond, AuthorityPublicKey: testAuthorityPub}
	if spec.Index == 1 {
		cfg.ID, cfg.Authority, cfg.AuthorityKey = 1, true, testAuthorityKey
	}
	node, err := New(cfg, rand.New(rand.NewSource(spec.Seed)))
	if err != nil {
		return fail(err)
	}
	var mu sync.Mutex
	seen := map[Key]bool{}
	joined := make(chan Event, 1)
	// everything is closed by the delivery that completes the set.
	everything := make(chan struct{})
	m := NewMember(node, tr, WallClock{}, MemberOptions{
		OnDeliver: func(d Delivery) {
			mu.Lock()
			defer mu.Unlock()
			if seen[d.Key] {
				res.Dups++
				return
			}
			seen[d.Key] = true
			res.Delivered[d.Source]++
			if len(seen) == 2*netnsPackets {
				close(everything)
			}
		},
		OnEvent: func(e Event) {
			if e.Kind == EventJoined || e.Kind == EventDenied {
				joined <- e
			}
		},
	})
	if err := m.Start(); err != nil {
		return fail(err)
	}
	defer m.Close()
	if spec.Index != 1 {
		if err := m.Join(); err != nil {
			return fail(err)
		}
		select {
		case e := <-joined:
			if e.Kind != EventJoined {
				return fail(fmt.Errorf("join: %s %s", e.Kind, e.Reason))
			}
		case <-time.After(30 * time.Second):
			return fail(fmt.Errorf("join: no answer from the authority"))
		}
	}
	knowsAll := func() bool {
		var n int
		m.Inspect(func(nd *Node) { n = len(nd.Members()) })
		return n == 2
	}
	// A member is also learned from its first packet, which no event
	// announces: the membership is checked, not awaited.
	if err := await.UntilErr(30*time.Second, "the other two members", knowsAll); err != nil {
		return fail(err)
	}
	m.Inspect(func(nd *Node) { res.ID = nd.ID() })
	// Send only once every member knows every other, so that each counts
	// everything it must receive from the first packet on.
	stdin := bufio.NewReader(os.Stdin)
	barrier := func(name string) error {
		fmt.Printf("BARRIER %s\n", name)
		line, err := stdin.ReadString('\n')
		if err != nil {
			return fmt.Errorf("barrier %s: %w", name, err)
		}
		if got := strings.TrimSpace(line); got != name {
			return fmt.Errorf("barrier %s: the test said %q", name, got)
		}
		return nil
	}
	if err := barrier("ready"); err != nil {
		return fail(err)
	}
	// One packet every 3 ms: a steady stream the receivers' loss and
	// repair work on, not a burst.
	pace := time.NewTicker(3 * time.Millisecond)
	for seq := 1; seq <= netnsPackets; seq++ {
		if err := m.Send(testPayload(res.ID, uint32(seq), 48)); err != nil {
			pace.Stop()
			return fail(err)
		}
		<-pace.C
	}
	pace.Stop()
	// Stay, answering the others' repair requests, until every member has
	// everything; a member that has not after 30 s reports what it got.
	select {
	case <-everything:
		_ = barrier("done") // if it fails, another member failed and says so
	case <-time.After(30 * time.Second):
	}
	res.Metrics = m.Metrics().Counters()
	mu.Lock()
	defer mu.Unlock()
	return res
}
