package fdpass_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fdpass"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

var bins testenv.Binaries

func TestMain(m *testing.M) {
	code := m.Run()
	bins.Remove()
	os.Exit(code)
}

// stoppedServerFile mounts dummy-fuse at a directory of the lab's, opens its file and stops the server
// (SIGSTOP): a close of the file now sends a FLUSH that nobody answers. With held, the test process mounts the
// connection and keeps a copy of its /dev/fuse, as the plugin does; without, dummy-fuse mounts it alone. It
// returns the file and the connection's number.
func stoppedServerFile(t *testing.T, held bool) (*os.File, uint32) {
	t.Helper()
	testenv.RequireFUSE(t)
	lab := testenv.NewLab(t)
	mnt := filepath.Join(lab.Dir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bins.Path(t, "dummy-fuse"), mnt)
	if held {
		dev, err := fuseconn.Open()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		if err := fuseconn.Mount(dev, mnt, fuseconn.MountOptions{Name: "dummy-fuse", Source: "dummy-fuse", ReadOnly: true}); err != nil {
			t.Fatal(err)
		}
		cmd = exec.Command(bins.Path(t, "dummy-fuse"), "/dev/fd/3")
		cmd.ExtraFiles = []*os.File{dev}
	}
	server := lab.Start("dummy-fuse", cmd)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := mounts.WaitAnswering(ctx, mnt, "dummy-file.txt", server.Done()); err != nil {
		t.Fatalf("dummy-fuse never answered: %v\n%s", err, server.Tail())
	}
	f, err := os.Open(filepath.Join(mnt, "dummy-file.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, mnt, unix.AT_STATX_DONT_SYNC, 0, &st); err != nil {
		t.Fatal(err)
	}
	server.Signal(syscall.SIGSTOP)
	// Stopped only once every thread is: a thread the signal has not reached yet still answers a request, and
	// the close's FLUSH would be answered (CI saw Drain return nil, on a loaded machine).
	testenv.Eventually(t, 10*time.Second, "dummy-fuse stopped in every thread", func() bool { return testenv.Stopped(server.PID()) })
	return f, st.Dev_minor
}

// TestCloserEndsAHeldConnectionBeforeClosingItsFile: a peer's file of a FUSE connection that this process holds,
// whose server does not answer, is closed without any thread left waiting: the connection is aborted first.
// Without it the worker would sleep in FLUSH for good, and the process could never exit.
func TestCloserEndsAHeldConnectionBeforeClosingItsFile(t *testing.T) {
	f, conn := stoppedServerFile(t, true)
	if id, ok := fdpass.FUSEConnection(f); !ok || id != conn {
		t.Fatalf("FUSEConnection = %d, %t; want %d, true", id, ok, conn)
	}
	c := fdpass.NewCloser(1, 4)
	c.Close(f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Drain(ctx); err != nil {
		t.Fatalf("the close of a file of a held connection did not end: %v", err)
	}
	if n, err := fuseconn.Waiting(conn); err == nil && n != 0 {
		t.Errorf("connection %d has %d requests waiting after the close", conn, n)
	}
}

// TestDrainNamesConnectionsItCannotEnd: a file of a connection this process does not hold is closed by a worker
// that waits for its server; Drain cannot end that connection (it is another process's), gives up when its
// context ends and names it. The lab's cleanup aborts it, which ends the close.
func TestDrainNamesConnectionsItCannotEnd(t *testing.T) {
	f, conn := stoppedServerFile(t, false)
	c := fdpass.NewCloser(1, 4)
	c.Close(f)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := c.Drain(ctx)
	if err == nil || !strings.Contains(err.Error(), strconv.Itoa(int(conn))) {
		t.Fatalf("Drain = %v, want an error naming connection %d", err, conn)
	}
}

// TestRefuseRights: a socket that refuses descriptors makes the sender's message fail, and nothing arrives;
// plain messages still do.
func TestRefuseRights(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, b := os.NewFile(uintptr(fds[0]), "a"), os.NewFile(uintptr(fds[1]), "b")
	defer a.Close()
	defer b.Close()
	if err := fdpass.RefuseRights(b); errors.Is(err, fdpass.ErrRightsUnsupported) {
		t.Skip(err)
	} else if err != nil {
		t.Fatal(err)
	}
	if err := unix.Sendmsg(int(a.Fd()), []byte("x"), unix.UnixRights(int(a.Fd())), nil, 0); !errors.Is(err, unix.EPERM) {
		t.Fatalf("sending a descriptor to a socket that refuses them: %v, want EPERM", err)
	}
	if err := unix.Sendmsg(int(a.Fd()), []byte("y"), nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	buf, oob := make([]byte, 8), make([]byte, 64)
	n, oobn, _, _, err := unix.Recvmsg(int(b.Fd()), buf, oob, 0)
	if err != nil || string(buf[:n]) != "y" || oobn != 0 {
		t.Fatalf("received %q with %d control bytes (%v), want \"y\" alone", buf[:n], oobn, err)
	}
}
