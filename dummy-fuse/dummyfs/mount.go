package dummyfs

import (
	"fmt"
	"path"
	"strconv"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Name is the FUSE subtype: the mount table lists the filesystem type as "fuse.dummy-fuse".
const Name = "dummy-fuse"

// IsMagicMountpoint reports whether mountpoint is go-fuse's /dev/fd/N form: an already-mounted /dev/fuse
// descriptor inherited from a privileged parent.
func IsMagicMountpoint(mountpoint string) bool {
	dir, file := path.Split(mountpoint)
	n, err := strconv.Atoi(file)
	return dir == "/dev/fd/" && err == nil && n > 0
}

// MountOptions returns the go-fuse options for serving opts, for a fresh mount and for a successor
// that takes over the connection with fuse.NewProtocolServer alike.
func MountOptions(mountpoint string, opts Options) *fuse.MountOptions {
	fsName := opts.FsName
	if fsName == "" {
		fsName = Name
	}
	mo := &fuse.MountOptions{
		Name:       Name,
		FsName:     fsName,
		AllowOther: opts.AllowOther,
		Options:    []string{"ro"},
		// MS_RDONLY makes the mount itself read-only, so the kernel answers EROFS for writes without asking us.
		DirectMountFlags: syscall.MS_RDONLY | syscall.MS_NOSUID | syscall.MS_NODEV,
		Debug:            opts.Debug,
	}
	// Root mounts with mount(2): no fusermount exists on the target machines, and a silent fallback to it
	// would only hide the real error. The magic /dev/fd/N mountpoint must not be mount(2)ed over (it is a
	// symlink to /dev/fuse); go-fuse then serves the inherited descriptor.
	if !IsMagicMountpoint(mountpoint) {
		mo.DirectMount = true
		mo.DirectMountStrict = true
	}
	return mo
}

// Mount mounts the filesystem at mountpoint (a directory, or /dev/fd/N) and serves it in the background.
// The caller waits with Server.Wait and unmounts with Server.Unmount (not possible for /dev/fd/N: the
// parent that mounted it unmounts it).
func Mount(mountpoint string, opts Options) (*fuse.Server, error) {
	if !IsMagicMountpoint(mountpoint) {
		// mount(2) would happily mount over a regular file (rootmode follows the target); refuse early.
		var st syscall.Stat_t
		if err := syscall.Stat(mountpoint, &st); err != nil {
			return nil, err // the caller names the mount point
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			return nil, syscall.ENOTDIR
		}
	}
	srv, err := fuse.NewServer(New(opts), mountpoint, MountOptions(mountpoint, opts))
	if err != nil {
		return nil, err
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		// Serve has started; unmounting ends it.
		_ = srv.Unmount()
		return nil, fmt.Errorf("wait for mount: %w", err)
	}
	return srv, nil
}
