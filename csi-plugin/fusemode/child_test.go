package fusemode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse/dummyfs"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// bins builds dummy-fuse once for all the tests of this package.
var bins testenv.Binaries

func TestMain(m *testing.M) {
	code := m.Run()
	bins.Remove()
	os.Exit(code)
}

func TestServedFileIsDummyFuses(t *testing.T) {
	if ServedFile != dummyfs.FileName {
		t.Fatalf("ServedFile = %q, dummy-fuse serves %q", ServedFile, dummyfs.FileName)
	}
}

func TestNewRejectsUnknownModeAndMissingBinary(t *testing.T) {
	if _, err := New("daemon", Options{Server: fuseserver.Spec{Path: "/bin/true"}}); err == nil {
		t.Error("New accepted an unknown mode")
	}
	for _, p := range []string{"/nonexistent/dummy-fuse", t.TempDir()} {
		if _, err := New(ChildName, Options{Server: fuseserver.Spec{Path: p}}); err == nil {
			t.Errorf("child mode accepted dummy-fuse path %q", p)
		}
	}
}

func newChild(t *testing.T) *Child {
	t.Helper()
	testenv.RequireFUSE(t)
	c, err := NewChild(Options{Server: fuseserver.Spec{Path: bins.Path(t, "dummy-fuse")}, StartTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func mountDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Cleanup(func() { _, _ = mounts.UnmountUnder(dir) })
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	return mnt
}

func stopped(t *testing.T, s Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Error(err)
	}
}

// TestStartStop: Start returns with the mount answering; Stop (SIGTERM) makes dummy-fuse unmount and exit.
func TestStartStop(t *testing.T) {
	c := newChild(t)
	mnt := mountDir(t)
	s, err := c.Start(context.Background(), Request{VolumeID: "v", Mountpoint: mnt})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopped(t, s) })
	b, err := os.ReadFile(filepath.Join(mnt, ServedFile))
	if err != nil || string(b) != dummyfs.Content {
		t.Fatalf("read %q, %v", b, err)
	}
	stopped(t, s)
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("server still running after Stop")
	}
	if ok, _ := mounts.IsMountPoint(mnt); ok {
		t.Fatal("still mounted after Stop")
	}
}

// TestStartFailureReportsOutput: when dummy-fuse dies at start, the error carries its stderr.
func TestStartFailureReportsOutput(t *testing.T) {
	c := newChild(t)
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := c.Start(context.Background(), Request{VolumeID: "v", Mountpoint: file})
	if err == nil {
		t.Fatal("Start on a regular file succeeded")
	}
	// dummy-fuse's own words: "dummy-fuse: mount PATH: not a directory".
	if !strings.Contains(err.Error(), "dummy-fuse: mount "+file) || !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("error lacks the child's stderr and exit status: %v", err)
	}
}

// TestChildSurvivesExitOfCallingThread guards against golang/go#27505: the parent-death signal fires when the
// thread that forked the child exits. A Start called from a goroutine whose locked thread then exits must not
// take the FUSE server with it.
func TestChildSurvivesExitOfCallingThread(t *testing.T) {
	c := newChild(t)
	mnt := mountDir(t)
	type result struct {
		s   Server
		err error
		tid int
	}
	ch := make(chan result, 1)
	work := func() {
		runtime.LockOSThread() // never unlocked: the runtime terminates this thread when the goroutine ends
		s, err := c.Start(context.Background(), Request{VolumeID: "v", Mountpoint: mnt})
		ch <- result{s, err, syscall.Gettid()}
	}
	go func() {
		runtime.LockOSThread()
		if syscall.Gettid() != os.Getpid() {
			work()
			return
		}
		// The main thread is never terminated (the runtime parks it instead): hold it, so that work runs on a
		// thread that does end.
		done := make(chan struct{})
		go func() { defer close(done); work() }()
		<-done
		runtime.UnlockOSThread()
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { stopped(t, r.s) })
	// The premise: the thread that called Start is gone.
	task := fmt.Sprintf("/proc/self/task/%d", r.tid)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(task); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d did not exit; the test proves nothing", r.tid)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A parent-death signal, were one due, has been sent by now; give the child a moment to die of it.
	select {
	case <-r.s.Done():
		t.Fatal("the FUSE server died with the thread that asked for it")
	case <-time.After(200 * time.Millisecond):
	}
	if err := mounts.Answers(mnt, ServedFile, time.Second); err != nil {
		t.Fatalf("mount stopped answering: %v", err)
	}
	if err := syscall.Kill(r.s.PID(), 0); err != nil {
		t.Fatalf("server process gone: %v", err)
	}
}

func TestClosedModeRefusesStart(t *testing.T) {
	c := newChild(t)
	_ = c.Close()
	if _, err := c.Start(context.Background(), Request{VolumeID: "v", Mountpoint: t.TempDir()}); err == nil {
		t.Fatal("Start after Close succeeded")
	}
}

func TestSidecarModeNeedsNoDummyFuse(t *testing.T) {
	m, err := New(SidecarName, Options{})
	if err != nil {
		t.Fatalf("New(%s) without dummy-fuse: %v (the sidecar runs dummy-fuse, not the plugin)", SidecarName, err)
	}
	if m.Placement() != OnTargets || m.Name() != SidecarName {
		t.Errorf("mode %T named %q is not the target-mounting sidecar mode", m, m.Name())
	}
	if _, err := m.Start(context.Background(), Request{VolumeID: "v", Mountpoint: t.TempDir()}); err == nil {
		t.Error("the sidecar mode started a server on a staging path")
	}
}
