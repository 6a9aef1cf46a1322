// Package netnstest builds, for tests, a LAN of network namespaces on a
// bridge with IP multicast routed: each member namespace has an eth0 with
// an address in one /24 and a multicast route, all on a bridge in a
// namespace of their own. It needs root and iproute2; LAN skips the test
// with a clear message where either is missing, and removes everything at
// the test's end (deleting a namespace deletes its veth and bridge).
package netnstest

import (
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// LAN makes n member namespaces named prefix<i>-<tag> (i from 1) and the
// bridge namespace prefix+"br"-<tag>, and returns the member namespaces.
// Keep prefix short and owned by the caller (interface and namespace
// names must not collide with other tests running at the same time).
func LAN(t *testing.T, prefix string, n int) []string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: creating network namespaces, veth pairs and a bridge needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("skipping: iproute2 'ip' not found")
	}
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	tag := fmt.Sprintf("%d%03d", os.Getpid()%10000, rng.Intn(1000))
	subnet := 1 + rng.Intn(250)
	bridge := prefix + "br-" + tag
	var members []string
	for i := range n {
		members = append(members, fmt.Sprintf("%s%d-%s", prefix, i+1, tag))
	}
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	for _, ns := range append([]string{bridge}, members...) {
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
				t.Logf("cleanup: ip netns del %s: %v: %s", ns, err, out)
			}
		})
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			t.Skipf("skipping: cannot create a network namespace: %v: %s", err, out)
		}
	}
	ip("-n", bridge, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0")
	ip("-n", bridge, "link", "set", "br0", "up")
	for i, ns := range members {
		port := fmt.Sprintf("p%d", i+1)
		ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", bridge)
		ip("-n", bridge, "link", "set", port, "master", "br0")
		ip("-n", bridge, "link", "set", port, "up")
		ip("-n", ns, "addr", "add", fmt.Sprintf("10.95.%d.%d/24", subnet, i+1), "dev", "eth0")
		ip("-n", ns, "link", "set", "lo", "up")
		ip("-n", ns, "link", "set", "eth0", "up")
		ip("-n", ns, "route", "add", "224.0.0.0/4", "dev", "eth0")
	}
	return members
}

// Group draws a multicast group and port in 239.<second>.0.0/16 for one
// test run.
func Group(second byte) string {
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	return fmt.Sprintf("239.%d.%d.%d:%d", second, rng.Intn(256), 1+rng.Intn(254), 20000+rng.Intn(20000))
}
