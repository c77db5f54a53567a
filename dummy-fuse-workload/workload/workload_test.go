package workload

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/command"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
)

const testFile = "/mnt/dummy-file.txt"

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeClock advances by step on every Now and stops the run (cancels ctx) at the rounds-th wait.
type fakeClock struct {
	now    time.Time
	step   time.Duration
	waits  []time.Duration
	rounds int
	cancel context.CancelCauseFunc
}

func (c *fakeClock) Now() time.Time {
	t := c.now
	c.now = c.now.Add(c.step)
	return t
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.waits = append(c.waits, d)
	if len(c.waits) >= c.rounds {
		c.cancel(errors.New("terminated signal received"))
		return nil // never fires: the select must take ctx.Done
	}
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

// script answers opens and reads in order; nil entries succeed.
type script struct {
	openErrs []error
	readErrs []error
	opens    int
	reads    int
	closes   int
	block    chan struct{} // when set, reads block until it is closed
	entered  chan struct{} // when set, receives when a read starts
}

func (s *script) open(path string) (File, error) {
	i := s.opens
	s.opens++
	if i < len(s.openErrs) && s.openErrs[i] != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: s.openErrs[i]}
	}
	return &scriptFile{s: s, path: path}, nil
}

type scriptFile struct {
	s    *script
	path string
}

func (f *scriptFile) ReadAt(p []byte, off int64) (int, error) {
	if f.s.entered != nil {
		f.s.entered <- struct{}{}
	}
	if f.s.block != nil {
		<-f.s.block
		return 0, syscall.EINTR
	}
	i := f.s.reads
	f.s.reads++
	if i < len(f.s.readErrs) && f.s.readErrs[i] != nil {
		return 0, &fs.PathError{Op: "read", Path: f.path, Err: f.s.readErrs[i]}
	}
	return copy(p, "Hello world!\n"), nil
}

func (f *scriptFile) Close() error {
	f.s.closes++
	return nil
}

type result struct {
	code  int
	out   string
	clock *fakeClock
}

func run(t *testing.T, cfg Config, s *script, rounds int) result {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	clk := &fakeClock{now: t0, step: 250 * time.Microsecond, rounds: rounds, cancel: cancel}
	var out bytes.Buffer
	code := Run(ctx, cfg, Env{Out: &out, Clock: clk, Open: s.open})
	return result{code: code, out: out.String(), clock: clk}
}

func records(t *testing.T, out string) []Record {
	t.Helper()
	var recs []Record
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var r Record
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("bad JSON line %q: %v", sc.Text(), err)
		}
		recs = append(recs, r)
	}
	return recs
}

func events(recs []Record) string {
	var ev []string
	for _, r := range recs {
		ev = append(ev, r.Event)
	}
	return strings.Join(ev, " ")
}

func TestTextLogKeepOpen(t *testing.T) {
	s := &script{readErrs: []error{nil, syscall.ENOTCONN}}
	res := run(t, Config{File: testFile, KeepOpen: true, Interval: 5 * time.Second, Format: FormatText}, s, 3)
	ts := "2026-01-02T03:04:05Z "
	want := ts + "starting: file /mnt/dummy-file.txt, keep-open true, exit-on-error false, direct-io false, read interval 5s\n" +
		ts + "opened file /mnt/dummy-file.txt\n" +
		ts + "reading\n" +
		ts + "read 13 bytes: \"Hello world!\\n\"\n" +
		ts + "reading\n" +
		ts + "read error: read /mnt/dummy-file.txt: transport endpoint is not connected\n" +
		ts + "reading\n" +
		ts + "read 13 bytes: \"Hello world!\\n\"\n" +
		ts + "closed file /mnt/dummy-file.txt\n" +
		ts + "exiting with code 0: terminated signal received\n"
	if res.out != want {
		t.Errorf("text log:\n%s\nwant:\n%s", res.out, want)
	}
	if res.code != ExitOK {
		t.Errorf("exit code %d, want %d", res.code, ExitOK)
	}
}

func TestJSONLogFields(t *testing.T) {
	s := &script{readErrs: []error{nil, syscall.ECONNABORTED, syscall.ENOTCONN}}
	res := run(t, Config{File: testFile, KeepOpen: true, Interval: 50 * time.Millisecond, Format: FormatJSON}, s, 3)
	recs := records(t, res.out)
	if got, want := events(recs), "start open read_start read read_start read_error read_start read_error close exit"; got != want {
		t.Fatalf("events %q, want %q", got, want)
	}
	for _, r := range recs {
		if r.File != testFile || r.Time.IsZero() || r.Time.Location() != time.UTC {
			t.Errorf("%s: file %q time %v: want file and a UTC time", r.Event, r.File, r.Time)
		}
	}
	start := recs[0]
	if start.KeepOpen == nil || !*start.KeepOpen || start.ExitOnError == nil || *start.ExitOnError || start.Interval != "50ms" {
		t.Errorf("start record %+v", start)
	}
	if open := recs[1]; open.LatencyUS == nil || *open.LatencyUS != 250 {
		t.Errorf("open record %+v, want its latency (250 µs)", open)
	}
	if rs := recs[2]; rs.Event != EventReadStart || rs.LatencyUS != nil || rs.Bytes != nil {
		t.Errorf("read_start record %+v, want neither latency nor bytes", rs)
	}
	read := recs[3]
	if *read.Bytes != 13 || *read.Content != "Hello world!\n" || *read.LatencyUS != 250 {
		t.Errorf("read record bytes %d content %q latency %d, want 13, hello, 250", *read.Bytes, *read.Content, *read.LatencyUS)
	}
	for i, wantErrno := range []string{"ECONNABORTED", "ENOTCONN"} {
		r := recs[5+2*i]
		if r.Errno == nil || *r.Errno != wantErrno || r.LatencyUS == nil || r.Error == "" || r.Bytes != nil {
			t.Errorf("read_error record %+v, want errno %s with latency and error, no bytes", r, wantErrno)
		}
	}
	exit := recs[len(recs)-1]
	if exit.Code == nil || *exit.Code != 0 || exit.Reason != "terminated signal received" {
		t.Errorf("exit record %+v", exit)
	}
	// time is RFC 3339 with nanoseconds, in UTC.
	if !strings.Contains(res.out, `"time":"2026-01-02T03:04:05.00075Z"`) {
		t.Errorf("no RFC3339Nano UTC time in %s", res.out)
	}
}

func TestKeepOpenNeverReopensAfterError(t *testing.T) {
	s := &script{readErrs: []error{syscall.ENOTCONN, syscall.ENOTCONN, syscall.ENOTCONN, syscall.ENOTCONN}}
	res := run(t, Config{File: testFile, KeepOpen: true, Interval: time.Second, Format: FormatJSON}, s, 4)
	if s.opens != 1 || s.reads != 4 {
		t.Errorf("opens %d reads %d, want 1 open re-read 4 times", s.opens, s.reads)
	}
	if res.code != ExitOK {
		t.Errorf("exit code %d, want 0 (no --exit-on-error)", res.code)
	}
	for _, r := range records(t, res.out) {
		if r.Event == EventRead {
			t.Errorf("a read event although every read failed: %+v", r)
		}
	}
}

func TestExitOnError(t *testing.T) {
	for _, tc := range []struct {
		name     string
		keepOpen bool
		s        *script
		wantLast string
		errno    string
	}{
		{"read error", true, &script{readErrs: []error{nil, syscall.ENOTCONN}}, "read_error close exit", "ENOTCONN"},
		{"open error", true, &script{openErrs: []error{syscall.ENOENT}}, "open_error exit", "ENOENT"},
		{"reopen error", false, &script{openErrs: []error{nil, syscall.ENOTCONN}}, "open_error exit", "ENOTCONN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, Config{File: testFile, KeepOpen: tc.keepOpen, ExitOnError: true, Interval: time.Second, Format: FormatJSON}, tc.s, 10)
			if res.code != ExitError {
				t.Fatalf("exit code %d, want %d", res.code, ExitError)
			}
			recs := records(t, res.out)
			if got := events(recs); !strings.HasSuffix(got, tc.wantLast) {
				t.Errorf("events %q, want them to end with %q", got, tc.wantLast)
			}
			exit := recs[len(recs)-1]
			if *exit.Code != 1 || !strings.Contains(exit.Reason, "error: ") {
				t.Errorf("exit record %+v", exit)
			}
			for _, r := range recs {
				if (r.Event == EventReadError || r.Event == EventOpenError) && *r.Errno != tc.errno {
					t.Errorf("%s errno %q, want %q", r.Event, *r.Errno, tc.errno)
				}
			}
		})
	}
}

func TestNoKeepOpenOpensEveryRound(t *testing.T) {
	s := &script{openErrs: []error{nil, syscall.ENOTCONN, nil}}
	res := run(t, Config{File: testFile, KeepOpen: false, Interval: time.Second, Format: FormatJSON}, s, 3)
	if got, want := events(records(t, res.out)), "start open read_start read close open_error open read_start read close exit"; got != want {
		t.Errorf("events %q, want %q", got, want)
	}
	if s.opens != 3 || s.closes != 2 {
		t.Errorf("opens %d closes %d, want 3 and 2", s.opens, s.closes)
	}
	if res.code != ExitOK {
		t.Errorf("exit code %d", res.code)
	}
}

func TestFirstReadImmediatelyThenEveryInterval(t *testing.T) {
	s := &script{}
	res := run(t, Config{File: testFile, KeepOpen: true, Interval: 7 * time.Second, Format: FormatJSON}, s, 3)
	if s.reads != 3 {
		t.Errorf("reads %d, want 3 (one at start, one after each of 2 waits)", s.reads)
	}
	for _, d := range res.clock.waits {
		if d != 7*time.Second {
			t.Errorf("waited %s, want the interval 7s", d)
		}
	}
}

func TestStopWhileReadHangs(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	s := &script{block: block, entered: make(chan struct{}, 1)}
	out := stopWhileHung(t, s.entered, s.open)
	if got := events(records(t, out)); got != "start open read_start exit" {
		t.Errorf("events %q after a stop during a hung read, want no read logged", got)
	}
}

// TestStopWhileOpenHangs: an open waits for the FUSE server too (a server gone while someone keeps its
// /dev/fuse descriptor); SIGTERM still ends the workload, and the open is not logged.
func TestStopWhileOpenHangs(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	entered := make(chan struct{}, 1)
	out := stopWhileHung(t, entered, func(string) (File, error) {
		entered <- struct{}{}
		<-block
		return nil, syscall.EINTR
	})
	if got := events(records(t, out)); got != "start exit" {
		t.Errorf("events %q after a stop during a hung open, want \"start exit\"", got)
	}
}

// stopWhileHung runs the workload with open until entered says an open or read hangs, stops it as SIGTERM
// does, and returns its JSON log once it exited with 0: a call stuck in the kernel never keeps it from ending.
func stopWhileHung(t *testing.T, entered <-chan struct{}, open func(string) (File, error)) string {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	var out bytes.Buffer
	done := make(chan int)
	go func() {
		done <- Run(ctx, Config{File: testFile, KeepOpen: true, Interval: time.Second, Format: FormatJSON}, Env{Out: &out, Open: open})
	}()
	<-entered
	cancel(errors.New("terminated signal received"))
	select {
	case code := <-done:
		if code != ExitOK {
			t.Errorf("exit code %d, want 0", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after a stop while a call hangs")
	}
	if !strings.Contains(out.String(), "terminated signal received") {
		t.Errorf("the exit record does not give the reason:\n%s", out.String())
	}
	return out.String()
}

// mainCode runs the command as main does and returns its exit code.
func mainCode(ctx context.Context, args []string, stdout, stderr io.Writer, env Env) int {
	return command.Code("dummy-fuse-workload", Command(env)(ctx, args, command.Streams{Out: stdout, Err: stderr}), stderr)
}

func TestMainUsage(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		code    int
		stderr  string
		stdoutN bool
	}{
		{args: nil, code: ExitUsage, stderr: "--file is required"},
		{args: []string{"--file", "x", "extra"}, code: ExitUsage, stderr: "unexpected arguments"},
		{args: []string{"--file", "x", "--read-interval", "0s"}, code: ExitUsage, stderr: "--read-interval must be positive"},
		{args: []string{"--file", "x", "--read-interval", "soon"}, code: ExitUsage, stderr: "invalid value"},
		{args: []string{"--file", "x", "--log-format", "yaml"}, code: ExitUsage, stderr: `unknown log format "yaml"`},
		{args: []string{"--no-such-flag"}, code: ExitUsage, stderr: "flag provided but not defined"},
		{args: []string{"--file", "x", "--sync-every", "2"}, code: ExitUsage, stderr: "--sync-every is for --write"},
		{args: []string{"--file", "x", "--write", "--write-size", "0"}, code: ExitUsage, stderr: "--write-size must be positive"},
		{args: []string{"--file", "x", "--write", "--direct-io"}, code: ExitUsage, stderr: "--keep-open and --direct-io are for reading"},
		{args: []string{"--help"}, code: ExitOK, stderr: "Usage: dummy-fuse-workload"},
		{args: []string{"--version"}, code: ExitOK, stdoutN: true},
	} {
		var stdout, stderr bytes.Buffer
		code := mainCode(context.Background(), tc.args, &stdout, &stderr, Env{})
		if code != tc.code {
			t.Errorf("%q: exit code %d, want %d", tc.args, code, tc.code)
		}
		if !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("%q: stderr %q, want it to contain %q", tc.args, stderr.String(), tc.stderr)
		}
		if tc.stdoutN != (stdout.Len() > 0) {
			t.Errorf("%q: stdout %q", tc.args, stdout.String())
		}
	}
}

func TestMainRealFile(t *testing.T) {
	// No mount needed: a plain file read through the real open/pread path.
	path := t.TempDir() + "/f"
	if err := os.WriteFile(path, []byte("Hello world!\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	clk := &fakeClock{now: t0, step: time.Millisecond, rounds: 2, cancel: cancel}
	var stdout, stderr bytes.Buffer
	code := mainCode(ctx, []string{"--file", path, "--log-format=json", "--keep-open=false"}, &stdout, &stderr, Env{Clock: clk})
	if code != ExitOK || stderr.Len() > 0 {
		t.Fatalf("exit code %d stderr %q", code, stderr.String())
	}
	recs := records(t, stdout.String())
	if got, want := events(recs), "start open read_start read close open read_start read close exit"; got != want {
		t.Errorf("events %q, want %q", got, want)
	}
	if *recs[3].Content != "Hello world!\n" {
		t.Errorf("content %q", *recs[3].Content)
	}

	var m bytes.Buffer
	code = mainCode(context.Background(), []string{"--file", path + ".missing", "--exit-on-error"}, &m, &stderr, Env{Clock: clk})
	if code != ExitError || !strings.Contains(m.String(), "open error: open "+path+".missing: no such file or directory") {
		t.Errorf("missing file: exit code %d, log:\n%s", code, m.String())
	}
}

// TestDirectIOOpensWithODirect: --direct-io opens the file with O_DIRECT (the kernel's file flags show it) and
// says so in the start record.
func TestDirectIOOpensWithODirect(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/f"
	if err := os.WriteFile(path, []byte("Hello world!\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	f, err := openFile(path, true)
	if err != nil {
		if errors.Is(err, syscall.EINVAL) {
			t.Skipf("%s's filesystem does not support O_DIRECT", dir)
		}
		t.Fatal(err)
	}
	defer f.Close()
	flags, err := unix.FcntlInt(uintptr(f.(osFile).fd), unix.F_GETFL, 0)
	if err != nil || flags&unix.O_DIRECT == 0 {
		t.Errorf("file flags %#o, %v: want O_DIRECT", flags, err)
	}
	cfg, err := ParseArgs([]string{"--file", path, "--direct-io", "--log-format=json"}, io.Discard)
	if err != nil || !cfg.DirectIO {
		t.Fatalf("ParseArgs: %+v, %v", cfg, err)
	}
	res := run(t, cfg, &script{}, 1)
	if start := records(t, res.out)[0]; start.DirectIO == nil || !*start.DirectIO {
		t.Errorf("start record %+v, want direct_io true", start)
	}
}

// TestReadErrorCarriesTheErrno: a read the kernel fails reaches the log with its errno, whatever the file: the
// descriptor is read with pread alone, never through Go's poller, which answers "not pollable" without asking
// the kernel once epoll reported an error on a file (a dead FUSE connection whose server answered POLL).
func TestReadErrorCarriesTheErrno(t *testing.T) {
	f, err := openFile(t.TempDir(), false) // a directory: open works, every read fails with EISDIR
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = f.ReadAt(make([]byte, 16), 0)
	if got := contract.ErrnoName(err); got != "EISDIR" {
		t.Errorf("read of a directory: %v, errno %q; want EISDIR", err, got)
	}
	if _, err := openFile(t.TempDir()+"/missing", false); contract.ErrnoName(err) != "ENOENT" {
		t.Errorf("open of a missing file: %v, want ENOENT", err)
	}
}
