package dummyfs

import (
	"fmt"
	"path"
	"strconv"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
)

// Name is the FUSE subtype: the mount table lists the filesystem type as "fuse.dummy-fuse".
const Name = "dummy-fuse"

// maxWrite is the largest READ/WRITE payload negotiated with the kernel (go-fuse's default). Conn sizes its
// request buffer from it: a read from /dev/fuse shorter than this plus the request header fails with EINVAL.
const maxWrite = 128 * 1024

// magicFD returns N for go-fuse's magic mountpoint /dev/fd/N (an already-mounted /dev/fuse descriptor
// inherited from a privileged parent), or -1.
func magicFD(mountpoint string) int {
	dir, file := path.Split(mountpoint)
	n, err := strconv.Atoi(file)
	if dir != "/dev/fd/" || err != nil || n <= 0 {
		return -1
	}
	return n
}

// IsMagicMountpoint reports whether mountpoint is the /dev/fd/N form.
func IsMagicMountpoint(mountpoint string) bool { return magicFD(mountpoint) >= 0 }

// MountOptions returns the go-fuse protocol options (negotiated in INIT) for serving opts. A successor
// process that takes over the connection must use the same ones.
func MountOptions(opts Options) *fuse.MountOptions {
	fsName := opts.FsName
	if fsName == "" {
		fsName = Name
	}
	mo := &fuse.MountOptions{
		Name:       Name,
		FsName:     fsName,
		AllowOther: opts.AllowOther,
		Debug:      opts.Debug,
		MaxWrite:   maxWrite,
	}
	if opts.Writable {
		// open(O_TRUNC) as one OPEN with O_TRUNC, not an OPEN and then a SETATTR of the size: a relay would
		// truncate by path, and its close of that descriptor makes a server such as gcsfuse upload the empty
		// file (most of what the relay cost gcsfuse's sequential writes, in make bench-relay-write).
		mo.ExtraCapabilities = fuse.CAP_ATOMIC_O_TRUNC
	}
	return mo
}

// Server is a mounted filesystem served in the background.
type Server struct {
	mountpoint string
	fd         int
	conn       *Conn
	done       chan struct{}
	err        error
	resent     bool
}

// Mount mounts the filesystem at mountpoint with mount(2) (root; there is no fusermount on the target
// machines), or serves the descriptor of a /dev/fd/N mountpoint, and answers the kernel's INIT before it
// returns. The filesystem is then served in the background until it is unmounted. The descriptor of a
// /dev/fd/N mountpoint is the server's from then on, closed when it stops or fails.
func Mount(mountpoint string, opts Options) (*Server, error) {
	mo := MountOptions(opts)
	fd := magicFD(mountpoint)
	if fd >= 0 {
		if err := fuseconn.Check(fd); err != nil {
			unix.Close(fd)
			return nil, err
		}
		unix.CloseOnExec(fd) // ours now, not for children
	} else {
		var err error
		if fd, err = mountDev(mountpoint, mo, opts.Writable); err != nil {
			return nil, err
		}
	}
	s := newServer(mountpoint, fd, opts, mo)
	if err := s.conn.Init(); err != nil {
		s.abort()
		return nil, err
	}
	s.start()
	return s, nil
}

// Takeover serves fd, a /dev/fuse descriptor of a connection that another server already initialised (and
// that some other process kept open when that server died), given the handover record that server saved
// (Server.InitRecord). It replays the INIT into its protocol server without replying, refuses a record it
// does not understand or would not negotiate identically (*HandoverError), asks the kernel to queue again
// the requests its predecessor had read but not answered (FUSE_NOTIFY_RESEND, when the kernel offers it;
// Server.Resent tells), and serves in the background. Like a /dev/fd/N mount, the descriptor is the
// server's from then on, closed when it stops or when Takeover fails.
//
// Without FUSE_NOTIFY_RESEND (Linux < 6.9) nothing can answer the requests the predecessor had read: the
// kernel matches replies by an ID only it and the dead process knew. Their callers stay blocked until the
// connection is aborted (/sys/fs/fuse/connections/N/abort); everything else is served.
func Takeover(fd int, record []byte, opts Options) (*Server, error) {
	if err := fuseconn.Check(fd); err != nil {
		unix.Close(fd)
		return nil, err
	}
	mountpoint := fmt.Sprintf("/dev/fd/%d", fd)
	s := newServer(mountpoint, fd, opts, MountOptions(opts))
	if err := s.conn.replayInit(record); err != nil {
		unix.Close(fd)
		return nil, err
	}
	resent, err := s.conn.resend()
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("take over %s: %w", mountpoint, err)
	}
	unix.CloseOnExec(fd)
	s.resent = resent
	s.start()
	return s, nil
}

func newServer(mountpoint string, fd int, opts Options, mo *fuse.MountOptions) *Server {
	fs := opts.FS
	if fs == nil {
		fs = New(opts)
	}
	return &Server{mountpoint: mountpoint, fd: fd, conn: NewConn(fd, fs, mo, opts.Workers), done: make(chan struct{})}
}

// start serves the connection in the background.
func (s *Server) start() {
	go func() {
		s.err = s.conn.Serve()
		unix.Close(s.fd)
		close(s.done)
	}()
}

// mountDev opens /dev/fuse and mounts it at mountpoint, read-only; it returns the descriptor to serve.
// mountDev mounts a new connection at mountpoint: read-only unless writable, which also makes the kernel check
// the caller's permissions (default_permissions): the server acts as its own user, root.
func mountDev(mountpoint string, mo *fuse.MountOptions, writable bool) (int, error) {
	var st unix.Stat_t
	if err := unix.Stat(mountpoint, &st); err != nil {
		return -1, err // the caller names the mount point
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		// mount(2) would mount over a regular file as well (rootmode follows the target); refuse.
		return -1, unix.ENOTDIR
	}
	dev, err := fuseconn.Open()
	if err != nil {
		return -1, err
	}
	o := fuseconn.MountOptions{Name: mo.Name, Source: mo.FsName, ReadOnly: !writable, DefaultPermissions: writable, AllowOther: mo.AllowOther, MaxRead: mo.MaxWrite}
	if err := fuseconn.Mount(dev, mountpoint, o); err != nil {
		dev.Close()
		return -1, err
	}
	// The descriptor is the server's from now on, closed when it stops (a raw fd, as Takeover gets one).
	fd, err := unix.Dup(int(dev.Fd()))
	dev.Close()
	if err != nil {
		_ = unix.Unmount(mountpoint, unix.MNT_DETACH)
		return -1, fmt.Errorf("dup /dev/fuse: %w", err)
	}
	unix.CloseOnExec(fd)
	return fd, nil
}

// abort gives up a mount whose INIT failed.
func (s *Server) abort() {
	if !IsMagicMountpoint(s.mountpoint) {
		_ = unix.Unmount(s.mountpoint, unix.MNT_DETACH)
	}
	unix.Close(s.fd)
}

// Wait waits until the connection ends (unmounted or aborted) and returns the serving error, if any.
func (s *Server) Wait() error {
	<-s.done
	return s.err
}

// Done is closed when the connection has ended.
func (s *Server) Done() <-chan struct{} { return s.done }

// Unmount unmounts the filesystem and waits for the server to stop. It fails with EBUSY while files are
// open, and always for /dev/fd/N, whose mount point only the parent that mounted it knows.
func (s *Server) Unmount() error {
	if IsMagicMountpoint(s.mountpoint) {
		return fmt.Errorf("unmount %s: the parent that mounted it must unmount it", s.mountpoint)
	}
	if err := unix.Unmount(s.mountpoint, 0); err != nil {
		return err
	}
	return s.Wait()
}

// InitRecord returns the handover record a successor needs to take the connection over (Takeover): the
// kernel's INIT request and this server's reply, as they crossed the device.
func (s *Server) InitRecord() []byte { return s.conn.InitRecord() }

// Resent reports whether Takeover asked the kernel to resend the requests the predecessor had read.
func (s *Server) Resent() bool { return s.resent }
