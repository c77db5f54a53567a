package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/fusemode"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/kubeletpath"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// podUIDKey is the volume context key of the pod's UID (kubelet sends it with podInfoOnMount).
const podUIDKey = "csi.storage.k8s.io/pod.uid"

// startSidecar runs the pod's sidecar for vol as nobody, as manifests/pod-sidecar.yaml does.
func (e *env) startSidecar(vol, pod string) *nobodyProc {
	e.t.Helper()
	socket := filepath.Join(kubeletpath.PodDir(e.root, pod), kubeletpath.EmptyDirIn(fusemode.SidecarVolume), "pv-"+vol, fusemode.SocketName)
	return e.startNobody("sidecar", "--socket", socket, "--dummy-fuse-path", e.dummyFuse, "--wait", "20s")
}

// publishForPod stages vol if needed and publishes it for pod as kubelet does with podInfoOnMount, after
// creating the pod's socket emptyDir (0777, as kubelet makes emptyDirs).
func (e *env) publishForPod(p *plugin, vol, pod string) {
	e.t.Helper()
	dir := filepath.Join(kubeletpath.PodDir(e.root, pod), kubeletpath.EmptyDirIn(fusemode.SidecarVolume))
	if err := os.MkdirAll(dir, 0o777); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		e.t.Fatal(err)
	}
	e.stagePublish(p, vol)
	if err := os.MkdirAll(filepath.Dir(e.targetPath(vol, pod)), 0o750); err != nil {
		e.t.Fatal(err)
	}
	if _, err := p.node.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{VolumeId: vol, StagingTargetPath: e.stagingPath(vol),
		TargetPath: e.targetPath(vol, pod), VolumeCapability: mountCap(), Readonly: true, VolumeContext: map[string]string{podUIDKey: pod}}); err != nil {
		e.t.Fatalf("NodePublishVolume %s %s: %v", vol, pod, err)
	}
}

// TestSidecarKeepFD: with --sidecar-keep-fd the plugin keeps its copy of the target's connection, so the pod's
// sidecar can be killed and come back while two workloads (a kept descriptor, an open per read) never see a
// failed read; after a plugin restart the plugin takes its copy back from the sidecar, and the next sidecar
// kill is carried by it as well. Without the option (TestSidecarMode in driver/) the same kill is ENOTCONN for
// good.
func TestSidecarKeepFD(t *testing.T) {
	e := newEnv(t, syscall.MS_PRIVATE)
	e.allowNobody()
	args := []string{"--fuse-mode=sidecar", "--sidecar-keep-fd", "--restore-mounts"}
	p := e.start(args...)
	e.publishForPod(p, "vol-1", "pod-a")
	sc := e.startSidecar("vol-1", "pod-a")
	target := filepath.Join(e.targetPath("vol-1", "pod-a"), "dummy-file.txt")
	keep := e.startReaderArgs(target, "--read-interval=5ms", "--direct-io")
	reopen := e.startReaderArgs(target, "--read-interval=5ms", "--keep-open=false", "--direct-io")
	readsOn(t, "through the sidecar", keep, reopen)
	if !strings.Contains(sc.Log(), "serving it as its keeper") {
		t.Errorf("the sidecar did not notice that the plugin keeps its copy:\n%s", sc.Log())
	}

	sc.Kill()
	sc = e.startSidecar("vol-1", "pod-a")
	readsOn(t, "after the sidecar was killed and started again", keep, reopen)

	// Its FUSE server alone dies (csi-plugin sidecar-crash does this on a cluster): the sidecar exits with it,
	// as without a kept copy, and the next instance takes the connection over.
	testenv.Eventually(t, waitTimeout, "the sidecar's FUSE server", func() bool { return len(sc.Children()) == 1 })
	if err := syscall.Kill(sc.Children()[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	sc.Wait(10 * time.Second) // a sidecar living on without its FUSE server fails here
	if code := sc.Cmd.ProcessState.ExitCode(); code != 128+int(syscall.SIGKILL) {
		t.Errorf("the sidecar exited with code %d after its FUSE server's SIGKILL, want 137 (the server's status, as without a kept copy)", code)
	}
	sc = e.startSidecar("vol-1", "pod-a")
	readsOn(t, "after the sidecar's FUSE server was killed and the sidecar started again", keep, reopen)

	p.kill()
	p = e.start(args...)
	testenv.Eventually(t, waitTimeout, "the restarted plugin to take its copy back from the sidecar", func() bool {
		return strings.Contains(p.Log(), `"Session connected"`) && strings.Contains(p.Log(), "adopted=1")
	})
	sc.Kill()
	e.startSidecar("vol-1", "pod-a")
	readsOn(t, "after a plugin restart and another sidecar kill", keep, reopen)
	t.Logf("longest read: %s with a kept descriptor, %s with an open per read", keep.maxLatency(), reopen.maxLatency())

	for _, r := range []*reader{keep, reopen} {
		r.Kill()
	}
	e.teardown(p, "vol-1", "pod-a")
}

// TestSidecarKeepFDNoSuccessor: with --sidecar-keep-fd the plugin's copy keeps a killed sidecar's connection
// alive, so a sidecar that never comes back (its image gone, a crash loop) would leave the workload's reads
// waiting for good, in D state, and the pod undeletable. The plugin bounds that wait as in keeper mode
// (--unserved-abort-after): the reader gets an error instead, and the mount fails at once afterwards.
func TestSidecarKeepFDNoSuccessor(t *testing.T) {
	const limit = 3 * time.Second
	e := newEnv(t, syscall.MS_PRIVATE)
	e.allowNobody()
	p := e.start("--fuse-mode=sidecar", "--sidecar-keep-fd", "--unserved-abort-after="+limit.String())
	e.publishForPod(p, "vol-1", "pod-a")
	sc := e.startSidecar("vol-1", "pod-a")
	target := filepath.Join(e.targetPath("vol-1", "pod-a"), "dummy-file.txt")
	r := e.startReaderArgs(target, "--read-interval=20ms", "--direct-io")
	readsOn(t, "through the sidecar", r)

	killed := time.Now() // before the kill: the error may not come earlier than limit after it
	sc.Kill()
	failed := r.firstError(limit+waitTimeout, "the reader's first failed read after the sidecar was killed for good")
	waited := failed.Time.Sub(killed)
	t.Logf("sidecar kill → the reader's error: %s (%s, limit %s)", waited.Round(time.Millisecond), *failed.Errno, limit)
	if e := *failed.Errno; e != "ECONNABORTED" && e != "ENOTCONN" {
		t.Errorf("the reader failed with %s, want ECONNABORTED or ENOTCONN", e)
	}
	if waited < limit {
		t.Errorf("the reader failed %s after the kill, before the limit %s: the plugin's copy did not keep the connection", waited, limit)
	}
	if !strings.Contains(p.Log(), "Aborted a FUSE connection") {
		t.Errorf("the plugin did not log the abort:\n%s", p.Tail())
	}
	if _, err := os.Stat(target); !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("stat of the aborted target: %v, want ENOTCONN at once", err)
	}
	r.Kill()
	e.teardown(p, "vol-1", "pod-a")
}
