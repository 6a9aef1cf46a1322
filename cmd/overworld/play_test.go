package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPromptPasswordFromPipe covers what scripts do: pipe the password in.
// (On a terminal the line is read with echo off; that needs a real tty.)
func TestPromptPasswordFromPipe(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"s3cret\n", "s3cret"},
		{"crlf\r\n", "crlf"},
		{"no newline", "no newline"},
		{"first\nsecond\n", "first"},
	} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteString(c.in); err != nil {
			t.Fatal(err)
		}
		w.Close()
		got, err := promptPassword(r)
		r.Close()
		if err != nil || got != c.want {
			t.Errorf("promptPassword(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	r, w, _ := os.Pipe()
	w.Close()
	if _, err := promptPassword(r); err == nil {
		t.Error("an empty stdin gave a password")
	}
	r.Close()
}

func TestReadPasswordFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "pw")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := readPassword(file, os.Stderr); err != nil || got != "from-file" {
		t.Fatalf("readPassword(file) = %q, %v", got, err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readPassword(empty, os.Stderr); err == nil {
		t.Fatal("an empty password file was accepted")
	}
}

func TestRequireBootstrap(t *testing.T) {
	if _, err := requireBootstrap(" , ", "see the README"); err == nil || !strings.Contains(err.Error(), "see the README") {
		t.Fatalf("an empty list: %v", err)
	}
	if _, err := requireBootstrap("/ip4/127.0.0.1/tcp/4001", "x"); err == nil {
		t.Fatal("a multiaddr without /p2p/ID was accepted")
	}
	const id = "12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQAJU5SA"
	boot, err := requireBootstrap("/ip4/127.0.0.1/tcp/4001/p2p/"+id, "x")
	if err != nil || len(boot) != 1 || boot[0].ID.String() != id {
		t.Fatalf("one bootstrap node: %v %v", boot, err)
	}
}
