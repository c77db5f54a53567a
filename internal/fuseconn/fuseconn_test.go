package fuseconn_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// mountFresh mounts a new connection on a temp dir and unmounts it when the test ends. Nobody serves it: the
// test must not touch the mount itself (every access would block until INIT is answered).
func mountFresh(t *testing.T) (*os.File, string) {
	t.Helper()
	testenv.RequireFUSE(t)
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dev, err := fuseconn.Open()
	if err != nil {
		t.Fatal(err)
	}
	if err := fuseconn.Mount(dev, dir, fuseconn.MountOptions{Name: "fuseconn-test", Source: "test", ReadOnly: true}); err != nil {
		dev.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
		dev.Close()
	})
	return dev, dir
}

// TestIDIsTheMountsDevice: the connection number of a descriptor is the minor device number the mount table
// shows for its mount, and a dup of the descriptor has the same.
func TestIDIsTheMountsDevice(t *testing.T) {
	dev, dir := mountFresh(t)
	id, err := fuseconn.ID(int(dev.Fd()))
	if errors.Is(err, fuseconn.ErrNoID) {
		t.Skipf("%v (kernel %s)", err, uname())
	}
	if err != nil {
		t.Fatal(err)
	}
	infos, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(dir))
	if err != nil || len(infos) != 1 {
		t.Fatalf("mountinfo of %s: %v, %d entries", dir, err, len(infos))
	}
	if infos[0].Major != 0 || uint32(infos[0].Minor) != id {
		t.Errorf("ID = %d, mount table: %d:%d (%s, %s)", id, infos[0].Major, infos[0].Minor, infos[0].FSType, infos[0].Options)
	}
	if infos[0].FSType != "fuse.fuseconn-test" || infos[0].Source != "test" || !hasOpt(infos[0].Options, "ro") {
		t.Errorf("mount: type %q source %q options %q", infos[0].FSType, infos[0].Source, infos[0].Options)
	}
	dup, err := unix.Dup(int(dev.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dup)
	if id2, err := fuseconn.ID(dup); err != nil || id2 != id {
		t.Errorf("ID of a dup = %d, %v; want %d", id2, err, id)
	}
}

// TestIDOfOtherDescriptors: a /dev/fuse descriptor of no connection has no ID, and anything else is refused.
func TestIDOfOtherDescriptors(t *testing.T) {
	testenv.RequireFUSE(t)
	dev, err := fuseconn.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if _, err := fuseconn.ID(int(dev.Fd())); !errors.Is(err, fuseconn.ErrNoID) {
		t.Errorf("ID of an unmounted /dev/fuse = %v, want fuseconn.ErrNoID", err)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if _, err := fuseconn.ID(int(null.Fd())); err == nil || errors.Is(err, fuseconn.ErrNoID) {
		t.Errorf("ID of %s = %v, want 'not /dev/fuse'", os.DevNull, err)
	}
	if err := fuseconn.Check(int(null.Fd())); err == nil {
		t.Errorf("fuseconn.Check(%s) = nil", os.DevNull)
	}
	if err := fuseconn.Check(int(dev.Fd())); err != nil {
		t.Errorf("fuseconn.Check(/dev/fuse) = %v", err)
	}
}

// TestResend: the kernel takes the notification on a mounted connection (this kernel has FUSE_NOTIFY_RESEND
// unless it is older than 6.9) and refuses it on a descriptor that is not mounted.
func TestResend(t *testing.T) {
	dev, _ := mountFresh(t)
	ok, err := fuseconn.Resend(int(dev.Fd()))
	if err != nil {
		t.Fatalf("Resend on a mounted connection: %v", err)
	}
	if !ok {
		t.Logf("kernel %s has no FUSE_NOTIFY_RESEND", uname())
	}
	other, err := fuseconn.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if ok, err := fuseconn.Resend(int(other.Fd())); err == nil || ok {
		t.Errorf("Resend on an unmounted /dev/fuse = %v, %v; want an error", ok, err)
	}
}

func hasOpt(opts, want string) bool { return slices.Contains(strings.Split(opts, ","), want) }

func uname() string {
	var u unix.Utsname
	_ = unix.Uname(&u)
	return unix.ByteSliceToString(u.Release[:])
}
