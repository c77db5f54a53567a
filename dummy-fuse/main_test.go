package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse-workload/workload"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/command"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fdpass"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/handover"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
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
		{[]string{"--workers", "0", "/mnt"}, 2, "", "--workers must be at least 1"},
		{[]string{"--read-latency", "-1s", "/mnt"}, 2, "", "--read-latency must not be negative"},
		{[]string{"--takeover", "rec", "/mnt"}, 2, "", "--takeover needs MOUNTPOINT /dev/fd/N"},
		{[]string{"--takeover", "/nonexistent/rec", "/dev/fd/3"}, 1, "", "read the handover record: open /nonexistent/rec: no such file"},
		{[]string{"--backend-wait", "30s", "/mnt"}, 2, "", "--node-table and --backend-wait need --relay-backend"},
		{[]string{"--relay-writable", "/mnt"}, 2, "", "--relay-writable and --spill-dir need --relay-backend or --relay-node-dir"},
		{[]string{"--relay-backend", "/b", "--spill-dir", "/s", "/mnt"}, 2, "", "--spill-dir is for --relay-writable"},
		{[]string{"--relay-backend", "/b", "--read-latency", "1s", "/mnt"}, 2, "", "no --read-latency"},
		{[]string{"--relay-backend", "/b", "--backend-wait", "0s", "/mnt"}, 2, "", "--backend-wait must be positive"},
		{[]string{"--relay-backend", "/b", "--takeover", "rec", "/dev/fd/3"}, 2, "", "--takeover of a relay needs the --node-table"},
		{[]string{"--relay-backend", "/nonexistent/dir", "/mnt"}, 1, "", "backend /nonexistent/dir: no such file"},
		{[]string{"--standby", "/dev/fd/3"}, 2, "", "--standby waits to take over: it needs --takeover"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), tc.args, command.Streams{Out: &stdout, Err: &stderr})
		if code := command.Code("dummy-fuse", err, &stderr); code != tc.code {
			t.Errorf("%q: exit code %d, want %d", tc.args, code, tc.code)
		}
		if !strings.Contains(stdout.String(), tc.stdout) || !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("%q: stdout %q stderr %q, want them to contain %q and %q", tc.args, stdout.String(), stderr.String(), tc.stdout, tc.stderr)
		}
	}
}

// TestStandby: a standby successor reads nothing, the handover record included, until a byte arrives on its
// stdin; at the end of stdin (its starter gone) it exits 0 without taking anything over.
func TestStandby(t *testing.T) {
	args := []string{"--standby", "--takeover", "/nonexistent/rec", "/dev/fd/3"}
	for _, tc := range []struct {
		in     string
		code   int
		stderr string
	}{
		{"", 0, ""},
		{"g", 1, "read the handover record: open /nonexistent/rec"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), args, command.Streams{In: strings.NewReader(tc.in), Out: &stdout, Err: &stderr})
		if code := command.Code("dummy-fuse", err, &stderr); code != tc.code || !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("stdin %q: exit code %d, stderr %q; want %d and %q", tc.in, code, stderr.String(), tc.code, tc.stderr)
		}
	}
}

// proc is a process a test started through its Lab: out is the file with its stdout (a workload's JSON
// records), its stderr goes to its log.
type proc struct {
	*testenv.Proc
	out string
}

func (p *proc) stderrString() string { return p.Log() }

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait() int { return p.Wait(waitTimeout) }

func start(t *testing.T, lab *testenv.Lab, cmd *exec.Cmd) *proc {
	t.Helper()
	out, err := os.CreateTemp(t.TempDir(), filepath.Base(cmd.Path)+"-*.out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout = out
	return &proc{Proc: lab.Start(filepath.Base(cmd.Path), cmd), out: out.Name()}
}

// poll calls cond until it reports true; it fails the test after waitTimeout.
func poll(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, what, cond)
}

// mountType returns the filesystem type of the mount on top at point, or "" when nothing is mounted there.
func mountType(t testing.TB, point string) string {
	t.Helper()
	top, err := mounts.Top(point)
	if err != nil {
		t.Fatal(err)
	}
	if top == nil {
		return ""
	}
	return top.FSType
}

// startDummyFuse mounts dummy-fuse (the binary) at a new directory and waits for the mount.
func startDummyFuse(t *testing.T, lab *testenv.Lab, bin string, args ...string) (*proc, string) {
	t.Helper()
	mnt := lab.Dir()
	p := start(t, lab, exec.Command(bin, append(args, mnt)...))
	poll(t, "dummy-fuse to mount "+mnt, func() bool {
		if p.Exited() {
			t.Fatalf("dummy-fuse exited before mounting: %v\n%s", p.Err(), p.Tail())
		}
		return mountType(t, mnt) == "fuse.dummy-fuse"
	})
	return p, mnt
}

func TestSIGTERMUnmounts(t *testing.T) {
	testenv.RequireFUSE(t)
	lab := testenv.NewLab(t)
	bin := testenv.Build(t, "dummy-fuse")
	p, mnt := startDummyFuse(t, lab, bin)
	if b, err := os.ReadFile(filepath.Join(mnt, fileName)); err != nil || string(b) != "Hello world!\n" {
		t.Fatalf("read = %q, %v", b, err)
	}
	// One line says what is mounted where and how to stop it.
	want := fmt.Sprintf("dummy-fuse: mounted %s at %s; stop with kill %d (SIGTERM) or umount %s\n", fileName, mnt, p.Cmd.Process.Pid, mnt)
	poll(t, "dummy-fuse's mounted line", func() bool { return strings.Contains(p.stderrString(), want) })
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0; stderr %q", code, p.stderrString())
	}
	if typ := mountType(t, mnt); typ != "" {
		t.Errorf("%s still mounted (%s) after SIGTERM", mnt, typ)
	}
}

func TestSIGINTWithOpenFileDetaches(t *testing.T) {
	testenv.RequireFUSE(t)
	lab := testenv.NewLab(t)
	bin := testenv.Build(t, "dummy-fuse")
	p, mnt := startDummyFuse(t, lab, bin, "--direct-io")
	f, err := os.Open(filepath.Join(mnt, fileName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := p.Cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	// A plain unmount is EBUSY while the file is open; dummy-fuse detaches lazily and still exits 0.
	if code := p.wait(); code != 0 {
		t.Errorf("exit code %d after SIGINT, want 0; stderr %q", code, p.stderrString())
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

// mountDevFuse opens /dev/fuse and mounts it at mnt as a privileged parent does, in the fd=N form that go-fuse
// serves through the magic mountpoint /dev/fd/N; the caller owns the descriptor.
func mountDevFuse(t *testing.T, mnt string) *os.File {
	t.Helper()
	dev, err := fuseconn.Open()
	if err != nil {
		t.Fatal(err)
	}
	if err := fuseconn.Mount(dev, mnt, fuseconn.MountOptions{Name: "dummy-fuse", Source: "dummy-fuse", ReadOnly: true}); err != nil {
		dev.Close()
		t.Fatal(err)
	}
	return dev
}

// TestMagicMountpoint plays the privileged parent: it opens /dev/fuse, mounts it, hands the descriptor to a
// dummy-fuse child as /dev/fd/3 and closes its own copy.
func TestMagicMountpoint(t *testing.T) {
	testenv.RequireFUSE(t)
	lab := testenv.NewLab(t)
	bin := testenv.Build(t, "dummy-fuse")
	mnt := lab.Dir()
	dev := mountDevFuse(t, mnt)
	cmd := exec.Command(bin, "/dev/fd/3")
	cmd.ExtraFiles = []*os.File{dev}
	p := start(t, lab, cmd)
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
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(); code != 0 {
		t.Errorf("exit code %d, want 0; stderr %q", code, p.stderrString())
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
	lab := testenv.NewLab(t)
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
			server, mnt := startDummyFuse(t, lab, fuseBin, mode.args...)
			file := filepath.Join(mnt, fileName)
			workloadArgs := []string{"--file", file, "--log-format", "json", "--read-interval", "50ms"}
			keep := start(t, lab, exec.Command(wlBin, workloadArgs...))
			exitOnErr := start(t, lab, exec.Command(wlBin, append(workloadArgs, "--exit-on-error")...))
			reopen := start(t, lab, exec.Command(wlBin, append(workloadArgs, "--keep-open=false")...))
			for _, w := range []*proc{keep, exitOnErr, reopen} {
				poll(t, "a first successful read", func() bool { return find(readLog(t, w.out), workload.EventRead, "") != nil })
			}

			if err := unix.Kill(server.PID(), unix.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			server.wait()

			poll(t, "read_error ENOTCONN on the descriptor kept open", func() bool {
				return find(readLog(t, keep.out), workload.EventReadError, "ENOTCONN") != nil
			})
			t.Logf("%s: kept-open descriptor failed with ENOTCONN %s after the kill", mode.name, time.Since(killed).Round(time.Millisecond))
			poll(t, "open_error ENOTCONN on a new open", func() bool {
				return find(readLog(t, reopen.out), workload.EventOpenError, "ENOTCONN") != nil
			})

			if code := exitOnErr.wait(); code != workload.ExitError {
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
				if err := w.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				if code := w.wait(); code != 0 {
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
	lab := testenv.NewLab(t)
	bin := testenv.Build(t, "dummy-fuse")
	p, mnt := startDummyFuse(t, lab, bin)
	bind := lab.Dir()
	if err := unix.Mount(mnt, bind, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s to %s: %v", mnt, bind, err)
	}
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0; stderr %q", code, p.stderrString())
	}
	if _, err := os.Stat(filepath.Join(bind, fileName)); !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("stat through the bind after the server stopped: %v, want ENOTCONN", err)
	}
}

// TestTakeover plays the keeper of a FUSE connection: it opens /dev/fuse, mounts it and keeps its copy of
// the descriptor while a dummy-fuse child serves it. The child is killed with SIGKILL while a slow read is
// inside it; a successor started with the same descriptor and the saved INIT takes over. The workloads
// (other processes, as in real life: a process that forks while it holds files of a dead FUSE server blocks
// in the FLUSH its child's exec sends for them) must see no failed read: the read that was inside the dead
// server completes with the content (the kernel resent it), the descriptor opened before the crash keeps
// reading, new opens work, and the mount was never remounted.
func TestTakeover(t *testing.T) {
	testenv.RequireFUSE(t)
	lab := testenv.NewLab(t)
	bin := testenv.Build(t, "dummy-fuse")
	wlBin := testenv.Build(t, "dummy-fuse-workload")
	mnt := lab.Dir()
	dev := mountDevFuse(t, mnt)
	record := filepath.Join(t.TempDir(), "init")
	file := filepath.Join(mnt, fileName)

	first := exec.Command(bin, "--direct-io", "--read-latency", "300ms", "--debug", "--save-init", record, "/dev/fd/3")
	first.ExtraFiles = []*os.File{dev}
	a := start(t, lab, first)
	poll(t, "the first server to save the handover record", func() bool {
		if a.Exited() {
			t.Fatalf("first server exited: %v\n%s", a.Err(), a.Tail())
		}
		_, err := os.Stat(record)
		return err == nil
	})

	wlArgs := []string{"--file", file, "--log-format", "json", "--read-interval", "20ms"}
	keep := start(t, lab, exec.Command(wlBin, wlArgs...))
	reopen := start(t, lab, exec.Command(wlBin, append(wlArgs, "--keep-open=false")...))
	var succ *exec.Cmd
	t.Cleanup(func() { dev.Close() }) // the Lab's cleanup, later, aborts the connection and stops the servers
	for _, w := range []*proc{keep, reopen} {
		poll(t, "a first successful read", func() bool { return find(readLog(t, w.out), workload.EventRead, "") != nil })
	}
	// go-fuse's debug log shows each request as read ("rx UNIQUE: READ ...") and answered ("tx UNIQUE: ...").
	poll(t, "a READ inside the first server", func() bool { return len(unanswered(a.stderrString(), "READ")) > 0 })
	if err := unix.Kill(first.Process.Pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.wait()
	inside := unanswered(a.stderrString(), "READ")
	if len(inside) == 0 {
		t.Fatal("no READ was left unanswered by the killed server")
	}

	succ = exec.Command(bin, "--direct-io", "--debug", "--takeover", record, "/dev/fd/3")
	succ.ExtraFiles = []*os.File{dev}
	b := start(t, lab, succ)
	// The kernel resends a request with bit 63 of its unique ID set (FUSE_UNIQUE_RESEND).
	for _, u := range inside {
		resent := fmt.Sprintf("tx %d:", u|1<<63)
		poll(t, "the successor to answer the resent "+resent, func() bool { return strings.Contains(b.stderrString(), resent) })
	}
	if !strings.Contains(b.stderrString(), "asked the kernel to resend") {
		t.Errorf("successor did not report the resend: %q", b.stderrString())
	}
	for _, w := range []*proc{keep, reopen} {
		n := len(readLog(t, w.out))
		poll(t, "two more workload records after the takeover", func() bool { return len(readLog(t, w.out)) >= n+2 })
	}
	if typ := mountType(t, mnt); typ != "fuse.dummy-fuse" {
		t.Errorf("mount type %q after the takeover", typ)
	}
	for _, w := range []*proc{keep, reopen} {
		if err := w.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		w.wait()
		reads := 0
		for _, r := range readLog(t, w.out) {
			switch {
			case r.Event == workload.EventRead && *r.Content != "Hello world!\n":
				t.Errorf("read record with content %q", *r.Content)
			case r.Event == workload.EventRead:
				reads++
			case r.Event == workload.EventReadError, r.Event == workload.EventOpenError:
				t.Errorf("workload saw a failure: %+v", r)
			}
		}
		if reads < 3 {
			t.Errorf("workload read %d times, want at least 3", reads)
		}
	}
	// The keep-open workload never reopened: its descriptor from before the crash served every read.
	if n := strings.Count(readLogRaw(t, keep.out), `"event":"open"`); n != 1 {
		t.Errorf("keep-open workload opened %d times, want 1", n)
	}

	// A successor that would negotiate other settings refuses: here a record whose reply differs in one byte.
	rec, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "init")
	rec[len(rec)-1] ^= 0xff
	if err := os.WriteFile(bad, rec, 0o600); err != nil {
		t.Fatal(err)
	}
	refused := exec.Command(bin, "--direct-io", "--takeover", bad, "/dev/fd/3")
	refused.ExtraFiles = []*os.File{dev}
	r := start(t, lab, refused)
	if code := r.wait(); code != 1 || !strings.Contains(r.stderrString(), "cannot take over the FUSE connection") {
		t.Errorf("takeover with a mismatching record: exit %d, stderr %q; want 1 and a refusal", code, r.stderrString())
	}

	if err := succ.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := b.wait(); code != 0 {
		t.Errorf("successor exit code %d after SIGTERM", code)
	}
}

// unanswered returns the unique IDs of the requests of opcode op that go-fuse's debug log shows as received
// ("rx 12: READ ...") and not answered ("tx 12: ...").
func unanswered(log, op string) []uint64 {
	open := map[uint64]bool{}
	for _, line := range strings.Split(log, "\n") {
		// "2026/11/23 08:10:39 rx 656: READ n2 {...}" (the log package's timestamp first)
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] != "rx" && f[i] != "tx" {
				continue
			}
			u, err := strconv.ParseUint(strings.TrimSuffix(f[i+1], ":"), 10, 64)
			if err != nil {
				break
			}
			if f[i] == "tx" {
				delete(open, u)
			} else if i+2 < len(f) && f[i+2] == op {
				open[u] = true
			}
			break
		}
	}
	var ids []uint64
	for u := range open {
		ids = append(ids, u)
	}
	return ids
}

// TestSession plays a keeper: it mounts two connections itself, keeps a copy of each descriptor, and hands
// them to one dummy-fuse --session process, which answers both INITs and reports each connection's handover
// record. That server is killed with SIGKILL while a slow read is inside it; a successor gets both
// connections with their records over a new session and takes them over. The workloads of both mounts see
// no failed read, and the read the dead server had taken completes with the content. Unmounting one mount is
// reported as the end of its connection; closing the session ends the server.
func TestSession(t *testing.T) {
	testenv.RequireFUSE(t)
	lab := testenv.NewLab(t)
	bin := testenv.Build(t, "dummy-fuse")
	wlBin := testenv.Build(t, "dummy-fuse-workload")
	type volume struct {
		name, mnt string
		dev       *os.File
		init      []byte
		wl        *proc
	}
	var vols []*volume
	for _, name := range []string{"vol-a", "vol-b"} {
		mnt := lab.Dir()
		vols = append(vols, &volume{name: name, mnt: mnt, dev: mountDevFuse(t, mnt)})
	}
	t.Cleanup(func() { // the Lab's cleanup, later, aborts the connections and stops the servers
		for _, v := range vols {
			v.dev.Close()
		}
	})
	startServer := func() (*handover.Conn, *proc) {
		t.Helper()
		session, child, err := handover.Pair()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { session.Close() })
		cmd := exec.Command(bin, "--direct-io", "--read-latency", "300ms", "--debug", "--session", "/dev/fd/3")
		cmd.ExtraFiles = []*os.File{child}
		p := start(t, lab, cmd)
		child.Close()
		return session, p
	}
	// served hands every volume to the server and waits for its answers.
	served := func(session *handover.Conn, p *proc) {
		t.Helper()
		for _, v := range vols {
			if err := session.Send(handover.Msg{Kind: handover.Serve, Volume: v.name, Init: v.init}, v.dev); err != nil {
				t.Fatal(err)
			}
		}
		for range vols {
			m, f, err := session.Recv()
			if err != nil {
				t.Fatalf("waiting for served: %v\n%s", err, p.stderrString())
			}
			if f != nil || m.Kind != handover.Served || m.PID != p.PID() || len(m.Init) == 0 {
				t.Fatalf("got %+v (descriptor %v), want served by pid %d with a record", m, f != nil, p.PID())
			}
			for _, v := range vols {
				if v.name == m.Volume {
					if v.init != nil && !bytes.Equal(v.init, m.Init) {
						t.Errorf("%s: the successor reports another record", v.name)
					}
					v.init = m.Init
				}
			}
		}
	}
	session, first := startServer()
	served(session, first)
	for _, v := range vols {
		v.wl = start(t, lab, exec.Command(wlBin, "--file", filepath.Join(v.mnt, fileName), "--log-format", "json", "--read-interval", "20ms"))
		w := v.wl
		poll(t, v.name+": a first successful read", func() bool { return find(readLog(t, w.out), workload.EventRead, "") != nil })
	}
	poll(t, "a READ inside the first server", func() bool { return len(unanswered(first.stderrString(), "READ")) > 0 })
	if err := unix.Kill(first.PID(), unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	first.wait()
	inside := unanswered(first.stderrString(), "READ")

	session2, succ := startServer()
	served(session2, succ)
	for _, u := range inside {
		resent := fmt.Sprintf("tx %d:", u|1<<63)
		poll(t, "the successor to answer the resent "+resent, func() bool { return strings.Contains(succ.stderrString(), resent) })
	}
	if n := strings.Count(succ.stderrString(), "took it over, asked the kernel to resend"); n != len(vols) {
		t.Errorf("successor took %d connections over with a resend, want %d: %q", n, len(vols), succ.stderrString())
	}
	for _, v := range vols {
		w := v.wl
		n := len(readLog(t, w.out))
		poll(t, v.name+": two more reads after the takeover", func() bool { return len(readLog(t, w.out)) >= n+2 })
		if err := w.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		w.wait()
		for _, r := range readLog(t, w.out) {
			if r.Event == workload.EventReadError || r.Event == workload.EventOpenError || (r.Event == workload.EventRead && *r.Content != "Hello world!\n") {
				t.Errorf("%s: workload record %+v", v.name, r)
			}
		}
	}

	// An unmounted connection ends, and the server says so.
	if err := unix.Unmount(vols[1].mnt, 0); err != nil {
		t.Fatal(err)
	}
	m, _, err := session2.Recv()
	if err != nil || m.Kind != handover.Ended || m.Volume != "vol-b" || m.Reason != "unmounted" {
		t.Errorf("after unmounting vol-b: %+v, %v; want ended vol-b unmounted", m, err)
	}
	// The keeper going away ends the server, cleanly.
	session2.Close()
	if code := succ.wait(); code != 0 {
		t.Errorf("server exit code %d after its session closed, want 0: %s", code, succ.stderrString())
	}
}

// TestSessionRefusesGarbage: a keeper that breaks the protocol ends the server with an error (exit 1) and the
// reason; a descriptor that is not /dev/fuse is never served.
func TestSessionRefusesGarbage(t *testing.T) {
	testenv.RequireFUSE(t)
	lab := testenv.NewLab(t)
	bin := testenv.Build(t, "dummy-fuse")
	// A raw socket pair: handover.Conn checks its own messages, a broken peer does not.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	child := os.NewFile(uintptr(fds[1]), "session")
	keeperEnd, err := net.FileConn(os.NewFile(uintptr(fds[0]), "keeper"))
	if err != nil {
		t.Fatal(err)
	}
	defer keeperEnd.Close()
	cmd := exec.Command(bin, "--session", "/dev/fd/3")
	cmd.ExtraFiles = []*os.File{child}
	p := start(t, lab, cmd)
	child.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if err := fdpass.WriteMsg(keeperEnd.(*net.UnixConn), []byte(`{"kind":"serve","volume":"v"}`), null, time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(); code != 1 || !strings.Contains(p.stderrString(), "not /dev/fuse") {
		t.Errorf("exit %d, stderr %q; want 1 and the reason", code, p.stderrString())
	}
	for _, args := range [][]string{{"--session", "/tmp/x"}, {"--session", "/dev/fd/3", "/mnt"}, {"--session", "/dev/fd/3", "--save-init", "/tmp/r"}} {
		r := start(t, lab, exec.Command(bin, args...))
		if code := r.wait(); code != 2 {
			t.Errorf("dummy-fuse %q: exit %d, want 2 (usage)", args, code)
		}
	}
}
