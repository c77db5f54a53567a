package testenv_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// TestAbortEndsAWaitNobodyAnswers: a FUSE mount whose connection is held open but served by nobody blocks
// every access (here: a stat waiting for the INIT nobody answers, and a process reading the mount); aborting
// the connections under the Lab's directory ends both at once, and the Lab's own cleanup then finds nothing
// to wait for.
func TestAbortEndsAWaitNobodyAnswers(t *testing.T) {
	testenv.RequireFUSE(t)
	lab := testenv.NewLab(t)
	mnt := filepath.Join(lab.Dir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	dev, err := fuseconn.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close() // held: without an abort, the mount would wait for a server forever
	if err := fuseconn.Mount(dev, mnt, fuseconn.MountOptions{Name: "lab-test", Source: "lab-test", ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	reader := lab.Start("cat", exec.Command("cat", filepath.Join(mnt, "file")))
	stat := make(chan error, 1)
	go func() { _, err := os.Stat(filepath.Join(mnt, "file")); stat <- err }()
	select {
	case err := <-stat:
		t.Fatalf("stat on a mount nobody serves returned at once: %v", err)
	case <-time.After(200 * time.Millisecond):
	}

	n, err := testenv.AbortFUSEUnder([]string{filepath.Dir(mnt)}, []int{reader.PID()})
	if err != nil || n != 1 {
		t.Fatalf("AbortFUSEUnder = %d, %v; want 1 connection aborted", n, err)
	}
	select {
	case err := <-stat:
		if !errors.Is(err, syscall.ECONNABORTED) && !errors.Is(err, syscall.ENOTCONN) {
			t.Errorf("stat after the abort: %v, want ECONNABORTED or ENOTCONN", err)
		}
	case <-time.After(testenv.ExitWait):
		t.Fatal("stat still waits after the abort")
	}
	if code := reader.Wait(testenv.ExitWait); code == 0 || !strings.Contains(reader.Log(), "cat:") {
		t.Errorf("cat after the abort: exit %d, log %q; want a failure", code, reader.Log())
	}
	if top, err := mounts.Top(mnt); err != nil || top == nil {
		t.Errorf("the aborted mount is gone from the mount table before the Lab's cleanup: %v %v", top, err)
	}
}

// TestEventuallyFailsWithWhatItWaitedFor: a condition that never holds fails within the bound, naming it.
func TestEventuallyFailsWithWhatItWaitedFor(t *testing.T) {
	var rec recorder
	done := make(chan struct{})
	go func() { // Fatalf ends the goroutine it runs in, as in a test
		defer close(done)
		testenv.Eventually(&rec, 50*time.Millisecond, "the impossible", func() bool { return false })
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Eventually did not give up")
	}
	if !strings.Contains(rec.msg, "timed out after 50ms waiting for the impossible") {
		t.Errorf("failure message %q", rec.msg)
	}
}

// recorder is a testing.TB that records a fatal failure instead of ending the test.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, a ...any) {
	r.msg = strings.TrimSpace(fmt.Sprintf(format, a...))
	runtime.Goexit()
}

// errorsOf is a testing.TB that keeps what Errorf reports instead of failing the test: a Lab's own failures,
// checked by the test that made the Lab.
type errorsOf struct {
	testing.TB
	mu  sync.Mutex
	got []string
}

func (e *errorsOf) Errorf(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, fmt.Sprintf(format, args...))
}

// TestStoppedHolderLeavingAHangFails: a process that runs csi-plugin (here a stand-in holding a copy of the
// connection's /dev/fuse) is stopped by the test while another holder keeps the connection and nobody serves
// it; a reader's request then waits for ever. The Lab's check reports it, naming the connection and the holder.
func TestStoppedHolderLeavingAHangFails(t *testing.T) {
	testenv.RequireFUSE(t)
	e := &errorsOf{TB: t}
	var dev *os.File   // the other holder, kept until the Lab's check has run
	t.Cleanup(func() { // runs after the Lab's cleanup, which is registered after it
		if dev != nil {
			dev.Close()
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		if len(e.got) != 1 || !strings.Contains(e.got[0], "held when the test stopped it") {
			t.Errorf("the Lab reported %q, want one unanswered connection of the stopped holder", e.got)
		}
	})
	lab := testenv.NewLab(e)
	dir := lab.Dir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	var err error
	dev, err = fuseconn.Open()
	if err != nil {
		t.Fatal(err)
	}
	if err := fuseconn.Mount(dev, mnt, fuseconn.MountOptions{Name: "lab-test", Source: "lab-test", ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	standIn := filepath.Join(dir, "csi-plugin")
	if err := os.Symlink(sleep, standIn); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(standIn, "60")
	cmd.ExtraFiles = []*os.File{dev}
	holder := lab.Start("csi-plugin stand-in", cmd)
	lab.Start("cat", exec.Command("cat", filepath.Join(mnt, "file"))) // waits: nobody answers
	testenv.Eventually(t, 10*time.Second, "the stand-in to hold the connection", func() bool {
		return len(testenv.HeldConnections(holder.PID())) == 1
	})
	holder.Signal(syscall.SIGKILL)
	holder.Wait(testenv.ExitWait)
}
