package mounts_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

func TestIsDead(t *testing.T) {
	for _, tc := range []struct {
		err  error
		dead bool
	}{
		{&os.PathError{Op: "statfs", Path: "/x", Err: syscall.ENOTCONN}, true},
		{fmt.Errorf("wrapped: %w", syscall.ECONNABORTED), true},
		{syscall.EIO, true},
		{syscall.ENOENT, false},
		{mounts.ErrTimeout, false},
		{nil, false},
	} {
		if got := mounts.IsDead(tc.err); got != tc.dead {
			t.Errorf("IsDead(%v) = %v, want %v", tc.err, got, tc.dead)
		}
	}
}

func TestAnswersOnPlainDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := mounts.Answers(dir, "", time.Second); !errors.Is(err, mounts.ErrNotFUSE) {
		t.Fatalf("Answers(plain dir) = %v, want ErrNotFUSE", err)
	}
	if ok, err := mounts.IsMountPoint(dir); err != nil || ok {
		t.Fatalf("IsMountPoint(plain dir) = %v, %v; want false, nil", ok, err)
	}
	if n, err := mounts.UnmountAll(dir); err != nil || n != 0 {
		t.Fatalf("UnmountAll(plain dir) = %d, %v; want 0, nil", n, err)
	}
	if n, err := mounts.UnmountAll(filepath.Join(dir, "missing")); err != nil || n != 0 {
		t.Fatalf("UnmountAll(missing) = %d, %v; want 0, nil", n, err)
	}
}

// TestOneOffChecksCloseTheirDescriptor: a one-off check (Statfs, Answers, WaitAnswering) leaves no descriptor
// behind. The garbage collector is off, as it is in effect in a plugin that allocates little: it would close
// a forgotten one whenever it ran (the csi-plugin relay-keeper soak saw the plugin's /proc/self/mountinfo
// descriptors grow by one per real server restart).
func TestOneOffChecksCloseTheirDescriptor(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	dir := t.TempDir()
	before := testenv.OpenFDs(t, 0)
	for range 10 {
		_, _ = mounts.Statfs(dir, time.Second)
		_ = mounts.Answers(dir, "", time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		_ = mounts.WaitAnswering(ctx, dir, "", nil)
		cancel()
	}
	if after := testenv.OpenFDs(t, 0); after > before {
		t.Errorf("%d open descriptors after 30 one-off checks, %d before", after, before)
	}
}

func TestResolveParentSymlinks(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	p := mounts.NewProber(time.Second, 1)
	realDir, err := filepath.EvalSymlinks(real)
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		filepath.Join(dir, "link", "leaf"):            filepath.Join(realDir, "leaf"),
		filepath.Join(dir, "link", "new", "sub", "x"): filepath.Join(realDir, "new", "sub", "x"),    // parents to create
		filepath.Join(dir, "link"):                    filepath.Join(filepath.Dir(realDir), "link"), // last element kept
	} {
		if got, err := p.Resolve(in); err != nil || got != want {
			t.Errorf("Resolve(%s) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// mountDummyFuse starts dummy-fuse on a new directory and returns the directory and the process.
func mountDummyFuse(t *testing.T, bin, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	died := make(chan struct{})
	go func() { _ = cmd.Wait(); close(died) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-died
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := mounts.WaitAnswering(ctx, dir, "dummy-file.txt", died); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// TestDeadFUSEMount pins the kernel behaviour the plugin's honesty rests on: after the server dies, the mount
// stays in the table, stat may still answer from the cache, but statfs (mounts.Probe) reports ENOTCONN.
func TestDeadFUSEMount(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := testenv.Build(t, "dummy-fuse")
	root := t.TempDir()
	t.Cleanup(func() { _, _ = mounts.UnmountUnder(root) })
	mnt := filepath.Join(root, "mnt")
	target := filepath.Join(root, "target")
	for _, d := range []string{mnt, target} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := mountDummyFuse(t, bin, mnt)
	if err := mounts.Answers(mnt, "dummy-file.txt", time.Second); err != nil {
		t.Fatalf("live mount: %v", err)
	}
	if err := mounts.Bind(mnt, target, true); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err != nil || st.Flags&unix.ST_RDONLY == 0 || st.Flags&unix.ST_NOSUID == 0 {
		t.Fatalf("read-only bind: statfs flags %#x, err %v; want ro and nosuid kept", st.Flags, err)
	}
	if b, err := os.ReadFile(filepath.Join(target, "dummy-file.txt")); err != nil || string(b) != "Hello world!\n" {
		t.Fatalf("read through bind: %q, %v", b, err)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := mounts.Probe(mnt, time.Second)
		if errors.Is(err, syscall.ENOTCONN) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Probe on dead mount = %v, want ENOTCONN", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, p := range []string{mnt, target} {
		if err := mounts.Answers(p, "dummy-file.txt", time.Second); !mounts.IsDead(err) {
			t.Errorf("Answers(%s) on dead mount = %v, want a dead-mount error", p, err)
		}
		if ok, err := mounts.IsMountPoint(p); err != nil || !ok {
			t.Errorf("IsMountPoint(%s) on dead mount = %v, %v; want true", p, ok, err)
		}
		if ok, err := mounts.NewProber(time.Second, 1).Exists(p); err != nil || !ok {
			t.Errorf("Exists(%s) on dead mount = %v, %v; want true", p, ok, err)
		}
	}

	// Stack a live mount on the dead target (the "stack" restore strategy), then remove both layers.
	mnt2 := filepath.Join(root, "mnt2")
	if err := os.Mkdir(mnt2, 0o755); err != nil {
		t.Fatal(err)
	}
	mountDummyFuse(t, bin, mnt2)
	if err := mounts.Bind(mnt2, target, false); err != nil {
		t.Fatal(err)
	}
	if err := mounts.Answers(target, "dummy-file.txt", time.Second); err != nil {
		t.Fatalf("stacked live mount: %v", err)
	}
	table, err := mounts.ReadTable()
	if err != nil {
		t.Fatal(err)
	}
	if n := table.Count(target); n != 2 {
		t.Fatalf("mounts on stacked target = %d, want 2", n)
	}
	if n, err := mounts.CountMounts(target); err != nil || n != 2 {
		t.Fatalf("CountMounts(stacked target) = %d, %v; want 2", n, err)
	}
	if n, err := mounts.UnmountAll(target); err != nil || n != 2 {
		t.Fatalf("UnmountAll(stacked) = %d, %v; want 2, nil", n, err)
	}
	if ok, _ := mounts.IsMountPoint(target); ok {
		t.Fatal("target still a mount point after UnmountAll")
	}
	if err := mounts.UnmountLazy(mnt); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "dummy-file.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after umount -l the empty directory underneath shows: stat err %v, want ENOENT", err)
	}
}

func TestWaitAnsweringStopsWhenServerDies(t *testing.T) {
	died := make(chan struct{})
	close(died)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := mounts.WaitAnswering(ctx, t.TempDir(), "x", died); err == nil {
		t.Fatal("WaitAnswering on a plain directory succeeded")
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("WaitAnswering ignored the died channel")
	}
}

// TestUnderOrder: mounts.Under lists nested and stacked mounts in an order that unmounts them all, and
// mounts.UnmountUnder removes every one of them.
func TestUnderOrder(t *testing.T) {
	testenv.Integration(t, "mounts tmpfs")
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "mounting tmpfs needs root")
	}
	root := t.TempDir()
	t.Cleanup(func() { _, _ = mounts.UnmountUnder(root) })
	outer := filepath.Join(root, "outer")
	inner := filepath.Join(outer, "inner")
	if err := os.Mkdir(outer, 0o755); err != nil {
		t.Fatal(err)
	}
	mountTmpfs := func(source, at string) {
		t.Helper()
		if err := unix.Mount(source, at, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatalf("mount tmpfs on %s: %v", at, err)
		}
	}
	mountTmpfs("outer", outer)
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	mountTmpfs("bottom", inner)
	mountTmpfs("top", inner)

	infos, err := mounts.Under(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range infos {
		got = append(got, in.Source)
	}
	if fmt.Sprint(got) != "[top bottom outer]" {
		t.Errorf("Under(%s) = %v, want [top bottom outer] (deepest first, topmost first)", root, got)
	}
	if n, err := mounts.UnmountUnder(root); err != nil || n != 3 {
		t.Errorf("UnmountUnder = %d, %v; want 3 mounts removed", n, err)
	}
	if left, err := mounts.Under(root); err != nil || len(left) != 0 {
		t.Errorf("left after UnmountUnder: %d mounts (%v)", len(left), err)
	}
}
