package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/internal/plugintest"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// wantEphemeralGone fails the test if anything of a torn-down ephemeral volume is left: its FUSE server, its target, its
// staging directory (or a mount on it), its records.
func wantEphemeralGone(t *testing.T, h *harness, vol, pod string) {
	t.Helper()
	for _, p := range []string{h.targetPath(vol, pod), h.ephemeralStagingPath(vol)} {
		if ok, _ := mounts.IsMountPoint(p); ok {
			t.Errorf("%s still mounted", p)
		}
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind: %v", p, err)
		}
	}
	if h.cfg.StateDir != "" {
		stages, pubs, errs := mustStore(t, h).Load()
		for _, s := range stages {
			if s.VolumeID == vol {
				t.Errorf("stage record left: %+v", s)
			}
		}
		for _, p := range pubs {
			if p.VolumeID == vol {
				t.Errorf("publish record left: %+v", p)
			}
		}
		if len(errs) != 0 {
			t.Errorf("unusable records: %v", errs)
		}
	}
	if _, known := h.d.lookup(vol); known {
		t.Errorf("the plugin still knows volume %s", vol)
	}
}

// TestEphemeralVolumeLifecycle is what kubelet does with an inline ephemeral volume: NodePublishVolume with no
// staging path (the plugin stages the volume itself), repeated; NodeGetVolumeStats; and NodeUnpublishVolume,
// which must also undo the stage, since no NodeUnstageVolume follows.
func TestEphemeralVolumeLifecycle(t *testing.T) {
	testenv.RequireFUSE(t)
	h := newHarness(t, true, nil)
	vol, pod := plugintest.EphemeralID("pod-uid-1/scratch"), "pod-e"
	target, staging := h.targetPath(vol, pod), h.ephemeralStagingPath(vol)

	if err := h.publishEphemeral(vol, pod, true); err != nil {
		t.Fatalf("NodePublishVolume of an ephemeral volume without staging path: %v", err)
	}
	plugintest.MustRead(t, target)
	plugintest.MustRead(t, staging)
	stages, pubs, errs := mustStore(t, h).Load()
	if len(errs) != 0 || len(stages) != 1 || len(pubs) != 1 {
		t.Fatalf("records: %+v %+v %v", stages, pubs, errs)
	}
	if s := stages[0]; s.VolumeID != vol || s.StagingPath != staging || !s.Ephemeral || !s.CreatedDir {
		t.Fatalf("stage record %+v: want ephemeral, created by the plugin, at %s", s, staging)
	}
	if p := pubs[0]; p.StagingPath != staging || p.TargetPath != target || !p.ReadOnly {
		t.Fatalf("publish record %+v", p)
	}

	// kubelet repeats NodePublishVolume (e.g. after its own restart): nothing new is started or stacked.
	for i := 0; i < 2; i++ {
		if err := h.publishEphemeral(vol, pod, true); err != nil {
			t.Fatalf("repeated ephemeral NodePublishVolume: %v", err)
		}
	}
	if n := len(h.mode.started()); n != 1 {
		t.Fatalf("%d FUSE servers started, want 1", n)
	}
	for _, p := range []string{target, staging} {
		if n, _ := mounts.CountMounts(p); n != 1 {
			t.Fatalf("%d mounts on %s, want 1", n, p)
		}
	}
	wantCode(t, h.publishEphemeral(vol, pod, false), codes.AlreadyExists) // same target, other readonly flag

	resp, err := h.stats(vol, target)
	if err != nil || condition(resp).Abnormal || len(resp.GetUsage()) == 0 {
		t.Fatalf("stats on an ephemeral target: %v, %v", resp, err)
	}

	// The dead-mount trap applies too: the server dies, stats say so, a repeated publish repairs both mounts.
	crash(t, h.mode.started()[0])
	plugintest.WaitDead(t, target)
	resp, err = h.stats(vol, target)
	if err != nil || !condition(resp).Abnormal {
		t.Fatalf("stats on a dead ephemeral target: %v, %v; want abnormal", resp, err)
	}
	if err := h.publishEphemeral(vol, pod, true); err != nil {
		t.Fatalf("ephemeral NodePublishVolume on dead mounts: %v", err)
	}
	plugintest.MustRead(t, staging)
	plugintest.MustRead(t, target)
	if n := len(h.mode.started()); n != 2 {
		t.Fatalf("%d FUSE servers started, want 2 (the dead one and its replacement)", n)
	}

	srv := h.mode.started()[1]
	for i := 0; i < 2; i++ { // the second NodeUnpublishVolume finds nothing left to do
		if err := h.unpublish(vol, pod); err != nil {
			t.Fatalf("NodeUnpublishVolume #%d: %v", i+1, err)
		}
	}
	waitClosed(t, srv.Done(), "NodeUnpublishVolume to stop the ephemeral volume's server")
	wantEphemeralGone(t, h, vol, pod)
	if _, err := h.stats(vol, target); err == nil {
		t.Fatal("stats answered on an unpublished ephemeral volume")
	}
}

// TestEphemeralPublishFailureUnstages: when the bind fails for good (the target holds another filesystem),
// kubelet treats the volume as never mounted and will not unpublish it, so the plugin must not keep the FUSE
// server it started for it.
func TestEphemeralPublishFailureUnstages(t *testing.T) {
	testenv.RequireFUSE(t)
	h := newHarness(t, true, nil)
	vol, pod := plugintest.EphemeralID("pod-uid-2/scratch"), "pod-f"
	target := h.targetPath(vol, pod)
	if err := os.MkdirAll(target, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", target, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mounts.UnmountLazy(target) })

	wantCode(t, h.publishEphemeral(vol, pod, false), codes.AlreadyExists)
	if n := len(h.mode.started()); n != 1 {
		t.Fatalf("%d FUSE servers started, want 1", n)
	}
	waitClosed(t, h.mode.started()[0].Done(), "the failed publish to stop the ephemeral volume's server")
	if _, err := os.Lstat(h.ephemeralStagingPath(vol)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("staging directory left behind: %v", err)
	}
	if stages, pubs, _ := mustStore(t, h).Load(); len(stages)+len(pubs) != 0 {
		t.Errorf("records left: %+v %+v", stages, pubs)
	}
	if n, _ := mounts.CountMounts(target); n != 1 {
		t.Errorf("%d mounts on the target, want only the tmpfs", n)
	}
}

// TestEphemeralUnpublishWithoutRecords: a plugin without a state directory that restarted knows nothing of the
// volume; its directory in the ephemeral directory, which only the plugin writes to, is enough to unstage it.
func TestEphemeralUnpublishWithoutRecords(t *testing.T) {
	testenv.RequireFUSE(t)
	h := newHarness(t, true, func(c *Config) { c.StateDir = "" })
	vol, pod := plugintest.EphemeralID("pod-uid-3/scratch"), "pod-g"
	if err := h.publishEphemeral(vol, pod, false); err != nil {
		t.Fatal(err)
	}
	plugintest.MustRead(t, h.targetPath(vol, pod))
	// The harness's mode outlives the driver, so the server keeps running across this restart.
	h.shutdown()
	h.start()
	if _, known := h.d.lookup(vol); known {
		t.Fatal("a plugin without records knows the volume")
	}
	if err := h.unpublish(vol, pod); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, h.mode.started()[0].Done(), "unmounting the staging mount to end the server")
	wantEphemeralGone(t, h, vol, pod)
}

// TestEphemeralAndPersistentDoNotMix: one volume ID is either staged by the CO (persistent) or by the plugin
// (ephemeral); a request that treats it as the other kind is refused and changes nothing.
func TestEphemeralAndPersistentDoNotMix(t *testing.T) {
	testenv.RequireFUSE(t)
	h := newHarness(t, true, nil)
	const persistent = "vol-persistent"
	if err := h.stage(persistent); err != nil {
		t.Fatal(err)
	}
	wantCode(t, h.publishEphemeral(persistent, "pod-a", false), codes.InvalidArgument)

	eph := plugintest.EphemeralID("pod-uid-4/scratch")
	if err := h.publishEphemeral(eph, "pod-b", false); err != nil {
		t.Fatal(err)
	}
	_, err := h.node.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{
		VolumeId: eph, StagingTargetPath: h.ephemeralStagingPath(eph), VolumeCapability: mountCap(),
	})
	wantCode(t, err, codes.AlreadyExists)
	wantCode(t, h.publish(eph, "pod-c", false), codes.InvalidArgument) // with a staging path: a persistent publish

	for _, p := range []string{h.stagingPath(persistent), h.targetPath(eph, "pod-b")} {
		plugintest.MustRead(t, p)
	}
	for _, p := range []string{h.targetPath(persistent, "pod-a"), h.targetPath(eph, "pod-c")} {
		if ok, _ := mounts.IsMountPoint(p); ok {
			t.Errorf("refused publish mounted %s", p)
		}
	}
	stages, _, _ := mustStore(t, h).Load()
	for _, s := range stages {
		if s.Ephemeral != (s.VolumeID == eph) {
			t.Errorf("stage record %+v has the wrong lifecycle", s)
		}
	}
	if err := h.unpublish(eph, "pod-b"); err != nil {
		t.Fatal(err)
	}
	wantEphemeralGone(t, h, eph, "pod-b")
	// Unpublishing a target of a persistent volume leaves its stage alone.
	if err := h.unpublish(persistent, "pod-a"); err != nil {
		t.Fatal(err)
	}
	plugintest.MustRead(t, h.stagingPath(persistent))
	if err := h.unstage(persistent); err != nil {
		t.Fatal(err)
	}
}

// TestEphemeralDirDefault: "ephemeral" beside the CSI socket unless configured; always absolute and clean.
func TestEphemeralDirDefault(t *testing.T) {
	for _, tc := range []struct{ endpoint, dir, want string }{
		{"unix:///csi/csi.sock", "", "/csi/ephemeral"},
		{"/var/lib/kubelet/plugins/dummy-fuse-csi/csi.sock", "", "/var/lib/kubelet/plugins/dummy-fuse-csi/ephemeral"},
		{"unix:///csi/csi.sock", "/var/lib/kubelet/plugins/dummy-fuse-csi/ephemeral/", "/var/lib/kubelet/plugins/dummy-fuse-csi/ephemeral"},
	} {
		d, err := New(Config{Endpoint: tc.endpoint, NodeID: "n", Mode: stubMode{}, EphemeralDir: tc.dir})
		if err != nil {
			t.Fatal(err)
		}
		if got := d.cfg.EphemeralDir; got != tc.want {
			t.Errorf("endpoint %q, --ephemeral-dir %q: ephemeral dir %q, want %q", tc.endpoint, tc.dir, got, tc.want)
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Config{Endpoint: "csi.sock", NodeID: "n", Mode: stubMode{}})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(wd, "ephemeral"); d.cfg.EphemeralDir != want {
		t.Errorf("relative endpoint: ephemeral dir %q, want %q", d.cfg.EphemeralDir, want)
	}
}
