package dummyfs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Conn serves one /dev/fuse connection with a plain loop on one OS thread: read a request, let go-fuse's
// ProtocolServer call the filesystem, write the reply. Our handlers never block, so doing requests in turn
// costs nothing, and it halves the latency of go-fuse's Server, which starts a goroutine for the next read
// on every request (hack/bench.sh: p50 of a direct-I/O read 15 µs instead of 27 µs). It is also the loop a
// successor process runs on an inherited, already initialised connection (FACTS.md §3).
type Conn struct {
	fd   int
	ps   *fuse.ProtocolServer
	in   []byte
	out  []byte
	init []byte // the kernel's INIT request, as read
}

// Request opcodes Conn looks at.
const (
	opInit      = 26 // FUSE_INIT
	inHeaderLen = 40 // sizeof(struct fuse_in_header)
)

// NewConn wraps fd, a /dev/fuse descriptor (Conn does not close it), to serve fs negotiating mo.
func NewConn(fd int, fs fuse.RawFileSystem, mo *fuse.MountOptions) *Conn {
	// The kernel refuses reads shorter than max_write plus headers, and than 8 KiB.
	size := max(mo.MaxWrite, 8192) + 4096
	return &Conn{fd: fd, ps: fuse.NewProtocolServer(fs, mo), in: make([]byte, size), out: make([]byte, size)}
}

// InitRequest returns the kernel's INIT request once it was handled (nil before).
func (c *Conn) InitRequest() []byte { return c.init }

// Init answers the first request, which on a new connection is the kernel's INIT.
func (c *Conn) Init() error {
	done, err := c.serveOne()
	switch {
	case err != nil:
		return fmt.Errorf("FUSE INIT: %w", err)
	case done:
		return errors.New("FUSE INIT: connection closed")
	case c.init == nil:
		return errors.New("FUSE INIT: first request was not INIT")
	}
	return nil
}

// Serve answers requests until the connection ends: nil when the filesystem was unmounted (ENODEV),
// otherwise the device's error.
func (c *Conn) Serve() error {
	runtime.LockOSThread() // a blocking read per request; keep it off the scheduler's shared threads
	defer runtime.UnlockOSThread()
	for {
		if done, err := c.serveOne(); done || err != nil {
			return err
		}
	}
}

// serveOne reads and answers one request; done reports the end of the connection.
func (c *Conn) serveOne() (done bool, err error) {
	n, err := unix.Read(c.fd, c.in)
	switch {
	case err == nil:
	case errors.Is(err, unix.EINTR), errors.Is(err, unix.ENOENT):
		return false, nil // ENOENT: the request was interrupted and withdrawn before we read it
	case errors.Is(err, unix.ENODEV):
		return true, nil // unmounted
	default:
		return true, fmt.Errorf("read /dev/fuse: %w", err)
	}
	req := c.in[:n]
	if c.init == nil && n >= inHeaderLen && binary.NativeEndian.Uint32(req[4:8]) == opInit {
		c.init = append([]byte(nil), req...)
	}
	m, st := c.ps.HandleRequest([][]byte{req}, [][]byte{c.out})
	if !st.Ok() || m == 0 {
		return false, nil // FORGET and friends have no reply; go-fuse logged a malformed request
	}
	for {
		_, err = unix.Write(c.fd, c.out[:m])
		switch {
		case err == nil, errors.Is(err, unix.ENOENT):
			return false, nil // ENOENT: nobody waits for this reply any more (interrupted request)
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENODEV):
			return true, nil
		default:
			return true, fmt.Errorf("write /dev/fuse: %w", err)
		}
	}
}
