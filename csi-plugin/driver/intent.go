package driver

import (
	"errors"
	"io/fs"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/state"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
)

// Crash consistency. A new mount is recorded twice: as an intent (state's Pending) before the plugin mounts, and
// as done once it answers. A plugin killed in between leaves the intent, which tells its successor that whatever
// is mounted at that path is the plugin's own unfinished work, that nobody was told about: it is undone at
// start-up (undoIntents), so that the CO's retry of the call starts afresh instead of finding a mount the plugin
// has no record of. A repair of a recorded mount needs no intent: the record claims the path already.

// hookMounted calls Config.mounted, if set.
func (d *Driver) hookMounted(path string) {
	if d.cfg.mounted != nil {
		d.cfg.mounted(path)
	}
}

// errInterrupted is why a pending mount is replaced without being probed.
var errInterrupted = errors.New("left by an interrupted call")

func (d *Driver) putStage(r state.Stage) error {
	if d.store == nil {
		return nil
	}
	if err := d.store.PutStage(r); err != nil {
		return status.Errorf(codes.Internal, "recording the stage: %v", err)
	}
	return nil
}

func (d *Driver) putPublish(r state.Publish) error {
	if d.store == nil {
		return nil
	}
	if err := d.store.PutPublish(r); err != nil {
		return status.Errorf(codes.Internal, "recording the publish: %v", err)
	}
	return nil
}

// recordStageIntent and recordIntent record that the plugin is about to mount r's path.
func (d *Driver) recordStageIntent(r state.Stage) error {
	r.Pending, r.Time = true, time.Now().UTC()
	return d.putStage(r)
}

func (d *Driver) recordIntent(r state.Publish) error {
	r.Pending, r.Time = true, time.Now().UTC()
	return d.putPublish(r)
}

// dropStageIntent and dropIntent remove the intent of a mount that failed and was undone (when recorded is
// true: the call wrote one). Left behind, it would only make the next start-up look at the path again.
func (d *Driver) dropStageIntent(r state.Stage, recorded bool) {
	if d.store == nil || !recorded {
		return
	}
	if err := d.store.DeleteStage(r.VolumeID); err != nil {
		klog.ErrorS(err, "Removing the intent of a failed stage", "volumeID", r.VolumeID, "stagingPath", r.StagingPath)
	}
}

func (d *Driver) dropIntent(r state.Publish, recorded bool) {
	if d.store == nil || !recorded {
		return
	}
	if err := d.store.DeletePublish(r.TargetPath); err != nil {
		klog.ErrorS(err, "Removing the intent of a failed publish", "volumeID", r.VolumeID, "targetPath", r.TargetPath)
	}
}

// undoIntents undoes, at start-up, what interrupted calls may have mounted: every mount stacked on the path of an
// intent (targets first: a target binds its staging mount), the directory when the intent says the plugin created
// it, then the intent. What cannot be undone stays known as pending: the next call on it replaces the mount
// (stage, publish) or removes it (unstage, unpublish), and the next start-up tries again.
func (d *Driver) undoIntents(stages []state.Stage, publishes []state.Publish) {
	for _, p := range publishes {
		n, err := undoMount(p.TargetPath, p.CreatedDir)
		if err == nil {
			err = d.store.DeletePublish(p.TargetPath)
		}
		if err != nil {
			klog.ErrorS(err, "Cannot undo an interrupted publish; the next call on its target will", "volumeID", p.VolumeID, "targetPath", p.TargetPath)
			d.mu.Lock()
			if v := d.volumes[p.VolumeID]; v != nil {
				v.targets[p.TargetPath] = target{readOnly: p.ReadOnly, createdDir: p.CreatedDir, cap: p.Capability, pending: true}
			}
			d.mu.Unlock()
			continue
		}
		klog.InfoS("Undid an interrupted publish", "volumeID", p.VolumeID, "targetPath", p.TargetPath, "unmounted", n)
	}
	for _, s := range stages {
		n, err := undoMount(s.StagingPath, s.CreatedDir)
		if err == nil {
			err = d.store.DeleteStage(s.VolumeID)
		}
		if err != nil {
			klog.ErrorS(err, "Cannot undo an interrupted stage; the next call on its volume will", "volumeID", s.VolumeID, "stagingPath", s.StagingPath)
			d.mu.Lock()
			d.volumes[s.VolumeID] = &volume{id: s.VolumeID, stagingPath: s.StagingPath, readOnly: s.ReadOnly, createdDir: s.CreatedDir, ephemeral: s.Ephemeral, cap: s.Capability, pending: true, targets: map[string]target{}}
			d.mu.Unlock()
			continue
		}
		klog.InfoS("Undid an interrupted stage", "volumeID", s.VolumeID, "stagingPath", s.StagingPath, "unmounted", n)
	}
}

// undoMount unmounts everything stacked on path and removes the directory when the plugin created it (rmdir:
// only ever an empty directory). Neither reaches a FUSE server.
func undoMount(path string, createdDir bool) (int, error) {
	n, err := mounts.UnmountAll(path)
	if err != nil {
		return n, err
	}
	if createdDir {
		if err := unix.Rmdir(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, err
		}
	}
	return n, nil
}
