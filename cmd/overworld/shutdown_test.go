package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/node/await"
)

// asBinaryEnv makes the test binary run the real main() (signal handling
// included) with its command line, so tests can start it as `overworld`.
const asBinaryEnv = "OVERWORLD_TEST_AS_BINARY"

func TestMain(m *testing.M) {
	if os.Getenv(asBinaryEnv) != "" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// binaryProc is the test binary started as `overworld ARGS`.
type binaryProc struct {
	cmd    *exec.Cmd
	out    *await.Output // stdout and stderr, then its exit mark
	exited chan error
}

func startBinary(t *testing.T, args ...string) *binaryProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &binaryProc{out: &await.Output{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(exe, args...)
	p.cmd.Env = append(os.Environ(), asBinaryEnv+"=1")
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := p.cmd.Wait()
		exitedMark(p.out, err)
		p.exited <- err
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() || os.Getenv("SHOW") != "" {
			t.Logf("overworld %s:\n%s", strings.Join(args, " "), p.out.String())
		}
	})
	return p
}

// wait waits for re in the output and returns its submatches.
func (p *binaryProc) wait(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	return matchOrExit(t, p.cmd.Args[1], p.out, 2*time.Minute, re)
}

// stop sends SIGTERM and returns the services in the order the process
// logged them stopped, after checking that it exited with status 0.
func (p *binaryProc) stop(t *testing.T) []string {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		p.exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("%s after SIGTERM: %v; output:\n%s", p.cmd.Args[1], err, p.out.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s did not exit within 2 minutes of SIGTERM; output:\n%s", p.cmd.Args[1], p.out.String())
	}
	stopped := regexp.MustCompile(`msg=stopped service=("[^"]*"|\S+)`)
	var order []string
	sc := bufio.NewScanner(strings.NewReader(p.out.String()))
	for sc.Scan() {
		if m := stopped.FindStringSubmatch(sc.Text()); m != nil {
			order = append(order, strings.Trim(m[1], `"`))
		}
	}
	return order
}

// TestSIGTERMStopsBinaryInOrder starts the operator's services and a
// player as the binary, stops each with SIGTERM and checks that it exits
// with status 0 after stopping its services in the order lifecycle.go
// writes down: what serves players first, the node and /metrics last.
func TestSIGTERMStopsBinaryInOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("starts several processes")
	}
	dir := t.TempDir()
	pw := filepath.Join(dir, "password")
	if err := os.WriteFile(pw, []byte("a password for the test\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	boot := startBinary(t, "bootstrap", "-listen", "/ip4/127.0.0.1/tcp/0", "-key-file", filepath.Join(dir, "boot.key"),
		"-metrics", "127.0.0.1:0", "-log-level", "info")
	bootAddr := boot.wait(t, regexp.MustCompile(`\s(/ip4/127\.0\.0\.1/tcp/\d+/p2p/\S+)`))[1]
	acc := startBinary(t, "accounts", "-listen", "127.0.0.1:0", "-data-dir", filepath.Join(dir, "accounts"), "-log-level", "info")
	accURL := acc.wait(t, regexp.MustCompile(`account server on (http://127\.0\.0\.1:\d+)`))[1]

	peer := startBinary(t, "peer", "-bootstrap", bootAddr, "-listen", "/ip4/127.0.0.1/tcp/0", "-data-dir", filepath.Join(dir, "peer"),
		"-account", accURL, "-user", "operator", "-password-file", pw, "-register", "-world-size", "2x2", "-metrics", "127.0.0.1:0", "-log-level", "info")
	peer.wait(t, regexp.MustCompile(`joined the overlay`))
	player := startBinary(t, "play", "-bootstrap", bootAddr, "-listen", "/ip4/127.0.0.1/tcp/0", "-data-dir", filepath.Join(dir, "play"),
		"-account", accURL, "-user", "alice", "-password-file", pw, "-register", "-world-size", "2x2", "-http", "127.0.0.1:0", "-log-level", "info")
	player.wait(t, regexp.MustCompile(`metrics on http://127\.0\.0\.1:\d+/metrics`))
	mir := startBinary(t, "mirror", "-authority", "-crimp", "memory", "-listen", "127.0.0.1:0", "-state-listen", "127.0.0.1:0",
		"-account", accURL, "-data-dir", filepath.Join(dir, "mirror"), "-log-level", "info")
	mir.wait(t, regexp.MustCompile(`mirror serving clients on ws://`))

	for _, c := range []struct {
		p    *binaryProc
		want []string
	}{
		{player, []string{"readiness", "page", "player", "node", "metrics", "page listener"}},
		{peer, []string{"readiness", "region services", "node", "metrics"}},
		{mir, []string{"mirror", "client listener"}},
		{boot, []string{"readiness", "bootstrap node", "metrics"}},
	} {
		if got := c.p.stop(t); !slices.Equal(got, c.want) {
			t.Errorf("%s stopped %v, want %v", c.p.cmd.Args[1], got, c.want)
		}
	}
	// The account server drains and exits cleanly too.
	acc.stop(t)
	// The player saved its character on the way out.
	if !strings.Contains(player.out.String(), "character saved") {
		t.Errorf("the player did not log its save on exit")
	}
}
