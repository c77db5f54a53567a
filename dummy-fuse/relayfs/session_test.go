package relayfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSessionsRelayTheRootTheyWereHanded: a connection's relay needs its volume's root first; a fresh connection
// starts a new node table, a taken-over one keeps its predecessor's.
func TestSessionsRelayTheRootTheyWereHanded(t *testing.T) {
	dir := t.TempDir()
	s, err := NewSessions(filepath.Join(dir, "nodes"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.FS("vol-1", true); err == nil || !strings.Contains(err.Error(), "no backend root") {
		t.Fatalf("FS before any root: %v, want an error naming the missing root", err)
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
	if _, _, err := s.FS("vol-2", false); err == nil {
		t.Error("FS of a volume whose root was never handed over succeeded")
	}
	if _, err := NewSessions("relative", Options{}); err == nil {
		t.Error("NewSessions accepted a relative directory")
	}
}
