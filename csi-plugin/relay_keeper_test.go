package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/driver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse-workload/workload"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver/backing"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// TestRelayKeeperPlacement: in the relay-keeper mode any single one of the real server, the relay, the keeper
// and the plugin can die while two workloads on the published target (one keeping its file open, one reopening
// it for every read, both with O_DIRECT) never see a failed read, for dummy-fuse and for the unmodified real
// servers; while the plugin is down they keep reading. The plugin runs in a mount namespace of its own, as in
// its container, so the backend is mounted where the keeper cannot see it: the keeper's real server serves it
// through the descriptor, the relay reaches it through the root descriptor. Only the plugin and the keeper
// together end the staging connection.
func TestRelayKeeperPlacement(t *testing.T) {
	for _, name := range []string{fuseserver.DummyFuse, fuseserver.Gcsfuse, fuseserver.Squashfuse} {
		t.Run(name, func(t *testing.T) { testRelayKeeper(t, name) })
	}
}

func testRelayKeeper(t *testing.T, name string) {
	rk := newRelayKeeper(t, name)
	e, spec, pluginArgs, keeperArgs := rk.env, rk.spec, rk.pluginArgs, rk.keeperArgs
	p := e.start(pluginArgs...)
	k := e.startKeeper(keeperArgs...)
	e.stagePublish(p, "vol-1", "pod-a")
	relay := k.servedBy("vol-1", 0)
	target := filepath.Join(e.targetPath("vol-1", "pod-a"), "dummy-file.txt")
	keep := e.startReaderArgs(target, "--read-interval=20ms", "--keep-open=true", "--direct-io")
	reopen := e.startReaderArgs(target, "--read-interval=20ms", "--keep-open=false", "--direct-io")
	readsOn(t, "before anything dies", keep, reopen)
	mountID := mountIDOf(t, e.stagingPath("vol-1"))

	// 1. The real server (the keeper's child) dies: the plugin mounts a new backend, the keeper runs a server on
	// it, and the plugin hands its root to the keeper's relay.
	server := realServerOf(t, k.Children, spec.Path, 0)
	if err := syscall.Kill(server, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	realServerOf(t, k.Children, spec.Path, server)
	readsOn(t, "after the real server was killed", keep, reopen)

	// 2. The relay dies: the keeper starts another, which takes the connection over with the node table.
	if out, err := exec.Command(e.plugin, "keeper", "crash", "--status-file="+k.status, "--volume=vol-1").CombinedOutput(); err != nil {
		t.Fatalf("keeper crash: %v\n%s", err, out)
	}
	k.servedBy("vol-1", relay) // a relay other than the one killed serves
	readsOn(t, "after the relay was killed", keep, reopen)

	// 3. The keeper dies with its relays and real servers: the plugin's copy carries the connection, and the
	// plugin mounts a new backend for the next keeper.
	k.Kill()
	k = e.startKeeper(keeperArgs...)
	k.servedBy("vol-1", 0)
	readsOn(t, "after the keeper was replaced", keep, reopen)

	// 4. The plugin dies, and its mount namespace with it: the backend mount is detached there, but the keeper's
	// relay holds its root and the keeper's real server serves it, so the workloads read on while it is down.
	p.kill()
	readsOn(t, "while the plugin is down", keep, reopen)
	p = e.start(pluginArgs...)
	readsOn(t, "after the plugin restarted", keep, reopen)
	testenv.Eventually(t, waitTimeout, "the restarted plugin to re-collect its copy from the keeper", func() bool {
		return strings.Contains(p.Log(), `"Session connected"`) && strings.Contains(p.Log(), `adopted=1`)
	})
	// A double fault: the real server dies while the plugin is down. Nobody can mount a new backend until the
	// plugin is back, which the keeper tells it at once: the reads wait (within the relay's backend wait).
	// The plugin's relay directory goes with it, as the chart's emptyDir goes with the plugin's pod: the
	// restarted plugin makes the new backend's directory again (on a real kubelet it once mounted on a missing one).
	p.kill()
	if err := os.RemoveAll(filepath.Join(e.sockDir, driver.RelayDirName)); err != nil {
		t.Fatal(err)
	}
	server = realServerOf(t, k.Children, spec.Path, 0)
	if err := syscall.Kill(server, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p = e.start(pluginArgs...)
	realServerOf(t, k.Children, spec.Path, server)
	readsOn(t, "after the real server died while the plugin was down", keep, reopen)

	// 5. The next keeper loss proves that the plugin re-collected its copy.
	k.Kill()
	k = e.startKeeper(keeperArgs...)
	k.servedBy("vol-1", 0)
	readsOn(t, "after the keeper was replaced a second time", keep, reopen)
	if id := mountIDOf(t, e.stagingPath("vol-1")); id != mountID {
		t.Errorf("the staging mount was replaced (mount ID %d, was %d): nothing may be remounted", id, mountID)
	}
	t.Logf("%s: longest read of the keep-open workload %s, of the reopening one %s", name, keep.maxLatency(), reopen.maxLatency())
	for _, r := range []*reader{keep, reopen} {
		r.Kill()
	}
	e.teardown(p, "vol-1", "pod-a")
	testenv.Eventually(t, waitTimeout, "the keeper to drop the unstaged connection", func() bool { return len(k.state().Connections) == 0 })

	// 6. The limit: the plugin and the keeper together.
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

// relayKeeper is a test's world set up for the relay-keeper mode with the real server called name: the plugin
// in a mount namespace of its own, and the arguments of the plugin and the keeper.
type relayKeeper struct {
	env                    *env
	spec                   fuseserver.Spec
	pluginArgs, keeperArgs []string
}

func newRelayKeeper(t *testing.T, name string) relayKeeper {
	if _, err := exec.LookPath("unshare"); err != nil {
		testenv.SkipOrFail(t, "unshare(1) is needed to give the plugin a mount namespace: "+err.Error())
	}
	e := newEnv(t, unix.MS_SHARED)
	e.allowNobody()
	// The chart's layout: the socket directory (and the relay directory beside the socket) private to the
	// plugin's namespace.
	e.sockDir, e.ownMountNS = filepath.Join(e.root, "plugins", driver.DefaultDriverName), true
	if err := os.MkdirAll(e.sockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(e.sockDir, e.sockDir, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mounts.UnmountLazy(e.sockDir) })
	if err := unix.Mount("", e.sockDir, "", unix.MS_PRIVATE, ""); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(e.root, "plugins")} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	spec := relayServerSpec(t, e, name)
	nodes := filepath.Join(e.root, "keeper-relay")
	if err := os.Mkdir(nodes, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(nodes, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	r := relayKeeper{env: e, spec: spec}
	r.pluginArgs = append([]string{"--fuse-mode=relay-keeper", "--restore-mounts", "--keeper-uid=65534", "--relay-backend-wait=20s"}, spec.Args()...)
	r.keeperArgs = []string{"--fuse-direct-io", "--relay-node-dir=" + nodes, "--relay-backend-wait=20s",
		"--relay-server=" + spec.Name, "--relay-server-path=" + spec.Path}
	for k, v := range spec.Opts {
		r.keeperArgs = append(r.keeperArgs, "--relay-server-opt="+k+"="+v)
	}
	return r
}

// relayServerSpec is the real server called name with what it reads, its executable copied where the plugin's
// unprivileged server user reaches it (the project's bin may be under a private directory).
func relayServerSpec(t *testing.T, e *env, name string) fuseserver.Spec {
	t.Helper()
	src := e.dummyFuse
	if name != fuseserver.DummyFuse {
		src = testenv.RealServer(t, name)
	}
	pub := filepath.Join(e.root, "servers")
	if err := os.Mkdir(pub, 0o755); err != nil {
		t.Fatal(err)
	}
	exe, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	spec := fuseserver.Spec{Name: name, Path: filepath.Join(pub, name)}
	if err := os.WriteFile(spec.Path, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	switch name {
	case fuseserver.Squashfuse:
		testenv.RealServer(t, "mksquashfs")
		image := filepath.Join(pub, "tree.squashfs")
		if err := backing.SquashfsImage(ctx, image); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(image, 0o644); err != nil {
			t.Fatal(err)
		}
		spec.Opts = map[string]string{"image": image}
	case fuseserver.Gcsfuse:
		spec.Opts = map[string]string{"endpoint": testenv.FakeGCS(ctx, t, pub).Endpoint}
	}
	return spec
}

// realServerOf waits until the keeper runs a real server (one of its children running exe) other than not,
// and returns it.
func realServerOf(t *testing.T, children func() []int, exe string, not int) int {
	t.Helper()
	var pid int
	testenv.Eventually(t, waitTimeout, "a real server "+exe+" of the keeper (other than pid "+strconv.Itoa(not)+")", func() bool {
		for _, c := range children() {
			if target, err := os.Readlink("/proc/" + strconv.Itoa(c) + "/exe"); err == nil && target == exe && c != not {
				pid = c
				return true
			}
		}
		return false
	})
	return pid
}

// TestRelayKeeperWritableVolume: a writable volume (plugin and keeper with --relay-writable) of gcsfuse,
// written by dummy-fuse-workload --write on the staging path, through the death of the real server, of the
// relay, of the keeper (which takes the relay and the real server at once: only the relay's journal files
// hold what gcsfuse had not uploaded, and the next keeper's relay replays them) and of the plugin. No write,
// fsync, close or rename fails and the fake GCS holds every acknowledged byte.
func TestRelayKeeperWritableVolume(t *testing.T) {
	rk := newRelayKeeper(t, fuseserver.Gcsfuse)
	e, spec := rk.env, rk.spec
	pluginArgs := append(rk.pluginArgs, "--relay-writable")
	keeperArgs := append(rk.keeperArgs, "--relay-writable")
	p := e.start(pluginArgs...)
	k := e.startKeeper(keeperArgs...)
	e.stagePublish(p, "vol-1", "pod-a")
	relay := k.servedBy("vol-1", 0)
	w := testenv.StartWriter(t, e.lab, bins.Path(t, "dummy-fuse-workload"), filepath.Join(e.stagingPath("vol-1"), "train.log"))
	w.WaitFor(t, 6, workload.EventWrite, "before anything dies")

	server := realServerOf(t, k.Children, spec.Path, 0)
	if err := syscall.Kill(server, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	realServerOf(t, k.Children, spec.Path, server)
	w.WaitFor(t, 6, workload.EventWrite, "after the real server was killed")

	if out, err := exec.Command(e.plugin, "keeper", "crash", "--status-file="+k.status, "--volume=vol-1").CombinedOutput(); err != nil {
		t.Fatalf("keeper crash: %v\n%s", err, out)
	}
	k.servedBy("vol-1", relay)
	w.WaitFor(t, 6, workload.EventWrite, "after the relay was killed")

	k.Kill()
	k = e.startKeeper(keeperArgs...)
	k.servedBy("vol-1", 0)
	w.WaitFor(t, 6, workload.EventWrite, "after the keeper was replaced")

	p.kill()
	w.WaitFor(t, 3, workload.EventWrite, "while the plugin is down")
	p = e.start(pluginArgs...)
	w.WaitFor(t, 1, workload.EventCheckpoint, "after the plugin restarted")
	recs := w.Stop(t)
	if errs := testenv.Failures(recs); len(errs) > 0 {
		t.Errorf("the writer saw %d errors, first: %v", len(errs), errs[:min(len(errs), 5)])
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	file, err := backing.GCSObject(ctx, spec.Opts["endpoint"], "train.log")
	if err != nil {
		t.Fatal(err)
	}
	ckpt, err := backing.GCSObject(ctx, spec.Opts["endpoint"], "train.log.ckpt")
	if err != nil {
		t.Fatal(err)
	}
	if err := workload.CheckWritten(recs, file, ckpt); err != nil {
		t.Errorf("the bucket against the writer's log: %v", err)
	}
	t.Logf("%d pieces (%d bytes) and %d checkpoints through a server, relay, keeper and plugin death, all in the bucket",
		w.Count(t, workload.EventWrite), len(file), w.Count(t, workload.EventCheckpoint))
	e.teardown(p, "vol-1", "pod-a")
}
