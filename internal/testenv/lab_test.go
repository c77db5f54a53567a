package testenv_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
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
