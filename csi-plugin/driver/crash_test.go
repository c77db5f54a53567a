package driver

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/internal/plugintest"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/state"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// killedBetweenMountAndRecord starts a privileged harness whose next mount at path stops the call right after the mount, before
// its outcome is recorded, as a kill of the plugin at that instant would. call is then made (it never answers),
// and the "kill" is completed: the FUSE servers die with the plugin (child mode) and the plugin is restarted on
// the same state directory.
func killedBetweenMountAndRecord(t *testing.T, mode string, path func(h *harness) string, prepare func(h *harness) error, call func(ctx context.Context, h *harness) error) *harness {
	t.Helper()
	testenv.RequireFUSE(t)
	var (
		once   sync.Once
		fired  = make(chan struct{})
		armed  = make(chan struct{})
		target string
	)
	h := newHarness(t, true, func(c *Config) {
		if mode != "" { // by name: the driver owns and closes it
			c.Mode, c.FuseMode = nil, mode
			c.FuseOptions.Server.Path = bins.Path(t, "dummy-fuse")
		}
		c.mounted = func(p string) {
			select {
			case <-armed:
			default:
				return
			}
			if p == target {
				once.Do(func() { close(fired) })
				runtime.Goexit() // nothing after the mount runs: the locks' deferred release aside
			}
		}
	})
	target = path(h)
	if err := prepare(h); err != nil {
		t.Fatal(err)
	}
	close(armed)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- call(ctx, h) }()
	waitClosed(t, fired, "the call to mount "+target)
	cancel()
	waitClosed(t, done, "the interrupted call to return to its client")
	if n, _ := mounts.CountMounts(target); n == 0 {
		t.Fatalf("nothing mounted at %s when the call was stopped", target)
	}
	for _, s := range h.mode.started() {
		crash(t, s)
	}
	if m, ok := h.d.mode.(*perTarget); ok {
		for _, s := range m.started() {
			crash(t, s)
		}
	}
	h.shutdown()
	h.cfg.mounted = nil
	h.start()
	return h
}

// TestKilledBetweenMountAndRecord: a plugin killed after a stage's or a publish's mount and before its record
// leaves a mount no record claimed, which every retry refused (FailedPrecondition, AlreadyExists) and an unpublish
// answered NotFound. The intent recorded before the mount lets the restarted plugin undo it: the retry of the same
// call succeeds, and an unpublish instead of the retry is OK.
func TestKilledBetweenMountAndRecord(t *testing.T) {
	const vol, pod = "vol-1", "pod-1"
	staging := func(h *harness) string { return h.stagingPath(vol) }
	target := func(h *harness) string { return h.targetPath(vol, pod) }
	nothing := func(*harness) error { return nil }
	stageCall := func(ctx context.Context, h *harness) error {
		_, err := h.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: vol, StagingTargetPath: h.stagingPath(vol), VolumeCapability: mountCap()})
		return err
	}
	publishCall := func(ctx context.Context, h *harness) error {
		if err := os.MkdirAll(filepath.Dir(h.targetPath(vol, pod)), 0o750); err != nil {
			return err
		}
		_, err := h.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: vol, StagingTargetPath: h.stagingPath(vol),
			TargetPath: h.targetPath(vol, pod), VolumeCapability: mountCap()})
		return err
	}

	t.Run("stage, then its retry", func(t *testing.T) {
		h := killedBetweenMountAndRecord(t, "", staging, nothing, stageCall)
		if err := h.stage(vol); err != nil {
			t.Fatalf("retry of the interrupted NodeStageVolume: %v", err)
		}
		if n, _ := mounts.CountMounts(h.stagingPath(vol)); n != 1 {
			t.Errorf("%d mounts on the staging path after the retry, want 1", n)
		}
		plugintest.MustRead(t, h.stagingPath(vol))
		h.teardown(vol)
	})
	t.Run("publish, then its retry", func(t *testing.T) {
		h := killedBetweenMountAndRecord(t, "", target, func(h *harness) error { return h.stage(vol) },
			publishCall)
		if err := h.publish(vol, pod, false); err != nil {
			t.Fatalf("retry of the interrupted NodePublishVolume: %v", err)
		}
		if n, _ := mounts.CountMounts(h.targetPath(vol, pod)); n != 1 {
			t.Errorf("%d mounts on the target after the retry, want 1", n)
		}
		plugintest.MustRead(t, h.targetPath(vol, pod))
		h.teardown(vol, pod)
	})
	t.Run("publish of a mode that mounts targets, then its retry", func(t *testing.T) {
		h := killedBetweenMountAndRecord(t, perTargetName, target, func(h *harness) error { return h.stage(vol) }, publishCall)
		if err := h.publish(vol, pod, false); err != nil {
			t.Fatalf("retry of the interrupted NodePublishVolume: %v", err)
		}
		if n, _ := mounts.CountMounts(h.targetPath(vol, pod)); n != 1 {
			t.Errorf("%d mounts on the target after the retry, want 1", n)
		}
		plugintest.MustRead(t, h.targetPath(vol, pod))
		h.teardown(vol, pod)
	})
	t.Run("publish, then an unpublish", func(t *testing.T) {
		h := killedBetweenMountAndRecord(t, "", target, func(h *harness) error { return h.stage(vol) },
			publishCall)
		for i := 0; i < 2; i++ { // idempotent: the second one finds nothing to do
			if err := h.unpublish(vol, pod); err != nil {
				t.Fatalf("NodeUnpublishVolume %d of the interrupted publish's target: %v", i+1, err)
			}
		}
		if n, _ := mounts.CountMounts(h.targetPath(vol, pod)); n != 0 {
			t.Errorf("%d mounts left on the target", n)
		}
		h.teardown(vol)
	})
}

// TestUnstageOfPublishedVolume: NodeUnstageVolume of a volume that is still published is refused with
// FailedPrecondition (the CO must unpublish first), leaving the staging mount, the targets and their records as
// they were; the unpublish and unstage that follow succeed.
func TestUnstageOfPublishedVolume(t *testing.T) {
	testenv.RequireFUSE(t)
	h := newHarness(t, true, nil)
	const vol, pod = "vol-1", "pod-1"
	if err := h.stage(vol); err != nil {
		t.Fatal(err)
	}
	if err := h.publish(vol, pod, false); err != nil {
		t.Fatal(err)
	}
	wantCode(t, h.unstage(vol), codes.FailedPrecondition)
	plugintest.MustRead(t, h.stagingPath(vol))
	plugintest.MustRead(t, h.targetPath(vol, pod))
	if v, ok := h.d.lookup(vol); !ok || len(v.targets) != 1 {
		t.Fatalf("the refused unstage changed the records: %+v %v", v, ok)
	}
	h.teardown(vol, pod)
}

// teardown unpublishes vol from pods and unstages it, and checks that nothing stays mounted.
func (h *harness) teardown(vol string, pods ...string) {
	h.t.Helper()
	for _, pod := range pods {
		if err := h.unpublish(vol, pod); err != nil {
			h.t.Fatalf("NodeUnpublishVolume %s %s: %v", vol, pod, err)
		}
	}
	if err := h.unstage(vol); err != nil {
		h.t.Fatalf("NodeUnstageVolume %s: %v", vol, err)
	}
	if n, err := mounts.UnmountUnder(h.root); err != nil || n != 0 {
		h.t.Errorf("%d mounts left after the teardown (%v)", n, err)
	}
}

// TestIntentThatCannotBeUndone: an intent whose undo fails at start-up (here the target directory it says the
// plugin created is not empty, so rmdir refuses) stays known as pending: the volume counts as published (its
// unstage is refused), and the unpublish that kubelet sends for it removes the intent; nothing else is touched.
func TestIntentThatCannotBeUndone(t *testing.T) {
	const vol, pod = "vol-1", "pod-1"
	var target, stranger string
	h := newHarness(t, false, func(c *Config) {
		kubelet := plugintest.Kubelet{Root: filepath.Dir(c.StateDir), Driver: DefaultDriverName}
		target = kubelet.Target(vol, pod)
		stranger = filepath.Join(target, "not-the-plugins")
		if err := os.MkdirAll(target, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(stranger, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		store, err := state.Open(c.StateDir)
		if err != nil {
			t.Fatal(err)
		}
		staging := kubelet.Staging(vol)
		if err := store.PutStage(state.Stage{VolumeID: vol, StagingPath: staging, FuseMode: "stub"}); err != nil {
			t.Fatal(err)
		}
		if err := store.PutPublish(state.Publish{VolumeID: vol, StagingPath: staging, TargetPath: target, FuseMode: "stub", CreatedDir: true, Pending: true}); err != nil {
			t.Fatal(err)
		}
	})
	wantCode(t, h.unstage(vol), codes.FailedPrecondition)
	if err := h.unpublish(vol, pod); err != nil {
		t.Fatalf("NodeUnpublishVolume of the pending target: %v", err)
	}
	if _, err := os.Stat(stranger); err != nil {
		t.Errorf("the file in the target directory: %v", err)
	}
	store, err := state.Open(h.cfg.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	if c := store.Read(); len(c.PendingPublishes)+len(c.Publishes) != 0 {
		t.Errorf("publish records left after the unpublish: %+v", c)
	}
	if err := h.unstage(vol); err != nil {
		t.Fatalf("NodeUnstageVolume after the unpublish: %v", err)
	}
}
