// Package fuseconn is what every process that holds a FUSE connection needs, whatever its part: the plugin
// that mounts it, a keeper or sidecar that keeps a copy of its descriptor, a server that answers it.
//
// A FUSE connection lives as long as some process holds a descriptor of /dev/fuse attached to it (the kernel
// aborts it when the last one is closed: fuse_dev_release in fs/fuse/dev.c). Whoever holds one can pass it on
// (SCM_RIGHTS, see internal/fdpass), serve it, or ask the kernel to queue again the requests that a dead
// server had read (Resend). docs/fuse-mount-loss.md tells the whole story.
package fuseconn

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Open opens /dev/fuse for a new connection; Mount attaches it to a mount point.
func Open() (*os.File, error) {
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: "/dev/fuse", Err: err}
	}
	return os.NewFile(uintptr(fd), "/dev/fuse"), nil
}

// MountOptions say how Mount mounts a connection.
type MountOptions struct {
	// Name is the filesystem subtype (the mount table shows fuse.<Name>) and Source the mount source.
	Name, Source string
	ReadOnly     bool
	// AllowOther lets every user reach the mount, not only the one who mounted it (containers that run as
	// another user); DefaultPermissions makes the kernel check file modes itself.
	AllowOther, DefaultPermissions bool
	// MaxRead bounds a READ request (0: the kernel's default).
	MaxRead int
}

// Mount mounts the connection of dev (from Open) at target with mount(2), the way fusermount does, with
// nosuid and nodev. The kernel queues its INIT at once: until a server reads dev and answers it, every access
// to the mount blocks, stat included.
func Mount(dev *os.File, target string, o MountOptions) error {
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
	if o.ReadOnly {
		flags |= unix.MS_RDONLY
	}
	data := fmt.Sprintf("fd=%d,rootmode=40000,user_id=%d,group_id=%d", dev.Fd(), os.Geteuid(), os.Getegid())
	if o.MaxRead > 0 {
		data += fmt.Sprintf(",max_read=%d", o.MaxRead)
	}
	if o.AllowOther {
		data += ",allow_other"
	}
	if o.DefaultPermissions {
		data += ",default_permissions"
	}
	if err := unix.Mount(o.Source, target, "fuse."+o.Name, flags, data); err != nil {
		return &os.PathError{Op: "mount fuse." + o.Name + " (" + data + ") on", Path: target, Err: err}
	}
	return nil
}

// Check makes sure fd is open on /dev/fuse (character device 10:229, Documentation/admin-guide/devices.txt),
// so that a wrong descriptor gets a clear error instead of garbage. It asks no FUSE server anything: statx(2)
// with AT_STATX_DONT_SYNC answers from what the kernel has even for a file on a FUSE mount, where a plain
// fstat(2) would send GETATTR to a server that may never answer.
func Check(fd int) error {
	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE, &st); err != nil {
		return fmt.Errorf("descriptor %d: %w", fd, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev_major != 10 || st.Rdev_minor != 229 {
		return fmt.Errorf("descriptor %d is not /dev/fuse", fd)
	}
	return nil
}

// ErrNoID is returned by ID when the kernel does not say which connection a descriptor belongs to.
var ErrNoID = errors.New("this kernel does not show the FUSE connection of a /dev/fuse descriptor in /proc/self/fdinfo")

// ID returns the number of the connection that /dev/fuse descriptor fd is attached to: the minor device number
// of its mounts (st_dev of the mount root, the "0:N" of /proc/self/mountinfo, the N of
// /sys/fs/fuse/connections/N). The kernel shows it as "fuse_connection:" in /proc/self/fdinfo/<fd>
// (fuse_dev_show_fdinfo in fs/fuse/dev.c, added in 2025 by "fs: fuse: add dev id to /dev/fuse fdinfo"); on an
// older kernel ID fails with ErrNoID. A descriptor not attached to any connection yet fails too.
//
// It is how a process that is handed a descriptor can tell whether it belongs to a given mount without asking
// the server anything.
func ID(fd int) (uint32, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
	if err != nil {
		return 0, fmt.Errorf("reading the fdinfo of descriptor %d: %w", fd, err)
	}
	if id, ok, err := connectionIn(b); ok || err != nil {
		if err != nil {
			err = fmt.Errorf("descriptor %d: %w", fd, err)
		}
		return id, err
	}
	if err := Check(fd); err != nil {
		return 0, err
	}
	return 0, ErrNoID
}

// connectionIn returns the "fuse_connection:" of an fdinfo file's content, if it has one.
func connectionIn(fdinfo []byte) (uint32, bool, error) {
	s := bufio.NewScanner(bytes.NewReader(fdinfo))
	for s.Scan() {
		key, val, ok := bytes.Cut(s.Bytes(), []byte(":"))
		if !ok || string(key) != "fuse_connection" {
			continue
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(val)), 10, 32)
		if err != nil {
			return 0, false, fmt.Errorf("bad fuse_connection %q in its fdinfo", val)
		}
		return uint32(n), true, nil
	}
	return 0, false, nil
}

// HeldBySelf reports whether this process holds a /dev/fuse descriptor attached to connection id (see ID): then
// the connection cannot end while the process lives, whatever its servers do. It reads only /proc/self/fdinfo.
func HeldBySelf(id uint32) (bool, error) {
	held, err := HeldBy("self")
	return slices.Contains(held, id), err
}

// HeldBy returns the connections process pid ("self", or a number) holds a /dev/fuse descriptor of, as its
// /proc/<pid>/fdinfo shows them (see ID); none on a kernel that does not show them.
func HeldBy(pid string) ([]uint32, error) {
	dir := "/proc/" + pid + "/fdinfo"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var ids []uint32
	for _, e := range ents {
		b, err := os.ReadFile(dir + "/" + e.Name())
		if err != nil {
			continue // closed meanwhile
		}
		if n, ok, _ := connectionIn(b); ok && !slices.Contains(ids, n) {
			ids = append(ids, n)
		}
	}
	return ids, nil
}

// outHeaderLen is sizeof(struct fuse_out_header) (include/uapi/linux/fuse.h).
const outHeaderLen = 16

// notifyResend is the FUSE_NOTIFY_RESEND notification: an out-header with unique 0, the notification code
// (enum fuse_notify_code: FUSE_NOTIFY_RESEND = 7, positive; go-fuse's fuse.NOTIFY_RESEND is its negation, which
// the kernel refuses with EINVAL) in the error field, and no payload.
var notifyResend = func() []byte {
	b := make([]byte, outHeaderLen)
	binary.NativeEndian.PutUint32(b[0:4], outHeaderLen)
	binary.NativeEndian.PutUint32(b[4:8], 7)
	return b
}()

// Resend asks the kernel to move every request of fd's connection that a server has read but not answered
// back to the input queue, with bit 63 of its unique ID set (FUSE_UNIQUE_RESEND), so that the next reader gets
// it again (fuse_resend in fs/fuse/dev.c; protocol 7.40, Linux 6.9). Any holder of the connection may send
// it: a successor after its predecessor died, or a holder that saw a server die. A request being handled by a
// live server at that moment is handed out a second time; its first reply then finds no request (ENOENT, which
// servers ignore) and the second one is delivered, so this is only safe for idempotent requests — every request
// of a read-only filesystem is.
//
// It reports false without error when the kernel cannot (EINVAL: a kernel without FUSE_NOTIFY_RESEND).
func Resend(fd int) (bool, error) {
	_, err := unix.Write(fd, notifyResend)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EINVAL):
		return false, nil
	case errors.Is(err, unix.ENODEV):
		return false, errors.New("the FUSE connection is gone (unmounted or aborted)")
	case errors.Is(err, unix.EPERM):
		return false, errors.New("the descriptor is not a mounted FUSE connection")
	}
	return false, fmt.Errorf("write FUSE_NOTIFY_RESEND: %w", err)
}

// The kernel's request timeouts (Linux 6.14): a connection whose request waits longer than this is aborted, as if
// every holder had died. 0 (the default) is no timeout.
const (
	defaultTimeoutFile = "/proc/sys/fs/fuse/default_request_timeout"
	maxTimeoutFile     = "/proc/sys/fs/fuse/max_request_timeout"
)

// RequestTimeouts returns the kernel's default_request_timeout (for servers that set none in INIT, as ours)
// and max_request_timeout; an older kernel has neither (0, and no error).
func RequestTimeouts() (def, max time.Duration, err error) {
	read := func(path string) (time.Duration, error) {
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
		return time.Duration(n) * time.Second, nil
	}
	if def, err = read(defaultTimeoutFile); err != nil {
		return 0, 0, err
	}
	max, err = read(maxTimeoutFile)
	return def, max, err
}

// timeoutCheck is FUSE_TIMEOUT_TIMER_FREQ (fs/fuse/fuse_i.h): the kernel checks a connection's requests this
// often, and raises a shorter timeout to it (measured: 1 s asked, aborted after 25 s, TestRequestTimeoutEndsAPause
// in dummy-fuse). So a connection is aborted between its timeout and that plus this much of silence.
const timeoutCheck = 15 * time.Second

// PauseLimit is how long a connection may surely go without a server before the kernel aborts it: the effective
// request timeout for our servers (the default one, capped by the maximum, at least timeoutCheck), 0 if none.
func PauseLimit() (time.Duration, error) {
	def, max, err := RequestTimeouts()
	return effectiveTimeout(def, max), err
}

// effectiveTimeout is the timeout a connection gets whose server asks for none: the default, capped by the
// maximum (which also applies alone).
func effectiveTimeout(def, max time.Duration) time.Duration {
	t := max
	if def != 0 && (max == 0 || def < max) {
		t = def
	}
	if t != 0 && t < timeoutCheck {
		return timeoutCheck
	}
	return t
}

// ControlDir is where the kernel's FUSE control filesystem lists every connection by its number (ID)
// (Documentation/filesystems/fuse.rst, "Control filesystem"): <N>/waiting counts the requests of connection N
// that have not been answered, and writing anything to <N>/abort ends it as if its last holder had died.
const ControlDir = "/sys/fs/fuse/connections"

// MountControl mounts the control filesystem on ControlDir unless it is there (systemd mounts it at boot; a
// container's own sysfs lacks it). It needs CAP_SYS_ADMIN.
func MountControl() error {
	var st unix.Statfs_t
	if err := unix.Statfs(ControlDir, &st); err != nil {
		return fmt.Errorf("the FUSE control filesystem: %w", err)
	}
	if st.Type == ControlMagic {
		return nil
	}
	if err := unix.Mount("fusectl", ControlDir, "fusectl", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("mounting the FUSE control filesystem on %s: %w", ControlDir, err)
	}
	return nil
}

// ControlMagic is the control filesystem's type as statfs(2) tells it: FUSE_CTL_SUPER_MAGIC
// (include/uapi/linux/magic.h).
const ControlMagic = 0x65735543

// Waiting returns how many requests of connection id wait for an answer: queued, or read by a server that
// has not answered them (fuse_conn_waiting_read in fs/fuse/control.c).
func Waiting(id uint32) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("%s/%d/waiting", ControlDir, id))
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("connection %d: bad waiting count %q", id, b)
	}
	return n, nil
}

// Abort ends connection id at once: every request waiting and every later one fails (ECONNABORTED for those
// in flight, ENOTCONN after), its mounts stay until unmounted, and its readers see ENODEV. Only the
// connection's owner (the user that mounted it) or root may do it.
func Abort(id uint32) error {
	err := os.WriteFile(fmt.Sprintf("%s/%d/abort", ControlDir, id), []byte("1"), 0)
	if err != nil {
		return fmt.Errorf("aborting FUSE connection %d: %w", id, err)
	}
	return nil
}
