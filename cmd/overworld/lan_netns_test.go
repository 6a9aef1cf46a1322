package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/node/await"
	"github.com/overworld-p2p/overworld/node/netnstest"
)

// TestLANNetns plays `overworld lan` as four players would on a LAN: each
// player's process in its own network namespace (dy-l<n>-<tag>) on a
// bridge, over real IP multicast, with no server. The first founds the game
// and announces it; the others find it on the discovery group and join.
// Every player is its own mirror and a bot plays on each. Then the process
// of the mirror holding the authority duty is killed: the others take the
// duty over, release its avatar and go on agreeing on the game state.
func TestLANNetns(t *testing.T) {
	if os.Getenv(lanRoleEnv) != "" {
		t.Skip("running as a LAN player")
	}
	if testing.Short() {
		t.Skip("skipping the LAN test in -short mode")
	}
	// The founder picks the protocol; the joiners take it from the
	// announcement.
	for _, protocol := range []string{"command", "event"} {
		t.Run(protocol, func(t *testing.T) { playLAN(t, protocol) })
	}
}

func playLAN(t *testing.T, protocol string) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	players := netnstest.LAN(t, "dy-l", 4)
	disc := netnstest.Group(96)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	procs := make([]*lanProc, len(players))
	start := func(i int, wait time.Duration) {
		args := []string{"lan", "-interface", "eth0", "-discovery", disc, "-wait", wait.String(), "-bot", "-protocol", protocol,
			"-name", fmt.Sprintf("p%d", i+1), "-http", "127.0.0.1:0", "-world-size", "3x3", "-status-every", "200ms", "-log-level", "error"}
		raw, _ := json.Marshal(args)
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", players[i], exe, "-test.run=^TestLANRole$", "-test.count=1", "-test.timeout=5m")
		cmd.Env = append(os.Environ(), lanRoleEnv+"="+string(raw))
		p, err := startLANProc(cmd)
		if err != nil {
			t.Fatal(err)
		}
		procs[i] = p
		t.Cleanup(p.kill)
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
	// poll waits for a state of the whole game: each player prints its
	// view on a STATUS line every 200 ms, and what is awaited is a relation
	// between the latest lines of all of them (with a quiet window), which
	// no single line announces; cond reads the lines already parsed.
	poll := func(limit time.Duration, what string, cond func() bool) {
		t.Helper()
		if err := await.UntilErr(limit, what, cond); err != nil {
			for i, p := range procs {
				if p != nil {
					st, _ := p.status()
					t.Logf("player %d (dead %v): %+v; output:\n%s", i+1, p.dead, st, p.tail())
				}
			}
			t.Fatal(err)
		}
	}
	// settled: every live player has the same holder and epoch, the game
	// holds one avatar per live player, and every one has compared hashes
	// and found them equal for the last two seconds (on a loaded machine a
	// command can come too late and a mirror resync, as mirror mode
	// intends; what must hold is that they come back to agreeing).
	type quiet struct {
		mismatched, agreed uint64
		since              time.Time
	}
	quietFor := map[*lanProc]*quiet{}
	settled := func() bool {
		ps := live()
		var first lanStatus
		ok := true
		for k, p := range ps {
			st, seen := p.status()
			if !seen {
				return false
			}
			q := quietFor[p]
			if q == nil || q.mismatched != st.Mismatched {
				q = &quiet{mismatched: st.Mismatched, agreed: st.Agreed, since: time.Now()}
				quietFor[p] = q
			}
			if st.Mirror == 0 || st.Holder == 0 || st.Players != len(ps) || time.Since(q.since) < 2*time.Second || st.Agreed <= q.agreed {
				ok = false
			}
			if k == 0 {
				first = st
			} else if st.Holder != first.Holder || st.Epoch != first.Epoch {
				ok = false
			}
		}
		return ok
	}
	start(0, time.Second)
	poll(30*time.Second, "the founder's game", func() bool { st, ok := procs[0].status(); return ok && st.Holder != 0 })
	for i := 1; i < len(players); i++ {
		start(i, 3*time.Second)
	}
	poll(90*time.Second, "four players agreeing on one game", settled)
	if !strings.Contains(procs[0].tail(), "founding") || !strings.Contains(procs[3].tail(), "joining") ||
		!strings.Contains(procs[3].tail(), protocol+" protocol") {
		t.Fatalf("the first player did not found the game or the last did not find it:\n%s\n%s", procs[0].tail(), procs[3].tail())
	}
	before, _ := procs[0].status()
	var victim *lanProc
	for _, p := range live() {
		if st, _ := p.status(); st.Mirror == st.Holder {
			victim = p
		}
	}
	if victim == nil {
		t.Fatal("no player holds the duty")
	}
	victim.kill()
	killed := time.Now()
	clear(quietFor)
	poll(60*time.Second, "the others taking the duty over and playing on", func() bool {
		if !settled() {
			return false
		}
		st, _ := live()[0].status()
		return st.Holder != before.Holder || st.Epoch != before.Epoch
	})
	after, _ := live()[0].status()
	t.Logf("holder %d (epoch %d) killed; now holder %d (epoch %d), %d players, agreeing again %v after the kill (incl. the 2 s quiet window)",
		before.Holder, before.Epoch, after.Holder, after.Epoch, after.Players, time.Since(killed).Round(100*time.Millisecond))
	for _, p := range live() {
		p.stop()
	}
}

const lanRoleEnv = "OVERWORLD_LAN_ROLE"

// TestLANRole runs `overworld lan` with the arguments in lanRoleEnv until
// its stdin closes.
func TestLANRole(t *testing.T) {
	raw := os.Getenv(lanRoleEnv)
	if raw == "" {
		t.Skip("helper process of TestLANNetns")
	}
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	if err := dispatch(ctx, args, os.Stdout, os.Stderr); err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
}

type lanStatusLine = lanStatus

// lanProc is one player process: its latest status line and its output.
type lanProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	mu    sync.Mutex
	last  lanStatusLine
	seen  bool
	out   []string
	dead  bool
}

func startLANProc(cmd *exec.Cmd) (*lanProc, error) {
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	p := &lanProc{cmd: cmd, stdin: stdin}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			if js, ok := strings.CutPrefix(line, "STATUS "); ok {
				var st lanStatusLine
				if json.Unmarshal([]byte(js), &st) == nil {
					p.last, p.seen = st, true
				}
			} else {
				p.out = append(p.out, line)
				if len(p.out) > 200 {
					p.out = p.out[len(p.out)-200:]
				}
			}
			p.mu.Unlock()
		}
	}()
	return p, nil
}

func (p *lanProc) status() (lanStatusLine, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last, p.seen && !p.dead
}

func (p *lanProc) tail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.out, "\n")
}

// kill ends the player at once, as a crash would.
func (p *lanProc) kill() {
	p.mu.Lock()
	if p.dead {
		p.mu.Unlock()
		return
	}
	p.dead = true
	p.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
}

// stop lets the player leave: its stdin closes, it shuts down.
func (p *lanProc) stop() {
	_ = p.stdin.Close()
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
		p.mu.Lock()
		p.dead = true
		p.mu.Unlock()
	case <-time.After(20 * time.Second):
		p.kill()
	}
}
