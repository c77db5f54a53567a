package dummyfs

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// faultVictimEnv makes the test binary play a FUSE server that is killed while the kernel copies a request into
// its buffer (faultVictim).
const faultVictimEnv = "DFC_DUMMYFS_FAULT_VICTIM"

func TestMain(m *testing.M) {
	if os.Getenv(faultVictimEnv) == "1" {
		os.Exit(faultVictim())
	}
	os.Exit(m.Run())
}

// userfaultfd's interface (include/uapi/linux/userfaultfd.h), which x/sys/unix does not define.
const (
	uffdAPI                   = 0xAA
	uffdioAPI                 = 0xc018aa3f // _IOWR(0xAA, 0x3F, struct uffdio_api): 24 bytes
	uffdioRegister            = 0xc020aa00 // _IOWR(0xAA, 0x00, struct uffdio_register): 32 bytes
	uffdioRegisterModeMissing = 1
)

// faultVictim reads a request from the connection on fd 3 into a buffer whose pages are registered with a
// userfaultfd that nobody serves: the kernel's copy of the request into the buffer faults and waits there,
// inside read(2), until the process is killed. It prints "reading" first, and anything read(2) returns.
func faultVictim() int {
	size := max(MountOptions(DefaultOptions()).MaxWrite, 8192) + 4096 // what a worker reads with (NewConn)
	buf, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		fmt.Println("mmap:", err)
		return 1
	}
	uffd, _, errno := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC, 0, 0)
	if errno != 0 {
		fmt.Println("userfaultfd:", errno)
		return 1
	}
	api := [3]uint64{uffdAPI, 0, 0} // api, features, ioctls
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uffd, uffdioAPI, uintptr(unsafe.Pointer(&api))); errno != 0 {
		fmt.Println("UFFDIO_API:", errno)
		return 1
	}
	reg := [4]uint64{uint64(uintptr(unsafe.Pointer(&buf[0]))), uint64(len(buf)), uffdioRegisterModeMissing, 0} // range, mode, ioctls
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uffd, uffdioRegister, uintptr(unsafe.Pointer(&reg))); errno != 0 {
		fmt.Println("UFFDIO_REGISTER:", errno)
		return 1
	}
	fmt.Println("reading")
	n, err := unix.Read(3, buf)
	fmt.Println("read returned", n, err)
	return 0
}

// initialised mounts a connection in a temporary directory and answers its INIT with a Conn that serves nothing
// more until told: the test decides who reads the requests. The connection is aborted at the end.
func initialised(t *testing.T) (fd int, id uint32, mnt string, c *Conn) {
	t.Helper()
	mnt = t.TempDir()
	mo := MountOptions(DefaultOptions())
	fd, err := mountDev(mnt, mo, false)
	if err != nil {
		t.Fatalf("mount %s: %v", mnt, err)
	}
	if id, err = fuseconn.ID(fd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = fuseconn.Abort(id) // nothing may wait on this connection after the test
		_ = unix.Unmount(mnt, unix.MNT_DETACH)
		unix.Close(fd)
	})
	c = NewConn(fd, New(DefaultOptions()), mo, 1)
	if err := c.Init(); err != nil {
		t.Fatal(err)
	}
	return fd, id, mnt, c
}

// TestKillWhileTheKernelCopiesARequest shows why a FUSE server's read buffer must be resident before it reads
// (newWorker prefaults it): the kernel copies a request into the reader's buffer after taking it off the
// queue, and when that copy fails — a page fault in the buffer that a SIGKILL interrupts — it ends the request
// with EIO for its caller instead of queueing it again (fuse_dev_do_read in fs/fuse/dev.c: "if (err)
// req->out.h.error = -EIO"). A server killed in that window costs its caller an EIO although another process
// keeps the connection and a successor serves it; a fresh successor, whose buffers no request has touched
// yet, is the likeliest to be there. The test makes the window wide: the victim's buffer is registered with a
// userfaultfd that nobody serves, so the copy waits in the fault until the kill.
func TestKillWhileTheKernelCopiesARequest(t *testing.T) {
	testenv.RequireFUSE(t)
	if err := fuseconn.MountControl(); err != nil {
		testenv.SkipOrFail(t, "no FUSE control filesystem: "+err.Error())
	}
	fd, id, mnt, c := initialised(t)
	lab := testenv.NewLab(t)
	lab.AddRoot(mnt) // its cleanup aborts the connection before it waits for the readers

	// A caller's request waits in the queue: nobody serves the connection yet.
	file := filepath.Join(mnt, FileName)
	reader := lab.Start("cat", exec.Command("cat", file))
	testenv.Eventually(t, 10*time.Second, "the reader's request in the connection's queue", func() bool {
		n, err := fuseconn.Waiting(id)
		return err == nil && n > 0
	})

	// The victim takes it off the queue and waits in the fault of the copy.
	dup, err := unix.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	victimDev := os.NewFile(uintptr(dup), "/dev/fuse")
	defer victimDev.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), faultVictimEnv+"=1")
	cmd.ExtraFiles = []*os.File{victimDev}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	victim := lab.Start("fault victim", cmd)
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "reading" {
		t.Fatalf("the victim did not get to its read: %q\n%s", lines.Text(), victim.Tail())
	}
	wchan := func() string {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", victim.PID()))
		return string(b)
	}
	testenv.Eventually(t, 10*time.Second, "the victim's read to wait in the fault of the request's copy (wchan handle_userfault)", func() bool {
		return wchan() == "handle_userfault"
	})
	victim.Signal(syscall.SIGKILL)
	victim.Wait(10 * time.Second)

	// Served from now on: a request that had been queued again would be answered.
	go func() { _ = c.Serve() }()
	if code := reader.Wait(10 * time.Second); code == 0 {
		t.Fatalf("the reader's request survived the kill of the process copying it (the kernel queued it again?): %s", reader.Log())
	}
	if got := reader.Log(); !strings.Contains(got, "Input/output error") {
		t.Errorf("the reader failed with %q, want EIO (Input/output error)", strings.TrimSpace(got))
	}
	// Another process reads: a read in this process could wait on its own server (see pollOnce).
	after := lab.Start("cat after the kill", exec.Command("cat", file))
	if code := after.Wait(10 * time.Second); code != 0 || !strings.Contains(after.Log(), strings.TrimSpace(Content)) {
		t.Errorf("a read after the kill: exit %d, %q; want the file: only the request being copied fails", code, after.Log())
	}
}

// TestWorkerBufferIsResident: a worker's read buffer has its first page resident before it reads anything, so
// that the kernel's copy of a request into it does not fault (see TestKillWhileTheKernelCopiesARequest), while
// the rest stays untouched (it takes no memory).
func TestWorkerBufferIsResident(t *testing.T) {
	c := NewConn(-1, New(DefaultOptions()), MountOptions(DefaultOptions()), 1)
	w := c.newWorker()
	defer w.free()
	if w.mapping == nil {
		t.Skip("the buffers are on the Go heap (mmap failed): resident like any heap memory")
	}
	vec := residentPages(t, w.mapping)
	if vec[0]&1 == 0 {
		t.Error("the first page of a new worker's read buffer is not resident: the kernel's copy of the first request would fault")
	}
	resident := 0
	for _, v := range vec {
		resident += int(v & 1)
	}
	if resident > 2 {
		t.Errorf("%d of the buffers' %d pages are resident, want the read buffer's first page only (and at most the reply's)", resident, len(vec))
	}

	// A filesystem whose requests do not fit in a page (it takes WRITEs) gets the whole read buffer resident.
	large := NewConn(-1, largeFS{New(DefaultOptions())}, MountOptions(DefaultOptions()), 1).newWorker()
	defer large.free()
	vec = residentPages(t, large.in)
	for i, v := range vec {
		if v&1 == 0 {
			t.Fatalf("page %d of %d of the read buffer of a filesystem taking WRITEs is not resident", i, len(vec))
		}
	}
}

// largeFS is a filesystem that says its requests do not fit in a page.
type largeFS struct{ *FS }

func (largeFS) LargeRequests() bool { return true }

// residentPages is mincore(2) of b: a byte per page, bit 0 set when the page is resident.
func residentPages(t *testing.T, b []byte) []byte {
	t.Helper()
	page := os.Getpagesize()
	vec := make([]byte, (len(b)+page-1)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	return vec
}

// TestRefusedReplyCostsOneRequest: a reply the kernel refuses once it found its request (here: longer than
// what the request takes: copy_out_args in fs/fuse/dev.c) ends that request with EIO for its caller, and the
// server serves on: the connection's other and later callers are answered. (A reply whose header is malformed
// is refused before the kernel looks up its request, which then stays unanswered: no server here writes one,
// go-fuse sets the header.)
func TestRefusedReplyCostsOneRequest(t *testing.T) {
	testenv.RequireFUSE(t)
	fd, _, mnt, c := initialised(t)
	lab := testenv.NewLab(t)
	lab.AddRoot(mnt) // its cleanup aborts the connection before it waits for the readers
	file := filepath.Join(mnt, FileName)
	first := lab.Start("cat", exec.Command("cat", file))

	// The test plays a broken server for the first request (a LOOKUP or GETATTR, whose answer has a fixed
	// size): a well-formed reply with 1 KiB more than that.
	w := c.newWorker()
	defer w.free()
	n, err := unix.Read(fd, w.in)
	if err != nil || n < inHeaderLen {
		t.Fatalf("read the first request: %d bytes, %v", n, err)
	}
	reply := make([]byte, outHeaderLen+1024)
	binary.NativeEndian.PutUint32(reply[0:4], uint32(len(reply)))
	copy(reply[8:16], w.in[8:16]) // its unique
	done, err := writeReply(fd, reply)
	if done || err == nil || !strings.Contains(err.Error(), "refused a reply") {
		t.Fatalf("writeReply of a malformed reply: done %t, %v; want a refusal that does not end the connection", done, err)
	}
	go func() { _ = c.Serve() }()
	if code := first.Wait(10 * time.Second); code == 0 || !strings.Contains(first.Log(), "Input/output error") {
		t.Errorf("the caller of the refused reply: exit %d, %q; want EIO", code, first.Log())
	}
	after := lab.Start("cat after the refusal", exec.Command("cat", file))
	if code := after.Wait(10 * time.Second); code != 0 || !strings.Contains(after.Log(), strings.TrimSpace(Content)) {
		t.Errorf("a read after the refused reply: exit %d, %q; want the file", code, after.Log())
	}
}
