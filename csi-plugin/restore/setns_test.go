package restore

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// loopback serves dir at mnt; the returned device number names its FUSE connection.
func loopback(t *testing.T, dir, mnt string) (*fuse.Server, uint64) {
	t.Helper()
	root, err := fs.NewLoopbackRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := fs.Mount(mnt, root, &fs.Options{MountOptions: fuse.MountOptions{FsName: "setns-test"}})
	if err != nil {
		t.Fatalf("mounting %s: %v", mnt, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(mnt, &st); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = fuseconn.Abort(unix.Minor(st.Dev))
		_ = unix.Unmount(mnt, unix.MNT_DETACH)
	})
	return srv, st.Dev
}

// TestSetnsReattachKeepsSubdirectory: a "container" (a shell in a mount namespace of its own) holds the volume
// at its root and subPath-like binds of a subdirectory and of a file; the connection dies; Reattach puts the new staging
// mount back at both places, the subPath showing its subdirectory, not the root, and a descriptor the container
// kept open stays dead.
func TestSetnsReattachKeepsSubdirectory(t *testing.T) {
	testenv.RequireFUSE(t)
	base := t.TempDir()
	data := filepath.Join(base, "data")
	for _, d := range []string{data + "/sub", base + "/old", base + "/new", base + "/c/vol", base + "/c/subpath"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(data+"/where", []byte("root\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(data+"/sub/where", []byte("subdirectory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(base+"/c/file", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, dead := loopback(t, data, base+"/old")

	// The container: private mount namespace, binds made inside it only, a descriptor kept open on the volume.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	script := `mount --bind "$1/old" "$1/c/vol" && mount --bind "$1/old/sub" "$1/c/subpath" && mount --bind "$1/old/sub/where" "$1/c/file" && exec 3<"$1/c/vol/where" && echo ready && read _ &&
		{ if cat <&3 >/dev/null 2>&1; then echo kept=alive; else echo kept=dead; fi; } &&
		echo "volume=$(cat "$1/c/vol/where")" && echo "subpath=$(cat "$1/c/subpath/where")" && echo "file=$(cat "$1/c/file")"`
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", base)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) // a second Wait only errors
	buf := make([]byte, 6)
	if n, err := out.Read(buf); err != nil || string(buf[:n]) != "ready\n" {
		t.Fatalf("container did not start: %q %v", buf[:n], err)
	}

	// The server dies: its connection is aborted (ENOTCONN everywhere); a new staging mount serves the data.
	if err := fuseconn.Abort(unix.Minor(dead)); err != nil {
		t.Fatal(err)
	}
	_, _ = loopback(t, data, base+"/new")

	// Only the container's namespace: the test's mounts propagate into other namespaces of this machine.
	res, err := reattach(dead, base+"/new", []int{cmd.Process.Pid})
	if err != nil {
		t.Fatalf("Reattach: %v (%+v)", err, res)
	}
	if res.Replaced != 4 || res.Namespaces != 1 {
		t.Fatalf("Reattach = %+v, want 4 mounts replaced (the staging copy, the volume, a directory and a file subPath)", res)
	}
	// The container reports from inside: its kept descriptor, then what its two mounts show.
	if _, err := stdin.Write([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("container: %v; it wrote %q", err, rest)
	}
	if want := "kept=dead\nvolume=root\nsubpath=subdirectory\nfile=subdirectory\n"; string(rest) != want {
		t.Errorf("the container wrote %q, want %q (a subPath must show its subdirectory; a descriptor kept across the crash holds the old connection)", rest, want)
	}
}

// TestCleanRel: mountinfo's paths become relative paths that cannot climb out of the directory they are
// resolved in (the kernel resolves them beneath it as well: RESOLVE_BENEATH, RESOLVE_IN_ROOT).
func TestCleanRel(t *testing.T) {
	for in, want := range map[string]string{"/": ".", "/sub": "sub", "/sub/./f": "sub/f", "/a/../b": "b", "/..": "."} {
		if got, err := cleanRel(in); err != nil || got != want {
			t.Errorf("cleanRel(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "sub", "../x", "./x"} {
		if got, err := cleanRel(in); err == nil {
			t.Errorf("cleanRel(%q) = %q, want an error", in, got)
		}
	}
}
