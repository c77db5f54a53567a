package mounts_test

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// TestProberBoundsStuckCalls: a call that does not return is joined rather than repeated, and once a mount has a
// stuck call, at most perMount calls to it are outstanding; the others fail at once. When the calls return,
// nothing stays counted.
func TestProberBoundsStuckCalls(t *testing.T) {
	const perMount = 2
	p := mounts.NewProber(50*time.Millisecond, perMount)
	dir := t.TempDir()
	release := make(chan struct{})
	var started atomic.Int32
	stuck := func() (any, error) { started.Add(1); <-release; return "late", nil }

	for i := 0; i < 5; i++ { // kubelet polling one path: one call, joined
		if _, err := p.Do("statfs", dir, stuck); !errors.Is(err, mounts.ErrTimeout) {
			t.Fatalf("call %d on a stuck path: %v, want ErrTimeout", i, err)
		}
	}
	if n := started.Load(); n != 1 {
		t.Fatalf("%d calls started for one path, want 1 (the others join it)", n)
	}
	if _, err := p.Do("lstat", dir, stuck); !errors.Is(err, mounts.ErrTimeout) { // second outstanding call: allowed
		t.Fatalf("second operation: %v, want ErrTimeout", err)
	}
	start := time.Now()
	_, err := p.Do("readdir", dir, stuck)
	if !errors.Is(err, mounts.ErrTimeout) || time.Since(start) >= 50*time.Millisecond {
		t.Fatalf("third operation on a mount with %d stuck calls: %v after %v; want an immediate ErrTimeout", perMount, err, time.Since(start))
	}
	if n := started.Load(); n != perMount {
		t.Fatalf("%d calls started, want %d", n, perMount)
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for p.Outstanding() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls still outstanding after they returned", p.Outstanding())
		}
		time.Sleep(time.Millisecond)
	}
	if v, err := p.Do("statfs", dir, func() (any, error) { return "ok", nil }); err != nil || v != "ok" {
		t.Fatalf("after the mount answered again: %v, %v", v, err)
	}
}

// TestMountPointsFollowTheTable: the cached mount points notice a mount and an unmount (the kernel's POLLPRI on
// mountinfo), so a path is always attributed to the mount it lies on; a bind mount counts as the same
// filesystem as its source.
func TestMountPointsFollowTheTable(t *testing.T) {
	testenv.Integration(t, "mounts tmpfs")
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "mounting needs root")
	}
	dir, bind := t.TempDir(), t.TempDir()
	var m mounts.MountPoints
	parent, parentFS := m.Of(dir)
	if parent == dir {
		t.Fatalf("%s is a mount point before the test mounted it", dir)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	got, fsys := m.Of(filepath.Join(dir, "x"))
	if got != dir || fsys == parentFS {
		t.Errorf("after mounting %s: a path in it is on %q (filesystem %s, its parent's %s)", dir, got, fsys, parentFS)
	}
	if err := unix.Mount(dir, bind, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(bind, unix.MNT_DETACH) })
	if got, bindFS := m.Of(bind); got != bind || bindFS != fsys {
		t.Errorf("the bind mount %s: on %q, filesystem %s; want itself and the source's filesystem %s", bind, got, bindFS, fsys)
	}
	if err := unix.Unmount(bind, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(dir, 0); err != nil {
		t.Fatal(err)
	}
	if got, fsys := m.Of(filepath.Join(dir, "x")); got != parent || fsys != parentFS {
		t.Errorf("after unmounting %s: a path in it is on %q (%s), want %q (%s)", dir, got, fsys, parent, parentFS)
	}
}
