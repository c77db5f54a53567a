// Package restore replays mount records at plugin start-up: every staged volume first, then the targets it is
// published on. Volumes are independent, so they are restored in parallel by a bounded pool of workers; within
// one volume the order is fixed (a bind mount of a dead staging mount would be dead too).
package restore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/state"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
)

// Strategy says how a dead published target is repaired.
type Strategy string

const (
	// Rebind lazily unmounts the dead target, then bind-mounts the new staging mount. New containers see the
	// volume; a running container keeps the dead mount: its mount namespace holds its own copy of the target,
	// made when it started, and with kubelet's default propagation (None, i.e. private) no later mount on the
	// host reaches that copy (docs/fuse-mount-loss.md; the kernel's Documentation/filesystems/sharedsubtree.rst).
	Rebind Strategy = "rebind"
	// Stack bind-mounts the new staging mount on top of the dead target mount without unmounting it: with
	// HostToContainer propagation (a slave mount) the new mount propagates into running containers on top of
	// their copy, whose new opens then succeed; files opened before the crash stay dead. Only the bottom
	// (original) mount is kept underneath: the dead binds that earlier restores stacked are detached first (their
	// unmount propagates to the containers as well), so a target never holds more than two mounts, however often
	// the plugin crashes.
	Stack Strategy = "stack"
)

// ParseStrategy checks a --restore-strategy value.
func ParseStrategy(s string) (Strategy, error) {
	switch Strategy(s) {
	case Rebind, Stack, Setns:
		return Strategy(s), nil
	}
	return "", fmt.Errorf("unknown restore strategy %q (want %q, %q or %q)", s, Rebind, Stack, Setns)
}

// ErrKubeletDone is what a Restorer returns, after forgetting the record, for a path whose directory kubelet
// has removed: kubelet does so only once it is done with the volume there (or the node's kubelet directory was
// wiped), so nothing will ever unmount what a restore would mount there, nor call the plugin for it again.
var ErrKubeletDone = errors.New("kubelet removed the directory of this path: the record is forgotten, nothing is mounted")

// Restorer does the mount work for one record; Run only schedules and logs. The table is one snapshot of the
// mount table taken before the restore started (parsed once, not once per volume); each volume's paths are
// only touched by its own worker, so the snapshot stays true for them.
type Restorer interface {
	// RestoreStage makes the staging mount of rec answer and says what it did (e.g. "remounted").
	RestoreStage(ctx context.Context, table *mounts.Table, rec state.Stage) (string, error)
	// RestorePublish makes the target of rec answer again and says what it did (e.g. "stacked").
	RestorePublish(ctx context.Context, table *mounts.Table, rec state.Publish) (string, error)
}

// Result counts restored records (stages and publishes alike); Forgotten are those of ErrKubeletDone.
type Result struct {
	OK, Failed, Skipped, Forgotten int
}

// Run restores stages and their publishes with at most workers volumes at a time and returns the counts. Each
// restored or failed mount is logged. Publishes of a volume whose stage failed, or that has no stage record,
// are skipped (their staging mount cannot answer).
func Run(ctx context.Context, stages []state.Stage, publishes []state.Publish, workers int, r Restorer) Result {
	table, err := mounts.ReadTable()
	if err != nil {
		klog.ErrorS(err, "Cannot restore mounts")
		return Result{Failed: len(stages) + len(publishes)}
	}
	byVolume := map[string][]state.Publish{}
	for _, p := range publishes {
		byVolume[p.VolumeID] = append(byVolume[p.VolumeID], p)
	}
	var (
		mu  sync.Mutex
		res Result
		wg  sync.WaitGroup
	)
	count := func(ok, failed, skipped, forgotten int) {
		mu.Lock()
		res.OK += ok
		res.Failed += failed
		res.Skipped += skipped
		res.Forgotten += forgotten
		mu.Unlock()
	}
	if workers < 1 {
		workers = 1
	}
	sem := make(chan struct{}, workers)
	left := 0 // volumes not started because ctx ended (the plugin stops): the next start restores them
	for _, s := range stages {
		pubs := byVolume[s.VolumeID]
		delete(byVolume, s.VolumeID)
		select {
		case sem <- struct{}{}:
			if ctx.Err() != nil {
				<-sem // both were ready: the stop wins
			}
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			left++
			count(0, 0, 1+len(pubs), 0)
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			start := time.Now()
			action, err := r.RestoreStage(ctx, table, s)
			switch {
			case errors.Is(err, ErrKubeletDone):
				// Its targets are normally gone too; those that are not fail below (their staging mount is gone).
				klog.InfoS("Not restoring staging mount: "+err.Error(), "volumeID", s.VolumeID, "stagingPath", s.StagingPath)
				count(0, 0, 0, 1)
			case err != nil:
				klog.ErrorS(err, "Failed to restore staging mount", "volumeID", s.VolumeID, "stagingPath", s.StagingPath)
				for _, p := range pubs {
					klog.ErrorS(nil, "Not restoring target: its staging mount failed", "volumeID", p.VolumeID, "targetPath", p.TargetPath)
				}
				count(0, 1, len(pubs), 0)
				return
			default:
				klog.InfoS("Restored staging mount", "volumeID", s.VolumeID, "stagingPath", s.StagingPath, "action", action, "duration", time.Since(start))
				count(1, 0, 0, 0)
			}
			for _, p := range pubs {
				start := time.Now()
				action, err := r.RestorePublish(ctx, table, p)
				switch {
				case errors.Is(err, ErrKubeletDone):
					klog.InfoS("Not restoring target: "+err.Error(), "volumeID", p.VolumeID, "targetPath", p.TargetPath)
					count(0, 0, 0, 1)
				case err != nil:
					klog.ErrorS(err, "Failed to restore target", "volumeID", p.VolumeID, "targetPath", p.TargetPath)
					count(0, 1, 0, 0)
				default:
					klog.InfoS("Restored target", "volumeID", p.VolumeID, "targetPath", p.TargetPath, "action", action, "duration", time.Since(start))
					count(1, 0, 0, 0)
				}
			}
		}()
	}
	wg.Wait()
	if left > 0 {
		klog.InfoS("Stopped restoring: the plugin stops; the next start restores the rest", "volumes", left)
	}
	for id, pubs := range byVolume {
		for _, p := range pubs {
			klog.ErrorS(nil, "Not restoring target: its volume has no stage record", "volumeID", id, "targetPath", p.TargetPath)
		}
		res.Skipped += len(pubs)
	}
	return res
}
