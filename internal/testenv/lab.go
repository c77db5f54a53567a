package testenv

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
)

// Bounds of a Lab's waits. A process that does not exit this long after SIGKILL is stuck in the kernel (a FUSE
// request that nobody answers leaves its caller in uninterruptible sleep); waiting longer would hang the test.
const (
	ExitWait = 10 * time.Second
	// logTail is how many lines of a log a failure shows.
	logTail = 30
)

// Lab is what one test started: processes, and the directories under which it mounts. Its cleanup, registered
// when the Lab is made and so run after every cleanup registered later, is the only order that cannot hang:
//
//  0. check that every plugin or keeper the test stopped left its FUSE connections served or ended
//     (checkHolders);
//  1. abort the FUSE connections of every mount under the Lab's directories (in this process's mount table and
//     in those of its processes, which may have mount namespaces of their own): a request that nobody answers
//     keeps its caller in uninterruptible sleep, out of reach of SIGKILL, until its connection ends;
//  2. kill every process still running (SIGKILL, by its PID);
//  3. unmount everything under the Lab's directories, lazily;
//  4. wait for every process, at most ExitWait each; a process still there fails the test with its state, what
//     it waits for in the kernel and the end of its log;
//  5. when the test failed, show the end of every process's log.
type Lab struct {
	t      testing.TB
	logDir string

	mu    sync.Mutex
	roots []string
	procs []*Proc
}

// NewLab returns a Lab for t. Tests that start processes or mount filesystems make it first.
func NewLab(t testing.TB) *Lab {
	// The log directory is made first: testing removes it after the Lab's cleanup, which shows the logs.
	l := &Lab{t: t, logDir: t.TempDir()}
	t.Cleanup(l.cleanup)
	return l
}

// Dir returns a new directory for the test's mounts and sockets: short (a unix socket path holds 108 bytes),
// removed at the end after everything mounted below it was unmounted. Mount nothing in a t.TempDir made after
// the Lab: testing removes it before the Lab's cleanup has unmounted anything.
func (l *Lab) Dir() string {
	l.t.Helper()
	dir, err := os.MkdirTemp("", "dfc")
	if err != nil {
		l.t.Fatal(err)
	}
	l.AddRoot(dir)
	return dir
}

// AddRoot makes every mount on dir or below it the test's: aborted and unmounted at the end. dir itself is
// removed at the end when the Lab made it (Dir); other directories belong to whoever made them.
func (l *Lab) AddRoot(dir string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.roots = append(l.roots, filepath.Clean(dir))
}

// Proc is a process a test started through a Lab. Its output goes to a log file in the test's directory.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	// LogPath is the file with its output (stdout too, unless the caller had set Cmd.Stdout).
	LogPath string

	t    testing.TB
	done chan struct{}
	err  error
	// holder is set for the plugin and its keeper (a command line that runs csi-plugin): they hold FUSE
	// connections, and the Lab checks what they leave behind (checkHolders). held are the connections it was
	// seen holding when the test signalled it.
	holder bool
	mu     sync.Mutex
	held   map[uint32]bool
}

// Start starts cmd as the process called name (in messages and in its log's file name); the Lab stops it at
// the end. Output the caller did not direct elsewhere goes to the process's log file.
func (l *Lab) Start(name string, cmd *exec.Cmd) *Proc {
	l.t.Helper()
	p := &Proc{Name: name, Cmd: cmd, t: l.t, done: make(chan struct{}), holder: runsPlugin(cmd)}
	log, err := os.CreateTemp(l.logDir, strings.NewReplacer("/", "-", " ", "-").Replace(name)+"-*.log")
	if err != nil {
		l.t.Fatal(err)
	}
	defer log.Close() // the child has its own copy
	p.LogPath = log.Name()
	if cmd.Stdout == nil {
		cmd.Stdout = log
	}
	if cmd.Stderr == nil {
		cmd.Stderr = log
	}
	if err := cmd.Start(); err != nil {
		l.t.Fatalf("starting %s (%s): %v", name, cmd, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	l.mu.Lock()
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	return p
}

// PID is the process's PID.
func (p *Proc) PID() int { return p.Cmd.Process.Pid }

// Done is closed once the process has exited and was reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is what exec.Cmd.Wait returned; only valid once Exited.
func (p *Proc) Err() error { return p.err }

// Log returns what the process wrote to its log so far.
func (p *Proc) Log() string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		p.t.Errorf("reading the log of %s: %v", p.Name, err)
	}
	return string(b)
}

// Tail returns the last lines of the process's log, for a failure message.
func (p *Proc) Tail() string { return tail(p.LogPath, logTail) }

// runsPlugin reports whether cmd runs csi-plugin (the plugin, its keeper; directly or through a wrapper such
// as unshare).
func runsPlugin(cmd *exec.Cmd) bool {
	return slices.ContainsFunc(cmd.Args, func(a string) bool { return filepath.Base(a) == "csi-plugin" })
}

// Signal sends sig to the process (by its PID; a no-op once it was reaped).
func (p *Proc) Signal(sig os.Signal) {
	p.t.Helper()
	if p.holder && !p.Exited() {
		p.noteHeld()
	}
	if err := p.Cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.t.Fatalf("signal %v to %s (pid %d): %v", sig, p.Name, p.PID(), err)
	}
}

// Kill sends SIGKILL and waits (at most ExitWait) until the process is gone.
func (p *Proc) Kill() {
	p.t.Helper()
	if p.Exited() {
		return
	}
	p.Signal(syscall.SIGKILL)
	p.Wait(ExitWait)
}

// Wait waits at most within for the process to exit and returns its exit code (128+signal for a killed one, as
// a shell or a container runtime reports it); waiting longer fails the test, naming what it waited for.
func (p *Proc) Wait(within time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		p.t.Fatalf("%s did not exit within %s: %s", p.Name, within, p.describe())
	}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0
	case errors.As(p.err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	p.t.Fatalf("%s: %v", p.Name, p.err)
	return -1
}

// describe says where a process that does not exit is stuck, with the end of its log.
func (p *Proc) describe() string {
	return fmt.Sprintf("pid %d, %s; the end of its log %s:\n%s", p.PID(), procState(p.PID()), p.LogPath, p.Tail())
}

// StateLetter is the state letter of process pid (R, S, D, T, Z…) from /proc/<pid>/stat; "" once it is gone.
func StateLetter(pid int) string { return stateIn(fmt.Sprintf("/proc/%d/stat", pid)) }

// stateIn is the state letter of a stat file of /proc (a process's or a thread's), "" if unreadable.
func stateIn(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	i := strings.LastIndexByte(string(b), ')') // the command, in parentheses, may hold anything
	if i < 0 || i+2 >= len(b) {
		return ""
	}
	return string(b[i+2])
}

// procState is a process's state and kernel wait channel ("D (disk sleep) in fuse_flush"): what it waits for.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "no state: " + err.Error()
	}
	state := "state unknown"
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "State:"); ok {
			state = "state " + strings.TrimSpace(v)
		}
	}
	if w, err := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid)); err == nil && len(w) > 0 && string(w) != "0" {
		state += " in " + string(w)
	}
	if d := dThreads(pid); len(d) > 0 {
		state += "; threads in D state (uninterruptible, SIGKILL cannot end them): " + strings.Join(d, ", ")
	}
	return state
}

// Stopped reports whether every thread of process pid is stopped by a signal (state T): after SIGSTOP, a test
// reads the process's state knowing it does not move.
func Stopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		if stateIn(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name())) != "T" {
			return false
		}
	}
	return true
}

// dThreads describes the threads of process pid in D state: "tid in <kernel function> (<caller> ← …)", from
// /proc/<pid>/task/<tid>/wchan and, when readable (root), the top of its kernel stack: what it waits for, such
// as request_wait_answer ← fuse_flush for a close(2) waiting for a FUSE server's answer.
func dThreads(pid int) []string {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil
	}
	var out []string
	for _, task := range tasks {
		dir := fmt.Sprintf("/proc/%d/task/%s", pid, task.Name())
		if stateIn(dir+"/stat") != "D" {
			continue
		}
		d := task.Name()
		if w, err := os.ReadFile(dir + "/wchan"); err == nil && len(w) > 0 && string(w) != "0" {
			d += " in " + string(w)
		}
		if st, err := os.ReadFile(dir + "/stack"); err == nil {
			var frames []string
			for _, line := range strings.Split(strings.TrimSpace(string(st)), "\n") {
				if f := strings.Fields(line); len(f) >= 2 && len(frames) < 4 {
					frames = append(frames, strings.SplitN(f[1], "+", 2)[0])
				}
			}
			if len(frames) > 0 {
				d += " (" + strings.Join(frames, " ← ") + ")"
			}
		}
		out = append(out, d)
	}
	return out
}

// noteHeld records the FUSE connections the process holds now (HeldConnections).
func (p *Proc) noteHeld() {
	ids := HeldConnections(p.PID())
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held = map[uint32]bool{}
	}
	for _, id := range ids {
		p.held[id] = true
	}
}

// HeldConnections returns the FUSE connections that process pid holds a /dev/fuse descriptor of
// (fuseconn.HeldBy); none once it is gone.
func HeldConnections(pid int) []uint32 {
	ids, _ := fuseconn.HeldBy(strconv.Itoa(pid))
	return ids
}

// checkHolders fails the test for every FUSE connection that a plugin or keeper held when the test stopped
// it and whose requests never all get answered over a couple of seconds at the end: a reader of it hangs, and
// only the cleanup's abort would end it. A stopped plugin or keeper must leave each connection either served by
// another holder or ended. A served connection under load has requests in flight at any moment, so the check
// is that the count never drops to zero, sampled often. (That the process itself is gone, with no thread left in
// D state, Proc.Wait and the cleanup's wait check.)
func (l *Lab) checkHolders(procs []*Proc) {
	type left struct {
		p  *Proc
		id uint32
	}
	var suspects []left
	_ = fuseconn.MountControl() // without it nothing can be checked (fuseconn.Waiting fails), and nothing is reported
	for _, p := range procs {
		if !p.holder || !p.Exited() {
			continue
		}
		p.mu.Lock()
		for id := range p.held {
			if !slices.ContainsFunc(suspects, func(s left) bool { return s.id == id }) {
				suspects = append(suspects, left{p, id})
			}
		}
		p.mu.Unlock()
	}
	for deadline := time.Now().Add(unansweredFor); len(suspects) > 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		suspects = slices.DeleteFunc(suspects, func(s left) bool {
			n, err := fuseconn.Waiting(s.id)
			return err != nil || n == 0 // ended, or every request answered at this moment
		})
	}
	for _, s := range suspects {
		n, _ := fuseconn.Waiting(s.id)
		l.t.Errorf("FUSE connection %d, which %s (pid %d) held when the test stopped it, still has %d request(s) waiting: none was answered for %s at the end of the test, so its readers hang (a stopped plugin or keeper must leave a connection served or ended)", s.id, s.p.Name, s.p.PID(), n, unansweredFor)
	}
}

// unansweredFor is how long checkHolders watches a connection for a moment with no request waiting.
const unansweredFor = 2 * time.Second

// cleanup is the Lab's end; see Lab.
func (l *Lab) cleanup() {
	l.mu.Lock()
	roots, procs := l.roots, l.procs
	l.mu.Unlock()
	t := l.t
	l.checkHolders(procs)

	var live []int
	for _, p := range procs {
		if !p.Exited() {
			live = append(live, p.PID())
		}
	}
	aborted, err := AbortFUSEUnder(roots, live)
	if err != nil {
		t.Errorf("aborting the FUSE connections of the test's mounts: %v", err)
	}
	if aborted > 0 && !t.Failed() {
		t.Logf("cleanup aborted %d FUSE connection(s) still mounted under %v", aborted, roots)
	}
	var orphans []int // children of the killed processes: re-parented to this process if it is a subreaper
	reap := subreaper()
	for _, p := range procs {
		if !p.Exited() {
			if reap {
				orphans = append(orphans, p.Children()...)
			}
			_ = p.Cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	for _, root := range roots {
		if _, err := mounts.UnmountUnder(root); err != nil {
			t.Errorf("unmounting what the test left under %s: %v", root, err)
		}
	}
	deadline := time.Now().Add(ExitWait)
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(time.Until(deadline)):
			t.Errorf("%s still runs %s after SIGKILL (its FUSE connections were aborted): %s", p.Name, ExitWait, p.describe())
		}
	}
	Reap(t, orphans)
	if t.Failed() {
		for _, p := range procs {
			t.Logf("%s (pid %d, %v): the end of its log %s:\n%s", p.Name, p.PID(), p.Cmd.ProcessState, p.LogPath, p.Tail())
		}
	}
	for _, root := range roots {
		if strings.HasPrefix(root, filepath.Clean(os.TempDir())+"/dfc") {
			if err := os.RemoveAll(root); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("removing %s: %v", root, err)
			}
		}
	}
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.SplitAfter(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[%d lines before]\n", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "")
}

// AbortFUSEUnder aborts the FUSE connection of every FUSE mount on one of roots or below them, in this process's
// mount table and in those of the processes pids, and returns how many connections it aborted. It mounts the
// control filesystem first when nobody has (as systemd does at boot).
func AbortFUSEUnder(roots []string, pids []int) (int, error) {
	conns := map[int]bool{}
	for _, pid := range append([]int{0}, pids...) {
		for _, root := range roots {
			infos, err := mounts.UnderIn(pid, root)
			if err != nil {
				if pid != 0 {
					continue // the process has exited meanwhile
				}
				return 0, err
			}
			for _, in := range infos {
				// A FUSE mount's device is 0:N, N the connection's number (fuseconn.ID); binds share it.
				if (in.FSType == "fuse" || strings.HasPrefix(in.FSType, "fuse.") || strings.HasPrefix(in.FSType, "fuseblk")) && in.Major == 0 {
					conns[in.Minor] = true
				}
			}
		}
	}
	if len(conns) == 0 {
		return 0, nil
	}
	if err := fuseconn.MountControl(); err != nil {
		return 0, err
	}
	ids := make([]int, 0, len(conns))
	for id := range conns {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var errs []error
	n := 0
	for _, id := range ids {
		err := fuseconn.Abort(uint32(id))
		switch {
		case err == nil:
			n++
		case errors.Is(err, fs.ErrNotExist): // ended meanwhile
		default:
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

// Eventually calls cond every few milliseconds until it reports true, for at most within; then it fails the
// test with what it waited for.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Children returns the PIDs of the children of process pid.
func Children(pid int) []int {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var kids []int
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				kids = append(kids, n)
			}
		}
	}
	return kids
}

// Children returns the PIDs of the process's children.
func (p *Proc) Children() []int { return Children(p.PID()) }

// subreaper reports whether this process is a child subreaper (prctl PR_SET_CHILD_SUBREAPER): the orphans of
// its children are re-parented to it, and it must reap them.
func subreaper() bool {
	var v int32
	err := unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&v)), 0, 0, 0)
	return err == nil && v != 0
}

// Reap waits, at most ExitWait in all, for the orphans pids (children of a killed child, re-parented to this
// child subreaper) and returns the wait status of each one it reaped. One that a dying parent reaped itself is
// gone all the same and left out; one that is still alive, or not ours to reap, fails the test.
func Reap(t testing.TB, pids []int) map[int]syscall.WaitStatus {
	t.Helper()
	out := map[int]syscall.WaitStatus{}
	deadline := time.Now().Add(ExitWait)
	for _, pid := range pids {
		type result struct {
			ws  syscall.WaitStatus
			err error
		}
		done := make(chan result, 1)
		go func() {
			var r result
			for {
				_, r.err = syscall.Wait4(pid, &r.ws, 0, nil)
				if !errors.Is(r.err, syscall.EINTR) {
					break
				}
			}
			done <- r
		}()
		select {
		case r := <-done:
			switch {
			case r.err == nil:
				out[pid] = r.ws
			case errors.Is(r.err, syscall.ECHILD):
				if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
					t.Errorf("orphan %d is still alive and not ours to reap: %s", pid, procState(pid))
				}
			default:
				t.Errorf("wait4(%d): %v", pid, r.err)
			}
		case <-time.After(time.Until(deadline)):
			t.Errorf("orphan %d still alive %s after its parent was killed: %s", pid, ExitWait, procState(pid))
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return out
}

// ReadFile reads path as os.ReadFile does, but from another goroutine: a read that a FUSE server does not answer
// within fails the test (naming the file) instead of hanging it; the Lab's cleanup then aborts the connection,
// which ends the read.
func ReadFile(t testing.TB, path string, within time.Duration) ([]byte, error) {
	t.Helper()
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := os.ReadFile(path)
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		return r.b, r.err
	case <-time.After(within):
		t.Fatalf("reading %s: no answer within %s (a FUSE server that does not serve its connection?)", path, within)
		return nil, nil
	}
}
