package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// killServer sends SIGKILL to pid, a FUSE server the keeper k started (checked among its children, so that a
// PID reused meanwhile is never hit), and waits until the keeper has reaped it.
func (k *keeperProc) killServer(pid int) {
	k.t.Helper()
	if !slices.Contains(testenv.Children(k.PID()), pid) {
		k.t.Fatalf("pid %d is not a FUSE server of the keeper (pid %d); its log:\n%s", pid, k.PID(), k.Tail())
	}
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		k.t.Fatalf("kill FUSE server %d: %v", pid, err)
	}
	testenv.Eventually(k.t, waitTimeout, fmt.Sprintf("the keeper to see its FUSE server %d exit", pid), func() bool {
		return strings.Contains(k.Log(), fmt.Sprintf("FUSE server pid %d exited", pid))
	})
}

// reportedServing waits until the keeper logged that server pid serves vol: it took the connection over and
// asked the kernel to resend what its predecessors had read.
func (k *keeperProc) reportedServing(vol string, pid int) {
	k.t.Helper()
	testenv.Eventually(k.t, waitTimeout, fmt.Sprintf("the keeper's line that server %d serves %s", pid, vol), func() bool {
		s := bufio.NewScanner(strings.NewReader(k.Log()))
		for s.Scan() {
			if l := contract.ParseKeeperLine(s.Bytes()); l.Kind == contract.KeeperLineServed && l.Volume == vol && l.PID == pid {
				return true
			}
		}
		return false
	})
}

// runFor lets the stopped plugin run for about d, then stops it again and waits until every thread of it has.
func (p *plugin) runFor(d time.Duration) {
	p.t.Helper()
	p.Signal(syscall.SIGCONT)
	for start := time.Now(); time.Since(start) < d; {
		// spin: a sleep this short oversleeps by more than a whole step
	}
	p.Signal(syscall.SIGSTOP)
	for deadline := time.Now().Add(waitTimeout); !testenv.Stopped(p.PID()); time.Sleep(20 * time.Microsecond) {
		if time.Now().After(deadline) {
			p.t.Fatalf("the plugin (pid %d) did not stop within %s of SIGSTOP:\n%s", p.PID(), waitTimeout, p.Tail())
		}
	}
}

// connectedLines counts the keeper's lines saying it greeted a plugin and handed it every copy it holds.
func (k *keeperProc) connectedLines() int {
	n := 0
	s := bufio.NewScanner(strings.NewReader(k.Log()))
	for s.Scan() {
		if contract.ParseKeeperLine(s.Bytes()).Kind == contract.KeeperLineConnected {
			n++
		}
	}
	return n
}

// connectionOf returns the FUSE connection number of the mount at path.
func connectionOf(t testing.TB, path string) uint32 {
	t.Helper()
	top, err := mounts.Top(path)
	if err != nil || top == nil || top.Major != 0 {
		t.Fatalf("no FUSE connection mounted at %s: %v %v", path, top, err)
	}
	return uint32(top.Minor)
}

// inFlight waits until a request of connection id waits for an answer (the kernel's count of the control
// filesystem): with a slow server, a read is inside it.
func inFlight(t testing.TB, id uint32) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, fmt.Sprintf("a request waiting on FUSE connection %d", id), func() bool {
		n, err := fuseconn.Waiting(id)
		return err == nil && n > 0
	})
}

// TestKeeperDoubleFault: the FUSE server's successor dies in the middle of the recovery, twice per round: once
// right after the keeper started it (before or while it replays the INIT), once right after it took the
// connection over and asked the kernel to resend the read its predecessor had (the resent read inside it, as
// every read takes 500 ms). The next successor replays the INIT and asks for the resend again, and the reader,
// which keeps its file open, never sees a failed read: its reads only come late.
func TestKeeperDoubleFault(t *testing.T) {
	const rounds = 3
	e := newEnv(t, syscall.MS_PRIVATE)
	e.allowNobody()
	p := e.start("--fuse-mode=keeper", "--keeper-uid=65534")
	k := e.startKeeper("--fuse-direct-io", "--read-latency=500ms")
	e.stagePublish(p, "vol-1", "pod-a")
	srv := k.servedBy("vol-1", 0)
	keep := e.startReaderArgs(filepath.Join(e.targetPath("vol-1", "pod-a"), "dummy-file.txt"), "--read-interval=20ms", "--keep-open=true", "--direct-io")
	readsOn(t, "before any kill", keep)
	id := connectionOf(t, e.stagingPath("vol-1"))
	for round := 1; round <= rounds; round++ {
		inFlight(t, id)
		k.killServer(srv)
		// Killed as soon as the keeper names it: it is starting, or replaying the INIT.
		starting := k.servedBy("vol-1", srv)
		k.killServer(starting)
		// Killed right after it took over: it has asked for the resend and holds the resent read.
		took := k.servedBy("vol-1", starting)
		k.reportedServing("vol-1", took)
		inFlight(t, id)
		k.killServer(took)
		srv = k.servedBy("vol-1", took)
		readsOn(t, fmt.Sprintf("after round %d of double faults", round), keep)
		t.Logf("round %d: killed servers %d (starting) and %d (serving the resent read); %d serves", round, starting, took, srv)
	}
	n := keep.goodReads() // fails the test on any failed read
	t.Logf("%d rounds: %d good reads, 0 failed; longest read %s", rounds, n, keep.maxLatency())
	keep.Kill()
	e.teardown(p, "vol-1", "pod-a")
}

// TestKeeperPluginKilledDuringRecollection: the plugin is killed again and again while the keeper hands it back
// its copies of eight connections; the keeper serves on throughout, and the plugin that finally stays
// re-collects every copy, which the loss of the keeper right after proves.
//
// The re-collection takes well under a millisecond on an idle machine: a kill aimed at a log line lands after
// it. So each round lines it up with SIGSTOP: the keeper stays stopped while the plugin restarts, the plugin
// while the keeper queues its hello and every copy in the socket. Then the plugin runs in short steps, stopped
// after each, until its log shows a copy taken and the session not yet connected: it is killed right there.
func TestKeeperPluginKilledDuringRecollection(t *testing.T) {
	e := newEnv(t, syscall.MS_PRIVATE)
	e.allowNobody()
	args := []string{"--fuse-mode=keeper", "--restore-mounts", "--keeper-uid=65534"}
	p := e.start(args...)
	k := e.startKeeper("--fuse-direct-io")
	var vols []string
	var readers []*reader
	for i := range 8 {
		v := fmt.Sprintf("vol-%d", i)
		vols = append(vols, v)
		e.stagePublish(p, v, "pod-a")
		k.servedBy(v, 0)
		readers = append(readers, e.startReaderArgs(filepath.Join(e.targetPath(v, "pod-a"), "dummy-file.txt"), "--read-interval=10ms", "--keep-open=true", "--direct-io"))
	}
	readsOn(t, "before the plugin dies", readers...)
	step := 50 * time.Microsecond // halved after a step that took every copy at once
	during, kills := 0, 0
	for ; during < 3 && kills < 20; kills++ {
		k.Signal(syscall.SIGSTOP)
		p.kill()
		p = e.start(args...)
		p.Signal(syscall.SIGSTOP)
		greeted := k.connectedLines()
		k.Signal(syscall.SIGCONT)
		testenv.Eventually(t, waitTimeout, "the keeper to queue its copies for the stopped plugin", func() bool {
			return k.connectedLines() > greeted
		})
		n, connected, steps := 0, false, 0
		for deadline := time.Now().Add(waitTimeout); n == 0 && !connected; steps++ {
			if time.Now().After(deadline) {
				t.Fatalf("the plugin, run in steps of %s, took no copy within %s:\n%s", step, waitTimeout, p.Tail())
			}
			p.runFor(step)
			n, connected = strings.Count(p.Log(), "Re-collected a FUSE connection"), strings.Contains(p.Log(), "Session connected")
		}
		p.kill() // still stopped: the kill lands in the state just read
		t.Logf("plugin killed after %d step(s) of %s: it had taken %d of %d copies, session connected: %t", steps, step, n, len(vols), connected)
		if connected {
			step /= 2
		} else {
			during++
		}
	}
	if during == 0 {
		t.Fatalf("none of %d kills landed inside the re-collection: the window was not tested", kills)
	}
	t.Logf("%d of %d kills landed inside the re-collection", during, kills)
	readsOn(t, "while the plugin was killed in its re-collection", readers...)
	p = e.start(args...)
	testenv.Eventually(t, waitTimeout, "the last plugin to re-collect every copy", func() bool {
		return strings.Contains(p.Log(), fmt.Sprintf("adopted=%d", len(vols)))
	})
	// The plugin's copies now carry every connection alone.
	k.Kill()
	k = e.startKeeper("--fuse-direct-io")
	for _, v := range vols {
		k.servedBy(v, 0)
	}
	readsOn(t, "after the keeper was replaced", readers...)
	for _, r := range readers {
		r.goodReads() // fails the test on any failed read
		r.Kill()
	}
	for _, v := range vols {
		e.teardown(p, v, "pod-a")
	}
}

// TestKeeperNoSuccessor: the FUSE servers cannot start any more (a crash loop: the binary the keeper runs fails
// at once). The plugin, the connection's last holder that can, aborts it once the reader's request waited for
// the limit (--unserved-abort-after): the reader gets an error (ECONNABORTED, then ENOTCONN) instead of hanging
// in D state, and a stat of the mount fails at once. A connection on which nothing waits is not aborted however
// long it has no server: a keeper that comes back after the limit finds it and serves it.
func TestKeeperNoSuccessor(t *testing.T) {
	const limit = 3 * time.Second
	e := newEnv(t, syscall.MS_PRIVATE)
	e.allowNobody()
	// The keeper runs dummy-fuse through a script that fails once the test breaks it.
	broken := filepath.Join(e.root, "broken")
	wrapper := filepath.Join(e.root, "dummy-fuse-wrapper")
	script := fmt.Sprintf("#!/bin/sh\n[ -e %s ] && { echo 'dummy-fuse: cannot start (broken by the test)' >&2; exit 1; }\nexec %s \"$@\"\n", broken, e.dummyFuse)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	p := e.start("--fuse-mode=keeper", "--keeper-uid=65534", "--unserved-abort-after="+limit.String())
	keeperArgs := []string{"--fuse-direct-io", "--dummy-fuse-path=" + wrapper}
	k := e.startKeeper(keeperArgs...)
	e.stagePublish(p, "vol-1", "pod-a")
	k.servedBy("vol-1", 0)
	staging := e.stagingPath("vol-1")
	id := connectionOf(t, staging)

	// 1. Nothing waits: the connection outlives the limit without a server, and the next keeper serves it.
	k.Kill()
	time.Sleep(2 * limit)
	if strings.Contains(p.Log(), "Aborted a FUSE connection") {
		t.Fatalf("the plugin aborted a connection on which nothing waited:\n%s", p.Tail())
	}
	k = e.startKeeper(keeperArgs...)
	k.servedBy("vol-1", 0)
	file := filepath.Join(e.targetPath("vol-1", "pod-a"), "dummy-file.txt")
	r := e.startReaderArgs(file, "--read-interval=20ms", "--keep-open=true", "--direct-io")
	readsOn(t, "after a keeper came back to the idle connection", r)

	// 2. A crash loop with a reader waiting: an error within the limit, and no process in D state.
	if err := os.WriteFile(broken, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	srv, _ := k.state().ServerOf("vol-1")
	killed := time.Now()
	k.killServer(srv)
	failed := r.firstError(limit+waitTimeout, "the reader's first failed read after the servers stopped starting")
	t.Logf("kill of the last good server → the reader's error: %s (%s, limit %s)", failed.Time.Sub(killed).Round(time.Millisecond), *failed.Errno, limit)
	if e := *failed.Errno; e != "ECONNABORTED" && e != "ENOTCONN" {
		t.Errorf("the reader failed with %s, want ECONNABORTED or ENOTCONN", e)
	}
	if !strings.Contains(k.Log(), "cannot start (broken by the test)") {
		t.Errorf("the keeper never ran the broken server: no crash loop was tested; its log:\n%s", k.Tail())
	}
	if st := testenv.StateLetter(r.PID()); st == "D" {
		t.Errorf("the reader is in D state after the abort")
	}
	if _, err := os.Stat(filepath.Join(staging, "dummy-file.txt")); !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("stat of the aborted mount: %v, want ENOTCONN at once", err)
	}
	if n, err := fuseconn.Waiting(id); err == nil && n != 0 {
		t.Errorf("%d requests still wait on the aborted connection %d", n, id)
	}
	r.Kill()
	e.teardown(p, "vol-1", "pod-a")
}
