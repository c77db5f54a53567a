package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse-workload/workload"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/version"
)

const fileName = "dummy-file.txt"

// waitTimeout bounds every wait of these tests; it is generous because other builds share the machine.
const waitTimeout = 20 * time.Second

func TestRunFlags(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"--version"}, 0, version.Version + "\n", ""},
		{[]string{"--help"}, 0, "Usage: dummy-fuse [flags] MOUNTPOINT", ""},
		{nil, 2, "", "expected exactly one MOUNTPOINT, got 0 arguments"},
		{[]string{"a", "b"}, 2, "", "got 2 arguments"},
		{[]string{"--attr-timeout", "long", "/mnt"}, 2, "", "invalid value"},
		{[]string{"--no-such-flag", "/mnt"}, 2, "", "flag provided but not defined"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(tc.args, &stdout, &stderr); code != tc.code {
			t.Errorf("%q: exit code %d, want %d", tc.args, code, tc.code)
		}
		if !strings.Contains(stdout.String(), tc.stdout) || !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("%q: stdout %q stderr %q, want them to contain %q and %q", tc.args, stdout.String(), stderr.String(), tc.stdout, tc.stderr)
		}
	}
}

// proc is a process a test started; it is killed (by PID) and reaped when the test ends.
type proc struct {
	cmd    *exec.Cmd
	out    string // file with its stdout
	stderr *bytes.Buffer
	done   chan struct{}
	err    error
}

func start(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{cmd: cmd, out: filepath.Join(t.TempDir(), filepath.Base(cmd.Path)+".out"), stderr: &bytes.Buffer{}, done: make(chan struct{})}
	out, err := os.Create(p.out)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			b, _ := os.ReadFile(p.out)
			t.Logf("%s (pid %d):\nstdout:\n%s\nstderr:\n%s", cmd, cmd.Process.Pid, b, p.stderr)
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(waitTimeout):
		t.Fatalf("%s did not exit within %s", p.cmd, waitTimeout)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatalf("%s: %v", p.cmd, p.err)
	}
	return 0
}

// poll calls cond until it reports true; it fails the test after waitTimeout.
func poll(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", waitTimeout, what)
		}
		<-tick.C
	}
}

// mountType returns the filesystem type of the mount at point, or "" when nothing is mounted there.
func mountType(t testing.TB, point string) string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	typ := ""
	for sc.Scan() {
		pre, post, _ := strings.Cut(sc.Text(), " - ")
		if a, b := strings.Fields(pre), strings.Fields(post); len(a) > 4 && len(b) > 0 && a[4] == point {
			typ = b[0] // the last one is the top of the stack
		}
	}
	return typ
}

// cleanupMount lazily unmounts whatever is left at mnt when the test ends (registered before the server
// starts, so it runs after the server was killed).
func cleanupMount(t *testing.T, mnt string) {
	t.Cleanup(func() {
		for mountType(t, mnt) != "" {
			if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", mnt, err)
				return
			}
		}
	})
}

// startDummyFuse mounts dummy-fuse (the binary) at a new directory and waits for the mount.
func startDummyFuse(t *testing.T, bin string, args ...string) (*proc, string) {
	t.Helper()
	mnt := t.TempDir()
	cleanupMount(t, mnt)
	p := start(t, exec.Command(bin, append(args, mnt)...))
	poll(t, "dummy-fuse to mount "+mnt, func() bool {
		if p.exited() {
			t.Fatalf("dummy-fuse exited before mounting: %v\n%s", p.err, p.stderr)
		}
		return mountType(t, mnt) == "fuse.dummy-fuse"
	})
	return p, mnt
}

func TestSIGTERMUnmounts(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := testenv.Build(t, "dummy-fuse")
	p, mnt := startDummyFuse(t, bin)
	if b, err := os.ReadFile(filepath.Join(mnt, fileName)); err != nil || string(b) != "Hello world!\n" {
		t.Fatalf("read = %q, %v", b, err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0; stderr %q", code, p.stderr)
	}
	if typ := mountType(t, mnt); typ != "" {
		t.Errorf("%s still mounted (%s) after SIGTERM", mnt, typ)
	}
}

func TestSIGINTWithOpenFileDetaches(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := testenv.Build(t, "dummy-fuse")
	p, mnt := startDummyFuse(t, bin, "--direct-io")
	f, err := os.Open(filepath.Join(mnt, fileName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	// A plain unmount is EBUSY while the file is open; dummy-fuse detaches lazily and still exits 0.
	if code := p.wait(t); code != 0 {
		t.Errorf("exit code %d after SIGINT, want 0; stderr %q", code, p.stderr)
	}
	if typ := mountType(t, mnt); typ != "" {
		t.Errorf("%s still mounted (%s)", mnt, typ)
	}
	if _, err := unix.Pread(int(f.Fd()), make([]byte, 64), 0); !errors.Is(err, unix.ENOTCONN) {
		t.Errorf("read on the descriptor kept open = %v, want ENOTCONN", err)
	}
}

func TestBadMountpoint(t *testing.T) {
	bin := testenv.Build(t, "dummy-fuse")
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for mp, cause := range map[string]string{
		filepath.Join(dir, "missing"): "no such file or directory",
		file:                          "not a directory",
	} {
		var stderr bytes.Buffer
		cmd := exec.Command(bin, mp)
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("%s: %v, want exit code 1", mp, err)
		}
		if want := fmt.Sprintf("dummy-fuse: mount %s: %s\n", mp, cause); stderr.String() != want {
			t.Errorf("stderr %q, want exactly %q", stderr.String(), want)
		}
	}
}

// TestMagicMountpoint plays the privileged parent: it opens /dev/fuse, mounts it, hands the descriptor to a
// dummy-fuse child as /dev/fd/3 and closes its own copy.
func TestMagicMountpoint(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := testenv.Build(t, "dummy-fuse")
	mnt := t.TempDir()
	cleanupMount(t, mnt)
	dev, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	data := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0", dev.Fd())
	if err := unix.Mount("dummy-fuse", mnt, "fuse.dummy-fuse", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_RDONLY, data); err != nil {
		dev.Close()
		t.Fatalf("mount %s: %v", mnt, err)
	}
	cmd := exec.Command(bin, "/dev/fd/3")
	cmd.ExtraFiles = []*os.File{dev}
	p := start(t, cmd)
	dev.Close() // only the child serves the connection now

	// A read waits for the child to answer INIT; do it aside so a broken child fails the test, not hangs it.
	type res struct {
		b   []byte
		err error
	}
	got := make(chan res, 1)
	go func() {
		b, err := os.ReadFile(filepath.Join(mnt, fileName))
		got <- res{b, err}
	}()
	select {
	case r := <-got:
		if r.err != nil || string(r.b) != "Hello world!\n" {
			t.Fatalf("read through /dev/fd/3 = %q, %v", r.b, r.err)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("read through /dev/fd/3 hangs")
	}
	if typ := mountType(t, mnt); typ != "fuse.dummy-fuse" {
		t.Errorf("mount type %q", typ)
	}

	// The child cannot unmount a mount it does not know; it exits 0 and the mount is dead.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 0 {
		t.Errorf("exit code %d, want 0; stderr %q", code, p.stderr)
	}
	// open always asks the server (stat may still be answered from the attribute cache).
	if f, err := os.Open(filepath.Join(mnt, fileName)); !errors.Is(err, unix.ENOTCONN) {
		if err == nil {
			f.Close()
		}
		t.Errorf("open after the server exited = %v, want ENOTCONN", err)
	}
}

// readLog returns the complete JSON lines the workload wrote so far.
func readLog(t *testing.T, path string) []workload.Record {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var recs []workload.Record
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if len(line) == 0 || line[len(line)-1] != '\n' {
			break // not written completely yet
		}
		var r workload.Record
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("bad log line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

func find(recs []workload.Record, event, errno string) *workload.Record {
	for i, r := range recs {
		if r.Event == event && (errno == "" || (r.Errno != nil && *r.Errno == errno)) {
			return &recs[i]
		}
	}
	return nil
}

// TestMountLoss kills dummy-fuse with SIGKILL under running workloads, as when a CSI plugin container dies,
// and checks what they see: ENOTCONN on the descriptor they keep open (after ECONNABORTED at most, and in
// page-cache mode maybe after some reads from the cache), ENOTCONN on new opens, and exit code 1 with
// --exit-on-error.
func TestMountLoss(t *testing.T) {
	testenv.RequireFUSE(t)
	fuseBin := testenv.Build(t, "dummy-fuse")
	wlBin := testenv.Build(t, "dummy-fuse-workload")
	for _, mode := range []struct {
		name string
		args []string
	}{
		{"direct-io", []string{"--direct-io"}},
		{"page-cache", nil},
	} {
		t.Run(mode.name, func(t *testing.T) {
			server, mnt := startDummyFuse(t, fuseBin, mode.args...)
			file := filepath.Join(mnt, fileName)
			workloadArgs := []string{"--file", file, "--log-format", "json", "--read-interval", "50ms"}
			keep := start(t, exec.Command(wlBin, workloadArgs...))
			exitOnErr := start(t, exec.Command(wlBin, append(workloadArgs, "--exit-on-error")...))
			reopen := start(t, exec.Command(wlBin, append(workloadArgs, "--keep-open=false")...))
			for _, w := range []*proc{keep, exitOnErr, reopen} {
				poll(t, "a first successful read", func() bool { return find(readLog(t, w.out), workload.EventRead, "") != nil })
			}

			if err := unix.Kill(server.cmd.Process.Pid, unix.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			server.wait(t)

			poll(t, "read_error ENOTCONN on the descriptor kept open", func() bool {
				return find(readLog(t, keep.out), workload.EventReadError, "ENOTCONN") != nil
			})
			t.Logf("%s: kept-open descriptor failed with ENOTCONN %s after the kill", mode.name, time.Since(killed).Round(time.Millisecond))
			poll(t, "open_error ENOTCONN on a new open", func() bool {
				return find(readLog(t, reopen.out), workload.EventOpenError, "ENOTCONN") != nil
			})

			if code := exitOnErr.wait(t); code != workload.ExitError {
				t.Errorf("--exit-on-error workload exit code %d, want %d", code, workload.ExitError)
			}
			recs := readLog(t, exitOnErr.out)
			first := find(recs, workload.EventReadError, "")
			if first == nil || (*first.Errno != "ENOTCONN" && *first.Errno != "ECONNABORTED") {
				t.Errorf("--exit-on-error workload: first read_error %+v, want ENOTCONN or ECONNABORTED", first)
			}
			if last := recs[len(recs)-1]; last.Event != workload.EventExit || *last.Code != 1 {
				t.Errorf("--exit-on-error workload: last record %+v, want exit with code 1", last)
			}

			for _, w := range []*proc{keep, reopen} {
				if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				if code := w.wait(t); code != 0 {
					t.Errorf("workload exit code %d after SIGTERM, want 0", code)
				}
				recs := readLog(t, w.out)
				if last := recs[len(recs)-1]; last.Event != workload.EventExit || *last.Code != 0 {
					t.Errorf("last record %+v, want exit with code 0", last)
				}
				for _, r := range recs {
					if r.Event == workload.EventRead && *r.Content != "Hello world!\n" {
						t.Errorf("read record with content %q", *r.Content)
					}
				}
			}
			// The keep-open workload never reopened: one open, whatever happened.
			if n := strings.Count(readLogRaw(t, keep.out), `"event":"open"`); n != 1 {
				t.Errorf("keep-open workload opened %d times, want 1", n)
			}
		})
	}
}

func readLogRaw(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A bind of the mount (a published CSI target) keeps the kernel's superblock, and so the connection, alive
// after the unmount: SIGTERM must still end the server, leaving the bind disconnected as a crash would.
func TestSIGTERMWithBindMountExits(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := testenv.Build(t, "dummy-fuse")
	p, mnt := startDummyFuse(t, bin)
	bind := t.TempDir()
	if err := unix.Mount(mnt, bind, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s to %s: %v", mnt, bind, err)
	}
	cleanupMount(t, bind)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0; stderr %q", code, p.stderr)
	}
	if _, err := os.Stat(filepath.Join(bind, fileName)); !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("stat through the bind after the server stopped: %v, want ENOTCONN", err)
	}
}
