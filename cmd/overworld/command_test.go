package main

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/node/await"
)

// How the tests of this package wait for a command: its output and its
// logs each go to an await.Output, and a test waits for the line it needs
// with matchOrExit. When the command returns, the line exitedMark writes
// goes to both, so a wait ends as soon as the command is gone instead of
// at its deadline, and the failure says how it ended.

// exitedPrefix starts the line a command's output gets when it returns.
const exitedPrefix = "overworld-test: the command returned: "

// exitedMark writes that the command returned err into out.
func exitedMark(out io.Writer, err error) {
	fmt.Fprintf(out, "\n%s%v\n", exitedPrefix, err)
}

// matchOrExit waits for re in out and returns its submatches; it fails the
// test, with the output so far, if the command named what returns first or
// nothing matches within the bound.
func matchOrExit(t testing.TB, what string, out *await.Output, within time.Duration, re *regexp.Regexp) []string {
	t.Helper()
	// The mark is written after everything the command printed, so when re
	// matches the leftmost match is re's, whatever followed it.
	either := regexp.MustCompile(`(?:` + re.String() + `)|` + regexp.QuoteMeta(exitedPrefix))
	m, err := out.MatchErr(within, either)
	if err != nil {
		t.Fatalf("%s: %v; output:\n%s", what, err, out.String())
	}
	if strings.HasPrefix(m[0], exitedPrefix) {
		t.Fatalf("%s ended before printing anything matching %v; output:\n%s", what, re, out.String())
	}
	return m
}

// runningCommand is an overworld subcommand run in this process by a test.
type runningCommand struct {
	name string
	out  *await.Output // what it prints on stdout, then its exit mark
	log  *await.Output // its logs (stderr), then its exit mark
	done chan struct{} // closed when it has returned
	err  error         // what it returned, once done is closed
}

// startCommand runs `overworld args...` in this process until ctx ends.
func startCommand(ctx context.Context, args ...string) *runningCommand {
	c := &runningCommand{name: args[0], out: &await.Output{}, log: &await.Output{}, done: make(chan struct{})}
	go func() {
		c.err = dispatch(ctx, args, c.out, c.log)
		exitedMark(c.out, c.err)
		exitedMark(c.log, c.err)
		close(c.done)
	}()
	return c
}

// runCommand runs `overworld args...` in this process until the test ends,
// then checks that it stops cleanly.
func runCommand(t *testing.T, args ...string) *runningCommand {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := startCommand(ctx, args...)
	t.Cleanup(func() {
		cancel()
		select {
		case <-c.done:
			if c.err != nil {
				t.Errorf("%s returned %v", c.name, c.err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s did not stop", c.name)
		}
	})
	return c
}

// match waits up to a minute for re in the command's output.
func (c *runningCommand) match(t testing.TB, re *regexp.Regexp) []string {
	t.Helper()
	return matchOrExit(t, c.name, c.out, time.Minute, re)
}

// logged waits up to a minute for re in the command's logs; a test gives
// the command the -log-level the awaited line is logged at.
func (c *runningCommand) logged(t testing.TB, re *regexp.Regexp) []string {
	t.Helper()
	return matchOrExit(t, c.name+"'s log", c.log, time.Minute, re)
}

// stopped waits for the command to return after its context ended and
// fails the test unless it returned nil.
func (c *runningCommand) stopped(t testing.TB) {
	t.Helper()
	select {
	case <-c.done:
		if c.err != nil {
			t.Fatalf("%s returned %v on shutdown; output:\n%s\nlog:\n%s", c.name, c.err, c.out.String(), c.log.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not stop within 30 s of its context ending; output:\n%s\nlog:\n%s", c.name, c.out.String(), c.log.String())
	}
}
