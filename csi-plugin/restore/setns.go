package restore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/state"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/podcgroup"
)

// Setns repairs the host target like Rebind, then enters the mount namespace of every process that still holds
// a copy of the dead mount (a running container) and puts a bind of the new staging mount in its place: the
// same subdirectory the dead mount showed, so that a kubelet subPath bind gets its subdirectory back, not the
// volume's root (the trap csi-plugin/README.md "Restore strategies" describes). Files opened before the crash
// stay dead: they hold the old connection. Needs the host's PID namespace (hostPID) to see the containers'
// processes.
const Setns Strategy = "setns"

// Reattached says what Reattach did; the plugin keeps it in the target's record.
type Reattached = state.Reattached

// Reattach replaces, in the mount namespaces of the pod with UID podUID (the pod of a target the plugin's
// records say it published) other than the plugin's own, each mount of the dead FUSE connection dev (the device
// number of that dead target) by a bind of the same subdirectory of staging (the new, answering staging mount,
// whose root is the file system's root). Nothing of a workload's is trusted beyond what the kernel proves: a
// process counts only when the kernel reports it in the pod's cgroup (podcgroup), a mount is only replaced when
// its device number is dev and its file system type is FUSE, and the mount point opened through the
// process's root, without following symlinks, is that very mount (its mount ID). A process is read through a
// descriptor of its /proc directory, so a PID that a new process takes over meanwhile is never mistaken for it.
func Reattach(dev uint64, staging, podUID string) (Reattached, error) {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return Reattached{}, fmt.Errorf("listing processes: %w", err)
	}
	var pids []int
	for _, p := range procs {
		if pid, err := strconv.Atoi(p.Name()); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return reattach(dev, staging, podUID, pids)
}

// reattach is Reattach for the mount namespaces of pids only.
func reattach(dev uint64, staging, podUID string, pids []int) (Reattached, error) {
	var res Reattached
	if podUID == "" {
		return res, errors.New("no pod UID: the target's pod is unknown")
	}
	self, err := nsInode("self")
	if err != nil {
		return res, err
	}
	seen := map[uint64]bool{self: true}
	for _, pid := range pids {
		reattachPID(pid, dev, staging, podUID, seen, &res)
	}
	if res.Failed > 0 {
		return res, fmt.Errorf("%d of %d dead mounts in running containers not replaced", res.Failed, res.Failed+res.Replaced)
	}
	return res, nil
}

// container is one process of the pod, held open: its mount namespace and root, opened through its /proc
// directory's descriptor.
type container struct {
	pid      int
	ns, root int
}

func (c *container) close() { unix.Close(c.ns); unix.Close(c.root) }

// reattachPID replaces the dead mounts in pid's mount namespace, when pid is a process of the pod and the
// namespace is not one of seen. Everything of the process is read through one descriptor of its /proc
// directory, which keeps referring to that process: once it is gone its files fail (ESRCH), never showing a new
// process that took its PID (the kernel ties a /proc/<pid> inode to the process's struct pid, fs/proc/base.c).
func reattachPID(pid int, dev uint64, staging, podUID string, seen map[uint64]bool, res *Reattached) {
	dir, err := unix.Open("/proc/"+strconv.Itoa(pid), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return // gone
	}
	defer unix.Close(dir)
	if cg, err := readAt(dir, "cgroup"); err != nil || !podcgroup.In(cg, podUID) {
		return // another pod's, the host's, or gone
	}
	c := container{pid: pid}
	if c.ns, err = unix.Openat(dir, "ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
		return
	}
	if c.root, err = unix.Openat(dir, "root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		unix.Close(c.ns)
		return
	}
	defer c.close()
	table, err := readAt(dir, "mountinfo")
	if err != nil {
		return // exited
	}
	infos, err := mountinfo.GetMountsFromReader(bytes.NewReader(table), nil)
	if err != nil {
		return
	}
	var st unix.Stat_t
	if err := unix.Fstat(c.ns, &st); err != nil || seen[st.Ino] {
		return // a namespace already done
	}
	seen[st.Ino] = true
	var dead []*mountinfo.Info
	for _, m := range infos {
		if unix.Mkdev(uint32(m.Major), uint32(m.Minor)) == dev && strings.HasPrefix(m.FSType, "fuse") {
			dead = append(dead, m)
		}
	}
	if len(dead) == 0 {
		return
	}
	res.Namespaces++
	// Latest first (mountinfo lists a mount after its parent). Every step is a syscall on a descriptor or a
	// path of the plugin's own, except the walk to a mount point's parent through the container's root: should
	// that walk cross a dead mount of this connection (a mount nested in another), it fails at once with
	// ENOTCONN, as the connection's server is gone, and that mount is reported failed.
	for i := len(dead) - 1; i >= 0; i-- {
		m := dead[i]
		if err := replaceIn(&c, m, staging); err != nil {
			res.Failed++
			klog.ErrorS(err, "Failed to re-bind a dead mount inside a running container", "pid", pid, "podUID", podUID, "mountPoint", m.Mountpoint, "root", m.Root)
			continue
		}
		res.Replaced++
		klog.InfoS("Re-bound a dead mount inside a running container; files it held open stay dead", "pid", pid, "podUID", podUID, "mountPoint", m.Mountpoint, "subdirectory", m.Root)
	}
}

// replaceIn puts a clone of staging's subdirectory m.Root at m.Mountpoint in c's mount namespace, instead of m.
func replaceIn(c *container, m *mountinfo.Info, staging string) error {
	sub, err := cleanRel(m.Root)
	if err != nil {
		return fmt.Errorf("root %q: %w", m.Root, err)
	}
	point, err := cleanRel(m.Mountpoint)
	if err != nil || point == "." {
		return fmt.Errorf("mount point %q: not a path below the process's root", m.Mountpoint)
	}
	// The new tree, cloned in the plugin's namespace: the subdirectory is resolved beneath the staging mount.
	st, err := unix.Open(staging, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening staging mount: %w", err)
	}
	defer unix.Close(st)
	// Not O_DIRECTORY: a subPath may be a file.
	subFd, err := unix.Openat2(st, sub, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return fmt.Errorf("subdirectory %q of the new staging mount: %w", sub, err)
	}
	defer unix.Close(subFd)
	tree, err := unix.OpenTree(subFd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("open_tree of the new staging mount: %w", err)
	}
	defer unix.Close(tree)

	// The place, opened through the process's root without following any symlink, and proven to be the dead
	// mount by its mount ID. Opening a mount's root with O_PATH sends nothing to its FUSE server.
	parent, err := unix.Openat2(c.root, filepath.Dir(point), &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return fmt.Errorf("parent of the mount point: %w", err)
	}
	defer unix.Close(parent)
	base := filepath.Base(point)
	at, err := unix.Openat(parent, base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the mount point: %w", err)
	}
	id, err := mountID(at)
	unix.Close(at)
	if err != nil {
		return err
	}
	if id != m.ID {
		return fmt.Errorf("the mount point holds mount %d, not the dead mount %d", id, m.ID)
	}
	return inNamespace(c.ns, func() error {
		// Relative to the parent's descriptor: the thread's root is now the container's, and nothing of the
		// container's file system (its /proc included) is looked up by path.
		if err := unix.Fchdir(parent); err != nil {
			return fmt.Errorf("entering the parent of the mount point: %w", err)
		}
		if err := unix.Unmount(base, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil {
			return fmt.Errorf("detaching the dead mount: %w", err)
		}
		if err := unix.MoveMount(tree, "", parent, base, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("move_mount of the new staging mount: %w", err)
		}
		return nil
	})
}

// inNamespace runs fn on a thread of its own that joined the mount namespace ns. The thread never returns to
// the scheduler: it stays locked, so the runtime ends it when the goroutine exits.
func inNamespace(ns int, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// setns of a mount namespace refuses a thread that shares its root and cwd (all Go threads do).
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			done <- fmt.Errorf("unshare(CLONE_FS): %w", err)
			return
		}
		if err := unix.Setns(ns, unix.CLONE_NEWNS); err != nil {
			done <- fmt.Errorf("setns: %w", err)
			return
		}
		done <- fn()
	}()
	return <-done
}

// cleanRel turns an absolute path of mountinfo into a relative one; cleaning an absolute path removes every
// "..", so it cannot climb.
func cleanRel(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", errors.New("not absolute")
	}
	rel := strings.TrimPrefix(filepath.Clean(p), "/")
	if rel == "" {
		return ".", nil
	}
	return rel, nil
}

// mountID reads the mount ID of fd from the plugin's own fdinfo (no request reaches a FUSE server).
func mountID(fd int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
	if err != nil {
		return 0, fmt.Errorf("reading fdinfo: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "mnt_id:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, errors.New("fdinfo has no mnt_id")
}

// readAt reads the file name of the /proc/<pid> directory dir.
func readAt(dir int, name string) ([]byte, error) {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	return io.ReadAll(f)
}

// nsInode is the inode of a process's mount namespace.
func nsInode(pid string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+pid+"/ns/mnt", &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}
