package driver

// What the plugin owns, and how it refuses the rest. The plugin runs privileged on every node: whatever it is
// sent, it only mounts on, unmounts, or removes paths that its own records say it made for that volume.
//
// The records are the state directory's (loaded at start-up) plus what this process did since; without
// --state-dir they are only the latter (kept in memory), so a restarted plugin owns nothing it did before, except
// the one directory only it writes to: the ephemeral directory (see ephemeralLeftover).

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
)

// begin checks that start-up has finished and takes the locks of the volume and of every path the call works
// on, all or none; the caller defers the returned release. Locking paths as well as volumes serialises two
// volumes aimed at one path (two stages on one staging path, two publishes on one target): the second one sees
// the first one's record and is refused, instead of stacking a second mount.
func (d *Driver) begin(volumeID string, paths ...string) (func(), error) {
	if !d.Ready() {
		return nil, status.Error(codes.Unavailable, "the plugin is still restoring its mounts; retry later")
	}
	return d.lock(volumeID, paths...)
}

func (d *Driver) lock(volumeID string, paths ...string) (func(), error) {
	keys := []string{"volume\x00" + volumeID}
	for _, p := range paths {
		keys = append(keys, "path\x00"+p)
	}
	if !d.locks.tryAcquire(keys...) {
		return nil, status.Errorf(codes.Aborted, "an operation on volume %q or on one of its paths is already in progress", clip(volumeID))
	}
	return func() { d.locks.release(keys...) }, nil
}

// resolve checks a request path and returns it as the kernel writes it in the mount table (symlinks of its
// parent directories resolved), which is how the plugin records, locks and compares paths. A path whose last
// element is a symlink is refused: mount(2) would follow it (to "/", say) while the mount table, the records
// and unmount (which never follows one) would not. Every filesystem call here is bounded: a parent directory
// on a stuck FUSE mount answers Unavailable, not a hang.
func (d *Driver) resolve(field, p string) (string, error) {
	if err := validatePath(field, p); err != nil {
		return "", err
	}
	r, err := d.prober.Resolve(p)
	switch {
	case errors.Is(err, mounts.ErrTimeout):
		return "", status.Errorf(codes.Unavailable, "resolving %s: %v", field, clipErr(err))
	case err != nil:
		return "", status.Errorf(codes.InvalidArgument, "%s %q cannot be resolved: %v", field, clip(p), clipErr(err))
	}
	if err := validatePath(field, r); err != nil {
		return "", err
	}
	if d.volumeOfPath(r) != "" {
		return r, nil // the plugin's own mount point: checked when it was recorded, and it may not answer now
	}
	fi, err := d.prober.Lstat(r)
	switch {
	case err == nil && fi.Mode()&fs.ModeSymlink != 0:
		return "", status.Errorf(codes.InvalidArgument, "%s %q is a symlink: give the path it points to", field, clip(p))
	case err == nil, errors.Is(err, unix.ENOENT), mounts.IsDead(err):
		return r, nil
	case errors.Is(err, mounts.ErrTimeout):
		return "", status.Errorf(codes.Unavailable, "checking %s: %v", field, clipErr(err))
	}
	return "", status.Errorf(codes.InvalidArgument, "%s %q: %v", field, clip(p), clipErr(err))
}

// checkPlace refuses a path where a mount of volume id would hide or sit inside what is not its own: inside or
// above another recorded mount (mounting above would hide it, inside would be a mount within a FUSE mount), and
// inside or above the plugin's own directories (a target in the state directory would be a record's neighbour;
// one above it would hide the records).
func (d *Driver) checkPlace(field, p, id string) error {
	if d.hasPath(id, p) {
		return nil // where the records already have this volume: the call is a repetition
	}
	for _, own := range []string{d.cfg.StateDir, d.cfg.EphemeralDir} {
		if own != "" && (within(p, own) || within(own, p)) {
			return status.Errorf(codes.InvalidArgument, "%s %q overlaps the plugin's own directory %q", field, clip(p), own)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for vid, v := range d.volumes {
		paths := []string{v.stagingPath}
		for t := range v.targets {
			paths = append(paths, t)
		}
		for _, q := range paths {
			if p != q && (within(p, q) || within(q, p)) {
				return status.Errorf(codes.InvalidArgument, "%s %q is nested with %q, a mount of volume %q", field, clip(p), q, clip(vid))
			}
		}
	}
	return nil
}

// within reports whether p is dir or lies below it.
func within(p, dir string) bool {
	dir = filepath.Clean(dir)
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// sameMount reports whether the top mounts on a and b are of one filesystem (a bind mount has the device
// number of its source), from the mount table alone: stat(2) of either would reach the FUSE server.
func sameMount(look mountLookup, a, b string) (bool, error) {
	ma, err := look(a)
	if err != nil {
		return false, err
	}
	mb, err := look(b)
	if err != nil {
		return false, err
	}
	if len(ma) == 0 || len(mb) == 0 {
		return false, nil
	}
	ta, tb := ma[len(ma)-1], mb[len(mb)-1]
	return ta.Major == tb.Major && ta.Minor == tb.Minor, nil
}

// ephemeralLeftover reports whether target is a bind mount of inline ephemeral volume id's staging mount, made by
// an earlier run of a plugin without records: the staging mount sits in the ephemeral directory, which only the
// plugin writes to, so it is the plugin's; and the target shows the same filesystem.
func (d *Driver) ephemeralLeftover(id, target string) bool {
	if d.store != nil {
		return false
	}
	n, err := mounts.CountMounts(d.ephemeralStagingPath(id))
	if err != nil || n == 0 {
		return false
	}
	same, err := sameMount(mounts.MountsAt, d.ephemeralStagingPath(id), target)
	return err == nil && same
}

// hasPath reports whether the records give volume id path as its staging path or one of its targets.
func (d *Driver) hasPath(id, path string) bool {
	v, ok := d.lookup(id)
	if !ok {
		return false
	}
	_, published := v.targets[path]
	return published || v.stagingPath == path
}

// resolveParent is resolve for calls that undo or inspect: the parent directories are resolved (the records hold
// resolved paths), the path itself is not looked at.
func (d *Driver) resolveParent(field, p string) (string, error) {
	if err := validatePath(field, p); err != nil {
		return "", err
	}
	r, err := d.prober.Resolve(p)
	if err != nil {
		return "", probeStatus("resolving "+field, err)
	}
	return r, nil
}
