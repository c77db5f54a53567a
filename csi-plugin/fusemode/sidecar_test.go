package fusemode

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fdpass"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fdpass/fdpasstest"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/handover"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// TestSocketChmodDoesNotFollowSymlinks: the socket's directory lies in a volume the pod can write to, so root in
// the pod can put a symlink where the plugin just bound its socket; making the socket connectable must then
// fail instead of making the symlink's target (anything on the node) world-writable.
func TestSocketChmodDoesNotFollowSymlinks(t *testing.T) {
	dir := t.TempDir()
	canary := filepath.Join(dir, "canary")
	if err := os.WriteFile(canary, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(canary, filepath.Join(dir, SocketName)); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := chmodSocket(d, SocketName); err == nil {
		t.Error("chmodSocket on a symlink succeeded")
	}
	st, err := os.Stat(canary)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("the symlink's target became %#o: the chmod followed the symlink", st.Mode().Perm())
	}
	// A regular file is not the socket either.
	if err := os.Remove(filepath.Join(dir, SocketName)); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(canary, filepath.Join(dir, SocketName)); err != nil {
		t.Fatal(err)
	}
	if err := chmodSocket(d, SocketName); err == nil {
		t.Error("chmodSocket on a regular file succeeded")
	}
	// The socket itself is made connectable by anyone.
	if err := os.Remove(filepath.Join(dir, SocketName)); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: filepath.Join(dir, SocketName)}); err != nil {
		t.Fatal(err)
	}
	if err := chmodSocket(d, SocketName); err != nil {
		t.Fatalf("chmodSocket on the socket: %v", err)
	}
	if st, err := os.Lstat(filepath.Join(dir, SocketName)); err != nil || st.Mode().Perm() != 0o666 {
		t.Errorf("socket mode after chmodSocket: %v %v, want 0666", st.Mode(), err)
	}
}

// TestReleaseDoesNotWaitForThePod: in the plain sidecar mode the plugin only sends on its socket, so the socket
// refuses descriptors (SO_PASSRIGHTS, Linux 6.16) and a pod can queue none; on an older kernel it can queue
// descriptors whose close blocks (lingering TCP sockets) on connections to it, which the handover closes (all
// but the one it accepts, when it stops listening; that one after sending). Either way unpublish (Release) and
// the plugin's exit (Close) return at once.
func TestReleaseDoesNotWaitForThePod(t *testing.T) {
	testenv.RequireFUSE(t)
	pod := t.TempDir()
	rel := filepath.Join("volumes", "kubernetes.io~empty-dir", SidecarVolume, "vol")
	if err := os.MkdirAll(filepath.Join(pod, filepath.Dir(rel)), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := NewSidecar(Options{SendTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var queued atomic.Int32
	var mounted atomic.Bool
	var targets []string
	for _, name := range []string{"a", "b"} {
		target := filepath.Join(pod, "target-"+name)
		if err := os.Mkdir(target, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
		// The pod's processes connect as soon as the socket exists, while the plugin still mounts.
		socket := filepath.Join(pod, rel+name, SocketName)
		var wg sync.WaitGroup
		mounted.Store(false)
		for range 8 {
			f := fdpasstest.LingeringSocket(t)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
					c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socket, Net: "unix"})
					if err != nil {
						if mounted.Load() {
							break // the handover is over: nothing to queue on any more
						}
						time.Sleep(100 * time.Microsecond)
						continue
					}
					t.Cleanup(func() { c.Close() })
					if _, _, err := c.WriteMsgUnix([]byte("x"), unix.UnixRights(int(f.Fd())), nil); err == nil {
						queued.Add(1)
						f.Close() // the copy in flight is the last one
						return
					}
					break
				}
				go f.Close() // not sent: blocks until the peer's reset at the end
			}()
		}
		req := TargetRequest{VolumeID: "vol-" + name, Target: target, PodDir: pod, SocketDir: rel + name}
		if err := s.MountTarget(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		mounted.Store(true)
		targets = append(targets, target)
		wg.Wait()
	}
	switch refused := fdpass.RightsRefusable(); {
	case refused && queued.Load() > 0:
		t.Fatalf("the pod queued %d descriptors on a socket that refuses them", queued.Load())
	case !refused && queued.Load() == 0:
		t.Fatal("no slow descriptor could be queued: the test shows nothing")
	}
	t.Logf("%d slow descriptors queued", queued.Load())
	for _, what := range []struct {
		name string
		call func()
	}{
		{"Release", func() { s.Release(targets[0]) }},
		{"Close", func() { _ = s.Close() }},
	} {
		done := make(chan struct{})
		start := time.Now()
		go func() { what.call(); close(done) }()
		select {
		case <-done:
			t.Logf("%s returned after %v", what.name, time.Since(start))
		case <-time.After(releaseWait + 3*time.Second):
			t.Fatalf("%s blocked on descriptors the pod queued", what.name)
		}
	}
}

// TestKeepFDHandsTheRecordToTheNextSidecar: with KeepFD, the first sidecar's report gives the connection's
// record, which a restarted sidecar gets with the connection to take it over.
func TestKeepFDHandsTheRecordToTheNextSidecar(t *testing.T) {
	testenv.RequireFUSE(t)
	pod := t.TempDir()
	rel := filepath.Join("volumes", "kubernetes.io~empty-dir", SidecarVolume, "vol")
	if err := os.MkdirAll(filepath.Join(pod, filepath.Dir(rel)), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := NewSidecar(Options{SidecarKeepFD: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	target := filepath.Join(pod, "target")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
	if err := s.MountTarget(context.Background(), TargetRequest{VolumeID: "vol-1", Target: target, PodDir: pod, SocketDir: rel}); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(pod, rel, SocketName)
	sidecar := func() (*handover.Conn, handover.Msg) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := handover.Dial(ctx, socket, 10*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Send(handover.Msg{Kind: handover.Hello, Role: "sidecar"}, nil); err != nil {
			t.Fatal(err)
		}
		c.SetRecvDeadline(time.Now().Add(5 * time.Second))
		m, f, err := c.Recv()
		if err != nil || m.Kind != handover.Serve {
			t.Fatalf("sidecar got %+v, %v; want serve", m, err)
		}
		f.Close()
		return c, m
	}
	first, m := sidecar()
	if m.Init != nil {
		t.Fatalf("a new connection came with a record %q", m.Init)
	}
	if err := first.Send(handover.Msg{Kind: handover.Served, Volume: "vol-1", Init: []byte("rec"), PID: 7}, nil); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the target served", func() bool { return !s.Pending(target) })
	first.Close()
	second, m := sidecar()
	defer second.Close()
	if string(m.Init) != "rec" {
		t.Errorf("the next sidecar got the connection with record %q, want the first one's", m.Init)
	}
}
