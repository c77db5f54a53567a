package driver

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/moby/sys/mountinfo"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/internal/plugintest"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// retryAborted repeats call while it is answered Aborted (another call holds the volume or a path), as kubelet
// does.
func retryAborted(call func() error) error {
	for {
		err := call()
		if status.Code(err) != codes.Aborted {
			return err
		}
		time.Sleep(time.Millisecond)
	}
}

// TestConcurrentVolumesOnOverlappingPaths stages and publishes many volumes at once on staging paths and targets
// that several volumes ask for. Whoever wins a path, the mount table must match the records afterwards: one
// mount per recorded path, none anywhere else, each target a bind of its own volume's staging mount, one FUSE
// server per staged volume, and a success answered for exactly what was recorded.
func TestConcurrentVolumesOnOverlappingPaths(t *testing.T) {
	testenv.RequireFUSE(t)
	h := newHarness(t, true, nil)
	const volumes, stagingPaths, targets = 12, 4, 6
	stagingOf := func(i int) string { return filepath.Join(h.root, "staging", fmt.Sprintf("s%d", i%stagingPaths)) }
	targetsOf := func(i int) []string {
		return []string{
			filepath.Join(h.root, "pods", fmt.Sprintf("t%d", i%targets), "mount"),
			filepath.Join(h.root, "pods", fmt.Sprintf("t%d", (i+3)%targets), "mount"),
		}
	}
	ctx := context.Background()
	var (
		wg                sync.WaitGroup
		mu                sync.Mutex
		staged, published int
		unexpected        []string
		start             = make(chan struct{})
		acceptable        = map[codes.Code]bool{codes.OK: true, codes.AlreadyExists: true, codes.InvalidArgument: true, codes.FailedPrecondition: true}
		note              = func(what string, err error) bool {
			mu.Lock()
			defer mu.Unlock()
			if !acceptable[status.Code(err)] {
				unexpected = append(unexpected, fmt.Sprintf("%s: %v", what, err))
			}
			return err == nil
		}
	)
	for i := 0; i < volumes; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			vol := fmt.Sprintf("vol-%02d", i)
			<-start
			err := retryAborted(func() error {
				_, err := h.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: vol, StagingTargetPath: stagingOf(i), VolumeCapability: mountCap()})
				return err
			})
			if !note("stage "+vol, err) {
				return
			}
			mu.Lock()
			staged++
			mu.Unlock()
			for _, tp := range targetsOf(i) {
				err := retryAborted(func() error {
					_, err := h.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: vol, StagingTargetPath: stagingOf(i), TargetPath: tp, VolumeCapability: mountCap()})
					return err
				})
				if note("publish "+vol+" at "+tp, err) {
					mu.Lock()
					published++
					mu.Unlock()
				}
			}
		}(i)
	}
	close(start)
	wg.Wait()
	for _, u := range unexpected {
		t.Error(u)
	}

	stages, pubs, errs := mustStore(t, h).Load()
	if len(errs) != 0 {
		t.Fatalf("unusable records: %v", errs)
	}
	t.Logf("%d volumes staged on %d paths, %d publishes on %d targets", len(stages), stagingPaths, len(pubs), targets)
	if len(stages) != staged || len(pubs) != published {
		t.Errorf("%d stages and %d publishes answered OK, but %d and %d recorded", staged, published, len(stages), len(pubs))
	}
	if len(stages) != stagingPaths {
		t.Errorf("%d volumes staged, want one per staging path (%d)", len(stages), stagingPaths)
	}
	recorded := map[string]string{} // path → volume
	stagingOfVolume := map[string]string{}
	for _, s := range stages {
		if other, dup := recorded[s.StagingPath]; dup {
			t.Errorf("staging path %s recorded for %s and %s", s.StagingPath, other, s.VolumeID)
		}
		recorded[s.StagingPath], stagingOfVolume[s.VolumeID] = s.VolumeID, s.StagingPath
		plugintest.MustRead(t, s.StagingPath)
	}
	for _, p := range pubs {
		if other, dup := recorded[p.TargetPath]; dup {
			t.Errorf("target %s recorded for %s and %s", p.TargetPath, other, p.VolumeID)
		}
		recorded[p.TargetPath] = p.VolumeID
		if stagingOfVolume[p.VolumeID] != p.StagingPath {
			t.Errorf("publish record %+v: its volume is staged at %q", p, stagingOfVolume[p.VolumeID])
		}
		plugintest.MustRead(t, p.TargetPath)
		if same, err := sameMount(mounts.MountsAt, p.StagingPath, p.TargetPath); err != nil || !same {
			t.Errorf("target %s is not a bind of %s (%v)", p.TargetPath, p.StagingPath, err)
		}
	}
	// The mount table below the test's root: exactly the recorded paths, one mount each.
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(h.root))
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, in := range infos {
		count[in.Mountpoint]++
	}
	for p, n := range count {
		if _, ok := recorded[p]; !ok {
			t.Errorf("%s is mounted (%d) without a record", p, n)
		} else if n != 1 {
			t.Errorf("%d mounts stacked on %s", n, p)
		}
	}
	for p := range recorded {
		if count[p] != 1 {
			t.Errorf("recorded %s has %d mounts", p, count[p])
		}
	}
	alive := 0
	for _, s := range h.mode.started() {
		select {
		case <-s.Done():
		default:
			alive++
		}
	}
	if alive != len(stages) {
		t.Errorf("%d FUSE servers running for %d staged volumes", alive, len(stages))
	}

	// Tear everything down, concurrently too; nothing may be left.
	for _, p := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := retryAborted(func() error {
				_, err := h.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: p.VolumeID, TargetPath: p.TargetPath})
				return err
			}); err != nil {
				t.Errorf("unpublish %s: %v", p.TargetPath, err)
			}
		}()
	}
	wg.Wait()
	for _, s := range stages {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := retryAborted(func() error {
				_, err := h.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: s.VolumeID, StagingTargetPath: s.StagingPath})
				return err
			}); err != nil {
				t.Errorf("unstage %s: %v", s.VolumeID, err)
			}
		}()
	}
	wg.Wait()
	if infos, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(h.root)); len(infos) != 0 {
		var left []string
		for _, in := range infos {
			left = append(left, in.Mountpoint)
		}
		t.Errorf("mounts left after teardown: %s", strings.Join(left, ", "))
	}
	if stages, pubs, _ := mustStore(t, h).Load(); len(stages)+len(pubs) != 0 {
		t.Errorf("records left after teardown: %v %v", stages, pubs)
	}
	for _, s := range h.mode.started() {
		waitClosed(t, s.Done(), "every FUSE server to end after teardown")
	}
}
