package fdpass

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// soPassRights is SO_PASSRIGHTS (include/uapi/asm-generic/socket.h, Linux 6.16; golang.org/x/sys does not
// name it yet): at 0, the kernel refuses every message that carries descriptors to the socket (the sender's
// sendmsg fails with EPERM), so no descriptor ever lands in the receiver. A listening socket's setting is
// inherited by the connections it accepts, already while they wait in its backlog.
const soPassRights = 83

// ErrRightsUnsupported is returned by RefuseRights on a kernel without SO_PASSRIGHTS (before Linux 6.16).
var ErrRightsUnsupported = errors.New("this kernel cannot make a socket refuse descriptors (SO_PASSRIGHTS, Linux 6.16)")

// RefuseRights makes the unix socket c refuse messages that carry descriptors, where none is expected: a
// descriptor a peer pushes into a process can make it wait when it closes it (see Closer).
func RefuseRights(c syscall.Conn) error { return setPassRights(c, 0) }

// RefuseRightsControl is a net.ListenConfig Control function that makes a listening socket refuse
// descriptors before it is bound, so that no connection can queue one, not even one made at once; on a kernel
// without SO_PASSRIGHTS it does nothing.
func RefuseRightsControl(_, _ string, raw syscall.RawConn) error {
	if err := setPassRightsRaw(raw, 0); err != nil && !errors.Is(err, ErrRightsUnsupported) {
		return err
	}
	return nil
}

// RightsRefusable reports whether this kernel can make a socket refuse descriptors (SO_PASSRIGHTS).
func RightsRefusable() bool {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	return unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, soPassRights, 0) == nil
}

func setPassRights(c syscall.Conn, v int) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	return setPassRightsRaw(raw, v)
}

func setPassRightsRaw(raw syscall.RawConn, v int) error {
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, soPassRights, v) }); err != nil {
		return err
	}
	switch {
	case errors.Is(serr, unix.ENOPROTOOPT):
		return ErrRightsUnsupported
	case serr != nil:
		return fmt.Errorf("setsockopt SO_PASSRIGHTS=%d: %w", v, serr)
	}
	return nil
}
