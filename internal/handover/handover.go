// Package handover is the session protocol of the processes that keep FUSE connections alive between them:
// the CSI plugin, which mounts each connection and keeps a copy of its /dev/fuse descriptor; the keeper, which
// keeps another copy and runs the FUSE servers; and the servers, which answer the connections the keeper hands
// them. As long as one of them holds a connection's descriptor, the kernel keeps the mount, callers wait, and
// whoever serves the descriptor next answers them; so any one of these processes can die and come back while
// the workloads see a pause, not an error.
//
// A session is a connection on a unix sequenced-packet socket: every message is one JSON object, and the two
// kinds that hand over a connection (Hold, Serve) carry its descriptor. Each side may send at any time. The
// messages:
//
//	hello  {role, version, pid, holds, secret}  first message of the side that connected; holds Hold messages
//	                                    follow; secret proves the right to connect where the listener asks for one
//	hold   {volume, init} + descriptor  "I hold this connection": what a restarted peer re-collects
//	serve  {volume, init} + descriptor  "serve this connection"; no init: it is new, its INIT is still queued
//	served {volume, init, pid, version} the connection is answered by process pid; init is its handover record
//	stop   {volume}                     the connection is over (unmounted): drop every copy of it
//	drop   {volume, reason}             "I do not know this connection": the receiver closes its copy
//	ended  {volume, reason}             a server's connection ended
//	backend {volume} + descriptor       the root directory of the volume's backend mount (the relay-keeper mode:
//	                                    the relay reaches the real server's private mount through it)
//	backend-serve {volume} + descriptor the volume's backend connection (relay-keeper mode): run the real server
//	                                    on it
//	backend-ended {volume, reason}      the real server of the volume's backend exited
//
// The handover record (init) is the kernel's INIT request and the first server's reply, which a successor
// needs to take an initialised connection over (dummyfs.Takeover).
package handover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fdpass"
)

// Kind is a message's kind.
type Kind string

// The kinds of messages.
const (
	Hello  Kind = "hello"
	Hold   Kind = "hold"
	Serve  Kind = "serve"
	Served Kind = "served"
	Stop   Kind = "stop"
	Drop   Kind = "drop"
	Ended  Kind = "ended"
	// Backend carries a directory descriptor, not a connection: the root of a relay's backend mount.
	Backend Kind = "backend"
	// BackendServe carries a backend's /dev/fuse descriptor for the keeper's real server; BackendEnded says
	// that server exited.
	BackendServe Kind = "backend-serve"
	BackendEnded Kind = "backend-ended"
)

// ReasonUnmounted is the Reason of Ended when the connection itself is over (unmounted or aborted): nobody
// can serve it again. Any other reason is a server's failure on a connection that lives on.
const ReasonUnmounted = "unmounted"

// carriesFD reports whether messages of kind k carry a connection's descriptor (and only they do).
func (k Kind) carriesFD() bool { return k == Hold || k == Serve || k == Backend || k == BackendServe }

// known reports whether k is a kind of this protocol.
func (k Kind) known() bool {
	switch k {
	case Hello, Hold, Serve, Served, Stop, Drop, Ended, Backend, BackendServe, BackendEnded:
		return true
	}
	return false
}

// Msg is one message. Which fields mean something depends on Kind (see the package comment).
type Msg struct {
	Kind Kind `json:"kind"`
	// Volume names the connection: the volume ID of the CSI volume it serves.
	Volume string `json:"volume,omitempty"`
	// Init is the connection's handover record.
	Init []byte `json:"init,omitempty"`
	// Role says who says hello ("keeper"), Version which build, PID which process (in the sender's PID
	// namespace; for logs).
	Role    string `json:"role,omitempty"`
	Version string `json:"version,omitempty"`
	PID     int    `json:"pid,omitempty"`
	// Holds is the number of Hold messages that follow a Hello.
	Holds int `json:"holds,omitempty"`
	// Reason says why, for Drop and Ended; ReasonUnmounted for an Ended connection that is over.
	Reason string `json:"reason,omitempty"`
	// Secret, in a Hello, is what the listener asks of those who may connect (the keeper socket's per-node
	// secret).
	Secret []byte `json:"secret,omitempty"`
}

// Limits of a message, checked on receipt.
const (
	// MaxInit bounds a handover record: an INIT request and reply are a few hundred bytes.
	MaxInit = 1024
	// MaxVolume bounds a volume ID (the CSI spec's limit for IDs).
	MaxVolume = 128
	// maxReason bounds a reason's length.
	maxReason = 1024
	// maxHolds bounds the connections one hello may announce.
	maxHolds = 100000
	// MaxSecret bounds a hello's secret.
	MaxSecret = 64
)

// validate checks m as received (with or without a descriptor).
func (m Msg) validate(hasFD bool) error {
	switch {
	case !m.Kind.known():
		return fmt.Errorf("unknown message kind %q", clip(string(m.Kind)))
	case m.Kind.carriesFD() && !hasFD:
		return fmt.Errorf("%s message without a descriptor", m.Kind)
	case !m.Kind.carriesFD() && hasFD:
		return fmt.Errorf("%s message with a descriptor", m.Kind)
	case len(m.Init) > MaxInit:
		return fmt.Errorf("%s message: handover record of %d bytes (at most %d)", m.Kind, len(m.Init), MaxInit)
	case len(m.Reason) > maxReason:
		return fmt.Errorf("%s message: reason of %d bytes (at most %d)", m.Kind, len(m.Reason), maxReason)
	case len(m.Secret) > MaxSecret || (len(m.Secret) > 0 && m.Kind != Hello):
		return fmt.Errorf("%s message: secret of %d bytes (only a hello has one, of at most %d)", m.Kind, len(m.Secret), MaxSecret)
	}
	if m.Kind == Hello {
		if m.Holds < 0 || m.Holds > maxHolds {
			return fmt.Errorf("hello announces %d connections", m.Holds)
		}
		return nil
	}
	if err := ValidateVolume(m.Volume); err != nil {
		return fmt.Errorf("%s message: volume %q: %w", m.Kind, clip(m.Volume), err)
	}
	return nil
}

// ValidateVolume checks a volume ID as a connection's name: not empty, at most MaxVolume bytes, no NUL, no
// "/" (it names files and log lines).
func ValidateVolume(v string) error {
	switch {
	case v == "":
		return errors.New("must not be empty")
	case len(v) > MaxVolume:
		return fmt.Errorf("longer than %d bytes", MaxVolume)
	case strings.ContainsAny(v, "\x00/"):
		return errors.New("must not contain NUL or '/'")
	}
	return nil
}

// Conn is one end of a session. Send may be called from several goroutines; Recv from one at a time.
type Conn struct {
	c       *net.UnixConn
	timeout time.Duration
	mu      sync.Mutex // one Send at a time: a message and its descriptor go out together
	// closer, when set, closes what the peer sent and the session's socket (see fdpass.Closer): the end that
	// does not trust its peer.
	closer *fdpass.Closer
	// recvBy bounds the next Recv calls (zero: none).
	recvBy time.Time
	// dropping makes Recv read with no room for descriptors (DropDescriptors).
	dropping bool
	dl       sync.Mutex // closed, and the read deadline, which Close sets in the past to wake a Recv
	closed   bool
}

// SendTimeout bounds a Send: a peer that stops reading gets its session closed instead of blocking the sender.
const SendTimeout = 10 * time.Second

func newConn(c *net.UnixConn) *Conn { return &Conn{c: c, timeout: SendTimeout} }

// Dial connects to the session socket at path (retrying every interval while nobody listens there yet, until
// ctx ends).
func Dial(ctx context.Context, path string, interval time.Duration) (*Conn, error) {
	c, err := fdpass.Dial(ctx, "unixpacket", path, interval)
	if err != nil {
		return nil, err
	}
	return newConn(c), nil
}

// Listener accepts sessions on a unix sequenced-packet socket.
type Listener struct {
	l      *net.UnixListener
	closer *fdpass.Closer
}

// CloseVia makes l close itself and every session it accepts through closer (see fdpass.Closer): the
// listener's side does not trust who connects. Call it before Accept.
func (l *Listener) CloseVia(closer *fdpass.Closer) { l.closer = closer }

// Listen listens at path (replacing a stale socket, never anything else; see fdpass.Listen), with the socket's
// permissions set to mode.
func Listen(path string, mode os.FileMode) (*Listener, error) {
	l, err := fdpass.Listen("unixpacket", path, mode)
	if err != nil {
		return nil, err
	}
	return &Listener{l: l}, nil
}

// ListenerOf takes sessions on l, a listening unix sequenced-packet socket made elsewhere (e.g. bound through a
// directory descriptor).
func ListenerOf(l *net.UnixListener) *Listener { return &Listener{l: l} }

// Accept waits for the next session.
func (l *Listener) Accept() (*Conn, error) {
	c, err := l.l.AcceptUnix()
	if err != nil {
		return nil, err
	}
	conn := newConn(c)
	conn.closer = l.closer
	return conn, nil
}

// Close stops listening and removes the socket; a blocked Accept returns. With CloseVia, connections still
// waiting to be accepted may hold descriptors that are slow to close: the socket is closed by the Closer, and
// a blocked Accept is woken at once.
func (l *Listener) Close() error {
	if l.closer == nil {
		return l.l.Close()
	}
	_ = l.l.SetDeadline(time.Unix(1, 0))
	l.closer.Close(l.l)
	return nil
}

// Pair returns a connected pair of session ends, for a parent and the child it starts: the child's end is a
// file to pass in exec.Cmd.ExtraFiles (the parent closes its copy once the child runs; FromFile opens it in
// the child).
func Pair() (*Conn, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	child := os.NewFile(uintptr(fds[1]), "handover")
	parent, err := FromFile(os.NewFile(uintptr(fds[0]), "handover"))
	if err != nil {
		child.Close()
		return nil, nil, err
	}
	return parent, child, nil
}

// FromFile makes a session end of f, a connected sequenced-packet unix socket (e.g. /dev/fd/3 inherited from
// the parent). f is closed: the Conn has its own descriptor.
func FromFile(f *os.File) (*Conn, error) {
	defer f.Close()
	typ, err := unix.GetsockoptInt(int(f.Fd()), unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		return nil, fmt.Errorf("%s is not a socket: %w", f.Name(), err)
	}
	if typ != unix.SOCK_SEQPACKET {
		return nil, fmt.Errorf("%s is not a sequenced-packet socket (type %d)", f.Name(), typ)
	}
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("%s is not a unix socket", f.Name())
	}
	return newConn(uc), nil
}

// Send sends m, with f's descriptor when m's kind carries one (f must then be set, else nil). The caller keeps
// f.
func (c *Conn) Send(m Msg, f *os.File) error {
	if err := m.validate(f != nil); err != nil {
		return fmt.Errorf("not sending: %w", err)
	}
	data, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encoding a %s message: %w", m.Kind, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dl.Lock()
	closed := c.closed
	c.dl.Unlock()
	if closed {
		return fmt.Errorf("%s message: the session is closed: %w", m.Kind, net.ErrClosed)
	}
	if err := fdpass.WriteMsg(c.c, data, f, time.Now().Add(c.timeout)); err != nil {
		return fmt.Errorf("%s message: %w", m.Kind, err)
	}
	return nil
}

// Recv waits for the next message. A message that breaks the protocol (not JSON, an unknown kind, a missing or
// surplus descriptor, a descriptor that is not /dev/fuse, fields out of bounds) is an error, after which the
// caller should end the session; any descriptor it carried is closed. The end of the session is an error
// wrapping io.EOF.
func (c *Conn) Recv() (Msg, *os.File, error) {
	c.dl.Lock()
	if c.closed {
		c.dl.Unlock()
		return Msg{}, nil, fmt.Errorf("the session is closed: %w", net.ErrClosed)
	}
	err := c.c.SetReadDeadline(c.recvBy)
	c.dl.Unlock()
	if err != nil {
		return Msg{}, nil, fmt.Errorf("setting the read deadline: %w", err)
	}
	var data []byte
	var f *os.File
	if c.dropping {
		data, err = fdpass.ReadMsgDropping(c.c)
		if errors.Is(err, fdpass.ErrDroppedRights) {
			return Msg{}, nil, fmt.Errorf("protocol error: %w", err)
		}
	} else {
		data, f, err = fdpass.ReadMsgVia(c.c, c.closer)
	}
	if err != nil {
		return Msg{}, nil, err
	}
	var m Msg
	err = json.Unmarshal(data, &m)
	if err != nil {
		err = fmt.Errorf("message %q is not JSON: %w", clip(string(data)), err)
	} else if err = m.validate(f != nil); err == nil && f != nil {
		switch {
		case m.Kind == Backend && !fdpass.IsDirectory(f):
			err = fmt.Errorf("%s message: descriptor is not a directory", m.Kind)
		case m.Kind != Backend && !fdpass.IsFuseDevice(f):
			err = fmt.Errorf("%s message: descriptor is not /dev/fuse", m.Kind)
		}
	}
	if err != nil {
		if f != nil {
			c.Discard(f)
		}
		return Msg{}, nil, fmt.Errorf("protocol error: %w", err)
	}
	return m, f, nil
}

// CloseVia makes c close what the peer sends and, at the end, its socket through closer (see fdpass.Closer):
// for the end that does not trust its peer. Accepted sessions of a Listener with CloseVia have it already.
func (c *Conn) CloseVia(closer *fdpass.Closer) { c.closer = closer }

// DropDescriptors, while drop, makes Recv read with no room for descriptors: what a message carries is
// released by the kernel unopened (fdpass.ReadMsgDropping), and the message is a protocol error. For the part of
// a session where the protocol has the peer send none (a hello): a descriptor closed here could make the
// closing thread wait for a FUSE server.
func (c *Conn) DropDescriptors(drop bool) { c.dropping = drop }

// RefuseDescriptors drops descriptors for the rest of the session (DropDescriptors) and makes the kernel fail
// the peer's sends that carry one (fdpass.RefuseRights), so that none even waits in the socket. A kernel
// without the means (before Linux 6.16) returns fdpass.ErrRightsUnsupported; the drop holds all the same.
func (c *Conn) RefuseDescriptors() error {
	c.dropping = true
	return fdpass.RefuseRights(c.c)
}

// SetRecvDeadline bounds the Recv calls that follow: past t they fail (zero: no bound).
func (c *Conn) SetRecvDeadline(t time.Time) { c.recvBy = t }

// Discard closes f, a descriptor the peer sent, through the session's Closer if it has one.
func (c *Conn) Discard(f *os.File) {
	if c.closer == nil {
		_ = f.Close()
		return
	}
	c.closer.Close(f)
}

// Close ends the session; a blocked Recv or Send returns. With a Closer (an accepted session), Close only
// wakes them and leaves the socket, which may hold descriptors of the peer's that are slow to close, to the
// Closer: it waits while the Closer is full.
func (c *Conn) Close() error {
	if c.closer == nil {
		return c.c.Close()
	}
	c.dl.Lock()
	if c.closed {
		c.dl.Unlock()
		return nil
	}
	c.closed = true
	_ = c.c.SetDeadline(time.Unix(1, 0))
	c.dl.Unlock()
	c.closer.Close(c.c)
	return nil
}

// PeerUID returns the user ID of the process at the other end (SO_PEERCRED, as it was when it connected).
func (c *Conn) PeerUID() (int, error) {
	cred, err := c.PeerCred()
	if err != nil {
		return 0, err
	}
	return int(cred.Uid), nil
}

// PeerCred returns the credentials of the process at the other end (SO_PEERCRED, as they were when it
// connected).
func (c *Conn) PeerCred() (*unix.Ucred, error) {
	raw, err := c.c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if serr != nil {
		return nil, fmt.Errorf("SO_PEERCRED: %w", serr)
	}
	return cred, nil
}

func clip(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
