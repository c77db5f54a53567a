package fuseserver_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// askFusermount plays libfuse asking fusermount for a connection (lib/mount.c, fuse_mount_fusermount): one end of
// a socket pair in $_FUSE_COMMFD, the stand-in run with args, and whatever descriptor it sends read from the other
// end. It returns the stand-in's status and output and the descriptor (-1: none).
func askFusermount(t *testing.T, args ...string) (int, string, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[1])
	t.Setenv("_FUSE_COMMFD", strconv.Itoa(fds[0]))
	var out bytes.Buffer
	status := fuseserver.Fusermount(args, &out)
	unix.Close(fds[0]) // as libfuse's child exits: no message means end of file
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(fds[1], make([]byte, 1), oob, 0)
	if err != nil || oobn == 0 {
		return status, out.String(), -1
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		t.Fatalf("control messages %v (%v), want one", msgs, err)
	}
	got, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(got) != 1 {
		t.Fatalf("descriptors %v (%v), want one", got, err)
	}
	return status, out.String(), got[0]
}

// TestFusermountStandInHandsThePassedConnection: asked for a connection as libfuse asks fusermount, the stand-in
// sends the very /dev/fuse file its server was given (the same open file: a flag set through one shows through
// the other) and mounts nothing; an unmount is left alone; and it refuses, saying why, without a passed
// connection or with something other than /dev/fuse.
func TestFusermountStandInHandsThePassedConnection(t *testing.T) {
	testenv.RequireFUSE(t)
	dev, err := fuseconn.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	t.Setenv(fuseserver.HandoffFDEnv, strconv.Itoa(int(dev.Fd())))
	mnt := t.TempDir()
	status, out, fd := askFusermount(t, "-o", "rw,nosuid,nodev,allow_other,auto_unmount,subtype=s3fs", "--", mnt)
	if status != 0 || fd < 0 {
		t.Fatalf("stand-in: status %d, descriptor %d, output %q; want the connection sent", status, fd, out)
	}
	defer unix.Close(fd)
	if err := fuseconn.Check(fd); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	if fl, err := unix.FcntlInt(dev.Fd(), unix.F_GETFL, 0); err != nil || fl&unix.O_NONBLOCK == 0 {
		t.Errorf("the descriptor sent is not the passed connection's open file (flags %#x, %v)", fl, err)
	}
	if ents, err := os.ReadDir(mnt); err != nil || len(ents) != 0 {
		t.Errorf("mountpoint %s: %v, %v", mnt, ents, err)
	}
	if status, _, fd := askFusermount(t, "-u", "-q", "-z", "--", mnt); status != 0 || fd >= 0 {
		t.Errorf("unmount: status %d, descriptor %d; want nothing done, status 0", status, fd)
	}

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	t.Setenv(fuseserver.HandoffFDEnv, strconv.Itoa(int(r.Fd())))
	if status, out, fd := askFusermount(t, "--", mnt); status != 1 || fd >= 0 || !strings.Contains(out, fuseserver.HandoffFDEnv) || !strings.Contains(out, "/dev/fuse") {
		t.Errorf("a pipe passed: status %d, descriptor %d, output %q; want a refusal naming $%s", status, fd, out, fuseserver.HandoffFDEnv)
	}
	os.Unsetenv(fuseserver.HandoffFDEnv)
	if status, out, fd := askFusermount(t, "--", mnt); status != 1 || fd >= 0 || !strings.Contains(out, "no connection was passed") || !strings.Contains(out, "mounts nothing") {
		t.Errorf("nothing passed: status %d, descriptor %d, output %q; want a refusal that says it mounts nothing", status, fd, out)
	}
}

// TestHandoffDirectory: the stand-in's directory puts the running executable first in $PATH under both of
// fusermount's names and gives servers an empty mountpoint; making it again (a keeper's successor) works.
func TestHandoffDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fusermount")
	h := fuseserver.NewHandoff(dir)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("NewHandoff made %s already (%v): its parent may not exist yet", dir, err)
	}
	for range 2 {
		if err := h.Make(); err != nil {
			t.Fatal(err)
		}
		exe, _ := os.Executable()
		for _, n := range []string{"fusermount", "fusermount3"} {
			if got, err := os.Readlink(filepath.Join(dir, "bin", n)); err != nil || got != exe {
				t.Errorf("%s → %q (%v), want %s", n, got, err, exe)
			}
			if !fuseserver.IsFusermount(filepath.Join("/anywhere", n)) {
				t.Errorf("IsFusermount(%s) = false", n)
			}
		}
		env := strings.Join(h.Env(), " ")
		if !strings.Contains(env, "PATH="+filepath.Join(dir, "bin")+":") || !strings.Contains(env, fuseserver.HandoffFDEnv+"=3") {
			t.Errorf("Env = %q", h.Env())
		}
	}
	if fuseserver.IsFusermount("csi-plugin") {
		t.Error("IsFusermount(csi-plugin) = true")
	}
	if err := os.WriteFile(filepath.Join(dir, "mnt", "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.Make(); err == nil || !strings.Contains(err.Error(), "must be an empty directory") {
		t.Errorf("a mountpoint with a file in it: %v", err)
	}
}

// TestARealHelperIsRefused: where libfuse would run a real fusermount before it searches $PATH (this host's, when
// it has one), the stand-in cannot answer: that is an error naming the helper, not a server that fails later.
func TestARealHelperIsRefused(t *testing.T) {
	real := ""
	for _, p := range fuseserver.HelperPaths() {
		if _, err := os.Stat(p); err == nil {
			real = p
			break
		}
	}
	err := fuseserver.NoRealFusermount()
	switch {
	case real == "" && err != nil:
		t.Errorf("no helper on this host, yet: %v", err)
	case real != "" && (err == nil || !strings.Contains(err.Error(), "a real helper is at")):
		t.Errorf("with %s on this host: %v; want a refusal naming it", real, err)
	}
}
