package fdpass

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
)

// Closer closes what another process can make slow to close, off the caller's path: a descriptor it sent (a
// TCP socket with SO_LINGER, a file of a FUSE mount whose server never answers), and a socket it can have
// queued such descriptors on (closing a socket releases what waits in its queue without closing it: fput, not
// close(2)). At most workers goroutines close them (started when needed, gone when idle), so at most that many
// threads can ever be stuck, and at most pending wait: Close blocks its caller beyond that, which slows down
// whoever sends them rather than the process.
//
// A regular file on a FUSE mount is the one descriptor whose close can wait for ever: close(2) sends FLUSH, a
// forced request (fuse_flush in fs/fuse/file.c), so the closing thread sleeps uninterruptibly until the server
// answers or the connection ends, SIGKILL notwithstanding; and a process that holds the connection's /dev/fuse
// itself keeps it from ever ending, so it could never exit (its threads stay in D state, a zombie). So before
// such a file is closed, its connection is aborted when this process holds a /dev/fuse descriptor of it: the
// close then returns at once; so is a connection the owner says it mounted (Own), such as a backend whose only
// holder is another process's server. A process holds only its own connections (the plugin mounted them), and
// a peer can only reach the files of connections it serves itself, or could leave unserved: ending one is
// nothing that peer could not do. Another connection ends only when its holders die; the Closer cannot end
// it, and Drain says so.
//
// A /dev/fuse descriptor is closed at once: its release (fuse_dev_release in fs/fuse/dev.c) never waits for a
// server.
type Closer struct {
	q       chan io.Closer
	workers chan struct{} // a token per running worker; workers exit when nothing waits

	mu   sync.Mutex
	fuse map[*os.File]uint32 // FUSE files queued or being closed, with their connections
	idle *sync.Cond          // signalled whenever one of them is closed
	own  func(conn uint32) bool
}

// NewCloser returns a Closer of at most workers goroutines (started when needed) with at most pending waiting.
func NewCloser(workers, pending int) *Closer {
	c := &Closer{q: make(chan io.Closer, pending), workers: make(chan struct{}, workers), fuse: map[*os.File]uint32{}}
	c.idle = sync.NewCond(&c.mu)
	return c
}

// Own tells the Closer which FUSE connections, besides those this process holds, are its own to end (it mounted
// them); call it before the first Close.
func (c *Closer) Own(own func(conn uint32) bool) { c.own = own }

// work closes what is queued until nothing is, then lets its token go.
func (c *Closer) work() {
	for {
		select {
		case x := <-c.q:
			c.closeNow(x)
			continue
		default:
		}
		<-c.workers
		// Something queued between the check and the release, by a caller that found no free token, is
		// taken here.
		if len(c.q) == 0 {
			return
		}
		select {
		case c.workers <- struct{}{}:
		default:
			return // another worker runs and takes it
		}
	}
}

// closeNow closes x on the calling goroutine.
func (c *Closer) closeNow(x io.Closer) {
	_ = x.Close()
	if f, ok := x.(*os.File); ok {
		c.mu.Lock()
		if _, ok := c.fuse[f]; ok {
			delete(c.fuse, f)
			c.idle.Broadcast()
		}
		c.mu.Unlock()
	}
}

// Close closes x: at once when it is a /dev/fuse descriptor, else through the workers (see Closer), waiting
// while pending are queued; a FUSE file's connection is aborted first when this process holds it. A caller
// that must not wait (a CSI call) runs it on a goroutine of its own.
func (c *Closer) Close(x io.Closer) {
	if f, ok := x.(*os.File); ok {
		if IsFuseDevice(f) {
			_ = f.Close()
			return
		}
		if conn, onFUSE := FUSEConnection(f); onFUSE {
			if aborted, err := c.end(conn); aborted || err != nil {
				klog.ErrorS(err, "A peer sent a file of a FUSE connection this process holds; the connection is ended so that closing the file cannot wait for ever", "connection", conn, "aborted", aborted)
			}
			c.mu.Lock()
			c.fuse[f] = conn
			c.mu.Unlock()
		}
	}
	c.q <- x
	select {
	case c.workers <- struct{}{}:
		go c.work()
	default: // every worker runs: one of them takes it
	}
}

// Pending reports how many wait to be closed, for tests and logs.
func (c *Closer) Pending() int { return len(c.q) }

// Drain is for the end of the process: it aborts the connection of every FUSE file still queued or being
// closed that is its own now (it may have adopted one since), and waits until ctx ends for those
// closes to return. It returns an error naming the connections whose files are still being closed then:
// connections of other processes, which this one cannot end, whose servers do not answer. Other descriptors
// (sockets) are left to the process's exit, which never waits for them uninterruptibly.
func (c *Closer) Drain(ctx context.Context) error {
	c.mu.Lock()
	conns := slices.Collect(maps.Values(c.fuse))
	c.mu.Unlock()
	for _, conn := range conns {
		_, _ = c.end(conn)
	}
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.idle.Broadcast()
		c.mu.Unlock()
	})
	defer stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.fuse) > 0 && ctx.Err() == nil {
		c.idle.Wait()
	}
	if len(c.fuse) == 0 {
		return nil
	}
	left := slices.Sorted(maps.Values(c.fuse))
	return fmt.Errorf("%d file(s) a peer sent are still being closed, waiting for the servers of FUSE connections %v, which this process does not hold and cannot end", len(left), slices.Compact(left))
}

// end aborts FUSE connection conn when this process holds a /dev/fuse descriptor of it or it is its own (see
// Closer), and reports whether it did.
func (c *Closer) end(conn uint32) (bool, error) {
	if conn == 0 {
		return false, nil
	}
	held, err := fuseconn.HeldBySelf(conn)
	if !held && c.own != nil && c.own(conn) {
		held, err = true, nil
	}
	if !held {
		return false, err
	}
	return true, fuseconn.Abort(conn)
}

// FUSEConnection reports whether f is a regular file on a FUSE mount, and the number of its connection (the N of
// /sys/fs/fuse/connections/N), without asking the server anything: the device of its filesystem, as statx(2)
// tells with AT_STATX_DONT_SYNC, is anonymous (major 0) and has an entry in the FUSE control filesystem. When
// the control filesystem cannot be read (not mounted, as in a container), every file on an anonymous device
// (tmpfs, overlay, proc, FUSE…) counts as possibly FUSE, with connection 0 (none to abort).
func FUSEConnection(f *os.File) (uint32, bool) {
	var st unix.Statx_t
	if err := unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE, &st); err != nil {
		return 0, false
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		// Only a regular file's close sends FLUSH: a FUSE directory has no flush (fuse_dir_operations), a device
		// node or FIFO on a FUSE mount closes through its own driver, an O_PATH descriptor through none.
		return 0, false
	}
	if st.Dev_major != 0 {
		return 0, false
	}
	if _, err := os.Stat(fuseconn.ControlDir + "/" + strconv.FormatUint(uint64(st.Dev_minor), 10)); err == nil {
		return st.Dev_minor, true
	}
	if controlMounted() {
		return 0, false // the control filesystem is there and lists no such connection
	}
	return 0, true
}

// controlMounted reports whether the FUSE control filesystem is mounted on fuseconn.ControlDir.
func controlMounted() bool {
	var st unix.Statfs_t
	return unix.Statfs(fuseconn.ControlDir, &st) == nil && st.Type == fuseconn.ControlMagic
}

// IsFuseDevice reports whether f is /dev/fuse (character device 10:229, devices.txt) without reaching any
// FUSE server: a plain fstat(2) of a file on a FUSE mount asks its server for attributes, so statx(2) is told
// to use what the kernel has (AT_STATX_DONT_SYNC, which fuse_update_get_attr honours).
func IsFuseDevice(f *os.File) bool {
	var st unix.Statx_t
	if err := unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE, &st); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev_major == 10 && st.Rdev_minor == 229
}

// IsDirectory reports whether f is a directory, as IsFuseDevice without reaching any FUSE server.
func IsDirectory(f *os.File) bool {
	var st unix.Statx_t
	if err := unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE, &st); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFDIR
}
