package local

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
)

// makeRShared bind-mounts dir onto itself and makes it rshared, as kubelet's root dir is on a node: mounts
// made below it by the plugin (which shares this mount namespace) then propagate into containers that use
// HostToContainer, however the host's / is set up. It is made private first: when / is shared (as on a
// node prepared for Bidirectional propagation), the bind would join /'s peer group and every mount of the
// run would be copied onto the host's / (and its peers) as well.
func makeRShared(dir string) error {
	if err := unix.Mount(dir, dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s onto itself: %w", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s private: %w", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s rshared: %w", dir, err)
	}
	return nil
}

// mountsUnder lists the mounts at or below dir, in the order they can be unmounted.
func mountsUnder(dir string) ([]*mountinfo.Info, error) { return mounts.Under(dir) }

// abortFUSEUnder aborts the FUSE connections mounted at or below dir (fuseconn.Abort): every request waiting on
// them fails with ECONNABORTED and the connection ends. It returns the connections it aborted.
func abortFUSEUnder(dir string) ([]uint32, error) {
	ms, err := mountsUnder(dir)
	if err != nil {
		return nil, err
	}
	var ids []uint32
	var errs []error
	for _, m := range ms {
		if id := uint32(m.Minor); m.Major == 0 && strings.HasPrefix(m.FSType, "fuse") && !slices.Contains(ids, id) {
			ids = append(ids, id)
			errs = append(errs, fuseconn.Abort(id))
		}
	}
	return ids, errors.Join(errs...)
}

// unmountAll unmounts everything at or below dir, deepest first; a mount that is busy (e.g. a dead FUSE mount
// with an open fd, EBUSY) is detached lazily. It returns what it did, one line per mount, and an error if
// anything is left.
func unmountAll(dir string) ([]string, error) {
	var done []string
	for range 100 { // each round removes one mount; stacked mounts at one path take several
		ms, err := mountsUnder(dir)
		if err != nil {
			return done, err
		}
		if len(ms) == 0 {
			return done, nil
		}
		mp := ms[0].Mountpoint
		if err := unix.Unmount(mp, 0); err != nil {
			if derr := unix.Unmount(mp, unix.MNT_DETACH); derr != nil {
				return done, fmt.Errorf("unmount %s: %w (lazy: %v)", mp, err, derr)
			}
			done = append(done, fmt.Sprintf("umount -l %s (%s: %v)", mp, ms[0].FSType, err))
			continue
		}
		done = append(done, fmt.Sprintf("umount %s (%s)", mp, ms[0].FSType))
	}
	ms, _ := mountsUnder(dir)
	return done, fmt.Errorf("%d mounts left under %s", len(ms), dir)
}
