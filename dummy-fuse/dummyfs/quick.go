package dummyfs

import (
	"encoding/binary"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Opcodes and input sizes of the requests QuickReply answers (include/uapi/linux/fuse.h).
const (
	opOpen    = 14 // FUSE_OPEN, struct fuse_open_in: 8 bytes
	opRead    = 15 // FUSE_READ, struct fuse_read_in: 40 bytes
	opRelease = 18 // FUSE_RELEASE, struct fuse_release_in: 24 bytes
	opFlush   = 25 // FUSE_FLUSH, struct fuse_flush_in: 24 bytes

	openInLen    = 8
	readInLen    = 40
	releaseInLen = 24
	flushInLen   = 24
	openOutLen   = 16 // struct fuse_open_out
)

// QuickReply answers the requests that make up nearly all of the traffic, READ (when there is no read
// latency: a slow READ stays with go-fuse, which tracks it for INTERRUPT), OPEN, FLUSH and RELEASE, with the same
// filesystem methods and the same reply bytes as go-fuse (TestQuickReplyMatchesGoFuse), straight from the
// request bytes: go-fuse's HandleRequest allocates about 1 KiB per request, whose churn costs GC work and
// raises the server's peak RSS. Everything else, and everything under --debug (go-fuse logs each request),
// goes through go-fuse: QuickReply reports false for it. It writes the reply into out and returns its length.
func (fs *FS) QuickReply(req, out []byte) (int, bool) {
	if fs.opts.Debug || len(req) < inHeaderLen || len(out) < outHeaderLen+openOutLen {
		return 0, false
	}
	ne := binary.NativeEndian
	if ne.Uint16(req[36:38]) != 0 { // total_extlen: request extensions, left to go-fuse
		return 0, false
	}
	node := ne.Uint64(req[16:24])
	body := req[inHeaderLen:]
	switch ne.Uint32(req[4:8]) {
	case opRead:
		if len(body) < readInLen || fs.opts.ReadLatency > 0 {
			return 0, false
		}
		if node != FileID {
			_, st := fs.Read(nil, &fuse.ReadIn{InHeader: fuse.InHeader{NodeId: node}}, nil) // the error
			return replyStatus(req, out, st), true
		}
		data := fs.readData(ne.Uint64(body[8:16]), ne.Uint32(body[16:20]))
		if len(out) < outHeaderLen+len(data) {
			return 0, false
		}
		n := outHeaderLen + copy(out[outHeaderLen:], data)
		putOutHeader(req, out, n, fuse.OK)
		return n, true
	case opOpen:
		if len(body) < openInLen {
			return 0, false
		}
		in := fuse.OpenIn{InHeader: fuse.InHeader{NodeId: node}, Flags: ne.Uint32(body[0:4]), Mode: ne.Uint32(body[4:8])}
		var o fuse.OpenOut
		if st := fs.Open(nil, &in, &o); st != fuse.OK {
			return replyStatus(req, out, st), true
		}
		ne.PutUint64(out[outHeaderLen:], o.Fh)
		ne.PutUint32(out[outHeaderLen+8:], o.OpenFlags)
		ne.PutUint32(out[outHeaderLen+12:], uint32(o.BackingID))
		putOutHeader(req, out, outHeaderLen+openOutLen, fuse.OK)
		return outHeaderLen + openOutLen, true
	case opFlush:
		if len(body) < flushInLen {
			return 0, false
		}
		return replyStatus(req, out, fs.Flush(nil, &fuse.FlushIn{InHeader: fuse.InHeader{NodeId: node}})), true
	case opRelease:
		if len(body) < releaseInLen {
			return 0, false
		}
		fs.Release(nil, &fuse.ReleaseIn{InHeader: fuse.InHeader{NodeId: node}})
		return replyStatus(req, out, fuse.OK), true
	}
	return 0, false
}

// replyStatus writes a reply without payload: the out header alone.
func replyStatus(req, out []byte, st fuse.Status) int {
	putOutHeader(req, out, outHeaderLen, st)
	return outHeaderLen
}

// putOutHeader writes struct fuse_out_header: the reply's length, the negated errno, the request's unique ID.
func putOutHeader(req, out []byte, n int, st fuse.Status) {
	ne := binary.NativeEndian
	ne.PutUint32(out[0:4], uint32(n))
	ne.PutUint32(out[4:8], uint32(-int32(st)))
	copy(out[8:16], req[8:16])
}
