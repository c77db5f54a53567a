package dummyfs

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// fuseRequest returns a request with the given opcode, node and body, as the kernel writes it.
func fuseRequest(op uint32, node uint64, body []byte) []byte {
	b := make([]byte, inHeaderLen+len(body))
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint32(b[4:], op)
	ne.PutUint64(b[8:], 0x8000000000000abc) // unique, with the resend bit as a successor sees it
	ne.PutUint64(b[16:], node)
	ne.PutUint32(b[24:], 1000) // uid
	ne.PutUint32(b[28:], 1000) // gid
	ne.PutUint32(b[32:], 4242) // pid
	copy(b[inHeaderLen:], body)
	return b
}

func readBody(off uint64, size uint32) []byte {
	b := make([]byte, readInLen)
	binary.NativeEndian.PutUint64(b[0:], FileHandle)
	binary.NativeEndian.PutUint64(b[8:], off)
	binary.NativeEndian.PutUint32(b[16:], size)
	return b
}

func openBody(flags uint32) []byte {
	b := make([]byte, openInLen)
	binary.NativeEndian.PutUint32(b[0:], flags)
	return b
}

// TestQuickReplyMatchesGoFuse: for every request QuickReply answers, its reply is byte for byte the one
// go-fuse's ProtocolServer writes for the same filesystem after the same INIT.
func TestQuickReplyMatchesGoFuse(t *testing.T) {
	reqs := map[string][]byte{}
	for _, node := range []uint64{RootID, FileID, 7} {
		for _, rd := range []struct {
			off  uint64
			size uint32
		}{{0, 4096}, {0, 5}, {5, 4096}, {13, 4096}, {1 << 40, 10}, {0, 0}} {
			reqs[fmt.Sprintf("READ node %d off %d size %d", node, rd.off, rd.size)] = fuseRequest(opRead, node, readBody(rd.off, rd.size))
		}
		for _, fl := range []int{syscall.O_RDONLY, syscall.O_WRONLY, syscall.O_RDWR, syscall.O_RDONLY | syscall.O_TRUNC, syscall.O_RDONLY | syscall.O_DIRECT} {
			reqs[fmt.Sprintf("OPEN node %d flags %#x", node, fl)] = fuseRequest(opOpen, node, openBody(uint32(fl)))
		}
		reqs[fmt.Sprintf("RELEASE node %d", node)] = fuseRequest(opRelease, node, make([]byte, releaseInLen))
		reqs[fmt.Sprintf("FLUSH node %d", node)] = fuseRequest(opFlush, node, make([]byte, flushInLen))
	}
	for _, direct := range []bool{false, true} {
		opts := DefaultOptions()
		opts.DirectIO = direct
		c := NewConn(-1, New(opts), MountOptions(opts), 1)
		if c.quick == nil {
			t.Fatal("the filesystem offers no QuickReply")
		}
		out := make([]byte, c.bufSize)
		if m, st := c.ps.HandleRequest([][]byte{kernelInit(41, 0)}, [][]byte{out}); !st.Ok() || m < outHeaderLen {
			t.Fatalf("INIT: %v, %d bytes", st, m)
		}
		for name, req := range reqs {
			want := make([]byte, c.bufSize)
			m, st := c.ps.HandleRequest([][]byte{req}, [][]byte{want})
			if !st.Ok() {
				t.Fatalf("%s: go-fuse: %v", name, st)
			}
			got := make([]byte, c.bufSize)
			n, ok := c.quick.QuickReply(req, got)
			if !ok {
				t.Errorf("direct-io %t, %s: not answered by QuickReply", direct, name)
				continue
			}
			if !bytes.Equal(got[:n], want[:m]) {
				t.Errorf("direct-io %t, %s:\nQuickReply %x\ngo-fuse    %x", direct, name, got[:n], want[:m])
			}
		}
	}
}

// TestQuickReplyLeavesToGoFuse: what QuickReply does not answer goes to go-fuse unchanged.
func TestQuickReplyLeavesToGoFuse(t *testing.T) {
	slow := DefaultOptions()
	slow.ReadLatency = time.Millisecond
	debug := DefaultOptions()
	debug.Debug = true
	ext := fuseRequest(opOpen, FileID, openBody(0))
	binary.NativeEndian.PutUint16(ext[36:], 8) // a request extension follows
	for _, tc := range []struct {
		name string
		opts Options
		req  []byte
	}{
		{"a READ with a read latency (go-fuse tracks it for INTERRUPT)", slow, fuseRequest(opRead, FileID, readBody(0, 4096))},
		{"anything under --debug (go-fuse logs it)", debug, fuseRequest(opOpen, FileID, openBody(0))},
		{"GETATTR", DefaultOptions(), fuseRequest(3, FileID, make([]byte, 16))},
		{"a request with an extension", DefaultOptions(), ext},
		{"a cut READ", DefaultOptions(), fuseRequest(opRead, FileID, make([]byte, 8))},
		{"a cut header", DefaultOptions(), fuseRequest(opOpen, FileID, nil)[:20]},
	} {
		if n, ok := New(tc.opts).QuickReply(tc.req, make([]byte, 8192)); ok {
			t.Errorf("%s: answered (%d bytes), want it left to go-fuse", tc.name, n)
		}
	}
}

// TestQuickReplyAllocatesNothing: the point of QuickReply.
func TestQuickReplyAllocatesNothing(t *testing.T) {
	fs := New(DefaultOptions())
	out := make([]byte, 8192)
	for _, req := range [][]byte{fuseRequest(opRead, FileID, readBody(0, 4096)), fuseRequest(opOpen, FileID, openBody(0)), fuseRequest(opRelease, FileID, make([]byte, releaseInLen)), fuseRequest(opFlush, FileID, make([]byte, flushInLen))} {
		if a := testing.AllocsPerRun(100, func() { fs.QuickReply(req, out) }); a != 0 {
			t.Errorf("opcode %d: %v allocations per request", binary.NativeEndian.Uint32(req[4:8]), a)
		}
	}
}
