package mounts_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	mountutils "k8s.io/mount-utils"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// cachedServerArgs make dummy-fuse serve in page-cache mode with attributes and names cached for an hour, the
// setting under which a probe that the kernel can answer from its caches says "healthy" long after the server
// died (what Mountpoint-S3 CSI's empty-mask statx health check did for hours, their PR #921).
var cachedServerArgs = []string{"--attr-timeout=1h", "--entry-timeout=1h"}

// startServer starts dummy-fuse with args (the last one its mount point) and waits until mnt answers. The
// returned channel is closed when the process has exited; cleanup kills it by its PID and waits.
func startServer(t *testing.T, bin, mnt string, extra []*os.File, args ...string) (*exec.Cmd, <-chan struct{}) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.ExtraFiles = extra
	var stderr testenv.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	died := make(chan struct{})
	go func() { _ = cmd.Wait(); close(died) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-died:
		case <-time.After(20 * time.Second):
			t.Errorf("dummy-fuse (pid %d) did not exit within 20s of SIGKILL; its log:\n%s", cmd.Process.Pid, stderr.String())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := mounts.WaitAnswering(ctx, mnt, "dummy-file.txt", died); err != nil {
		t.Fatalf("dummy-fuse %v never answered: %v; its log:\n%s", args, err, stderr.String())
	}
	return cmd, died
}

// kill SIGKILLs the server and waits until it has exited (its descriptors are closed by then).
func kill(t *testing.T, cmd *exec.Cmd, died <-chan struct{}) {
	t.Helper()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-died:
	case <-time.After(20 * time.Second):
		t.Fatalf("dummy-fuse (pid %d) did not exit within 20s of SIGKILL", cmd.Process.Pid)
	}
}

// naiveProbes are the health checks that the kernel may answer without asking the FUSE server. Each returns nil
// when it would call the mount at path healthy.
var naiveProbes = []struct {
	name  string
	probe func(path string) error
}{
	{"statx with an empty mask", func(p string) error {
		var stx unix.Statx_t
		return unix.Statx(unix.AT_FDCWD, p, 0, 0, &stx)
	}},
	{"statx with an empty mask and AT_STATX_DONT_SYNC", func(p string) error {
		var stx unix.Statx_t
		return unix.Statx(unix.AT_FDCWD, p, unix.AT_STATX_DONT_SYNC, 0, &stx)
	}},
	{"statx with STATX_TYPE", func(p string) error { // Mountpoint-S3 CSI's fix (their PR #921)
		var stx unix.Statx_t
		return unix.Statx(unix.AT_FDCWD, p, 0, unix.STATX_TYPE, &stx)
	}},
	{"os.Stat of the root", func(p string) error { _, err := os.Stat(p); return err }},
	{"os.Stat of a file", func(p string) error { _, err := os.Stat(filepath.Join(p, "dummy-file.txt")); return err }},
	{"mount-utils IsLikelyNotMountPoint", func(p string) error {
		notMnt, err := mountutils.New("").IsLikelyNotMountPoint(p)
		if err == nil && notMnt {
			return errors.New("not a mount point")
		}
		return err
	}},
	{"mount-utils PathExists", func(p string) error {
		ok, err := mountutils.PathExists(p)
		if err == nil && !ok {
			return errors.New("does not exist")
		}
		return err
	}},
}

// TestNaiveProbesLieOnDeadMount kills the server of a page-cache mount whose attributes and names are cached
// for an hour: the naive probes still call the mount healthy, the Prober's statfs reaches the kernel's
// connection and reports it gone (ENOTCONN) at once. Twice: once after every probe ran on the live mount
// (warm: the root's attributes are cached, as after kubelet stat'ed the volume before starting a container),
// once after only the mount's start-up check (cold: the root's attributes were never asked for).
func TestNaiveProbesLieOnDeadMount(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := testenv.Build(t, "dummy-fuse")
	for _, tc := range []struct {
		name string
		warm bool
		lies map[string]bool // which naive probes call the dead mount healthy
	}{
		{"warm", true, map[string]bool{
			"statx with an empty mask": true, "statx with an empty mask and AT_STATX_DONT_SYNC": true,
			"statx with STATX_TYPE": true, "os.Stat of the root": true, "os.Stat of a file": true,
			"mount-utils IsLikelyNotMountPoint": true, "mount-utils PathExists": true,
		}},
		// The root's attributes are not cached: a stat of it reaches the connection and fails honestly. But a
		// statx with an empty mask or AT_STATX_DONT_SYNC (mount-utils' statx) never asks the server, cached
		// or not (fuse_update_get_attr in fs/fuse/dir.c), and the file's entry and attributes are cached.
		{"cold", false, map[string]bool{
			"statx with an empty mask": true, "statx with an empty mask and AT_STATX_DONT_SYNC": true, "os.Stat of a file": true,
			"mount-utils IsLikelyNotMountPoint": true,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mnt := t.TempDir()
			t.Cleanup(func() { _, _ = mounts.UnmountUnder(mnt) })
			cmd, died := startServer(t, bin, mnt, nil, append(cachedServerArgs, mnt)...)
			if tc.warm {
				for _, np := range naiveProbes { // fill the caches, and make sure each probe works on a live mount
					if err := np.probe(mnt); err != nil {
						t.Fatalf("%s on the live mount: %v", np.name, err)
					}
				}
			}
			p := mounts.NewProber(time.Second, 1)
			if err := p.Answers(mnt, "dummy-file.txt"); err != nil {
				t.Fatalf("mounts.Prober on the live mount: %v", err)
			}

			kill(t, cmd, died)
			for _, np := range naiveProbes {
				err := np.probe(mnt)
				switch {
				case err == nil && tc.lies[np.name]:
					t.Logf("%s: healthy — a lie, the server is dead", np.name)
				case err == nil:
					t.Errorf("%s on the dead mount: healthy; expected it to reach the connection and fail", np.name)
				case tc.lies[np.name]:
					t.Errorf("%s on the dead mount: %v; expected it to lie (answer from the caches) on this kernel", np.name, err)
				case !mounts.IsDead(err):
					t.Errorf("%s on the dead mount: %v; want ENOTCONN", np.name, err)
				default:
					t.Logf("%s: %v — honest", np.name, err)
				}
			}
			if _, err := p.Statfs(mnt); !errors.Is(err, syscall.ENOTCONN) {
				t.Errorf("mounts.Prober.Statfs on the dead mount: %v, want ENOTCONN", err)
			}
			if err := p.Answers(mnt, "dummy-file.txt"); !mounts.IsDead(err) {
				t.Errorf("mounts.Prober.Answers on the dead mount: %v, want a dead-mount error", err)
			}
		})
	}
}

// TestProberOnHeldConnection: the server dies while another process (here the test) still holds the
// connection's /dev/fuse descriptor, so the kernel keeps the connection and queues every request for a server
// that never comes (what a keeper or sidecar holding a copy sees when no successor starts). The naive probes
// answer from the caches; the Prober's statfs reports ErrTimeout after its timeout, joins the one blocked call
// instead of piling up threads, and refuses calls to the mount beyond perMount at once. Aborting the connection
// (fusectl) releases the blocked calls, which then report ENOTCONN.
func TestProberOnHeldConnection(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := testenv.Build(t, "dummy-fuse")
	mnt := t.TempDir()
	dev, err := fuseconn.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = mounts.UnmountUnder(mnt) }) // runs last
	if err := fuseconn.Mount(dev, mnt, fuseconn.MountOptions{Name: "dummy-fuse", Source: "dummy-fuse", ReadOnly: true, AllowOther: true}); err != nil {
		dev.Close()
		t.Fatal(err)
	}
	conn, err := fuseconn.ID(int(dev.Fd()))
	if err != nil {
		dev.Close()
		_ = unix.Unmount(mnt, unix.MNT_DETACH)
		t.Fatalf("the connection's number (needed to abort it): %v", err)
	}
	t.Cleanup(func() { // before the unmount: nothing may stay blocked on the connection
		if err := abortConnection(conn); err != nil {
			t.Errorf("aborting connection %d: %v", conn, err)
		}
		dev.Close()
	})
	cmd, died := startServer(t, bin, mnt, []*os.File{dev}, append(cachedServerArgs, "/dev/fd/3")...)
	for _, np := range naiveProbes {
		if err := np.probe(mnt); err != nil {
			t.Fatalf("%s on the live mount: %v", np.name, err)
		}
	}
	kill(t, cmd, died) // the test's copy of the descriptor keeps the connection: requests now queue

	// A naive probe that does reach the server would block for good here; run each bounded, so that the test
	// reports it (the abort at cleanup releases it).
	for _, np := range naiveProbes {
		errc := make(chan error, 1)
		go func() { errc <- np.probe(mnt) }()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("%s on the held connection: %v; it was expected to lie (answer from the caches)", np.name, err)
			} else {
				t.Logf("%s: healthy — a lie, nothing serves the connection", np.name)
			}
		case <-time.After(2 * time.Second):
			t.Errorf("%s on the held connection: still blocked after 2s (it reached the connection; expected a cached answer)", np.name)
		}
	}

	const timeout, perMount = 300 * time.Millisecond, 2
	p := mounts.NewProber(timeout, perMount)
	start := time.Now()
	_, err = p.Statfs(mnt)
	took := time.Since(start)
	if !errors.Is(err, mounts.ErrTimeout) {
		t.Fatalf("mounts.Prober.Statfs on the held connection: %v after %v, want mounts.ErrTimeout", err, took)
	}
	if took < timeout || took > 20*timeout {
		t.Errorf("mounts.Prober.Statfs gave up after %v, want about its timeout %v", took, timeout)
	}
	t.Logf("mounts.Prober.Statfs gave up after %v (timeout %v): %v", took, timeout, err)
	for i := 0; i < 5; i++ { // kubelet polling: joined, not repeated
		if _, err := p.Statfs(mnt); !errors.Is(err, mounts.ErrTimeout) {
			t.Fatalf("repeated mounts.Statfs %d: %v, want mounts.ErrTimeout", i, err)
		}
	}
	if n := p.Outstanding(); n != 1 {
		t.Fatalf("%d calls outstanding after six statfs of one path, want 1", n)
	}
	if err := p.Answers(mnt, "dummy-file.txt"); !errors.Is(err, mounts.ErrTimeout) {
		t.Fatalf("mounts.Prober.Answers on the held connection: %v, want mounts.ErrTimeout", err)
	}
	for i := 0; i < 20; i++ { // further calls to the stuck mount are refused at once
		start := time.Now()
		_, err := p.Statfs(filepath.Join(mnt, fmt.Sprintf("name-%d", i)))
		if !errors.Is(err, mounts.ErrTimeout) || time.Since(start) >= timeout {
			t.Fatalf("call %d beyond perMount: %v after %v, want an immediate mounts.ErrTimeout", i, err, time.Since(start))
		}
	}
	// A bind mount of the same connection (a target of the volume) shares the budget: refused at once too.
	bind := t.TempDir()
	if err := mounts.Bind(mnt, bind, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mounts.UnmountLazy(bind) })
	start = time.Now()
	if _, err := p.Statfs(bind); !errors.Is(err, mounts.ErrTimeout) || time.Since(start) >= timeout {
		t.Fatalf("statfs of a bind mount of the stuck connection: %v after %v, want an immediate mounts.ErrTimeout", err, time.Since(start))
	}
	if n := p.Outstanding(); n != perMount {
		t.Fatalf("%d calls outstanding on the stuck connection, want at most perMount = %d", n, perMount)
	}

	if err := abortConnection(conn); err != nil {
		t.Fatalf("aborting connection %d: %v", conn, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for p.Outstanding() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls still blocked 10s after the connection was aborted", p.Outstanding())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := p.Statfs(mnt); !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("mounts.Prober.Statfs after the abort: %v, want ENOTCONN", err)
	}
}

// abortConnection aborts the FUSE connection with number conn through fusectl (mounting it when needed), so
// that every request blocked on it fails (fuse_abort_conn in fs/fuse/dev.c).
func abortConnection(conn uint32) error {
	dir := "/sys/fs/fuse/connections"
	if _, err := os.Stat(filepath.Join(dir, fmt.Sprint(conn))); errors.Is(err, os.ErrNotExist) {
		if err := unix.Mount("fusectl", dir, "fusectl", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mounting fusectl: %w", err)
		}
	}
	return os.WriteFile(filepath.Join(dir, fmt.Sprint(conn), "abort"), []byte("1"), 0)
}

// TestStatfsOfAnOutsider pins the one case where statfs does not reach the FUSE server: a process the mount does
// not let in (no allow_other, another user) gets f_type FUSE and nothing else, without a request, whether the
// server lives or not (fuse_statfs in fs/fuse/inode.c answers for it when fuse_allow_current_process says no).
// The plugin is root and every mount it makes is its own or allow_other, so its statfs always reaches the
// server; a health check run as another user would not.
func TestStatfsOfAnOutsider(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := testenv.Build(t, "dummy-fuse")
	mnt := t.TempDir()
	for d := mnt; d != "/" && d != os.TempDir(); d = filepath.Dir(d) { // let the outsider reach the mount point
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _, _ = mounts.UnmountUnder(mnt) })
	cmd, died := startServer(t, bin, mnt, nil, append(cachedServerArgs, "--allow-other=false", mnt)...)
	const nobody = 65534
	outsider := func() string { // statfs as another user: "f_type f_bsize f_namelen"
		t.Helper()
		c := exec.Command("stat", "-f", "-c", "%t %s %l", mnt)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%s as uid %d: %v: %s", c, nobody, err, out)
		}
		return string(out)
	}
	want := fmt.Sprintf("%x 0 0\n", mounts.FUSESuperMagic) // the kernel's stand-in: the type, no sizes
	if got := outsider(); got != want {
		t.Fatalf("statfs of the live mount as an outsider: %q, want the kernel's stand-in %q", got, want)
	}
	if st, err := mounts.NewProber(time.Second, 1).Statfs(mnt); err != nil || st.Bsize == 0 {
		t.Fatalf("statfs of the live mount as root: bsize %d, %v; want the server's answer", st.Bsize, err)
	}
	kill(t, cmd, died)
	if got := outsider(); got != want {
		t.Errorf("statfs of the dead mount as an outsider: %q, want the same stand-in %q (a lie)", got, want)
	}
	if _, err := mounts.NewProber(time.Second, 1).Statfs(mnt); !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("statfs of the dead mount as root: %v, want ENOTCONN", err)
	}
}
