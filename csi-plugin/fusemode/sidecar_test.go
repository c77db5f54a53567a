package fusemode

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSocketChmodDoesNotFollowSymlinks: the socket's directory lies in a volume the pod can write to, so root in
// the pod can put a symlink where the plugin just bound its socket; making the socket connectable must then
// fail instead of making the symlink's target (anything on the node) world-writable.
func TestSocketChmodDoesNotFollowSymlinks(t *testing.T) {
	dir := t.TempDir()
	canary := filepath.Join(dir, "canary")
	if err := os.WriteFile(canary, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(canary, filepath.Join(dir, SocketName)); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := chmodSocket(d, SocketName); err == nil {
		t.Error("chmodSocket on a symlink succeeded")
	}
	st, err := os.Stat(canary)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("the symlink's target became %#o: the chmod followed the symlink", st.Mode().Perm())
	}
	// A regular file is not the socket either.
	if err := os.Remove(filepath.Join(dir, SocketName)); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(canary, filepath.Join(dir, SocketName)); err != nil {
		t.Fatal(err)
	}
	if err := chmodSocket(d, SocketName); err == nil {
		t.Error("chmodSocket on a regular file succeeded")
	}
	// The socket itself is made connectable by anyone.
	if err := os.Remove(filepath.Join(dir, SocketName)); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: filepath.Join(dir, SocketName)}); err != nil {
		t.Fatal(err)
	}
	if err := chmodSocket(d, SocketName); err != nil {
		t.Fatalf("chmodSocket on the socket: %v", err)
	}
	if st, err := os.Lstat(filepath.Join(dir, SocketName)); err != nil || st.Mode().Perm() != 0o666 {
		t.Errorf("socket mode after chmodSocket: %v %v, want 0666", st.Mode(), err)
	}
}
