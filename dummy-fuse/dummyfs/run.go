package dummyfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/atomicfile"
)

// MountError is a failure to mount; the dummy-fuse command reports it as "mount MOUNTPOINT: cause".
type MountError struct {
	Mountpoint string
	Err        error
}

func (e *MountError) Error() string { return fmt.Sprintf("mount %s: %v", e.Mountpoint, e.Err) }
func (e *MountError) Unwrap() error { return e.Err }

// Handover is Run's part in handing a FUSE connection from one server process to the next.
type Handover struct {
	// SaveInit, when set, is the file that receives the handover record (Server.InitRecord) once the
	// connection is initialised; a successor needs it. It is written atomically, or, for /dev/fd/N, written
	// to that descriptor.
	SaveInit string
	// Record, when set, is the record of a predecessor: Run takes the connection over (Takeover) instead
	// of mounting; the mountpoint must then be /dev/fd/N, the inherited descriptor.
	Record []byte
}

// Run mounts the filesystem at mountpoint, or takes an inherited connection over, and serves it until ctx is
// done (then it unmounts what it mounted) or until the mount goes away from outside (umount). Notes about the
// handover and the shutdown go to logw.
func Run(ctx context.Context, mountpoint string, opts Options, h Handover, logw io.Writer) error {
	srv, err := start(mountpoint, opts, h, logw)
	if err != nil {
		return err
	}
	if h.Record == nil && !IsMagicMountpoint(mountpoint) {
		what := FileName
		if opts.FS != nil {
			what = opts.FS.String()
		}
		fmt.Fprintf(logw, "dummy-fuse: mounted %s at %s; stop with kill %d (SIGTERM) or umount %s\n",
			what, mountpoint, os.Getpid(), mountpoint)
	}
	select {
	case <-srv.Done():
		// Unmounted from outside: nothing left to serve.
		return srv.Wait()
	case <-ctx.Done():
	}
	if IsMagicMountpoint(mountpoint) {
		// The parent that mounted it owns the mount point; exiting closes our descriptor.
		return nil
	}
	if err := unix.Unmount(mountpoint, 0); err != nil {
		// Typically EBUSY: a process still holds a file open. Detach the mount so it disappears from the
		// tree; open descriptors then fail with ENOTCONN once we exit, as after a crash.
		if derr := unix.Unmount(mountpoint, unix.MNT_DETACH); derr != nil {
			return fmt.Errorf("unmount %s: %w", mountpoint, errors.Join(err, derr))
		}
		fmt.Fprintf(logw, "dummy-fuse: unmount %s: %v; detached it lazily\n", mountpoint, err)
	}
	// The connection ends once the kernel drops the superblock. A bind of the mount elsewhere (a published
	// target) keeps it alive forever, so wait only briefly: exiting closes /dev/fuse and leaves such binds
	// dead (ENOTCONN), exactly as a crash of the server would.
	select {
	case <-srv.Done():
		return srv.Wait()
	case <-time.After(stopGrace):
		fmt.Fprintf(logw, "dummy-fuse: %s is still mounted elsewhere (bind mounts); exiting leaves them disconnected\n", mountpoint)
		return nil
	}
}

// stopGrace is how long Run waits for the connection to end after unmounting.
const stopGrace = 2 * time.Second

// start mounts or takes over mountpoint as Run describes and saves the handover record.
func start(mountpoint string, opts Options, h Handover, logw io.Writer) (*Server, error) {
	var srv *Server
	if h.Record == nil {
		var err error
		if srv, err = Mount(mountpoint, opts); err != nil {
			return nil, &MountError{Mountpoint: mountpoint, Err: err}
		}
	} else {
		fd := magicFD(mountpoint)
		if fd < 0 {
			return nil, fmt.Errorf("take over %s: a handover needs the inherited descriptor as /dev/fd/N", mountpoint)
		}
		var err error
		if srv, err = Takeover(fd, h.Record, opts); err != nil {
			return nil, err
		}
		if srv.Resent() {
			fmt.Fprintf(logw, "dummy-fuse: took over %s; asked the kernel to resend the requests the predecessor had read\n", mountpoint)
		} else {
			fmt.Fprintf(logw, "dummy-fuse: took over %s; this kernel cannot resend requests (no FUSE_HAS_RESEND): those the predecessor had read stay unanswered until the connection is aborted\n", mountpoint)
		}
	}
	if h.SaveInit != "" {
		if err := WriteInitRecord(h.SaveInit, srv.InitRecord()); err != nil {
			// Serving without a record would make this server impossible to replace: give up.
			if !IsMagicMountpoint(mountpoint) {
				_ = unix.Unmount(mountpoint, unix.MNT_DETACH)
			}
			return nil, err
		}
	}
	return srv, nil
}

// WriteInitRecord saves a handover record to path: for /dev/fd/N straight into that descriptor, otherwise
// atomically (atomicfile), so that a reader never sees half a record.
func WriteInitRecord(path string, rec []byte) error {
	if IsMagicMountpoint(path) {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("save the handover record: %w", err)
		}
		_, err = f.Write(rec)
		return errors.Join(wrapSave(err), wrapSave(f.Close()))
	}
	return wrapSave(atomicfile.Write(path, rec, 0o600))
}

func wrapSave(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("save the handover record: %w", err)
}

// MaxInitRecord bounds a handover record: an INIT request and reply are a few hundred bytes.
const MaxInitRecord = 4096

// ReadInitRecord reads a handover record from path (a regular file, also as /dev/fd/N). Anything else is
// refused before it is read: opening is non-blocking, so a FIFO there cannot hold the server up forever.
func ReadInitRecord(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("read the handover record: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return nil, fmt.Errorf("read the handover record: %w", err)
	} else if !st.Mode().IsRegular() {
		return nil, refuse("handover record %s is not a regular file (%s)", path, st.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxInitRecord+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("read the handover record %s: %w", path, err)
	case len(b) > MaxInitRecord:
		return nil, refuse("handover record %s is larger than %d bytes", path, MaxInitRecord)
	case len(b) == 0:
		return nil, refuse("handover record %s is empty", path)
	}
	return b, nil
}
