package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/overworld-p2p/overworld/node"
)

func TestMakesKeysTheBootstrapNodeReads(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	if err := run([]string{"-n", "3", "-dir", dir}, &out); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "bootstrap-addrs"))
	if err != nil {
		t.Fatal(err)
	}
	list := strings.Split(strings.TrimSpace(string(raw)), ",")
	infos, err := node.ParseBootstrapAddrs(list)
	if err != nil || len(infos) != 3 {
		t.Fatalf("bootstrap-addrs %q: %d peers, %v", raw, len(infos), err)
	}
	for i := range list {
		one, err := node.ParseBootstrapAddrs(list[i : i+1])
		if err != nil {
			t.Fatal(err)
		}
		info := one[0]
		path := filepath.Join(dir, "overworld-bootstrap-"+string(rune('0'+i))+".key")
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", path, st.Mode().Perm())
		}
		// The key is the identity `overworld bootstrap -key-file` loads.
		key, err := node.LoadOrCreateIdentity(path)
		if err != nil {
			t.Fatal(err)
		}
		if !info.ID.MatchesPrivateKey(key) {
			t.Errorf("address %d names %s, not the key's peer", i, info.ID)
		}
		want := "/dns4/overworld-bootstrap-" + string(rune('0'+i)) + ".overworld-bootstrap/tcp/4001/p2p/" + info.ID.String()
		if list[i] != want {
			t.Errorf("address %d = %s, want %s", i, list[i], want)
		}
	}
	if !strings.Contains(out.String(), "create secret generic overworld-bootstrap-keys") ||
		!strings.Contains(out.String(), "OVERWORLD_BOOTSTRAP="+strings.Join(list, ",")) {
		t.Errorf("printed commands:\n%s", out.String())
	}

	// Scaling up keeps the existing identities.
	if err := run([]string{"-n", "4", "-dir", dir}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	raw, _ = os.ReadFile(filepath.Join(dir, "bootstrap-addrs"))
	again := strings.Split(strings.TrimSpace(string(raw)), ",")
	if len(again) != 4 || strings.Join(again[:3], ",") != strings.Join(list, ",") {
		t.Errorf("after -n 4: %q, want the first three unchanged", again)
	}
}

func TestRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-n", "0"}, {"-port", "70000"}, {"-name", ""}, {"extra"}} {
		if err := run(append(args, "-dir", t.TempDir()), &bytes.Buffer{}); err == nil {
			t.Errorf("%q: accepted", args)
		}
	}
}
