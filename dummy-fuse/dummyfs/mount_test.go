package dummyfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// mountT mounts the filesystem in a temporary directory for the test's duration.
func mountT(t *testing.T, opts Options) string {
	t.Helper()
	testenv.RequireFUSE(t)
	mnt := t.TempDir()
	opts.Debug = opts.Debug || testing.Verbose()
	srv, err := Mount(mnt, opts)
	if err != nil {
		t.Fatalf("Mount(%s): %v", mnt, err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount %s: %v (detaching lazily)", mnt, err)
			_ = unix.Unmount(mnt, unix.MNT_DETACH)
		}
	})
	pollOnce(t, mnt)
	return mnt
}

// pollOnce makes the kernel send its first FUSE_POLL for the mount now, from a plain poll(2), so that the server
// answers ENOSYS and the kernel never polls this connection again (fs/fuse/file.c fuse_file_poll: no_poll). Without
// it the first poll comes from the Go runtime's own epoll when the test opens a file of the mount: epoll_ctl and
// the netpoller then wait in the kernel for this very process's server while holding its Ps, and with every P
// held the server never runs (a test stuck in request_wait_answer). go-fuse's WaitMount does the same
// (fuse/poll.go, its "epoll hack"); dummyfs serves the connection with its own loop, so the tests do it.
func pollOnce(t *testing.T, mnt string) {
	t.Helper()
	fd, err := unix.Open(filepath.Join(mnt, FileName), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open %s for the first poll: %v", mnt, err)
	}
	defer unix.Close(fd)
	if _, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0); err != nil {
		t.Fatalf("poll %s: %v", mnt, err)
	}
}

// mountFdT mounts like a privileged parent does for the magic mountpoint: it opens /dev/fuse, mounts it with
// mount(2) and flags, and serves the descriptor in-process through "/dev/fd/N".
func mountFdT(t *testing.T, opts Options, flags uintptr) string {
	t.Helper()
	testenv.RequireFUSE(t)
	mnt := t.TempDir()
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	data := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0", fd)
	if err := unix.Mount("dummy-fuse", mnt, "fuse."+Name, flags, data); err != nil {
		unix.Close(fd)
		t.Fatalf("mount %s: %v", mnt, err)
	}
	opts.Debug = opts.Debug || testing.Verbose()
	srv, err := Mount(fmt.Sprintf("/dev/fd/%d", fd), opts) // the server owns fd from here on
	if err != nil {
		_ = unix.Unmount(mnt, unix.MNT_DETACH)
		unix.Close(fd)
		t.Fatalf("serve /dev/fd/%d: %v", fd, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Errorf("unmount %s: %v (detaching lazily)", mnt, err)
			_ = unix.Unmount(mnt, unix.MNT_DETACH)
		}
		srv.Wait()
	})
	pollOnce(t, mnt)
	return mnt
}

// mountEntry is what the mount table says about a mount.
type mountEntry struct {
	Point, Type, Source  string
	MountOpts, SuperOpts []string
}

// findMount returns the mount on top at point, from the mount table.
func findMount(t *testing.T, point string) (mountEntry, bool) {
	t.Helper()
	top, err := mounts.Top(point)
	if err != nil {
		t.Fatal(err)
	}
	if top == nil {
		return mountEntry{}, false
	}
	return mountEntry{Point: top.Mountpoint, Type: top.FSType, Source: top.Source,
		MountOpts: strings.Split(top.Options, ","), SuperOpts: strings.Split(top.VFSOptions, ",")}, true
}

func TestContent(t *testing.T) {
	mnt := mountT(t, DefaultOptions())
	checkContent(t, mnt)
}

// checkContent checks what every dummy-fuse mount shows.
func checkContent(t *testing.T, mnt string) {
	t.Helper()
	file := filepath.Join(mnt, FileName)
	b, err := os.ReadFile(file)
	if err != nil || string(b) != "Hello world!\n" {
		t.Errorf("ReadFile = %q, %v; want %q", b, err, "Hello world!\n")
	}
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != 13 || fi.Mode() != 0o444 {
		t.Errorf("%s: size %d mode %v, want 13 and -r--r--r--", file, fi.Size(), fi.Mode())
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Ino != FileID || st.Nlink != 1 {
		t.Errorf("%s: inode %d nlink %d, want %d and 1", file, st.Ino, st.Nlink, FileID)
	}
	di, err := os.Stat(mnt)
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode() != os.ModeDir|0o555 {
		t.Errorf("root mode %v, want dr-xr-xr-x", di.Mode())
	}
	entries, err := os.ReadDir(mnt)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != FileName || !entries[0].Type().IsRegular() {
		t.Errorf("ReadDir = %v, want [%s]", entries, FileName)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(mnt, &sfs); err != nil {
		t.Fatal(err)
	}
	if sfs.Type != unix.FUSE_SUPER_MAGIC || sfs.Bsize != 4096 || sfs.Namelen != 255 || sfs.Files != 2 {
		t.Errorf("statfs %+v, want FUSE magic, bsize 4096, namelen 255, 2 files", sfs)
	}
	if _, err := os.Stat(filepath.Join(mnt, "missing")); !errors.Is(err, unix.ENOENT) {
		t.Errorf("stat missing = %v, want ENOENT", err)
	}
	if _, err := os.Stat(filepath.Join(file, "x")); !errors.Is(err, unix.ENOTDIR) {
		t.Errorf("stat below the file = %v, want ENOTDIR", err)
	}
	if err := unix.Access(file, unix.R_OK); err != nil {
		t.Errorf("access(R_OK) = %v", err)
	}
}

func TestMountTable(t *testing.T) {
	for _, opts := range []Options{DefaultOptions(), {FsName: "volume-42", AllowOther: false}} {
		mnt := mountT(t, opts)
		m, ok := findMount(t, mnt)
		if !ok {
			t.Fatalf("%s not in /proc/self/mountinfo", mnt)
		}
		want := opts.FsName
		if m.Type != "fuse.dummy-fuse" || m.Source != want {
			t.Errorf("type %q source %q, want fuse.dummy-fuse and %q", m.Type, m.Source, want)
		}
		for _, o := range []string{"ro", "nosuid", "nodev"} {
			if !slices.Contains(m.MountOpts, o) {
				t.Errorf("mount options %v lack %s", m.MountOpts, o)
			}
		}
		if slices.Contains(m.SuperOpts, "allow_other") != opts.AllowOther {
			t.Errorf("super options %v, want allow_other %t", m.SuperOpts, opts.AllowOther)
		}
	}
}

// writeOps are the ways to change a filesystem; each must fail.
var writeOps = []struct {
	name string
	// writeOpen is set for opens with write access: the filesystem answers EACCES, the ro mount EROFS.
	writeOpen bool
	do        func(mnt string) error
}{
	{"os.WriteFile existing", true, func(m string) error { return os.WriteFile(filepath.Join(m, FileName), []byte("x"), 0o644) }},
	{"open O_RDWR", true, func(m string) error { return openClose(filepath.Join(m, FileName), os.O_RDWR) }},
	{"open O_WRONLY|O_APPEND", true, func(m string) error { return openClose(filepath.Join(m, FileName), os.O_WRONLY|os.O_APPEND) }},
	{"open O_RDONLY|O_TRUNC", false, func(m string) error { return openClose(filepath.Join(m, FileName), os.O_RDONLY|os.O_TRUNC) }},
	{"create", false, func(m string) error { return openClose(filepath.Join(m, "new"), os.O_CREATE|os.O_WRONLY) }},
	{"create O_EXCL", false, func(m string) error { return openClose(filepath.Join(m, "new"), os.O_CREATE|os.O_EXCL|os.O_RDWR) }},
	{"truncate", false, func(m string) error { return os.Truncate(filepath.Join(m, FileName), 0) }},
	{"chmod", false, func(m string) error { return os.Chmod(filepath.Join(m, FileName), 0o644) }},
	{"chown", false, func(m string) error { return os.Chown(filepath.Join(m, FileName), 1, 1) }},
	{"utimes", false, func(m string) error { return os.Chtimes(filepath.Join(m, FileName), time.Now(), time.Now()) }},
	{"mkdir", false, func(m string) error { return os.Mkdir(filepath.Join(m, "dir"), 0o755) }},
	{"rename", false, func(m string) error { return os.Rename(filepath.Join(m, FileName), filepath.Join(m, "moved")) }},
	{"unlink", false, func(m string) error { return unix.Unlink(filepath.Join(m, FileName)) }},
	{"symlink", false, func(m string) error { return os.Symlink(FileName, filepath.Join(m, "link")) }},
	{"link", false, func(m string) error { return os.Link(filepath.Join(m, FileName), filepath.Join(m, "hard")) }},
	{"mkfifo", false, func(m string) error { return unix.Mkfifo(filepath.Join(m, "fifo"), 0o644) }},
	{"setxattr", false, func(m string) error { return unix.Setxattr(filepath.Join(m, FileName), "user.test", []byte("v"), 0) }},
	{"removexattr", false, func(m string) error { return unix.Removexattr(filepath.Join(m, FileName), "user.test") }},
	{"access W_OK", false, func(m string) error { return unix.Access(filepath.Join(m, FileName), unix.W_OK) }},
}

func openClose(path string, flag int) error {
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		return err
	}
	return errors.Join(errors.New("opened"), f.Close())
}

func checkWritesFail(t *testing.T, mnt string, writeOpenErr error) {
	t.Helper()
	for _, op := range writeOps {
		want := error(unix.EROFS)
		if op.writeOpen {
			want = writeOpenErr
		}
		if err := op.do(mnt); !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", op.name, err, want)
		}
	}
	checkContent(t, mnt) // nothing changed
}

func TestWritesFailOnReadOnlyMount(t *testing.T) {
	// The mount is read-only: the kernel refuses with EROFS before asking the server.
	checkWritesFail(t, mountT(t, DefaultOptions()), unix.EROFS)
}

func TestWritesFailInFilesystem(t *testing.T) {
	// Mounted without MS_RDONLY (as a careless parent of a /dev/fd/N server might): the filesystem itself
	// refuses: EROFS for changes, EACCES for opening with write access.
	checkWritesFail(t, mountFdT(t, DefaultOptions(), unix.MS_NOSUID|unix.MS_NODEV), unix.EACCES)
}

func TestMagicMountpointInProcess(t *testing.T) {
	mnt := mountFdT(t, DefaultOptions(), unix.MS_NOSUID|unix.MS_NODEV|unix.MS_RDONLY)
	checkContent(t, mnt)
	m, ok := findMount(t, mnt)
	if !ok || m.Type != "fuse.dummy-fuse" || !slices.Contains(m.MountOpts, "ro") {
		t.Errorf("mount entry %+v (found %t), want fuse.dummy-fuse, ro", m, ok)
	}
}

func TestDirectIOReadsOnOpenFile(t *testing.T) {
	for _, direct := range []bool{false, true} {
		opts := DefaultOptions()
		opts.DirectIO = direct
		mnt := mountT(t, opts)
		f, err := os.Open(filepath.Join(mnt, FileName))
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 100)
		for i := range 3 {
			n, err := unix.Pread(int(f.Fd()), buf, 0)
			if err != nil || string(buf[:n]) != Content {
				t.Errorf("direct %t: pread %d = %q, %v", direct, i, buf[:n], err)
			}
		}
		// Past the end both modes return 0 bytes (the server clamps; the page cache knows the size).
		if n, err := unix.Pread(int(f.Fd()), buf, 13); n != 0 || err != nil {
			t.Errorf("direct %t: pread at EOF = %d, %v", direct, n, err)
		}
		f.Close()
	}
}

func TestMountErrors(t *testing.T) {
	testenv.RequireFUSE(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for mp, want := range map[string]error{
		filepath.Join(dir, "missing"): unix.ENOENT,
		file:                          unix.ENOTDIR,
	} {
		if srv, err := Mount(mp, DefaultOptions()); !errors.Is(err, want) {
			if err == nil {
				_ = srv.Unmount()
			}
			t.Errorf("Mount(%s) = %v, want %v", mp, err, want)
		}
	}
}

// gatedFS holds every READ until the test lets it go.
type gatedFS struct {
	*FS
	entered chan struct{}
	release chan struct{}
}

func (g *gatedFS) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	g.entered <- struct{}{}
	<-g.release
	return g.FS.Read(cancel, in, buf)
}

// TestSlowReadDoesNotBlockOthers: while reads are held inside the filesystem, other requests (stat, readdir,
// further reads) are still served, up to the worker bound.
func TestSlowReadDoesNotBlockOthers(t *testing.T) {
	testenv.RequireFUSE(t)
	mnt := t.TempDir()
	opts := DefaultOptions()
	opts.DirectIO = true
	mo := MountOptions(opts)
	fd, err := mountDev(mnt, mo, false)
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedFS{FS: New(opts), entered: make(chan struct{}, 8), release: make(chan struct{})}
	c := NewConn(fd, g, mo, 4)
	served := make(chan error, 1)
	if err := c.Init(); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	go func() { served <- c.Serve() }()
	t.Cleanup(func() {
		close(g.release)
		if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		unix.Close(fd)
	})

	// Raw system calls: os.Open would register the file with Go's netpoller, whose epoll_ctl asks the FUSE
	// server (POLL) without releasing its P; with the server in this very process, two such opens at once
	// can take every P and starve the server.
	file := filepath.Join(mnt, FileName)
	reads := make(chan error, 3)
	for range 3 {
		go func() {
			fd, err := unix.Open(file, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				reads <- err
				return
			}
			defer unix.Close(fd)
			b := make([]byte, 64)
			n, err := unix.Pread(fd, b, 0)
			if err == nil && string(b[:n]) != Content {
				err = fmt.Errorf("read %q", b[:n])
			}
			reads <- err
		}()
	}
	for i := range 3 {
		select {
		case <-g.entered:
		case <-time.After(20 * time.Second):
			t.Fatalf("only %d of 3 reads reached the filesystem at once (workers 4)", i)
		}
	}
	// Three workers hold a read each; the fourth serves the rest.
	statted := make(chan error, 1)
	go func() {
		var st unix.Stat_t
		err := unix.Stat(file, &st)
		if err == nil {
			_, err = os.ReadDir(mnt) // directories have no poll: no POLL request
		}
		statted <- err
	}()
	select {
	case err := <-statted:
		if err != nil {
			t.Errorf("readdir/stat while reads are held: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("readdir/stat blocked behind the held reads")
	}
	for range 3 {
		g.release <- struct{}{}
	}
	for range 3 {
		if err := <-reads; err != nil {
			t.Errorf("held read: %v", err)
		}
	}
}

// TestWritableMountTruncatesAtOpen: a writable mount asks the kernel for atomic O_TRUNC (an OPEN carrying
// O_TRUNC, not an OPEN and a SETATTR of the size, which a relay would make by path); a read-only one does not.
func TestWritableMountTruncatesAtOpen(t *testing.T) {
	if got := MountOptions(Options{Writable: true}).ExtraCapabilities; got&fuse.CAP_ATOMIC_O_TRUNC == 0 {
		t.Errorf("writable: extra capabilities %#x lack CAP_ATOMIC_O_TRUNC", got)
	}
	if got := MountOptions(Options{}).ExtraCapabilities; got&fuse.CAP_ATOMIC_O_TRUNC != 0 {
		t.Errorf("read-only: extra capabilities %#x ask for CAP_ATOMIC_O_TRUNC", got)
	}
}
