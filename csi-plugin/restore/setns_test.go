package restore

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/podcgroup"
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

// ctr is a "container": a shell in a mount namespace of its own, started in the cgroup of pod podUID, that
// runs script with the test's base directory as $1, says "ready", and reports on stdout after a line on stdin.
type ctr struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   io.ReadCloser
}

func startCtr(t *testing.T, podUID, name, script, base string) *ctr {
	t.Helper()
	cg, err := podcgroup.Create(podUID, name)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "sh", "-c", script+` && echo ready && read _ && `+report, "sh", base)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cg.FD()}
	c := &ctr{cmd: cmd}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if c.out, err = cmd.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		_ = cg.Remove(0)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait() // a second Wait only errors
		if err := cg.Remove(10 * time.Second); err != nil {
			t.Error(err)
		}
	})
	buf := make([]byte, 6)
	if n, err := c.out.Read(buf); err != nil || string(buf[:n]) != "ready\n" {
		t.Fatalf("container %s did not start: %q %v", name, buf[:n], err)
	}
	return c
}

// report is what a container says from inside: its kept descriptor, then what its three mounts show.
const report = `{ if cat <&3 >/dev/null 2>&1; then echo kept=alive; else echo kept=dead; fi; } &&
	echo "volume=$(cat "$1/c/vol/where" 2>&1)" && echo "subpath=$(cat "$1/c/subpath/where" 2>&1)" && echo "file=$(cat "$1/c/file" 2>&1)"`

// finish asks the container for its report.
func (c *ctr) finish(t *testing.T) string {
	t.Helper()
	if _, err := c.stdin.Write([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(c.out)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("container: %v; it wrote %q", err, rest)
	}
	return string(rest)
}

// volumeLayout makes the data a loopback server serves (a root and a subdirectory that say which they are) and
// the container's mount points; it mounts the first (to die) staging mount at base/old.
func volumeLayout(t *testing.T) (base string, dead uint64) {
	t.Helper()
	base = t.TempDir()
	data := filepath.Join(base, "data")
	for _, d := range []string{data + "/sub", base + "/old", base + "/new", base + "/c/vol", base + "/c/subpath", base + "/real/vol"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for f, content := range map[string]string{data + "/where": "root\n", data + "/sub/where": "subdirectory\n", base + "/c/file": ""} {
		if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, dead = loopback(t, data, base+"/old")
	return base, dead
}

// holdVolume is the container's part: the volume, a directory and a file subPath bound inside its own
// namespace only, and a descriptor kept open on the volume.
const holdVolume = `mount --bind "$1/old" "$1/c/vol" && mount --bind "$1/old/sub" "$1/c/subpath" && mount --bind "$1/old/sub/where" "$1/c/file" && exec 3<"$1/c/vol/where"`

// TestSetnsReattachKeepsSubdirectory: a container of the target's pod holds the volume at its root and
// subPath-like binds of a subdirectory and of a file; the connection dies; Reattach puts the new staging mount
// back at the three places, the subPaths showing their subdirectory, not the root, and a descriptor the container
// kept open stays dead. A container of another pod holding the same dead mount is left alone: the plugin only
// touches the pod of the target it repairs.
func TestSetnsReattachKeepsSubdirectory(t *testing.T) {
	testenv.RequireFUSE(t)
	base, dead := volumeLayout(t)
	mine := startCtr(t, "11111111-2222-3333-4444-555555555555", "reader", holdVolume, base)
	other := startCtr(t, "99999999-8888-7777-6666-555555555555", "reader", holdVolume, base)

	// The server dies: its connection is aborted (ENOTCONN everywhere); a new staging mount serves the data.
	if err := fuseconn.Abort(unix.Minor(dead)); err != nil {
		t.Fatal(err)
	}
	_, _ = loopback(t, base+"/data", base+"/new")

	// Only the two containers' namespaces: the test's mounts propagate into other namespaces of this machine.
	res, err := reattach(dead, base+"/new", "11111111-2222-3333-4444-555555555555", []int{other.cmd.Process.Pid, mine.cmd.Process.Pid})
	if err != nil {
		t.Fatalf("Reattach: %v (%+v)", err, res)
	}
	if res.Replaced != 4 || res.Namespaces != 1 {
		t.Fatalf("Reattach = %+v, want 4 mounts replaced in 1 namespace (the staging copy, the volume, a directory and a file subPath)", res)
	}
	if got, want := mine.finish(t), "kept=dead\nvolume=root\nsubpath=subdirectory\nfile=subdirectory\n"; got != want {
		t.Errorf("the pod's container wrote %q, want %q (a subPath must show its subdirectory; a descriptor kept across the crash holds the old connection)", got, want)
	}
	const notConnected = "Transport endpoint is not connected"
	if got := other.finish(t); strings.Count(got, notConnected) != 3 {
		t.Errorf("the other pod's container wrote %q, want its three mounts still dead (%s): the plugin re-bound mounts of a pod whose target it was not repairing", got, notConnected)
	}
}

// TestSetnsRefusesForgedMountPoints: what a workload controls (the paths of its own file system) cannot make the
// plugin mount anywhere but on the dead mount itself: a mount point reached through a symlinked directory, a
// mount point that is a symlink, and a mount point that is not the dead mount are all refused, and the
// container's mounts stay as they were.
func TestSetnsRefusesForgedMountPoints(t *testing.T) {
	testenv.RequireFUSE(t)
	base, dead := volumeLayout(t)
	const pod = "11111111-2222-3333-4444-555555555555"
	// The workload's own moves after the crash: a symlink to the dead mount's directory, one to the mount point.
	c := startCtr(t, pod, "reader", holdVolume+` && ln -s "$1/c" "$1/link" && ln -s "$1/c/vol" "$1/c/volink"`, base)
	if err := fuseconn.Abort(unix.Minor(dead)); err != nil {
		t.Fatal(err)
	}
	_, _ = loopback(t, base+"/data", base+"/new")

	pid := c.cmd.Process.Pid
	infos, err := pidMountInfo(pid)
	if err != nil {
		t.Fatal(err)
	}
	var vol *mountinfo.Info
	for _, m := range infos {
		if m.Mountpoint == base+"/c/vol" {
			vol = m
		}
	}
	if vol == nil {
		t.Fatalf("the container's mount table has no %s/c/vol", base)
	}
	h := container{pid: pid}
	if h.ns, err = unix.Open(fmt.Sprintf("/proc/%d/ns/mnt", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
		t.Fatal(err)
	}
	if h.root, err = unix.Open(fmt.Sprintf("/proc/%d/root", pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		t.Fatal(err)
	}
	defer h.close()
	for name, point := range map[string]string{
		"through a symlinked directory": base + "/link/vol",
		"a symlink to the mount point":  base + "/c/volink",
		"another directory":             base + "/real/vol",
	} {
		forged := *vol
		forged.Mountpoint = point
		if err := replaceIn(&h, &forged, base+"/new"); err == nil {
			t.Errorf("%s (%s): replaced, want a refusal", name, point)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	// Nothing moved: the three dead mounts are still there, nothing was mounted on the real directory.
	if got := c.finish(t); strings.Count(got, "Transport endpoint is not connected") != 3 {
		t.Errorf("the container wrote %q, want its three mounts still dead", got)
	}
	after, err := os.ReadDir(base + "/real/vol")
	if err != nil || len(after) != 0 {
		t.Errorf("%s/real/vol holds %v (%v), want it empty", base, after, err)
	}
}

// TestProcDirOutlivesNoProcess: what reattachPID relies on against PID reuse: a descriptor of a process's
// /proc directory stops reading anything once the process is gone, so a new process that takes its PID is
// never read through it.
func TestProcDirOutlivesNoProcess(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	dir, err := unix.Open(fmt.Sprintf("/proc/%d", cmd.Process.Pid), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = cmd.Process.Kill()
		t.Fatal(err)
	}
	defer unix.Close(dir)
	if _, err := readAt(dir, "cgroup"); err != nil {
		t.Fatalf("reading a live process's cgroup: %v", err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait() // reaped: its PID is free for another process
	if b, err := readAt(dir, "cgroup"); err == nil {
		t.Fatalf("read %q through the /proc directory of a process that is gone", b)
	}
	if _, err := unix.Openat(dir, "ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		t.Fatal("opened the mount namespace of a process that is gone")
	}
}

// TestReattachNeedsThePod: without a pod UID nothing is touched.
func TestReattachNeedsThePod(t *testing.T) {
	if _, err := reattach(1, "/nonexistent", "", []int{os.Getpid()}); err == nil {
		t.Fatal("reattach without a pod UID did not fail")
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

// pidMountInfo is the mount table of process pid's mount namespace (/proc/<pid>/mountinfo).
func pidMountInfo(pid int) ([]*mountinfo.Info, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return mountinfo.GetMountsFromReader(f, nil)
}
