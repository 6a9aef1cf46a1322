package deploy

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The e2e tests give each process its ports on the command line, as the
// manifests do, so a port is picked here and bound by the process later
// (seconds later for the addresses handed to processes started after it).
// A port the kernel picks for 127.0.0.1:0 is a bad choice for that: it
// comes from the ephemeral range, where the kernel hands it again to the
// next socket bound to port 0, in another process or in this test's next
// pick (7 of 80 runs of the two e2e tests drew some port twice), and to
// outgoing connections, which the tests running beside these make by the
// thousand. So ports come from below the ephemeral range, where
// the kernel hands out nothing by itself, each checked free for TCP and
// UDP (a p2p port serves both) and never handed out twice by this binary.

// portPicker walks its range from a place that depends on the process, so
// two test binaries on one machine start apart.
var portPicker struct {
	mu     sync.Mutex
	lo, hi int // the range [lo, hi); lo 0: use the kernel's picks
	next   int
	given  map[int]bool
}

// lowestPort is where the range starts: above the services' default
// ports (8640-8672, 9100), which a test may bind.
const lowestPort = 20000

// freePort returns a loopback port that is free for TCP and UDP now and
// that no other call in this binary returned.
func freePort(t *testing.T) int {
	t.Helper()
	p, err := pickPort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func pickPort() (int, error) {
	pp := &portPicker
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.given == nil {
		pp.given = map[int]bool{}
		if first, err := ephemeralStart(); err == nil && first-lowestPort >= 1000 {
			pp.lo, pp.hi = lowestPort, first
			pp.next = pp.lo + os.Getpid()*37%(pp.hi-pp.lo)
		}
	}
	if pp.lo == 0 {
		// No room below the ephemeral range: the kernel's picks, never
		// one twice.
		for range 1000 {
			p, err := kernelPort()
			if err != nil {
				return 0, err
			}
			if !pp.given[p] && portFree(p) {
				pp.given[p] = true
				return p, nil
			}
		}
		return 0, errors.New("the kernel keeps picking ports this test handed out already")
	}
	for range pp.hi - pp.lo {
		p := pp.next
		if pp.next++; pp.next == pp.hi {
			pp.next = pp.lo
		}
		if !pp.given[p] && portFree(p) {
			pp.given[p] = true
			return p, nil
		}
	}
	return 0, fmt.Errorf("no free port left in %d-%d", pp.lo, pp.hi-1)
}

// ephemeralStart is the first port of the kernel's ephemeral range.
func ephemeralStart() (int, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, fmt.Errorf("ip_local_port_range: %q", b)
	}
	return strconv.Atoi(f[0])
}

// portFree reports whether 127.0.0.1:p can be bound for TCP and for UDP.
func portFree(p int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		return false
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		return false
	}
	u.Close()
	return true
}

func kernelPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// TestFreePortsAreDistinct: however many the tests pick, never a port
// twice (the kernel's own picks repeat within twenty).
func TestFreePortsAreDistinct(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		p := freePort(t)
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}
