package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/internal/plugintest"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
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
	p := e.start("--fuse-mode=keeper", fmt.Sprintf("--keeper-uid=%d", nobody))
	interrupted := make(chan error, 1)
	go func() { interrupted <- stage(p, context.Background()) }()
	testenv.Eventually(t, waitTimeout, "the stage's mount of "+staging, func() bool {
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

	p = e.start("--fuse-mode=keeper", fmt.Sprintf("--keeper-uid=%d", nobody))
	e.startKeeper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := stage(p, ctx); err != nil {
		t.Fatalf("retry of the NodeStageVolume the kill interrupted: %v\n%s", err, p.Log())
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

// TestKillsDuringStagesAndPublishes kills the plugin (child mode) with SIGKILL at a random instant while it
// stages and publishes volumes, ten times, and then does what kubelet does: retries every call, and tears every
// volume down. Every retry must succeed (a mount left without a record made them FailedPrecondition or
// AlreadyExists for good), and nothing may stay mounted. It logs how many mounts the kills interrupted (made,
// their outcome not recorded: undone at start-up).
func TestKillsDuringStagesAndPublishes(t *testing.T) {
	e := newEnv(t, syscall.MS_PRIVATE)
	const rounds, perRound = 10, 8
	stage := func(p *plugin, vol string) error {
		_, err := p.node.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{VolumeId: vol, StagingTargetPath: e.stagingPath(vol), VolumeCapability: mountCap()})
		return err
	}
	publish := func(p *plugin, vol string) error {
		_, err := p.node.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{VolumeId: vol, StagingTargetPath: e.stagingPath(vol),
			TargetPath: e.targetPath(vol, "pod"), VolumeCapability: mountCap(), Readonly: true})
		return err
	}
	var all []string
	interrupted, refused := 0, 0
	p := e.start()
	for r := 0; r < rounds; r++ {
		vols := make([]string, perRound)
		var wg sync.WaitGroup
		for i := range vols {
			vols[i] = fmt.Sprintf("vol-%d-%d", r, i)
			for _, dir := range []string{e.stagingPath(vols[i]), filepath.Dir(e.targetPath(vols[i], "pod"))} {
				if err := os.MkdirAll(dir, 0o750); err != nil {
					t.Fatal(err)
				}
			}
			wg.Add(1)
			go func(vol string) { // answers are lost with the plugin: what counts is the retry below
				defer wg.Done()
				if stage(p, vol) == nil {
					_ = publish(p, vol)
				}
			}(vols[i])
		}
		all = append(all, vols...)
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
		p.kill9(p.Children())
		wg.Wait()
		p = e.start()
		interrupted += strings.Count(p.Log(), "Undid an interrupted")
		for _, vol := range vols {
			err := stage(p, vol)
			if err == nil {
				err = publish(p, vol)
			}
			if err != nil {
				refused++
				t.Errorf("retry of %s after the kill: %v", vol, err)
			}
		}
	}
	for _, vol := range all {
		e.teardown(p, vol, "pod")
		for _, path := range []string{e.stagingPath(vol), e.targetPath(vol, "pod")} {
			if n, err := mounts.CountMounts(path); err != nil || n != 0 {
				t.Errorf("%d mounts left on %s (%v)", n, path, err)
			}
		}
	}
	t.Logf("%d kills during the stages and publishes of %d volumes: %d interrupted mounts undone at start-up, %d retries refused", rounds, len(all), interrupted, refused)
}
