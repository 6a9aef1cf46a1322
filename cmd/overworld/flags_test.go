package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateFlags = flag.Bool("update-flags", false, "rewrite testdata/flags.golden from the subcommands' help")

// TestFlagsUnchanged holds every subcommand's help (its flags' names,
// types, defaults and usage) in testdata/flags.golden, so a change to the
// command line is always a deliberate one: regenerate the file with
// `go test ./cmd/overworld -run TestFlagsUnchanged -update-flags` and read
// the diff.
func TestFlagsUnchanged(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", "/data") // defaults under the data dir, alike on every machine
	var all bytes.Buffer
	for _, c := range commands() {
		var out bytes.Buffer
		dispatch(context.Background(), []string{"help", c.name}, &out, io.Discard)
		all.WriteString("== " + c.name + "\n")
		all.Write(out.Bytes())
		all.WriteString("\n")
	}
	golden := filepath.Join("testdata", "flags.golden")
	if *updateFlags {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, all.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (generate it with -update-flags)", err)
	}
	if !bytes.Equal(want, all.Bytes()) {
		t.Fatalf("the subcommands' flags changed; if that is meant, regenerate %s with -update-flags and review the diff:\n%s",
			golden, lineChanges(string(want), all.String()))
	}
}

// lineChanges lists the lines only in want (-) and only in got (+).
func lineChanges(want, got string) string {
	count := func(s string) map[string]int {
		m := map[string]int{}
		for _, l := range strings.Split(s, "\n") {
			m[l]++
		}
		return m
	}
	w, g := count(want), count(got)
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if g[l] < w[l] {
			fmt.Fprintf(&b, "- %s\n", l)
			w[l]--
		}
	}
	w = count(want)
	for _, l := range strings.Split(got, "\n") {
		if w[l] < g[l] {
			fmt.Fprintf(&b, "+ %s\n", l)
			g[l]--
		}
	}
	return b.String()
}
