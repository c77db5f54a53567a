package main

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/internal/plugintest"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
)

// TestKilledDuringStage kills the plugin with SIGKILL between a stage's mount and its record: in keeper mode
// without a keeper, NodeStageVolume mounts the staging path and then waits for a keeper to serve it, so the
// window is the start timeout. The restarted plugin undoes what its intent claims, and kubelet's retry of the
// same NodeStageVolume succeeds (it was refused for good with FailedPrecondition before the intent existed).
func TestKilledDuringStage(t *testing.T) {
	e := newEnv(t, syscall.MS_PRIVATE)
	e.allowNobody()
	const vol = "vol-1"
	staging := e.stagingPath(vol)
	if err := os.MkdirAll(staging, 0o750); err != nil {
		t.Fatal(err)
	}
	stage := func(p *plugin, ctx context.Context) error {
		_, err := p.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: vol, StagingTargetPath: staging, VolumeCapability: mountCap()})
		return err
	}
	p := e.start("--fuse-mode=keeper")
	interrupted := make(chan error, 1)
	go func() { interrupted <- stage(p, context.Background()) }()
	waitFor(t, "the stage's mount of "+staging, func() bool {
		top, err := mounts.Top(staging)
		return err == nil && top != nil
	})
	p.kill9(nil)
	select {
	case err := <-interrupted:
		t.Logf("the interrupted NodeStageVolume answered: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the NodeStageVolume of the killed plugin did not end")
	}

	p = e.start("--fuse-mode=keeper")
	e.startKeeper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := stage(p, ctx); err != nil {
		t.Fatalf("retry of the NodeStageVolume the kill interrupted: %v\n%s", err, p.logs.String())
	}
	if n, err := mounts.CountMounts(staging); err != nil || n != 1 {
		t.Errorf("%d mounts on the staging path after the retry (%v), want 1", n, err)
	}
	plugintest.MustRead(t, staging)
	e.teardown(p, vol)
	if n, err := mounts.CountMounts(staging); err != nil || n != 0 {
		t.Errorf("%d mounts left on the staging path after the unstage (%v)", n, err)
	}
}
