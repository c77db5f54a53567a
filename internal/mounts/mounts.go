// Package mounts holds the mount helpers shared by the CSI plugin and the scenarios: asking a FUSE mount whether
// its server still answers, finding mount points in /proc/self/mountinfo (which, unlike stat-based checks, works
// on dead FUSE mounts), bind mounting, unmounting, and waiting for a fresh mount to answer.
//
// Why not k8s.io/mount-utils: its IsLikelyNotMountPoint reports "mounted, no error" on a dead FUSE mount without
// ever reaching the server, and stat(2) may still succeed from the attribute cache. Every check here either reads
// the mount table (no filesystem access at all) or sends a request the kernel cannot answer from a cache.
// docs/fuse-mount-loss.md explains the kernel's behaviour and the trap.
package mounts

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// FUSESuperMagic is statfs.f_type of every FUSE filesystem (and of bind mounts of one).
const FUSESuperMagic = 0x65735546

// ErrTimeout is wrapped by Probe when the filesystem did not answer in time: a FUSE server that is alive but
// stuck, or a dead server whose /dev/fuse fd is still held by another process (callers then block until some
// process serves that fd again; see docs/fuse-mount-loss.md).
var ErrTimeout = errors.New("filesystem did not answer in time")

// ErrNotFUSE is returned by Answers for a path whose filesystem is not FUSE (typically: nothing is mounted).
var ErrNotFUSE = errors.New("not a FUSE filesystem")

// Statfs runs statfs(2) on path but gives up after timeout; see Prober.Statfs. It is for one-off checks: a
// long-lived caller uses one Prober, which bounds how many calls a stuck mount can hold.
func Statfs(path string, timeout time.Duration) (unix.Statfs_t, error) {
	p := NewProber(timeout, 1)
	defer p.Close()
	return p.Statfs(path)
}

// Probe asks the filesystem at path to answer one request that is never served from a cache. It returns nil when
// it answered, else an error wrapping the errno (syscall.ENOTCONN for a dead FUSE server) or ErrTimeout.
func Probe(path string, timeout time.Duration) error {
	_, err := Statfs(path, timeout)
	return err
}

// IsDead reports whether err says that the FUSE server behind a mount is gone: ENOTCONN ("transport endpoint is
// not connected"), ECONNABORTED (a request in flight when the connection died), and the errnos that
// k8s.io/mount-utils' IsCorruptedMnt also treats as a corrupted mount.
func IsDead(err error) bool {
	for _, e := range []syscall.Errno{syscall.ENOTCONN, syscall.ECONNABORTED, syscall.EIO, syscall.ESTALE, syscall.EHOSTDOWN} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Answers is Prober.Answers for a one-off check.
func Answers(path, file string, timeout time.Duration) error {
	p := NewProber(timeout, 1)
	defer p.Close()
	return p.Answers(path, file)
}

// WaitAnswering polls Answers(path, file) until it succeeds, ctx ends, or died is closed (the server exited:
// no point in waiting further). The returned error carries the last probe result.
func WaitAnswering(ctx context.Context, path, file string, died <-chan struct{}) error {
	delay := 2 * time.Millisecond
	p := NewProber(time.Second, 1) // one outstanding check at a time, however long the server takes
	defer p.Close()
	for {
		err := p.Answers(path, file)
		if err == nil {
			return nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("mount at %s not answering: %w (last probe: %v)", path, ctx.Err(), err)
		case <-died:
			t.Stop()
			return fmt.Errorf("mount at %s not answering: FUSE server exited (last probe: %v)", path, err)
		case <-t.C:
		}
		if delay < 50*time.Millisecond {
			delay *= 2
		}
	}
}

// Bind bind-mounts src on target (on top of whatever is mounted there already). With readOnly the new mount is
// remounted read-only, keeping the nosuid/nodev/noexec flags of src so the remount does not clear them.
func Bind(src, target string, readOnly bool) error {
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return &os.PathError{Op: "bind mount " + src + " on", Path: target, Err: err}
	}
	if !readOnly {
		return nil
	}
	// The flags of the new mount come from the mount table, not from statfs: statfs would reach the FUSE server,
	// which may have stopped answering since the caller checked it.
	mp := filepath.Clean(target)
	infos, err := mountinfo.GetMounts(func(in *mountinfo.Info) (bool, bool) { return in.Mountpoint != mp, false })
	if err != nil || len(infos) == 0 {
		_ = unix.Unmount(target, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		return &os.PathError{Op: "remount read-only", Path: target, Err: fmt.Errorf("new bind mount not in the mount table (%v)", err)}
	}
	top := infos[len(infos)-1] // stacked mounts: the last one is on top
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY)
	for _, opt := range strings.Split(top.Options, ",") {
		flags |= map[string]uintptr{
			"nosuid": unix.MS_NOSUID, "nodev": unix.MS_NODEV, "noexec": unix.MS_NOEXEC,
			"noatime": unix.MS_NOATIME, "nodiratime": unix.MS_NODIRATIME, "relatime": unix.MS_RELATIME,
		}[opt]
	}
	if err := unix.Mount("", target, "", flags, ""); err != nil {
		// Do not leave a writable bind behind when read-only was asked for.
		_ = unix.Unmount(target, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		return &os.PathError{Op: "remount read-only", Path: target, Err: err}
	}
	return nil
}

// Unmount unmounts the top mount at path. A busy mount (open files, typical for a dead FUSE mount that a
// workload still reads) is detached lazily instead. It returns an error wrapping syscall.EINVAL when path is
// not a mount point and syscall.ENOENT when it does not exist.
func Unmount(path string) error {
	err := unix.Unmount(path, unix.UMOUNT_NOFOLLOW)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(path, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
	}
	if err != nil {
		return &os.PathError{Op: "umount", Path: path, Err: err}
	}
	return nil
}

// UnmountLazy detaches the top mount at path (umount -l): works on busy and dead mounts alike.
func UnmountLazy(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil {
		return &os.PathError{Op: "umount -l", Path: path, Err: err}
	}
	return nil
}

// maxLayers bounds UnmountAll: restores with the "stack" strategy pile mounts on one path, but never this many.
const maxLayers = 64

// UnmountAll unmounts every mount stacked on path (as the "stack" restore strategy leaves them) and returns how
// many it removed. A path that is not a mount point, or does not exist, is not an error.
func UnmountAll(path string) (int, error) {
	for n := 0; n < maxLayers; n++ {
		err := Unmount(path)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
	return maxLayers, fmt.Errorf("%s: still a mount point after %d unmounts", path, maxLayers)
}
