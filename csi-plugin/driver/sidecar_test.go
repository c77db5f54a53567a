package driver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/fusemode"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/internal/plugintest"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/kubeletpath"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// nobody is the unprivileged user the sidecar runs as in these tests.
const nobody = 65534

// sidecarHarness runs the plugin in sidecar mode; pods get the emptyDir volume the mode puts its sockets in.
func sidecarHarness(t *testing.T) *harness {
	t.Helper()
	testenv.RequireFUSE(t)
	h := newHarness(t, true, func(c *Config) {
		m, err := fusemode.NewSidecar(fusemode.Options{})
		if err != nil {
			t.Fatal(err)
		}
		c.Mode = m
		c.ProbeTimeout = 500 * time.Millisecond
	})
	bins.Path(t, "csi-plugin") // built now, so that starting a sidecar later takes the time of a start
	// The sidecar runs as nobody: it must reach the socket (and the binaries) through these directories.
	if err := os.Chmod(h.root, 0o755); err != nil {
		t.Fatal(err)
	}
	return h
}

// podSocketVolume creates pod's emptyDir for the sockets (mode 0777, as kubelet makes emptyDirs) and returns it.
func (h *harness) podSocketVolume(pod string) string {
	dir := filepath.Join(kubeletpath.PodDir(h.root, pod), kubeletpath.EmptyDirIn(fusemode.SidecarVolume))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		h.t.Fatal(err)
	}
	return dir
}

// socketPath is where the plugin serves vol's descriptor for pod.
func (h *harness) socketPath(vol, pod string) string {
	return filepath.Join(h.podSocketVolume(pod), "pv-"+vol, fusemode.SocketName)
}

func (h *harness) publishForPod(vol, pod string, volumeContext map[string]string) error {
	if err := os.MkdirAll(filepath.Dir(h.targetPath(vol, pod)), 0o750); err != nil {
		h.t.Fatal(err)
	}
	_, err := h.node.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{
		VolumeId: vol, StagingTargetPath: h.stagingPath(vol), TargetPath: h.targetPath(vol, pod),
		VolumeCapability: mountCap(), VolumeContext: volumeContext,
	})
	return err
}

func podContext(pod string) map[string]string {
	return map[string]string{fusemode.PodUIDContextKey: pod}
}

// startSidecar runs `csi-plugin sidecar` for vol of pod as nobody, without capabilities; it is killed at the end.
func (h *harness) startSidecar(vol, pod string, extra ...string) *exec.Cmd {
	t := h.t
	t.Helper()
	plugin, dummyFuse := bins.Path(t, "csi-plugin"), bins.Path(t, "dummy-fuse")
	if err := os.Chmod(filepath.Dir(plugin), 0o755); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"sidecar", "--socket", h.socketPath(vol, pod), "--dummy-fuse-path", dummyFuse, "--wait", "20s"}, extra...)
	cmd := exec.Command(plugin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("sidecar output:\n%s", out.String())
		}
	})
	return cmd
}

// capEff returns the effective capabilities of process pid (/proc/PID/status).
func capEff(t *testing.T, pid int) string {
	t.Helper()
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "CapEff:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no CapEff in /proc/%d/status", pid)
	return ""
}

// statAside stats path in a goroutine; the result comes on the channel once the kernel answers.
func statAside(path string) <-chan error {
	res := make(chan error, 1)
	go func() {
		_, err := os.Stat(filepath.Join(path, fusemode.ServedFile))
		res <- err
	}()
	return res
}

// TestSidecarMode walks the GCS FUSE CSI design: staging mounts nothing, publishing mounts the target with a
// /dev/fuse descriptor that nobody serves yet (accesses block, the plugin's own probes stay bounded), an
// unprivileged sidecar takes the descriptor and serves; the plugin keeps no copy, so killing the sidecar kills
// the mount for good.
func TestSidecarMode(t *testing.T) {
	h := sidecarHarness(t)
	const vol, pod = "v1", "pod-1"
	if err := h.stage(vol); err != nil {
		t.Fatal(err)
	}
	if n, err := mounts.CountMounts(h.stagingPath(vol)); err != nil || n != 0 {
		t.Fatalf("staging path has %d mounts (%v): the sidecar mode mounts nothing there", n, err)
	}
	sock := h.socketPath(vol, pod)
	if err := h.publishForPod(vol, pod, podContext(pod)); err != nil {
		t.Fatal(err)
	}
	target := h.targetPath(vol, pod)
	table, err := mounts.ReadTable()
	if err != nil {
		t.Fatal(err)
	}
	m := table.Mounts(target)
	if len(m) != 1 || m[0].FSType != "fuse.dummy-fuse" {
		t.Fatalf("target mounts %+v, want one fuse.dummy-fuse", m)
	}
	for _, opt := range []string{"nosuid", "nodev"} {
		if !strings.Contains(m[0].Options, opt) {
			t.Errorf("mount options %q lack %s", m[0].Options, opt)
		}
	}
	for _, opt := range []string{"allow_other", "default_permissions", "user_id=0", "group_id=0"} {
		if !strings.Contains(m[0].VFSOptions, opt) {
			t.Errorf("superblock options %q lack %s", m[0].VFSOptions, opt)
		}
	}
	if st, err := os.Lstat(sock); err != nil || st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket %s: %v, %v", sock, st, err)
	}

	// Nobody serves the mount yet: a stat blocks, and the plugin answers within its probe timeout.
	statStart := time.Now()
	blocked := statAside(target)
	select {
	case err := <-blocked:
		t.Fatalf("stat of the unserved mount returned %v, want it to block", err)
	case <-time.After(300 * time.Millisecond):
	}
	start := time.Now()
	resp, err := h.stats(vol, target)
	if err != nil {
		t.Errorf("stats of the unserved mount: %v", err)
	} else if c := condition(resp); !c.Abnormal || !strings.Contains(c.Message, "not responding") {
		t.Errorf("stats of the unserved mount: condition %v; want abnormal, not responding", c)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("stats took %v on an unserved mount", d)
	}
	if err := h.publishForPod(vol, pod, podContext(pod)); err != nil {
		t.Errorf("repeated publish: %v", err)
	}

	sidecarStart := time.Now()
	sidecar := h.startSidecar(vol, pod)
	select {
	case err := <-blocked:
		if err != nil {
			t.Fatalf("the blocked stat returned %v once the sidecar served", err)
		}
		// A report, not an assertion: the hang tracks the sidecar's start.
		t.Logf("stat blocked %v; returned %v after the sidecar process started", time.Since(statStart), time.Since(sidecarStart))
	case <-time.After(20 * time.Second):
		t.Fatal("the blocked stat did not return after the sidecar started")
	}
	plugintest.MustRead(t, target)
	// The staging path holds no mount in this mode: volume health looks at the targets only.
	vh, err := h.node.NodeGetVolumeHealth(context.Background(), &csi.NodeGetVolumeHealthRequest{VolumeId: vol, StagingTargetPath: h.stagingPath(vol), VolumePublishPath: target})
	if err != nil || len(vh.GetVolumeHealth().GetHealthStatuses()) != 0 {
		t.Errorf("NodeGetVolumeHealth of a served sidecar mount: %v, %v; want no problem", vh, err)
	}
	if c := capEff(t, sidecar.Process.Pid); c != "0000000000000000" {
		t.Errorf("sidecar CapEff %s, want none", c)
	}
	waitGone(t, sock)
	if h.d.mode.(*fusemode.Sidecar).Pending(target) {
		t.Error("the handover is still pending after the sidecar took the descriptor")
	}

	// The plugin closed its copy: the sidecar's death is the mount's.
	if err := sidecar.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	plugintest.WaitDead(t, target)
	vh, err = h.node.NodeGetVolumeHealth(context.Background(), &csi.NodeGetVolumeHealthRequest{VolumeId: vol, StagingTargetPath: h.stagingPath(vol), VolumePublishPath: target})
	if err != nil || len(vh.GetVolumeHealth().GetHealthStatuses()) != 1 {
		t.Errorf("NodeGetVolumeHealth after the sidecar died: %v, %v; want the dead target", vh, err)
	}

	if err := h.unpublish(vol, pod); err != nil {
		t.Fatal(err)
	}
	if n, _ := mounts.CountMounts(target); n != 0 {
		t.Errorf("%d mounts left on the target after unpublish", n)
	}
	if err := h.unstage(vol); err != nil {
		t.Fatal(err)
	}
}

func waitGone(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still exists", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSidecarPluginRestart restarts the plugin under a served mount: the mount is not touched (the descriptor
// is the sidecar's) and the restarted plugin still unpublishes it from its records.
func TestSidecarPluginRestart(t *testing.T) {
	h := sidecarHarness(t)
	h.cfg.RestoreMounts = true
	const vol, pod = "v1", "pod-1"
	if err := h.stage(vol); err != nil {
		t.Fatal(err)
	}
	h.podSocketVolume(pod)
	if err := h.publishForPod(vol, pod, podContext(pod)); err != nil {
		t.Fatal(err)
	}
	target := h.targetPath(vol, pod)
	h.startSidecar(vol, pod)
	waitGone(t, h.socketPath(vol, pod))
	f, err := os.Open(filepath.Join(target, fusemode.ServedFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	h.shutdown()
	h.start()
	plugintest.MustRead(t, target)
	buf := make([]byte, 64)
	if _, err := f.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		t.Errorf("reading a file opened before the restart: %v", err)
	}
	if n, _ := mounts.CountMounts(target); n != 1 {
		t.Errorf("%d mounts on the target after the restart, want the one the sidecar serves", n)
	}
	f.Close()
	if err := h.unpublish(vol, pod); err != nil {
		t.Fatal(err)
	}
	if n, _ := mounts.CountMounts(target); n != 0 {
		t.Errorf("%d mounts left after unpublish", n)
	}
	if err := h.unstage(vol); err != nil {
		t.Fatal(err)
	}
}

// TestSidecarUnpublishBeforeServed unpublishes a target that no sidecar ever served while an access to it
// blocks: the plugin closes the descriptor (the access fails instead of hanging forever) and unmounts.
func TestSidecarUnpublishBeforeServed(t *testing.T) {
	h := sidecarHarness(t)
	const vol, pod = "v1", "pod-1"
	if err := h.stage(vol); err != nil {
		t.Fatal(err)
	}
	sock := h.socketPath(vol, pod)
	if err := h.publishForPod(vol, pod, podContext(pod)); err != nil {
		t.Fatal(err)
	}
	target := h.targetPath(vol, pod)
	stale := statAside(target)
	time.Sleep(100 * time.Millisecond)
	// Someone unmounts the target behind the plugin's back: a repeated publish mounts it again, with a new
	// descriptor, and the handover waiting for the old one is replaced.
	if err := mounts.UnmountLazy(target); err != nil {
		t.Fatal(err)
	}
	if err := h.publishForPod(vol, pod, podContext(pod)); err != nil {
		t.Fatalf("publish after the target lost its mount: %v", err)
	}
	if n, _ := mounts.CountMounts(target); n != 1 || !h.d.mode.(*fusemode.Sidecar).Pending(target) {
		t.Fatalf("after the repeated publish: %d mounts, pending %v; want 1, true", n, h.d.mode.(*fusemode.Sidecar).Pending(target))
	}
	// The stat blocked in the detached mount ends with the old handover: its descriptor was closed.
	select {
	case err := <-stale:
		if !errors.Is(err, syscall.ENOTCONN) {
			t.Errorf("the stat blocked in the replaced mount returned %v, want ENOTCONN", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stat blocked in the replaced mount still hangs")
	}
	blocked := statAside(target)
	time.Sleep(100 * time.Millisecond)
	if err := h.unpublish(vol, pod); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-blocked:
		if !errors.Is(err, syscall.ENOTCONN) && !errors.Is(err, syscall.ENOENT) {
			t.Errorf("the blocked stat returned %v, want ENOTCONN (or ENOENT once unmounted)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the blocked stat still hangs after unpublish")
	}
	if n, _ := mounts.CountMounts(target); n != 0 {
		t.Errorf("%d mounts left after unpublish", n)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left after unpublish: %v", err)
	}
	if err := h.unstage(vol); err != nil {
		t.Fatal(err)
	}
}

// TestSidecarRefuses sends what the sidecar mode cannot work with; nothing is left mounted, nothing is created
// where a symlink points.
func TestSidecarRefuses(t *testing.T) {
	h := sidecarHarness(t)
	const vol = "v1"
	if err := h.stage(vol); err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()

	t.Run("no pod UID", func(t *testing.T) {
		h.podSocketVolume("pod-a")
		wantCode(t, h.publishForPod(vol, "pod-a", nil), codes.InvalidArgument)
	})
	t.Run("another pod's UID", func(t *testing.T) {
		h.podSocketVolume("pod-b")
		wantCode(t, h.publishForPod(vol, "pod-b", podContext("pod-x")), codes.InvalidArgument)
	})
	t.Run("no socket volume", func(t *testing.T) {
		wantCode(t, h.publishForPod(vol, "pod-c", podContext("pod-c")), codes.Unavailable)
	})
	t.Run("symlinked socket volume", func(t *testing.T) {
		dir := filepath.Join(kubeletpath.PodDir(h.root, "pod-d"), kubeletpath.EmptyDirIn(""))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(elsewhere, filepath.Join(dir, fusemode.SidecarVolume)); err != nil {
			t.Fatal(err)
		}
		wantCode(t, h.publishForPod(vol, "pod-d", podContext("pod-d")), codes.Unavailable)
	})
	t.Run("symlinked socket directory", func(t *testing.T) {
		sv := h.podSocketVolume("pod-e")
		if err := os.Symlink(elsewhere, filepath.Join(sv, "pv-"+vol)); err != nil {
			t.Fatal(err)
		}
		wantCode(t, h.publishForPod(vol, "pod-e", podContext("pod-e")), codes.Unavailable)
	})
	t.Run("socket directory of another user", func(t *testing.T) {
		sv := h.podSocketVolume("pod-f")
		d := filepath.Join(sv, "pv-"+vol)
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, nobody, nobody); err != nil {
			t.Fatal(err)
		}
		wantCode(t, h.publishForPod(vol, "pod-f", podContext("pod-f")), codes.Unavailable)
	})
	if entries, err := os.ReadDir(elsewhere); err != nil || len(entries) != 0 {
		t.Errorf("the plugin wrote where a symlink pointed: %v, %v", entries, err)
	}
	if n, err := mounts.UnmountUnder(h.root); err != nil || n != 0 {
		t.Errorf("refused publishes left %d mounts (%v)", n, err)
	}
}

// TestSidecarEphemeral: an inline ephemeral volume in sidecar mode is staged by the plugin (a record and a
// directory, no mount), its target gets the pod's FUSE mount, and unpublishing it takes the staging along.
func TestSidecarEphemeral(t *testing.T) {
	h := sidecarHarness(t)
	vol, pod := plugintest.EphemeralID("inline"), "pod-1"
	h.podSocketVolume(pod)
	if err := os.MkdirAll(filepath.Dir(h.targetPath(vol, pod)), 0o750); err != nil {
		t.Fatal(err)
	}
	volumeContext := plugintest.EphemeralContext(pod)
	volumeContext[fusemode.PodUIDContextKey] = pod
	if _, err := h.node.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{
		VolumeId: vol, TargetPath: h.targetPath(vol, pod), VolumeCapability: mountCap(), VolumeContext: volumeContext,
	}); err != nil {
		t.Fatal(err)
	}
	target := h.targetPath(vol, pod)
	if n, _ := mounts.CountMounts(h.ephemeralStagingPath(vol)); n != 0 {
		t.Errorf("%d mounts on the ephemeral staging path, want none", n)
	}
	h.startSidecar(vol, pod)
	waitGone(t, h.socketPath(vol, pod))
	plugintest.MustRead(t, target)
	if err := h.unpublish(vol, pod); err != nil {
		t.Fatal(err)
	}
	if n, _ := mounts.CountMounts(target); n != 0 {
		t.Errorf("%d mounts left on the target", n)
	}
	if _, err := os.Stat(h.ephemeralStagingPath(vol)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ephemeral staging dir left after the last unpublish: %v", err)
	}
}

// TestSidecarLate holds the sidecar back with --delay, as the sidecar-late scenario does: a stat of the mount
// issued before the sidecar starts blocks at least for the delay and succeeds once it serves, with no error.
// How much longer than the delay it takes is logged (a report, not asserted).
func TestSidecarLate(t *testing.T) {
	h := sidecarHarness(t)
	for i, delay := range []time.Duration{300 * time.Millisecond, time.Second} {
		vol, pod := fmt.Sprintf("v%d", i), fmt.Sprintf("pod-%d", i)
		if err := h.stage(vol); err != nil {
			t.Fatal(err)
		}
		h.podSocketVolume(pod)
		if err := h.publishForPod(vol, pod, podContext(pod)); err != nil {
			t.Fatal(err)
		}
		target := h.targetPath(vol, pod)
		start := time.Now()
		blocked := statAside(target)
		h.startSidecar(vol, pod, "--delay", delay.String())
		select {
		case err := <-blocked:
			hang := time.Since(start)
			if err != nil {
				t.Fatalf("delay %v: stat returned %v after %v, want success once the sidecar serves", delay, err, hang)
			}
			if hang < delay {
				t.Errorf("delay %v: stat returned after %v, before the sidecar could serve", delay, hang)
			}
			t.Logf("sidecar delay %v: stat blocked %v (%v beyond the delay)", delay, hang.Round(time.Millisecond), (hang - delay).Round(time.Millisecond))
		case <-time.After(delay + 20*time.Second):
			t.Fatalf("delay %v: stat still blocked", delay)
		}
		if err := h.unpublish(vol, pod); err != nil {
			t.Fatal(err)
		}
		if err := h.unstage(vol); err != nil {
			t.Fatal(err)
		}
	}
}
