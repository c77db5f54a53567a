package relayfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSessionsRelayTheRootTheyWereHanded: a connection's relay relays its volume's root; one started before any
// root (a keeper whose real server cannot start yet) lets requests wait for it within the backend wait and then
// fails them with ENOTCONN, never queueing them for good, and serves once the root comes; a fresh connection
// starts a new node table, a taken-over one keeps its predecessor's.
func TestSessionsRelayTheRootTheyWereHanded(t *testing.T) {
	dir := t.TempDir()
	wait := 300 * time.Millisecond
	s, err := NewSessions(filepath.Join(dir, "nodes"), Options{BackendWait: wait})
	if err != nil {
		t.Fatal(err)
	}
	early, endEarly, err := s.FS("vol-0", true)
	if err != nil {
		t.Fatalf("FS before any root: %v, want a relay that waits for one", err)
	}
	defer endEarly()
	statfs := func() error {
		return early.(*FS).do(func(r *rootFD) error {
			var st unix.Statfs_t
			return unix.Fstatfs(r.fd, &st)
		})
	}
	start := time.Now()
	if err := statfs(); !errors.Is(err, unix.ENOTCONN) {
		t.Fatalf("an operation before any root: %v, want ENOTCONN", err)
	}
	if d := time.Since(start); d < wait/2 {
		t.Errorf("an operation before any root failed after %s, not after waiting for the root (backend wait %s)", d, wait)
	}
	backend := filepath.Join(dir, "backend")
	if err := os.Mkdir(backend, 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := os.Open(backend)
	if err != nil {
		t.Fatal(err)
	}
	s.Backend("vol-1", root)
	root0, err := os.Open(backend)
	if err != nil {
		t.Fatal(err)
	}
	s.Backend("vol-0", root0)
	if err := statfs(); err != nil {
		t.Errorf("an operation once the root was handed over: %v", err)
	}
	table := NodeTable(filepath.Join(dir, "nodes"), "vol-1")
	if err := os.WriteFile(table, []byte("left by a predecessor of another connection\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fs, end, err := s.FS("vol-1", true)
	if err != nil {
		t.Fatal(err)
	}
	end()
	if fs.String() != "dummy-fuse-relay" {
		t.Errorf("FS is %s", fs.String())
	}
	if b, err := os.ReadFile(table); err == nil && strings.Contains(string(b), "predecessor") {
		t.Error("a fresh connection kept the node table of another connection")
	}
	if _, err := NewSessions("relative", Options{}); err == nil {
		t.Error("NewSessions accepted a relative directory")
	}
}
