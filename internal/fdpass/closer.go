package fdpass

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Closer closes what another process can make slow to close, off the caller's path: a descriptor it sent (a
// file of a FUSE mount whose server never answers FLUSH, a TCP socket with SO_LINGER: close(2) waits for
// them in the kernel, holding its OS thread), and a socket it can have queued such descriptors on (closing a
// socket releases what waits in its queue). At most workers goroutines close them (started when needed, gone
// when idle), so at most that many threads can ever be stuck, and at most pending wait: Close blocks its
// caller beyond that, which slows down whoever sends them rather than the process.
//
// A /dev/fuse descriptor is closed at once: its release (fuse_dev_release in fs/fuse/dev.c) never waits for a
// server.
type Closer struct {
	q       chan io.Closer
	workers chan struct{} // a token per running worker; workers exit when nothing waits
}

// NewCloser returns a Closer of at most workers goroutines (started when needed) with at most pending waiting.
func NewCloser(workers, pending int) *Closer {
	return &Closer{q: make(chan io.Closer, pending), workers: make(chan struct{}, workers)}
}

// work closes what is queued until nothing is, then lets its token go.
func (c *Closer) work() {
	for {
		select {
		case x := <-c.q:
			_ = x.Close()
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

// Close closes x: at once when it is a /dev/fuse descriptor, else through the workers (see Closer), waiting
// while pending are queued. A caller that must not wait (a CSI call) runs it on a goroutine of its own.
func (c *Closer) Close(x io.Closer) {
	if f, ok := x.(*os.File); ok && IsFuseDevice(f) {
		_ = f.Close()
		return
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
