package mounts

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// Table is one snapshot of this process's mount table, indexed by mount point. Reading it once and looking up
// many paths is what keeps a restore of hundreds of volumes linear: /proc/self/mountinfo grows with every mount,
// so parsing it per volume would be quadratic.
type Table struct {
	byPoint map[string][]*mountinfo.Info // in mountinfo order: for stacked mounts the last one is on top
}

// ReadTable parses /proc/self/mountinfo.
func ReadTable() (*Table, error) {
	infos, err := mountinfo.GetMounts(nil)
	if err != nil {
		return nil, fmt.Errorf("reading mount table: %w", err)
	}
	t := &Table{byPoint: make(map[string][]*mountinfo.Info, len(infos))}
	for _, in := range infos {
		t.byPoint[in.Mountpoint] = append(t.byPoint[in.Mountpoint], in)
	}
	return t, nil
}

// Mounts returns the mounts on path, bottom first (two or more when mounts are stacked), or nil. Like every
// function here that reads the mount table, it compares path as the kernel writes mount points (absolute, clean,
// symlinks resolved: see Prober.Resolve) and never touches the filesystem, so it cannot block on a FUSE server.
func (t *Table) Mounts(path string) []*mountinfo.Info {
	return t.byPoint[filepath.Clean(path)]
}

// Count returns how many mounts are stacked on path.
func (t *Table) Count(path string) int { return len(t.Mounts(path)) }

// IsMountPoint reports whether something is mounted on path, by reading the mount table only: it never touches
// the filesystem at path, so it works (and does not hang) on dead FUSE mounts.
func IsMountPoint(path string) (bool, error) {
	n, err := CountMounts(path)
	return n > 0, err
}

// CountMounts returns how many mounts are stacked on path according to /proc/self/mountinfo.
func CountMounts(path string) (int, error) {
	infos, err := MountsAt(path)
	return len(infos), err
}

// MountsAt returns the mounts stacked on path, bottom first, as Table.Mounts does, from a fresh read of
// /proc/self/mountinfo (one path: a caller that looks up many reads the Table once).
func MountsAt(path string) ([]*mountinfo.Info, error) { return MountsAtIn(0, path) }

// MountsAtIn is MountsAt in the mount namespace of process pid (0: this process), read from its
// /proc/<pid>/mountinfo: what a process in a mount namespace of its own (a container) sees at path.
func MountsAtIn(pid int, path string) ([]*mountinfo.Info, error) {
	p := filepath.Clean(path)
	// Not mountinfo.SingleEntryFilter: it stops at the first match and would count stacked mounts as one.
	infos, err := readMountinfo(pid, func(in *mountinfo.Info) (skip, stop bool) { return in.Mountpoint != p, false })
	if err != nil {
		return nil, fmt.Errorf("reading mount table for %s: %w", path, err)
	}
	return infos, nil
}

// readMountinfo parses the mount table of process pid (0: this process) through filter.
func readMountinfo(pid int, filter mountinfo.FilterFunc) ([]*mountinfo.Info, error) {
	if pid == 0 {
		return mountinfo.GetMounts(filter)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return mountinfo.GetMountsFromReader(f, filter)
}

// Top returns the mount on top at path according to the mount table (nil if nothing is mounted there), without
// touching the filesystem: its FSType, its device (Major:Minor; for FUSE the connection's number) and so on.
func Top(path string) (*mountinfo.Info, error) {
	infos, err := MountsAt(path)
	if err != nil {
		return nil, err
	}
	if len(infos) == 0 {
		return nil, nil
	}
	return infos[len(infos)-1], nil
}

// Under lists the mounts on dir or below it in this mount namespace, in the order they can be unmounted:
// deepest first and, of mounts stacked on one path, the topmost (latest in mountinfo) first. Like Mounts, it
// compares dir as the kernel writes mount points and reads the mount table only, so dead FUSE mounts are
// listed without being touched.
func Under(dir string) ([]*mountinfo.Info, error) { return UnderIn(0, dir) }

// UnderIn is Under in the mount namespace of process pid (0: this process).
func UnderIn(pid int, dir string) ([]*mountinfo.Info, error) {
	root := filepath.Clean(dir)
	infos, err := readMountinfo(pid, func(in *mountinfo.Info) (skip, stop bool) {
		return in.Mountpoint != root && !strings.HasPrefix(in.Mountpoint, root+"/"), false
	})
	if err != nil {
		return nil, fmt.Errorf("reading mount table for %s: %w", dir, err)
	}
	slices.Reverse(infos) // mountinfo lists a mount after the one it covers
	sort.SliceStable(infos, func(i, j int) bool {
		return strings.Count(infos[i].Mountpoint, "/") > strings.Count(infos[j].Mountpoint, "/")
	})
	return infos, nil
}

// UnmountUnder lazily unmounts every mount on dir or below it, deepest first and every stacked layer, and returns
// how many it removed. Tests call it in t.Cleanup so that no mount outlives them, whatever failed.
func UnmountUnder(dir string) (int, error) {
	infos, err := Under(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, in := range infos {
		if err := UnmountLazy(in.Mountpoint); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
