package main

import (
	"bufio"
	"context"
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

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/keeper"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse-workload/workload"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// nobody is the user the keeper runs as in these tests, as in the chart: it needs no privilege.
const nobody = 65534

// waitTimeout bounds the waits of these tests for something to happen; generous, as other builds share the
// machine.
const waitTimeout = 30 * time.Second

// nobodyProc is a csi-plugin subcommand (keeper, sidecar) run as user nobody without capabilities, as their
// pods run them. Kill sends SIGKILL, as a container kill does; the FUSE servers it runs die with it
// (parent-death signal).
type nobodyProc struct {
	*testenv.Proc
	t testing.TB
}

// startNobody starts `csi-plugin args...` as nobody; the test's Lab stops it.
func (e *env) startNobody(args ...string) *nobodyProc {
	e.t.Helper()
	cmd := exec.Command(e.plugin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}, Setpgid: true}
	return &nobodyProc{Proc: e.lab.Start("csi-plugin "+args[0], cmd), t: e.t}
}

// keeperProc is one running `csi-plugin keeper`.
type keeperProc struct {
	*nobodyProc
	status string
}

// startKeeper runs the keeper against the env's plugin, with its status file in a directory of its own.
func (e *env) startKeeper(args ...string) *keeperProc {
	e.t.Helper()
	statusDir := filepath.Join(e.root, "keeper")
	if err := os.MkdirAll(statusDir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Chown(statusDir, nobody, nobody); err != nil {
		e.t.Fatal(err)
	}
	status := filepath.Join(statusDir, "status.json")
	return &keeperProc{nobodyProc: e.startNobody(append([]string{"keeper", "--plugin-socket=" + filepath.Join(e.sockDir, "keeper.sock"),
		"--dummy-fuse-path=" + e.dummyFuse, "--status-file=" + status}, args...)...), status: status}
}

// servers returns the keeper's status: which server serves which volume.
func (k *keeperProc) state() keeper.Status {
	k.t.Helper()
	st, err := keeper.ReadStatus(k.status)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		k.t.Fatal(err)
	}
	return st
}

// servedBy waits until the keeper's status names a server for vol other than not, and returns it.
func (k *keeperProc) servedBy(vol string, not int) int {
	k.t.Helper()
	var pid int
	testenv.Eventually(k.t, waitTimeout, "a FUSE server of "+vol+" in the keeper's status", func() bool {
		pid, _ = k.state().ServerOf(vol)
		return pid != 0 && pid != not
	})
	return pid
}

// reader is a dummy-fuse-workload reading a file every 20 ms; its log is JSON records.
type reader struct {
	*testenv.Proc
	t testing.TB
}

func (e *env) startReader(file string, keepOpen bool) *reader {
	e.t.Helper()
	return e.startReaderArgs(file, "--read-interval=20ms", fmt.Sprintf("--keep-open=%t", keepOpen))
}

// startReaderArgs starts a dummy-fuse-workload reading file, logging JSON, with args.
func (e *env) startReaderArgs(file string, args ...string) *reader {
	e.t.Helper()
	cmd := exec.Command(bins.Path(e.t, "dummy-fuse-workload"), append([]string{"--file", file, "--log-format", "json"}, args...)...)
	return &reader{Proc: e.lab.Start("workload", cmd), t: e.t}
}

// records returns what the reader logged so far.
func (r *reader) records() []workload.Record {
	r.t.Helper()
	f, err := os.Open(r.LogPath)
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Close()
	var out []workload.Record
	s := bufio.NewScanner(f)
	for s.Scan() {
		var rec workload.Record
		if json.Unmarshal(s.Bytes(), &rec) == nil {
			out = append(out, rec)
		}
	}
	return out
}

// firstError waits up to within for the reader's first failed read and returns it; what names the wait.
func (r *reader) firstError(within time.Duration, what string) workload.Record {
	r.t.Helper()
	var failed workload.Record
	testenv.Eventually(r.t, within, what, func() bool {
		for _, rec := range r.records() {
			if rec.Event == workload.EventReadError && rec.Errno != nil {
				failed = rec
				return true
			}
		}
		return false
	})
	return failed
}

// goodReads counts the reader's reads of the content; failures are a test error (every read must succeed).
func (r *reader) goodReads() int {
	r.t.Helper()
	n := 0
	for _, rec := range r.records() {
		switch {
		case rec.Event == workload.EventRead && rec.Content != nil && *rec.Content == "Hello world!\n":
			n++
		case rec.Event == workload.EventReadError, rec.Event == workload.EventOpenError:
			r.t.Fatalf("the workload saw a failure: %s %s %s (its log: %s)", rec.Event, *rec.Errno, rec.Error, r.LogPath)
		}
	}
	return n
}

// readsOn waits until every reader read at least 3 more times.
func readsOn(t testing.TB, what string, rs ...*reader) {
	t.Helper()
	for _, r := range rs {
		n := r.goodReads()
		testenv.Eventually(t, waitTimeout, "3 more good reads "+what, func() bool { return r.goodReads() >= n+3 })
	}
}

// maxLatency is the longest read the reader logged.
func (r *reader) maxLatency() time.Duration {
	var max time.Duration
	for _, rec := range r.records() {
		if rec.LatencyUS != nil && time.Duration(*rec.LatencyUS)*time.Microsecond > max {
			max = time.Duration(*rec.LatencyUS) * time.Microsecond
		}
	}
	return max
}

// TestKeeperPlacement: in keeper mode any single one of the FUSE server, the keeper and the plugin can die and
// come back while two workloads on the published target (one keeping its file open, one reopening it for every
// read) never see a failed read; the plugin re-collects its copy of the connection from the keeper after its
// own restart (without it, killing the keeper next would end the mount); only killing the plugin and the keeper
// together ends the connection. Nothing is ever remounted.
func TestKeeperPlacement(t *testing.T) {
	e := newEnv(t, syscall.MS_PRIVATE)
	e.allowNobody()
	pluginArgs := []string{"--fuse-mode=keeper", "--restore-mounts", "--keeper-uid=65534"}
	p := e.start(pluginArgs...)
	// Direct I/O: every read reaches a server, so a read during a gap shows as its latency.
	keeperArgs := []string{"--fuse-direct-io"}
	k := e.startKeeper(keeperArgs...)
	e.stagePublish(p, "vol-1", "pod-a")
	first := k.servedBy("vol-1", 0)
	target := filepath.Join(e.targetPath("vol-1", "pod-a"), "dummy-file.txt")
	keep, reopen := e.startReader(target, true), e.startReader(target, false)
	readsOn(t, "before anything dies", keep, reopen)
	mountID := mountIDOf(t, e.stagingPath("vol-1"))

	// 1. A FUSE server crashes: the keeper starts another one, which takes the connection over.
	out, err := exec.Command(e.plugin, "keeper", "crash", "--status-file="+k.status, "--volume=vol-1").CombinedOutput()
	if err != nil {
		t.Fatalf("keeper crash: %v\n%s", err, out)
	}
	second := k.servedBy("vol-1", first)
	readsOn(t, "after the FUSE server crashed", keep, reopen)
	t.Logf("server pid %d killed, pid %d took over; longest read so far %s", first, second, keep.maxLatency())

	// 2. The keeper dies with its servers: the plugin's copy carries the connection until a new keeper serves it.
	k.Kill()
	k = e.startKeeper(keeperArgs...)
	k.servedBy("vol-1", 0)
	readsOn(t, "after the keeper was replaced", keep, reopen)

	// 3. The plugin dies: the keeper serves on; the restarted plugin takes its copy back.
	p.kill()
	readsOn(t, "while the plugin is down", keep, reopen)
	start := time.Now()
	p = e.start(pluginArgs...)
	t.Logf("plugin restarted: Probe ready after %s", time.Since(start).Round(time.Millisecond))
	testenv.Eventually(t, waitTimeout, "the restarted plugin to re-collect its copy from the keeper", func() bool {
		return strings.Contains(p.Log(), `"Session connected"`) && strings.Contains(p.Log(), `adopted=1`)
	})
	// 4. Which the next keeper loss proves: the plugin's re-collected copy carries the connection again.
	k.Kill()
	k = e.startKeeper(keeperArgs...)
	k.servedBy("vol-1", 0)
	readsOn(t, "after the keeper was replaced a second time", keep, reopen)
	if id := mountIDOf(t, e.stagingPath("vol-1")); id != mountID {
		t.Errorf("the staging mount was replaced (mount ID %d, was %d): nothing may be remounted", id, mountID)
	}
	t.Logf("longest read of the keep-open workload: %s, of the reopening one: %s", keep.maxLatency(), reopen.maxLatency())

	// Unstaging drops every copy: the keeper forgets the connection and its server ends with the mount.
	for _, r := range []*reader{keep, reopen} {
		r.Kill()
	}
	e.teardown(p, "vol-1", "pod-a")
	testenv.Eventually(t, waitTimeout, "the keeper to drop the unstaged connection", func() bool { return len(k.state().Connections) == 0 })

	// 5. The limit: the plugin and the keeper together take every copy with them.
	e.stagePublish(p, "vol-2", "pod-b")
	k.servedBy("vol-2", 0)
	p.kill()
	k.Kill()
	staging := e.stagingPath("vol-2")
	testenv.Eventually(t, waitTimeout, "ENOTCONN on the staging mount once every holder is gone", func() bool {
		_, err := os.Stat(filepath.Join(staging, "dummy-file.txt"))
		return errors.Is(err, syscall.ENOTCONN)
	})
}

// mountIDOf returns the mount ID of the mount on top at path (a new mount, even of the same connection, gets a
// new one).
func mountIDOf(t testing.TB, path string) int {
	t.Helper()
	top, err := mounts.Top(path)
	if err != nil || top == nil {
		t.Fatalf("nothing mounted at %s (%v)", path, err)
	}
	return top.ID
}

// TestKeeperStageWithoutKeeper: without a keeper the stage fails within the start timeout with a clear error,
// and nothing stays mounted.
func TestKeeperStageWithoutKeeper(t *testing.T) {
	e := newEnv(t, syscall.MS_PRIVATE)
	p := e.start("--fuse-mode=keeper")
	staging := e.stagingPath("vol-1")
	if err := os.MkdirAll(staging, 0o750); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := p.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "vol-1", StagingTargetPath: staging, VolumeCapability: mountCap()})
	if err == nil || !strings.Contains(err.Error(), "no keeper connected") {
		t.Fatalf("NodeStageVolume without a keeper: %v", err)
	}
	if status.Code(err) != codes.Unavailable {
		t.Errorf("code %s, want Unavailable (kubelet retries)", status.Code(err))
	}
	if top, err := mounts.Top(staging); err != nil || top != nil {
		t.Errorf("the staging path is still mounted after the failed stage: %v %v", top, err)
	}
}
