package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// timeoutTestEnv opts in to TestRequestTimeoutEndsAPause.
const timeoutTestEnv = "DFC_REQUEST_TIMEOUT_TEST"

// TestRequestTimeoutEndsAPause measures the limit of every handover: how long a connection may go unanswered
// before the kernel's request timeout (Linux ≥ 6.14, /proc/sys/fs/fuse/max_request_timeout, 0 = off by default)
// aborts it. The server is stopped (SIGSTOP: it holds its descriptor but reads nothing, as during the gap
// between a dead FUSE server and its successor), once for less than the timeout, once for longer.
//
// Opt-in ($DFC_REQUEST_TIMEOUT_TEST=1), not part of `make test`: it changes a machine-wide setting. Only for the
// instant of one mount's INIT (the kernel takes the timeout when it processes the INIT reply, fs/fuse/inode.c),
// so that no other connection gets it, but tests running beside it could mount in that instant; and it waits
// about a minute.
func TestRequestTimeoutEndsAPause(t *testing.T) {
	if os.Getenv(timeoutTestEnv) != "1" {
		t.Skipf("opt-in: %s=1 (it sets /proc/sys/fs/fuse/max_request_timeout for an instant)", timeoutTestEnv)
	}
	testenv.RequireFUSE(t)
	lab := testenv.NewLab(t)
	const sysctl = "/proc/sys/fs/fuse/max_request_timeout"
	old, err := os.ReadFile(sysctl)
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("%s does not exist: a kernel without request timeouts (< 6.14)", sysctl)
	}
	if err != nil {
		t.Fatal(err)
	}
	restore := func() {
		if err := os.WriteFile(sysctl, old, 0); err != nil {
			t.Errorf("restore %s to %s: %v", sysctl, strings.TrimSpace(string(old)), err)
		}
	}
	t.Cleanup(restore)

	bin := testenv.Build(t, "dummy-fuse")
	const asked = 1 // second: the kernel raises it to its own floor, which this measures too
	if err := os.WriteFile(sysctl, []byte(fmt.Sprint(asked)), 0); err != nil {
		t.Fatal(err)
	}
	p, mnt := startDummyFuse(t, lab, bin, "--direct-io") // every read reaches the server
	file := filepath.Join(mnt, fileName)
	if b, err := os.ReadFile(file); err != nil || string(b) != "Hello world!\n" { // INIT is answered by now
		restore()
		t.Fatalf("read = %q, %v", b, err)
	}
	restore()

	// pause stops the server for d (or until the read ends, when d is 0) while one read waits for it.
	pause := func(d time.Duration) (time.Duration, error) {
		if err := p.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = p.Cmd.Process.Signal(syscall.SIGCONT) }()
		start := time.Now()
		done := make(chan error, 1)
		go func() {
			b, err := os.ReadFile(file)
			if err == nil && string(b) != "Hello world!\n" {
				err = fmt.Errorf("read %q", b)
			}
			done <- err
		}()
		if d > 0 {
			time.Sleep(d)
			_ = p.Cmd.Process.Signal(syscall.SIGCONT)
		}
		select {
		case err := <-done:
			return time.Since(start), err
		case <-time.After(2 * time.Minute):
			t.Fatalf("the read still waits %s after the server stopped", time.Since(start))
			return 0, nil
		}
	}

	short := 5 * time.Second
	if took, err := pause(short); err != nil {
		t.Fatalf("a pause of %s (below the timeout) failed the read after %s: %v", short, took, err)
	} else {
		t.Logf("pause of %s: the waiting read succeeded after %s", short, took.Round(time.Millisecond))
	}
	took, err := pause(0)
	if !errors.Is(err, syscall.ECONNABORTED) && !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("the server stopped for good: the read ended after %s with %v, want the connection aborted", took, err)
	}
	_, after := os.Stat(file)
	t.Logf("max_request_timeout %d s asked: the kernel aborted the connection %s after the server stopped "+
		"(the read: %v); a stat after that: %v", asked, took.Round(time.Millisecond), err, after)
	if !errors.Is(after, syscall.ENOTCONN) {
		t.Errorf("after the abort, stat = %v, want ENOTCONN (the mount is dead, as after every holder died)", after)
	}
}
