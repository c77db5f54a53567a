package fusemode

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/handover"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// TestExclusiveHolderHandsOnAtTheEnd: in the relay-keeper mode a connection is served by one keeper's relay at a
// time (two relays would hand out node IDs the other does not know): a second keeper gets nothing while the
// first holds it, and gets the backend's root, then the connection with its record, once the first is gone.
func TestExclusiveHolderHandsOnAtTheEnd(t *testing.T) {
	testenv.RequireFUSE(t)
	k, dir := listeningKeeper(t)
	k.h.exclusive = true
	k.h.backendOf = func(string) *os.File {
		f, err := os.Open(dir)
		if err != nil {
			t.Error(err)
			return nil
		}
		return f
	}
	staging := filepath.Join(dir, "staging")
	k.h.add("vol-1", staging, mountConn(t, staging))
	first := helloKeeper(t, k)
	recvKind(t, first, handover.Backend, "vol-1")
	recvKind(t, first, handover.Serve, "vol-1")
	if err := first.Send(handover.Msg{Kind: handover.Served, Volume: "vol-1", Init: []byte("rec"), PID: 7}, nil); err != nil {
		t.Fatal(err)
	}
	second := helloKeeper(t, k)
	second.SetRecvDeadline(time.Now().Add(300 * time.Millisecond))
	if m, f, err := second.Recv(); err == nil {
		if f != nil {
			f.Close()
		}
		t.Fatalf("the second keeper got %+v while the first serves the connection", m)
	}
	first.Close()
	recvKind(t, second, handover.Backend, "vol-1")
	second.SetRecvDeadline(time.Now().Add(5 * time.Second))
	m, f, err := second.Recv()
	if f != nil {
		f.Close()
	}
	if err != nil || m.Kind != handover.Serve || string(m.Init) != "rec" {
		t.Fatalf("got %+v, %v; want the connection with its record once the first keeper is gone", m, err)
	}
}
