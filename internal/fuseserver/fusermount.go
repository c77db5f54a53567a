package fuseserver

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
)

// The fusermount stand-in: how a server that cannot take /dev/fd/N (a libfuse2 one, s3fs) serves a connection
// someone else mounted. A libfuse server that may not mount asks libfuse's setuid helper for its connection:
// libfuse runs `fusermount -o OPTS -- MOUNTPOINT` with one end of a socket pair in $_FUSE_COMMFD and reads the
// /dev/fuse descriptor the helper sends back on it (SCM_RIGHTS with one byte; lib/mount.c, fuse_mount_fusermount
// and receive_fd; libfuse3's fusermount3 and bazil.org/fuse speak the same). libfuse2 asks only when mount(2)
// is refused after it opened /dev/fuse itself, or at once with -o auto_unmount (fuse_mount_sys), which is what
// a spec's fusermountArgs are for: an unprivileged container has no /dev/fuse to open.
//
// Where the plugin mounted the connection and passed it (the keeper's real servers), the server runs with that
// descriptor at FD, HandoffFDEnv naming it, and this program first in $PATH under fusermount's names; it sends
// the descriptor back and mounts nothing. libfuse runs FUSERMOUNT_DIR/fusermount before $PATH (Debian's libfuse2:
// /bin/fusermount): the stand-in answers only where no real helper is at that path, as in this project's images
// (the local backend's keeper container puts the stand-in over the host's).

// HandoffFDEnv names, in a server's environment, the descriptor the stand-in hands to the server that asks.
const HandoffFDEnv = "DFC_FUSERMOUNT_FD"

// fusermountNames are the helper's names: libfuse2's, and libfuse3's and bazil.org/fuse's.
var fusermountNames = []string{"fusermount", "fusermount3"}

// IsFusermount reports whether a program was run under one of fusermount's names (its argv[0]): csi-plugin is
// then the stand-in.
func IsFusermount(argv0 string) bool { return slices.Contains(fusermountNames, filepath.Base(argv0)) }

// Fusermount is the stand-in, run as fusermount with args (libfuse's, without argv[0]) by a server that asks for
// its connection; it returns the exit status. An unmount (-u), which libfuse asks for when its server stops, is
// not the stand-in's to do: whoever mounted the connection detaches it.
func Fusermount(args []string, stderr io.Writer) int {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-u" {
			return 0
		}
	}
	if err := handOver(); err != nil {
		fmt.Fprintf(stderr, "fusermount (dummy-fuse-csi's stand-in, which only hands a FUSE server the connection passed to it, and mounts nothing): %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "fusermount (dummy-fuse-csi's stand-in): handed the server its connection, descriptor %s, mounting nothing\n", os.Getenv(HandoffFDEnv))
	return 0
}

func handOver() error {
	fd, err := envFD(HandoffFDEnv)
	if err != nil {
		return fmt.Errorf("%w (no connection was passed to this server)", err)
	}
	if err := fuseconn.Check(fd); err != nil {
		return fmt.Errorf("$%s=%d: %w", HandoffFDEnv, fd, err)
	}
	comm, err := envFD("_FUSE_COMMFD")
	if err != nil {
		return fmt.Errorf("%w (not run by a FUSE library asking for a connection)", err)
	}
	if err := unix.Sendmsg(comm, []byte{0}, unix.UnixRights(fd), nil, 0); err != nil {
		return fmt.Errorf("sending the connection on $_FUSE_COMMFD=%d: %w", comm, err)
	}
	return nil
}

func envFD(name string) (int, error) {
	v, ok := os.LookupEnv(name)
	if !ok {
		return 0, fmt.Errorf("$%s is not set", name)
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 0 {
		return 0, fmt.Errorf("$%s=%q is not a descriptor number", name, v)
	}
	return fd, nil
}

// Handoff is a directory that makes a server that asks fusermount serve descriptor FD: bin holds the stand-in
// (the running executable, which must be csi-plugin) under fusermount's names, mnt is the empty directory given
// as the server's {mountpoint}, on which nothing is ever mounted (libfuse and s3fs stat it, and s3fs gives the
// root of what it serves that directory's owner and mode).
type Handoff struct{ dir string }

// NewHandoff returns the stand-in's directory at dir; Make creates it.
func NewHandoff(dir string) *Handoff { return &Handoff{dir: dir} }

// Make makes (or makes again) the directory, owned by the caller, who runs the servers: before each server
// starts, since its parent may appear only later (the relay-keeper's node directory, which the plugin makes).
func (h *Handoff) Make() error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("fusermount stand-in: %w", err)
	}
	for _, d := range []string{h.bin(), h.Mountpoint()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("fusermount stand-in: %w", err)
		}
	}
	for _, n := range fusermountNames {
		// A new link replaces the old by rename: an executable of another version may have made it.
		link := filepath.Join(h.bin(), n)
		if cur, err := os.Readlink(link); err == nil && cur == exe {
			continue
		}
		tmp := link + ".new"
		_ = os.Remove(tmp)
		if err := os.Symlink(exe, tmp); err != nil {
			return fmt.Errorf("fusermount stand-in: %w", err)
		}
		if err := os.Rename(tmp, link); err != nil {
			return fmt.Errorf("fusermount stand-in: %w", err)
		}
	}
	if ents, err := os.ReadDir(h.Mountpoint()); err != nil || len(ents) > 0 {
		return errors.Join(fmt.Errorf("fusermount stand-in: %s must be an empty directory (servers refuse a non-empty mountpoint)", h.Mountpoint()), err)
	}
	return nil
}

// HelperPaths are the paths libfuse is built to run its helper at (FUSERMOUNT_DIR: /bin on Debian, /usr/bin or
// /usr/local/bin elsewhere) before it searches $PATH, under each of the helper's names.
func HelperPaths() []string {
	var paths []string
	for _, d := range []string{"/bin", "/usr/bin", "/usr/local/bin"} {
		for _, n := range fusermountNames {
			paths = append(paths, filepath.Join(d, n))
		}
	}
	return paths
}

// NoRealFusermount refuses a filesystem where a helper other than the stand-in (the running executable) is at a
// path libfuse runs before $PATH: the server would get a mount of that helper's making, or fail, instead of the
// connection passed.
func NoRealFusermount() error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("fusermount stand-in: %w", err)
	}
	self, err := os.Stat(exe)
	if err != nil {
		return fmt.Errorf("fusermount stand-in: %w", err)
	}
	for _, p := range HelperPaths() {
		if st, err := os.Stat(p); err == nil && !os.SameFile(st, self) {
			return fmt.Errorf("fusermount stand-in: a real helper is at %s, which libfuse runs before it searches $PATH: the server would not get the connection passed to it (run it where that path has no helper, as in this project's image)", p)
		}
	}
	return nil
}

func (h *Handoff) bin() string { return filepath.Join(h.dir, "bin") }

// Mountpoint is the directory to give as a server's {mountpoint} (FusermountArgs).
func (h *Handoff) Mountpoint() string { return filepath.Join(h.dir, "mnt") }

// Env is what a server's environment needs, on top of its own, to get descriptor FD from the stand-in.
func (h *Handoff) Env() []string {
	return []string{"PATH=" + h.bin() + ":" + os.Getenv("PATH"), fmt.Sprintf("%s=%d", HandoffFDEnv, FD)}
}
