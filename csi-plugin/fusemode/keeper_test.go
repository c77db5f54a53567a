package fusemode

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/handover"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// mountConn mounts a new connection at a new directory; nobody serves it, so the test only ever reads the mount
// table about it. It is unmounted and closed when the test ends.
func mountConn(t *testing.T, dir string) *os.File {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dev, err := fuseconn.Open()
	if err != nil {
		t.Fatal(err)
	}
	if err := fuseconn.Mount(dev, dir, fuseconn.MountOptions{Name: fuseserver.DummyFuse, Source: fuseserver.DummyFuse, ReadOnly: true}); err != nil {
		dev.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		dev.Close()
	})
	return dev
}

// dialKeeper connects to k's socket as a keeper would; the session is closed when the test ends.
func dialKeeper(t *testing.T, k *Keeper) *handover.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := handover.Dial(ctx, k.opts.KeeperSocket, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newTestKeeper(t *testing.T, uid int) (*Keeper, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "keeper") // short: it holds a socket
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	k, err := NewKeeper(Options{KeeperSocket: filepath.Join(dir, "keeper.sock"), KeeperUID: uid, StartTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return k, dir
}

// TestRecollectAdoptsOnlyItsOwnConnections: after a restart the plugin takes back a keeper's copy only when it
// is the connection mounted at the staging path its records name; another connection, or a volume it has no
// record of, is refused with a reason and the keeper told to drop it. The adopted copy is the plugin's from
// then on: unstaging (Stop) tells the keeper to drop its own.
func TestRecollectAdoptsOnlyItsOwnConnections(t *testing.T) {
	testenv.RequireFUSE(t)
	k, dir := newTestKeeper(t, os.Getuid())
	staging := filepath.Join(dir, "staging-1")
	own := mountConn(t, staging)
	other := mountConn(t, filepath.Join(dir, "elsewhere"))
	servers, err := k.Recollect(Records{Stages: []Recorded{{VolumeID: "vol-1", StagingPath: staging}}})
	if err != nil {
		t.Fatal(err)
	}
	if servers["vol-1"] == nil {
		t.Fatal("no Server for the recorded volume")
	}

	c := dialKeeper(t, k)
	send := func(m handover.Msg, f *os.File) {
		t.Helper()
		if err := c.Send(m, f); err != nil {
			t.Fatal(err)
		}
	}
	send(handover.Msg{Kind: handover.Hello, Role: "keeper", Holds: 3, Secret: k.secret}, nil)
	send(handover.Msg{Kind: handover.Hold, Volume: "vol-1"}, other)                // another connection under its name
	send(handover.Msg{Kind: handover.Hold, Volume: "vol-unknown"}, own)            // a volume without a record
	send(handover.Msg{Kind: handover.Hold, Volume: "vol-1", Init: []byte{1}}, own) // the right one
	for _, want := range []struct{ volume, reason string }{
		{"vol-1", "not the one mounted at the staging path"},
		{"vol-unknown", "no record"},
	} {
		m, _, err := c.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if m.Kind != handover.Drop || m.Volume != want.volume || !strings.Contains(m.Reason, want.reason) {
			t.Errorf("got %+v, want drop of %s because %q", m, want.volume, want.reason)
		}
	}
	var adopted *os.File
	for deadline := time.Now().Add(10 * time.Second); adopted == nil; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the plugin did not adopt its own connection")
		}
		k.h.mu.Lock()
		adopted = k.h.conns["vol-1"].dev
		k.h.mu.Unlock()
	}
	if id, err := fuseconn.ID(int(adopted.Fd())); err != nil || id != mustID(t, own) {
		t.Errorf("adopted connection %d (%v), want %d", id, err, mustID(t, own))
	}
	if got := servers["vol-1"].InitRecord(); string(got) != "\x01" {
		t.Errorf("handover record %q after adoption, want the keeper's", got)
	}

	if err := servers["vol-1"].Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	m, _, err := c.Recv()
	if err != nil || m.Kind != handover.Stop || m.Volume != "vol-1" {
		t.Errorf("after Stop the keeper got %+v, %v; want stop vol-1", m, err)
	}
	select {
	case <-servers["vol-1"].Done():
	default:
		t.Error("Done not closed after Stop")
	}
}

func mustID(t *testing.T, f *os.File) uint32 {
	t.Helper()
	id, err := fuseconn.ID(int(f.Fd()))
	if errors.Is(err, fuseconn.ErrNoID) {
		t.Skipf("%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestKeeperRefusesOtherUsers: with KeeperUID set, a session from another user is closed before anything is
// exchanged.
func TestKeeperRefusesOtherUsers(t *testing.T) {
	testenv.RequireFUSE(t)
	k, _ := newTestKeeper(t, 4242)
	if _, err := k.Recollect(Records{}); err != nil {
		t.Fatal(err)
	}
	c := dialKeeper(t, k)
	if _, _, err := c.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("a session of uid %d with KeeperUID 4242: %v, want it closed", os.Getuid(), err)
	}
	k.h.mu.Lock()
	n := len(k.h.sessions)
	k.h.mu.Unlock()
	if n != 0 {
		t.Errorf("%d sessions accepted", n)
	}
}

// TestStartWithoutKeeper: a stage without a keeper fails with ErrNoKeeper after the start timeout and leaves
// nothing mounted.
func TestStartWithoutKeeper(t *testing.T) {
	testenv.RequireFUSE(t)
	k, dir := newTestKeeper(t, os.Getuid())
	if _, err := k.Recollect(Records{}); err != nil {
		t.Fatal(err)
	}
	staging := filepath.Join(dir, "staging")
	if err := os.Mkdir(staging, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := k.Start(context.Background(), Request{VolumeID: "vol-1", Mountpoint: staging})
	if !errors.Is(err, ErrNoKeeper) {
		t.Fatalf("Start without a keeper: %v", err)
	}
	var st unix.Stat_t
	var parent unix.Stat_t
	if err := unix.Stat(staging, &st); err != nil || unix.Stat(dir, &parent) != nil || st.Dev != parent.Dev {
		t.Errorf("the staging path is still a mount point after the failed start (%v)", err)
	}
}
