package dummyfs

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
)

// A FUSE connection outlives its server process as long as some other process holds a descriptor of it: the
// kernel keeps the mount, callers wait, and whoever reads the device next serves them. Takeover lets a new
// dummy-fuse process be that reader.
//
// The kernel negotiates a connection once, in INIT, and never repeats it, so the successor needs what was
// negotiated: the handover record, which the first server writes once it answered INIT (Server.InitRecord,
// the --save-init flag). It is the kernel's INIT request exactly as read from /dev/fuse (struct
// fuse_in_header + struct fuse_init_in) followed by the reply that server wrote (struct fuse_out_header +
// struct fuse_init_out), as in include/uapi/linux/fuse.h; each part starts with its own length.
//
// go-fuse's fuse.NewServer cannot serve such a connection (it waits for an INIT that never comes), but its
// ProtocolServer can: HandleRequest of the saved INIT sets the negotiated state without writing anything to
// the device (fuse/protocol-server.go in github.com/hanwen/go-fuse/v2).

// Layouts of struct fuse_init_in: 16 bytes up to protocol 7.35, 64 bytes (flags2 and padding) since 7.36.
const (
	initInLenOld = 16
	initInLen    = 64
	initFlags2At = inHeaderLen + 16 // offset of fuse_init_in.flags2 in the request

	kernelMajor = 7  // FUSE_KERNEL_VERSION
	minMinor    = 12 // the oldest protocol go-fuse accepts (_MINIMUM_MINOR_VERSION in fuse/request_linux.go)
)

// HandoverError is a handover the successor refuses because it cannot honour it: a record it does not
// understand, or a connection it would serve with other settings than were negotiated.
type HandoverError struct{ Reason string }

func (e *HandoverError) Error() string { return "cannot take over the FUSE connection: " + e.Reason }

func refuse(format string, a ...any) error { return &HandoverError{Reason: fmt.Sprintf(format, a...)} }

// splitInitRecord checks a handover record and returns its request and reply.
func splitInitRecord(rec []byte) (req, reply []byte, err error) {
	if len(rec) < inHeaderLen {
		return nil, nil, refuse("handover record of %d bytes is shorter than a FUSE request header", len(rec))
	}
	n := int(binary.NativeEndian.Uint32(rec[0:4]))
	if op := binary.NativeEndian.Uint32(rec[4:8]); op != opInit {
		return nil, nil, refuse("handover record holds opcode %d, not INIT (%d)", op, opInit)
	}
	if n > len(rec) {
		return nil, nil, refuse("handover record: INIT request of %d bytes is cut at %d", n, len(rec))
	}
	// The length decides the layout; only a known layout is read (the record comes from another process).
	if n != inHeaderLen+initInLen && n != inHeaderLen+initInLenOld {
		return nil, nil, refuse("unknown INIT layout: a request of %d bytes (known: %d, %d)", n, inHeaderLen+initInLenOld, inHeaderLen+initInLen)
	}
	req, reply = rec[:n], rec[n:]
	major, minor := binary.NativeEndian.Uint32(req[inHeaderLen:]), binary.NativeEndian.Uint32(req[inHeaderLen+4:])
	switch {
	case major != kernelMajor:
		return nil, nil, refuse("kernel speaks FUSE %d.%d, this server %d.x", major, minor, kernelMajor)
	case (minor >= 36) != (n == inHeaderLen+initInLen):
		return nil, nil, refuse("unknown INIT layout: %d bytes of fuse_init_in for protocol 7.%d", n-inHeaderLen, minor)
	case minor < minMinor:
		return nil, nil, refuse("kernel speaks FUSE 7.%d, this server needs at least 7.%d", minor, minMinor)
	}
	if len(reply) < outHeaderLen || int(binary.NativeEndian.Uint32(reply[0:4])) != len(reply) {
		return nil, nil, refuse("handover record: the INIT reply after the %d-byte request is missing or cut (%d bytes)", n, len(reply))
	}
	if e := int32(binary.NativeEndian.Uint32(reply[4:8])); e != 0 {
		return nil, nil, refuse("handover record: the predecessor refused INIT (error %d); the connection never worked", e)
	}
	return req, reply, nil
}

// kernelHasResend reports whether the kernel's INIT request announced FUSE_HAS_RESEND.
func kernelHasResend(req []byte) bool {
	if len(req) < initFlags2At+4 {
		return false
	}
	flags2 := binary.NativeEndian.Uint32(req[initFlags2At:])
	return uint64(flags2)<<32&fuse.CAP_HAS_RESEND != 0
}

// replayInit feeds the saved INIT request to the connection's protocol server, as if it had just been read,
// and checks that the reply it computes is the one the predecessor wrote: otherwise this server would
// assume settings the kernel never agreed to (another max_write, other capabilities).
func (c *Conn) replayInit(rec []byte) error {
	req, saved, err := splitInitRecord(rec)
	if err != nil {
		return err
	}
	out := make([]byte, c.bufSize)
	m, st := c.ps.HandleRequest([][]byte{req}, [][]byte{out})
	if !st.Ok() || m < outHeaderLen {
		return refuse("replaying INIT failed: %v", st)
	}
	if got := out[:m]; !bytes.Equal(got, saved) {
		return refuse("this server would negotiate other settings than its predecessor did (INIT reply %x, predecessor's %x): an incompatible version or options", got, saved)
	}
	c.init = append([]byte(nil), rec...)
	return nil
}

// resend asks the kernel to queue again the requests a dead predecessor had read but not answered
// (fuseconn.Resend). It reports false without error when the kernel cannot (no FUSE_HAS_RESEND in its INIT).
func (c *Conn) resend() (bool, error) {
	if !kernelHasResend(c.init) {
		return false, nil
	}
	return fuseconn.Resend(c.fd)
}
