// Package fdpass hands open file descriptors, each with a small message beside it, from one process to
// another over a unix socket (SCM_RIGHTS, unix(7)). The privileged CSI plugin uses it to give an unprivileged
// FUSE server the /dev/fuse descriptor of a mount it made, as the GCS FUSE CSI driver does
// (pkg/util/fdchannel.go in GoogleCloudPlatform/gcs-fuse-csi-driver): Send and Receive, one descriptor and a
// JSON document on a stream socket. The processes that keep FUSE connections alive exchange longer sessions of
// messages that carry at most one descriptor each (WriteMsg, ReadMsg; package handover), on sequenced-packet
// sockets so that every message keeps its bounds.
//
// A message carries its descriptor in its control data. The receiver takes at most one per message: a message
// with two or more, or with anything but SCM_RIGHTS, is refused and every descriptor it brought is closed.
package fdpass

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// MaxConfig bounds the data of a message (the JSON sent beside a descriptor): a larger one is refused.
const MaxConfig = 4096

// maxFDs is how many descriptors the receiver makes room for, so that a message with more than one is seen
// whole (and all of them closed) instead of being cut off by the kernel with MSG_CTRUNC.
const maxFDs = 8

// Send writes f's descriptor and config (marshalled as JSON) as one message on conn before deadline. The
// caller keeps f: closing it is its own decision (the kernel has already duplicated it into the message).
func Send(conn *net.UnixConn, f *os.File, config any, deadline time.Time) error {
	data, err := json.Marshal(config)
	if err != nil {
		return fmt.Errorf("encoding the config: %w", err)
	}
	return WriteMsg(conn, data, f, deadline)
}

// WriteMsg writes data and, when f is not nil, f's descriptor as one message on conn before deadline (none:
// no deadline). data must not be empty (an empty message would read as the end of the connection) nor larger
// than MaxConfig.
func WriteMsg(conn *net.UnixConn, data []byte, f *os.File, deadline time.Time) error {
	if len(data) == 0 || len(data) > MaxConfig {
		return fmt.Errorf("message of %d bytes: want 1 to %d", len(data), MaxConfig)
	}
	if err := conn.SetWriteDeadline(deadline); err != nil {
		return fmt.Errorf("setting the write deadline: %w", err)
	}
	var oob []byte
	what := "message"
	if f != nil {
		oob = unix.UnixRights(int(f.Fd()))
		what = fmt.Sprintf("descriptor %d", f.Fd())
	}
	n, oobn, err := conn.WriteMsgUnix(data, oob, nil)
	if err != nil {
		return fmt.Errorf("sending %s: %w", what, err)
	}
	if n != len(data) || oobn != len(oob) {
		return fmt.Errorf("sending %s: short write (%d of %d bytes, %d of %d control bytes)", what, n, len(data), oobn, len(oob))
	}
	return nil
}

// Receive reads one message from conn before deadline: the one descriptor it carries (close-on-exec, as
// net.UnixConn.ReadMsgUnix receives with MSG_CMSG_CLOEXEC on Linux) and its config, decoded from JSON into
// config. On any error no descriptor is left open.
func Receive(conn *net.UnixConn, config any, deadline time.Time) (*os.File, error) {
	data, f, err := ReadMsg(conn, deadline)
	if err == nil && f == nil {
		err = errors.New("message carries no descriptor, want exactly 1")
	}
	if err == nil {
		if jerr := json.Unmarshal(data, config); jerr != nil {
			err = fmt.Errorf("decoding the config %q: %w", clip(data), jerr)
		}
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		return nil, fmt.Errorf("receiving a descriptor: %w", err)
	}
	return f, nil
}

// ReadMsg reads one message from conn before deadline (none: wait as long as it takes): its data and the
// descriptor it carries, nil if none. A message with two or more descriptors, other control data, more than
// MaxConfig bytes or no data at all is refused, and every descriptor it brought is closed; io.EOF (wrapped) is
// the end of the connection. Descriptors arrive close-on-exec (MSG_CMSG_CLOEXEC).
func ReadMsg(conn *net.UnixConn, deadline time.Time) ([]byte, *os.File, error) {
	if err := conn.SetReadDeadline(deadline); err != nil {
		return nil, nil, fmt.Errorf("setting the read deadline: %w", err)
	}
	return ReadMsgVia(conn, nil)
}

// ReadMsgVia is ReadMsg within conn's own read deadline, closing the descriptors of a refused message through
// closer (nil: at once), for a receiver that does not trust the sender (see Closer).
func ReadMsgVia(conn *net.UnixConn, closer *Closer) ([]byte, *os.File, error) {
	return readMsg(conn, maxFDs, closer)
}

// readMsg reads one message with room for room descriptors (0: none, see ReadMsgDropping).
func readMsg(conn *net.UnixConn, room int, closer *Closer) ([]byte, *os.File, error) {
	buf := make([]byte, MaxConfig+1)
	var oob []byte
	if room > 0 {
		oob = make([]byte, unix.CmsgSpace(room*4))
	}
	n, oobn, flags, _, err := conn.ReadMsgUnix(buf, oob)
	fds, perr := rights(oob[:oobn])
	if err == nil {
		err = perr
	}
	switch {
	case errors.Is(err, io.EOF), err == nil && n == 0 && len(fds) == 0 && flags&unix.MSG_CTRUNC == 0:
		err = fmt.Errorf("the peer closed the connection: %w", io.EOF)
	case err != nil:
	case flags&unix.MSG_CTRUNC != 0 && room == 0:
		err = ErrDroppedRights
	case flags&unix.MSG_CTRUNC != 0:
		err = fmt.Errorf("more than %d descriptors or other control data in one message", room)
	case n > MaxConfig || flags&unix.MSG_TRUNC != 0:
		err = fmt.Errorf("message larger than %d bytes", MaxConfig)
	case len(fds) > 1:
		err = fmt.Errorf("message carries %d descriptors, want at most 1", len(fds))
	case n == 0:
		err = errors.New("message carries a descriptor and no data")
	}
	if err != nil {
		for _, fd := range fds {
			closeVia(closer, os.NewFile(uintptr(fd), "fdpass"))
		}
		return nil, nil, err
	}
	var f *os.File
	if len(fds) == 1 {
		f = os.NewFile(uintptr(fds[0]), "fdpass")
	}
	return buf[:n], f, nil
}

// ErrDroppedRights is the error of ReadMsgDropping for a message that carried descriptors.
var ErrDroppedRights = errors.New("the message carried descriptors, dropped unopened")

// ReadMsgDropping reads one message from conn within its read deadline with no room for descriptors: the
// kernel releases any the message carries without ever installing them in this process (scm_recv in
// net/core/scm.c puts the files when there is no control buffer), so no close(2) of theirs can wait for a FUSE
// server (see Closer), on any kernel. A message that carried some is ErrDroppedRights; io.EOF (wrapped) is the
// end of the connection. For where the protocol has the peer send no descriptor.
func ReadMsgDropping(conn *net.UnixConn) ([]byte, error) {
	data, _, err := readMsg(conn, 0, nil)
	return data, err
}

// rights returns every descriptor in the control messages of oob; anything but SCM_RIGHTS is an error (the
// descriptors found are returned all the same, for the caller to close).
func rights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("parsing control data: %w", err)
	}
	var fds []int
	var bad error
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_RIGHTS {
			bad = fmt.Errorf("unexpected control message (level %d, type %d)", m.Header.Level, m.Header.Type)
			continue
		}
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			bad = fmt.Errorf("parsing SCM_RIGHTS: %w", err)
			continue
		}
		fds = append(fds, got...)
	}
	return fds, bad
}

func clip(b []byte) string {
	const max = 64
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}

// maxSunPath is the longest path a unix socket address holds (sun_path is 108 bytes with its NUL, unix(7)).
const maxSunPath = 107

// Listen listens on a unix socket of network ("unix" for a stream socket, "unixpacket" for a sequenced-packet
// one) at path, creating its directory (0750) if missing and first removing a stale socket left by a previous
// run, but nothing that is not a socket: a typo in a flag must not delete a file. mode, when not 0, is given
// to the socket (who may connect). Closing the listener removes the socket.
func Listen(network, path string, mode os.FileMode) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("creating the directory of socket %s: %w", path, err)
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket: left alone", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing stale socket: %w", err)
		}
	}
	l, err := net.ListenUnix(network, &net.UnixAddr{Name: path, Net: network})
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	if mode != 0 {
		if err := os.Chmod(path, mode); err != nil {
			l.Close()
			return nil, fmt.Errorf("chmod socket %s: %w", path, err)
		}
	}
	return l, nil
}

// Dial connects to the unix socket of network ("unix", "unixpacket") at path, retrying every interval while
// it does not exist yet or nobody listens (the other side may create it later), until ctx ends. A path too long
// for a socket address is reached through its directory's descriptor (/proc/self/fd/N/name).
func Dial(ctx context.Context, network, path string, interval time.Duration) (*net.UnixConn, error) {
	for {
		c, err := dialOnce(ctx, network, path)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ECONNREFUSED) {
			return nil, fmt.Errorf("connecting to %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connecting to %s: %w (last: %v)", path, ctx.Err(), err)
		case <-time.After(interval):
		}
	}
}

func dialOnce(ctx context.Context, network, path string) (*net.UnixConn, error) {
	addr := path
	if len(path) > maxSunPath {
		dir, err := os.OpenFile(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return nil, err
		}
		defer dir.Close()
		addr = fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(path))
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return c.(*net.UnixConn), nil
}

// SendOnce waits on ln for ONE connection until ctx ends, sends f and config on it within timeout, and
// closes the connection and ln through closer (nil: at once): the receiver may have queued descriptors on
// them that are slow to close (see Closer). It does not close f.
func SendOnce(ctx context.Context, ln *net.UnixListener, f *os.File, config any, timeout time.Duration, closer *Closer) error {
	// A deadline in the past wakes the Accept without closing anything on this goroutine.
	stop := context.AfterFunc(ctx, func() { _ = ln.SetDeadline(time.Unix(1, 0)) })
	conn, err := ln.AcceptUnix()
	stop()
	closeVia(closer, ln)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("waiting for the receiver: %w", ctx.Err())
		}
		return fmt.Errorf("waiting for the receiver: %w", err)
	}
	defer closeVia(closer, conn)
	return Send(conn, f, config, time.Now().Add(timeout))
}

// closeVia closes x through closer, or at once when closer is nil.
func closeVia(closer *Closer, x io.Closer) {
	if closer == nil {
		_ = x.Close()
		return
	}
	closer.Close(x)
}
