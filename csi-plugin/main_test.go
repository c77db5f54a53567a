package main

// These tests run csi-plugin as a real process, kill it with SIGKILL as the OOM killer or a container runtime
// would, and check what survives: its dummy-fuse children must die with it (their mounts then answer ENOTCONN),
// and a restarted plugin with --restore-mounts must make the recorded mounts answer again.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/driver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/internal/plugintest"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/state"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/command"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/csiprobe"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// bins builds csi-plugin and dummy-fuse once for all the tests of this package.
var bins testenv.Binaries

// TestMain makes this process a child subreaper: the dummy-fuse children of a killed plugin are re-parented to
// it instead of to PID 1 (which does not reap them in every container), so the tests can reap them by PID and
// leave no zombie behind.
func TestMain(m *testing.M) {
	if socket := os.Getenv(sendFilesEnv); socket != "" {
		os.Exit(sendFiles(socket)) // this process is a hostile peer (unkillable_test.go)
	}
	if real := os.Getenv(hostileServerEnv); real != "" {
		os.Exit(hostileServer(real)) // a hostile FUSE server of the keeper's (unkillable_test.go)
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "PR_SET_CHILD_SUBREAPER:", err)
	}
	code := m.Run()
	bins.Remove()
	os.Exit(code)
}

// env is one test's world: binaries, a kubelet-like directory tree and a state directory.
type env struct {
	t         testing.TB
	plugin    string // csi-plugin binary
	dummyFuse string
	root      string // short: it holds the unix socket
	kubelet   plugintest.Kubelet
	state     string
	sockDir   string // directory of the CSI socket (default root)
	// ownMountNS runs the plugin in a mount namespace of its own (unshare, mounts still propagating as they
	// are set up), as in a container.
	ownMountNS bool
	lab        *testenv.Lab
}

// newEnv prepares a test's world. Its root directory becomes a mount of its own with the given propagation
// (unix.MS_PRIVATE or unix.MS_SHARED), so that the outcome does not depend on how this machine's / happens to be
// mounted: private (no mount event crosses it) is the simplest case, shared is what kubelet's directories are on
// a real node (and what makes bind mounts of one staging mount peers of each other: see docs/fuse-mount-loss.md
// and the kernel's Documentation/filesystems/sharedsubtree.rst).
func newEnv(t testing.TB, propagation uintptr) *env {
	t.Helper()
	testenv.RequireFUSE(t)
	lab := testenv.NewLab(t) // first: its cleanup runs last, after every other one of the test
	root := lab.Dir()
	e := &env{t: t, plugin: bins.Path(t, "csi-plugin"), dummyFuse: bins.Path(t, "dummy-fuse"), root: root,
		kubelet: plugintest.Kubelet{Root: root, Driver: driver.DefaultDriverName}, state: filepath.Join(root, "state"), sockDir: root, lab: lab}
	if err := unix.Mount(root, root, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("", root, "", unix.MS_PRIVATE, ""); err != nil { // leave /'s peer group first
		t.Fatal(err)
	}
	if err := unix.Mount("", root, "", propagation, ""); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) stagingPath(vol string) string     { return e.kubelet.Staging(vol) }
func (e *env) targetPath(vol, pod string) string { return e.kubelet.Target(vol, pod) }

// plugin is one running csi-plugin process.
type plugin struct {
	*testenv.Proc
	t     testing.TB
	conn  *grpc.ClientConn
	node  csi.NodeClient
	ident csi.IdentityClient
}

// start runs csi-plugin with the env's state directory plus args, and waits until Probe is ready.
func (e *env) start(args ...string) *plugin {
	e.t.Helper()
	p := e.launch(args...)
	p.waitReady(60 * time.Second)
	return p
}

// launch runs csi-plugin with the env's state directory plus args.
func (e *env) launch(args ...string) *plugin {
	t := e.t
	t.Helper()
	sock := filepath.Join(e.sockDir, "csi.sock")
	p := &plugin{t: t}
	argv := append([]string{e.plugin,
		"--endpoint=unix://" + sock, "--nodeid=test-node", "--state-dir=" + e.state,
		"--dummy-fuse-path=" + e.dummyFuse, "-v=2",
	}, args...)
	if e.ownMountNS {
		// unshare execs the plugin: the process (and its PID) stays the plugin's.
		argv = append([]string{"unshare", "--mount", "--propagation=unchanged", "--"}, argv...)
	}
	p.Proc = e.lab.Start("csi-plugin", exec.Command(argv[0], argv[1:]...))
	// The socket appears only once the process runs: retry connecting every few milliseconds, not after
	// gRPC's default one-second backoff (which would dominate the start-up times measured here).
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 5 * time.Millisecond, Multiplier: 1.2, MaxDelay: 50 * time.Millisecond}, MinConnectTimeout: time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	p.conn, p.node, p.ident = conn, csi.NewNodeClient(conn), csi.NewIdentityClient(conn)
	return p
}

func (p *plugin) waitReady(timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ready, err := csiprobe.Ready(context.Background(), p.ident)
		if ready {
			return
		}
		if p.Exited() {
			p.t.Fatalf("csi-plugin exited before it was ready: %v\n%s", p.Cmd.ProcessState, p.Tail())
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("csi-plugin not ready after %v: %v", timeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// kill9 kills the plugin with SIGKILL and returns how each of its children ended: they must have been killed by
// the parent-death signal, as FUSE servers inside a dying container would be.
func (p *plugin) kill9(kids []int) map[int]syscall.WaitStatus {
	p.t.Helper()
	p.Kill()
	_ = p.conn.Close()
	return testenv.Reap(p.t, kids)
}

// kill ends the plugin if it still runs, reaping its children too.
func (p *plugin) kill() {
	p.t.Helper()
	if p.Exited() {
		return
	}
	p.kill9(p.Children())
}

// mountCap is the volume capability of these tests' requests: they publish read-only.
func mountCap() *csi.VolumeCapability {
	return plugintest.MountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)
}

// stagePublish does what kubelet does for a pod using vol: NodeStageVolume once, NodePublishVolume per pod.
func (e *env) stagePublish(p *plugin, vol string, pods ...string) {
	e.t.Helper()
	ctx := context.Background()
	if err := os.MkdirAll(e.stagingPath(vol), 0o750); err != nil {
		e.t.Fatal(err)
	}
	if _, err := p.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: vol, StagingTargetPath: e.stagingPath(vol), VolumeCapability: mountCap()}); err != nil {
		e.t.Fatalf("NodeStageVolume %s: %v", vol, err)
	}
	for _, pod := range pods {
		if err := os.MkdirAll(filepath.Dir(e.targetPath(vol, pod)), 0o750); err != nil {
			e.t.Fatal(err)
		}
		if _, err := p.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: vol, StagingTargetPath: e.stagingPath(vol),
			TargetPath: e.targetPath(vol, pod), VolumeCapability: mountCap(), Readonly: true}); err != nil {
			e.t.Fatalf("NodePublishVolume %s %s: %v", vol, pod, err)
		}
	}
}

// stagePublishMany stages and publishes n volumes (vol-0000, …) for pod, 16 at a time (a set-up, not what the
// benchmarks measure), and returns their IDs.
func (e *env) stagePublishMany(p *plugin, n int, pod string) []string {
	vols := make([]string, n)
	for i := range vols {
		vols[i] = fmt.Sprintf("vol-%04d", i)
	}
	var wg sync.WaitGroup
	work := make(chan string)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for vol := range work {
				e.stagePublish(p, vol, pod)
			}
		}()
	}
	for _, vol := range vols {
		work <- vol
	}
	close(work)
	wg.Wait()
	return vols
}

// allowNobody opens the test's root and the binaries' directory to user nobody: the keeper and the sidecar run
// as it and must reach the plugin's socket and dummy-fuse.
func (e *env) allowNobody() {
	e.t.Helper()
	for _, d := range []string{e.root, filepath.Dir(e.dummyFuse)} {
		if err := os.Chmod(d, 0o755); err != nil {
			e.t.Fatal(err)
		}
	}
}

// ephemeralVolume returns a volume ID shaped like kubelet's for an inline ephemeral volume, and where the plugin
// stages it by default ("ephemeral" beside the CSI socket).
func (e *env) ephemeralVolume(name string) (id, staging string) {
	id = plugintest.EphemeralID(name)
	return id, filepath.Join(e.sockDir, "ephemeral", id)
}

// publishEphemeral does what kubelet does for an inline ephemeral volume: no NodeStageVolume, and a
// NodePublishVolume with an empty staging path and the ephemeral flag in the volume context.
func (e *env) publishEphemeral(p *plugin, vol, pod string) {
	e.t.Helper()
	if err := os.MkdirAll(filepath.Dir(e.targetPath(vol, pod)), 0o750); err != nil {
		e.t.Fatal(err)
	}
	if _, err := p.node.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{VolumeId: vol,
		TargetPath: e.targetPath(vol, pod), VolumeCapability: mountCap(), Readonly: true,
		VolumeContext: plugintest.EphemeralContext(pod)}); err != nil {
		e.t.Fatalf("ephemeral NodePublishVolume %s %s: %v", vol, pod, err)
	}
}

// unpublish does what kubelet does when one pod of several using vol goes.
func (e *env) unpublish(p *plugin, vol, pod string) {
	e.t.Helper()
	if _, err := p.node.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: e.targetPath(vol, pod)}); err != nil {
		e.t.Fatalf("NodeUnpublishVolume %s %s: %v", vol, pod, err)
	}
}

// teardown does what kubelet does when the pods go: NodeUnpublishVolume per pod, then NodeUnstageVolume.
func (e *env) teardown(p *plugin, vol string, pods ...string) {
	e.t.Helper()
	ctx := context.Background()
	for _, pod := range pods {
		if _, err := p.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: e.targetPath(vol, pod)}); err != nil {
			e.t.Fatalf("NodeUnpublishVolume %s %s: %v", vol, pod, err)
		}
	}
	if _, err := p.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: vol, StagingTargetPath: e.stagingPath(vol)}); err != nil {
		e.t.Fatalf("NodeUnstageVolume %s: %v", vol, err)
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestRestoreAfterKill is the plugin's reason to exist, end to end: stage and publish, kill -9 the plugin (its
// dummy-fuse children die with it and every mount answers ENOTCONN), restart it with --restore-mounts, and
// check that staging paths and targets answer again, with the dead target mount unmounted (rebind) or still
// underneath the new one (stack). An inline ephemeral volume (staged by the plugin itself) comes back too, and
// its unpublish is its whole teardown.
func TestRestoreAfterKill(t *testing.T) {
	for _, tc := range []struct {
		strategy, propagation string
		flag                  uintptr
	}{
		{"rebind", "private", unix.MS_PRIVATE},
		{"stack", "private", unix.MS_PRIVATE},
		{"rebind", "shared", unix.MS_SHARED},
		{"stack", "shared", unix.MS_SHARED},
	} {
		strategy := tc.strategy
		t.Run(strategy+"/"+tc.propagation, func(t *testing.T) {
			e := newEnv(t, tc.flag)
			volumes := map[string][]string{"vol-a": {"pod-1", "pod-2"}, "vol-b": {"pod-3"}}
			eph, ephStaging := e.ephemeralVolume("pod-uid-e/scratch")
			const ephPod = "pod-e"
			p1 := e.start()
			for vol, pods := range volumes {
				e.stagePublish(p1, vol, pods...)
				for _, pod := range pods {
					plugintest.MustRead(t, e.targetPath(vol, pod))
				}
			}
			e.publishEphemeral(p1, eph, ephPod)
			plugintest.MustRead(t, e.targetPath(eph, ephPod))
			kids := p1.Children()
			if len(kids) != len(volumes)+1 {
				t.Fatalf("plugin has %d children, want one dummy-fuse per volume (%d)", len(kids), len(volumes)+1)
			}
			for pid, ws := range p1.kill9(kids) {
				if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
					t.Errorf("dummy-fuse %d ended with %v, want killed by SIGKILL with its plugin", pid, ws)
				}
			}
			for vol, pods := range volumes {
				plugintest.WaitDead(t, e.stagingPath(vol))
				for _, pod := range pods {
					plugintest.WaitDead(t, e.targetPath(vol, pod))
				}
			}
			plugintest.WaitDead(t, ephStaging)
			plugintest.WaitDead(t, e.targetPath(eph, ephPod))

			port := freePort(t)
			p2 := e.start("--restore-mounts", "--restore-strategy="+strategy, "--health-port="+strconv.Itoa(port))
			wantLayers := map[string]int{"rebind": 1, "stack": 2}[strategy]
			for vol, pods := range volumes {
				plugintest.MustRead(t, e.stagingPath(vol))
				if n, _ := mounts.CountMounts(e.stagingPath(vol)); n != 1 {
					t.Errorf("%d mounts on the staging path of %s, want 1", n, vol)
				}
				for _, pod := range pods {
					target := e.targetPath(vol, pod)
					plugintest.MustRead(t, target)
					if n, _ := mounts.CountMounts(target); n != wantLayers {
						t.Errorf("%d mounts on %s after a %s restore, want %d", n, target, strategy, wantLayers)
					}
				}
			}
			plugintest.MustRead(t, ephStaging)
			plugintest.MustRead(t, e.targetPath(eph, ephPod))
			if n, _ := mounts.CountMounts(e.targetPath(eph, ephPod)); n != wantLayers {
				t.Errorf("%d mounts on the ephemeral target after a %s restore, want %d", n, strategy, wantLayers)
			}
			if n := len(p2.Children()); n != len(volumes)+1 {
				t.Errorf("restored plugin has %d children, want %d", n, len(volumes)+1)
			}
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port))
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("/healthz after restore: %v, %v", resp, err)
			}
			resp.Body.Close()
			if got := strings.Count(p2.Log(), `"Restored target"`); got != 4 {
				t.Errorf("%d \"Restored target\" log lines, want 4:\n%s", got, p2.Log())
			}

			// kubelet tears down pod by pod. With shared propagation the stacked mounts of one volume's targets
			// are peers: unmounting one target's stack takes the others' top layer with it, which the plugin
			// must notice and repair. Every other target must keep answering.
			e.unpublish(p2, "vol-a", "pod-1")
			plugintest.MustRead(t, e.targetPath("vol-a", "pod-2"))
			plugintest.MustRead(t, e.targetPath("vol-b", "pod-3"))
			// kubelet sends no NodeUnstageVolume for the ephemeral volume: unpublishing it ends it.
			e.unpublish(p2, eph, ephPod)
			for _, p := range []string{e.targetPath(eph, ephPod), ephStaging} {
				if ok, _ := mounts.IsMountPoint(p); ok {
					t.Errorf("%s still mounted after the ephemeral volume was unpublished", p)
				}
				if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s left behind after the ephemeral volume was unpublished: %v", p, err)
				}
			}
			if n := len(p2.Children()); n != len(volumes) {
				t.Errorf("%d dummy-fuse children after the ephemeral volume was unpublished, want %d", n, len(volumes))
			}
			volumes["vol-a"] = []string{"pod-2"}
			for vol, pods := range volumes {
				e.teardown(p2, vol, pods...)
				for _, pod := range pods {
					if _, err := os.Stat(e.targetPath(vol, pod)); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("target %s left behind: %v", e.targetPath(vol, pod), err)
					}
				}
				if ok, _ := mounts.IsMountPoint(e.stagingPath(vol)); ok {
					t.Errorf("staging path of %s still mounted", vol)
				}
			}
			st, err := state.Open(e.state)
			if err != nil {
				t.Fatal(err)
			}
			if stages, pubs, errs := st.Load(); len(stages)+len(pubs)+len(errs) != 0 {
				t.Errorf("records left after teardown: %v %v %v", stages, pubs, errs)
			}
		})
	}
}

// TestEphemeralVolumeInChartLayout runs the plugin the way the chart does: in a mount namespace of its own, its
// socket directory (<kubeletDir>/plugins/<driver>, the chart's /csi) mounted without propagation, so that the
// default ephemeral directory beside the socket is private to the plugin, while the pods directory is shared with
// the host (Bidirectional). The ephemeral volume must reach the host all the same, come back after kill -9 with
// --restore-mounts, and go with its unpublish.
func TestEphemeralVolumeInChartLayout(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		testenv.SkipOrFail(t, "unshare(1) is needed to give the plugin a mount namespace: "+err.Error())
	}
	e := newEnv(t, unix.MS_SHARED)
	e.sockDir, e.ownMountNS = filepath.Join(e.root, "plugins", driver.DefaultDriverName), true
	if err := os.MkdirAll(e.sockDir, 0o750); err != nil {
		t.Fatal(err)
	}
	// A private bind on the host: the plugin's namespace copies it, and mounts below it stay in that namespace.
	if err := unix.Mount(e.sockDir, e.sockDir, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mounts.UnmountLazy(e.sockDir) }) // runs before newEnv's check for leftovers
	if err := unix.Mount("", e.sockDir, "", unix.MS_PRIVATE, ""); err != nil {
		t.Fatal(err)
	}
	vol, staging := e.ephemeralVolume("pod-uid-chart/scratch")
	const pod = "pod-e"
	target := e.targetPath(vol, pod)

	p1 := e.start()
	e.publishEphemeral(p1, vol, pod)
	plugintest.MustRead(t, target) // from the host's namespace
	if n, _ := mounts.CountMounts(staging); n != 0 {
		t.Errorf("the host sees %d mounts on the private staging path %s, want 0", n, staging)
	}
	if infos, err := mounts.MountsAtIn(p1.PID(), staging); err != nil || len(infos) == 0 {
		t.Errorf("the plugin's namespace has no mount on %s (%v)", staging, err)
	}

	p1.kill9(p1.Children())
	plugintest.WaitDead(t, target)
	p2 := e.start("--restore-mounts")
	plugintest.MustRead(t, target)
	e.unpublish(p2, vol, pod)
	if ok, _ := mounts.IsMountPoint(target); ok {
		t.Errorf("target %s still mounted", target)
	}
	if _, err := os.Lstat(staging); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("staging directory %s left behind: %v", staging, err)
	}
	if n := len(p2.Children()); n != 0 {
		t.Errorf("%d dummy-fuse children after unpublishing the only volume, want 0", n)
	}
	st, err := state.Open(e.state)
	if err != nil {
		t.Fatal(err)
	}
	if stages, pubs, errs := st.Load(); len(stages)+len(pubs)+len(errs) != 0 {
		t.Errorf("records left: %v %v %v", stages, pubs, errs)
	}
}

// TestRestoreSkipsCorruptRecords: garbage in the state directory is logged with its path and skipped, a record
// that cannot be restored fails alone (logged, its target skipped), and Probe still becomes ready with the valid
// records restored.
func TestRestoreSkipsCorruptRecords(t *testing.T) {
	e := newEnv(t, unix.MS_PRIVATE)
	p1 := e.start()
	e.stagePublish(p1, "vol-a", "pod-1")
	p1.kill9(p1.Children())
	plugintest.WaitDead(t, e.targetPath("vol-a", "pod-1"))

	garbage := filepath.Join(e.state, "staged", "garbage.json")
	truncated := filepath.Join(e.state, "published", strings.Repeat("0", 64)+".json")
	if err := os.WriteFile(garbage, []byte("\x00\x01\x02 not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(truncated, []byte(`{"volumeID": "vol-a", "targetPa`), 0o600); err != nil {
		t.Fatal(err)
	}
	// A well-formed record that cannot be restored (its staging path became a regular file) fails alone.
	blocked := filepath.Join(e.root, "blocked")
	if err := os.WriteFile(blocked, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := state.Open(e.state)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutStage(state.Stage{VolumeID: "vol-blocked", StagingPath: blocked, FuseMode: "child"}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutPublish(state.Publish{VolumeID: "vol-blocked", StagingPath: blocked, TargetPath: filepath.Join(e.root, "blocked-target"), FuseMode: "child"}); err != nil {
		t.Fatal(err)
	}

	p2 := e.start("--restore-mounts")
	plugintest.MustRead(t, e.targetPath("vol-a", "pod-1"))
	logs := p2.Log()
	for _, want := range []string{`"Failed to restore staging mount" err=`, `volumeID="vol-blocked"`, `"Not restoring target: its staging mount failed"`, "ok=2 failed=1 skipped=1"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	for _, f := range []string{garbage, truncated} {
		if !strings.Contains(logs, "Skipping unusable mount record") || !strings.Contains(logs, f) {
			t.Errorf("no log line names the unusable record %s:\n%s", f, logs)
		}
	}
	e.teardown(p2, "vol-a", "pod-1")
}

// TestRestoreForgetsWhatKubeletRemoved: a record whose kubelet directory is gone (here: the node's kubelet
// directory wiped while the plugin was down, the plugin's state directory kept) is forgotten, not restored: no
// directory of it is created again and nothing is mounted there, while the other volume comes back.
func TestRestoreForgetsWhatKubeletRemoved(t *testing.T) {
	e := newEnv(t, unix.MS_PRIVATE)
	p1 := e.start()
	e.stagePublish(p1, "vol-a", "pod-1")
	e.stagePublish(p1, "vol-b", "pod-2")
	p1.kill9(p1.Children())
	gone := []string{e.targetPath("vol-b", "pod-2"), e.stagingPath("vol-b")}
	for _, path := range gone {
		plugintest.WaitDead(t, path)
		if _, err := mounts.UnmountAll(path); err != nil {
			t.Fatal(err)
		}
		// What kubelet's removeMountDir leaves: neither the path nor its parent (vol_data.json's directory).
		if err := os.RemoveAll(filepath.Dir(path)); err != nil {
			t.Fatal(err)
		}
	}

	p2 := e.start("--restore-mounts")
	plugintest.MustRead(t, e.targetPath("vol-a", "pod-1"))
	logs := p2.Log()
	for _, want := range []string{`"Not restoring staging mount: kubelet removed the directory of this path`,
		`"Not restoring target: kubelet removed the directory of this path`, "ok=2 failed=0 skipped=0 forgotten=2"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	for _, path := range gone {
		if _, err := os.Lstat(filepath.Dir(path)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v, want it not created again", filepath.Dir(path), err)
		}
	}
	st, err := state.Open(e.state)
	if err != nil {
		t.Fatal(err)
	}
	stages, pubs, errs := st.Load()
	if len(stages) != 1 || stages[0].VolumeID != "vol-a" || len(pubs) != 1 || pubs[0].VolumeID != "vol-a" || len(errs) != 0 {
		t.Errorf("records after the restore: %+v %+v %v, want vol-a's only", stages, pubs, errs)
	}
	e.teardown(p2, "vol-a", "pod-1")
}

// TestGracefulStopLeavesDeadMounts: SIGTERM stops the plugin cleanly (exit 0), and in child mode its FUSE
// servers die with it: the mounts stay and answer ENOTCONN. That is the failure the testbed reproduces.
func TestGracefulStopLeavesDeadMounts(t *testing.T) {
	e := newEnv(t, unix.MS_SHARED)
	p := e.start()
	e.stagePublish(p, "vol-a", "pod-1")
	kids := p.Children()
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit code after SIGTERM = %d, want 0\n%s", code, p.Tail())
	}
	testenv.Reap(t, kids)
	plugintest.WaitDead(t, e.targetPath("vol-a", "pod-1"))
	if _, err := os.Stat(filepath.Join(e.root, "csi.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind after a graceful stop: %v", err)
	}
}

// TestUsageErrors: the command refuses bad flags with exit code 2 before touching anything.
func TestUsageErrors(t *testing.T) {
	var stdout, stderr bytes.Buffer
	streams := command.Streams{In: strings.NewReader(""), Out: &stdout, Err: &stderr}
	for _, args := range [][]string{
		{},                                 // no --nodeid
		{"--nodeid=n", "--restore-mounts"}, // restore without --state-dir
		{"--nodeid=n", "--restore-strategy=glue", "--dummy-fuse-path=/bin/true"},
		{"--nodeid=n", "--fuse-mode=daemon"},
		{"--nodeid=n", "extra-argument"},
		{"--no-such-flag"},
	} {
		stdout.Reset()
		stderr.Reset()
		if code := command.Code("csi-plugin", run(context.Background(), args, streams), &stderr); code != 2 {
			t.Errorf("run(%q) = %d, want 2 (stderr: %s)", args, code, stderr.String())
		}
	}
	stdout.Reset()
	if code := command.Code("csi-plugin", run(context.Background(), []string{"--version"}, streams), &stderr); code != 0 || strings.TrimSpace(stdout.String()) == "" {
		t.Errorf("--version: code %d, output %q", code, stdout.String())
	}
}

// TestStartupFailureIsNotUsage: valid flags on a machine that cannot run the plugin (dummy-fuse missing, a state
// directory that cannot be created) end with exit code 1, not as a usage error.
func TestStartupFailureIsNotUsage(t *testing.T) {
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--nodeid=n", "--dummy-fuse-path=/nonexistent/dummy-fuse"},
		{"--nodeid=n", "--dummy-fuse-path=/bin/true", "--state-dir=" + filepath.Join(blocker, "state")},
	} {
		var stderr bytes.Buffer
		streams := command.Streams{In: strings.NewReader(""), Out: io.Discard, Err: &stderr}
		if code := command.Code("csi-plugin", run(context.Background(), args, streams), &stderr); code != 1 {
			t.Errorf("run(%q) = %d, want 1 (stderr: %s)", args, code, stderr.String())
		}
	}
}
