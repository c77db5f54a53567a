package dummyfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"golang.org/x/sys/unix"
)

// MountError is a failure to mount; the dummy-fuse command reports it as "mount MOUNTPOINT: cause".
type MountError struct {
	Mountpoint string
	Err        error
}

func (e *MountError) Error() string { return fmt.Sprintf("mount %s: %v", e.Mountpoint, e.Err) }
func (e *MountError) Unwrap() error { return e.Err }

// Run mounts the filesystem at mountpoint and serves it until ctx is done (then it unmounts) or until the
// mount goes away from outside (umount). Notes about the shutdown go to logw.
func Run(ctx context.Context, mountpoint string, opts Options, logw io.Writer) error {
	srv, err := Mount(mountpoint, opts)
	if err != nil {
		return &MountError{Mountpoint: mountpoint, Err: err}
	}
	select {
	case <-srv.Done():
		// Unmounted from outside: nothing left to serve.
		return srv.Wait()
	case <-ctx.Done():
	}
	if IsMagicMountpoint(mountpoint) {
		// The parent that mounted it owns the mount point; exiting closes our descriptor.
		return nil
	}
	if err := unix.Unmount(mountpoint, 0); err != nil {
		// Typically EBUSY: a process still holds a file open. Detach the mount so it disappears from the
		// tree; open descriptors then fail with ENOTCONN once we exit, as after a crash.
		if derr := unix.Unmount(mountpoint, unix.MNT_DETACH); derr != nil {
			return fmt.Errorf("unmount %s: %w", mountpoint, errors.Join(err, derr))
		}
		fmt.Fprintf(logw, "dummy-fuse: unmount %s: %v; detached it lazily\n", mountpoint, err)
	}
	// The connection ends once the kernel drops the superblock. A bind of the mount elsewhere (a published
	// target) keeps it alive forever, so wait only briefly: exiting closes /dev/fuse and leaves such binds
	// dead (ENOTCONN), exactly as a crash of the server would.
	select {
	case <-srv.Done():
		return srv.Wait()
	case <-time.After(stopGrace):
		fmt.Fprintf(logw, "dummy-fuse: %s is still mounted elsewhere (bind mounts); exiting leaves them disconnected\n", mountpoint)
		return nil
	}
}

// stopGrace is how long Run waits for the connection to end after unmounting.
const stopGrace = 2 * time.Second
