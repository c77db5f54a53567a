package fdpass

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fdpass/fdpasstest"
)

// TestLingeringSocketBlocksClose checks the test's own premise: closing a LingeringSocket blocks.
func TestLingeringSocketBlocksClose(t *testing.T) {
	f := fdpasstest.LingeringSocket(t)
	done := make(chan struct{})
	go func() { f.Close(); close(done) }()
	select {
	case <-done:
		t.Fatal("closing a lingering socket did not block")
	case <-time.After(300 * time.Millisecond):
	}
}

// TestCloserBoundsStuckCloses: however many slow descriptors are handed to a Closer, at most its workers are
// stuck in close(2), and Close returns at once while fewer than pending wait.
func TestCloserBoundsStuckCloses(t *testing.T) {
	before := fdpasstest.Threads(t)
	c := NewCloser(2, 16)
	start := time.Now()
	for range 16 {
		c.Close(fdpasstest.LingeringSocket(t))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("queueing 16 slow closes took %v", d)
	}
	time.Sleep(200 * time.Millisecond)
	if n := fdpasstest.Threads(t) - before; n > 4 {
		t.Errorf("%d more threads with 2 workers stuck", n)
	}
	// /dev/fuse is closed at once even while the workers are stuck.
	if dev, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0); err == nil {
		c.Close(dev)
		if _, err := unix.FcntlInt(dev.Fd(), unix.F_GETFD, 0); err == nil {
			t.Error("a /dev/fuse descriptor was not closed at once")
		}
	}
}

// TestSendOnceDoesNotBlockOnLingeringSockets: the receiver queues descriptors whose close blocks on the
// connection it was accepted on and on a second connection waiting on the listener; SendOnce still returns at
// once, the slow closes left to its Closer.
func TestSendOnceDoesNotBlockOnLingeringSockets(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "socket")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // each dialed connection stays open (closed at cleanup) with its descriptor queued
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		f := fdpasstest.LingeringSocket(t)
		if err := WriteMsg(c, []byte("x"), f, time.Now().Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		f.Close() // not the last reference: the copy in flight, queued until SendOnce, is
	}
	_, w := pipe(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- SendOnce(ctx, ln, w, config{VolumeID: "v"}, time.Second, NewCloser(1, 4)) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("SendOnce blocked closing descriptors the receiver queued")
	}
	// A context that ends wakes the wait for a receiver, whatever is queued.
	ln2, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock + "2", Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if err := SendOnce(ctx2, ln2, w, config{}, time.Second, NewCloser(1, 4)); err == nil {
		t.Error("SendOnce without a receiver succeeded")
	}
}
