package driver

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"google.golang.org/grpc/status"

	"github.com/moby/sys/mountinfo"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/restore"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/state"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
)

// restorer replays records through the code paths of NodeStageVolume and NodePublishVolume, with the mount table
// read once for all volumes.
type restorer struct{ d *Driver }

var _ restore.Restorer = restorer{}

func tableLookup(t *mounts.Table) mountLookup {
	return func(path string) ([]*mountinfo.Info, error) { return t.Mounts(path), nil }
}

func (r restorer) RestoreStage(ctx context.Context, table *mounts.Table, rec state.Stage) (string, error) {
	release, err := r.d.lock(rec.VolumeID, rec.StagingPath)
	if err != nil {
		return "", errors.New(status.Convert(err).Message())
	}
	defer release()
	if !rec.Ephemeral { // an inline volume's staging path is the plugin's own, not kubelet's
		if done, err := r.kubeletDone(rec.StagingPath); err != nil || done {
			return "", r.forget(err, func() error { return r.d.unstage(ctx, rec.VolumeID, rec.StagingPath) })
		}
	}
	act, err := r.d.stage(ctx, rec.VolumeID, rec.StagingPath, rec.ReadOnly, rec.Ephemeral, nil, tableLookup(table))
	if err != nil {
		return "", errors.New(status.Convert(err).Message())
	}
	v, _ := r.d.lookup(rec.VolumeID)
	return fmt.Sprintf("%s (pid %d)", act, pidOf(v.server)), nil
}

func (r restorer) RestorePublish(ctx context.Context, table *mounts.Table, rec state.Publish) (string, error) {
	release, err := r.d.lock(rec.VolumeID, rec.StagingPath, rec.TargetPath)
	if err != nil {
		return "", errors.New(status.Convert(err).Message())
	}
	defer release()
	if done, err := r.kubeletDone(rec.TargetPath); err != nil || done {
		return "", r.forget(err, func() error {
			v, _ := r.d.lookup(rec.VolumeID)
			if _, err := r.d.unpublish(rec.VolumeID, rec.TargetPath, v.targets[rec.TargetPath]); err != nil {
				return err
			}
			return r.d.unstageEphemeral(ctx, rec.VolumeID)
		})
	}
	return r.d.place.restore(ctx, table, rec)
}

// kubeletDone says whether kubelet removed the directory it keeps beside path: the parent, where it writes
// vol_data.json before NodeStageVolume or NodePublishVolume and which it removes with that file once the
// matching NodeUnstageVolume or NodeUnpublishVolume succeeded (saveVolumeData and removeMountDir in
// kubernetes pkg/volume/csi, called from csi_attacher.go's MountDevice/UnmountDevice and csi_mounter.go's
// SetUpAt/TearDownAt), or when the node's kubelet directory was wiped while the plugin's state directory was
// kept. A restore there would mount what nothing will ever unmount (csi-plugin/README.md, "Restore strategies").
func (r restorer) kubeletDone(path string) (bool, error) {
	exists, err := r.d.prober.Exists(filepath.Dir(path))
	if err != nil {
		return false, fmt.Errorf("checking kubelet's directory of %s: %w", path, err)
	}
	return !exists, nil
}

// forget runs drop (the unpublish or unstage kubelet will never call) unless checkErr says the check failed,
// and returns restore.ErrKubeletDone when the record is gone.
func (r restorer) forget(checkErr error, drop func() error) error {
	if checkErr != nil {
		return checkErr
	}
	if err := drop(); err != nil {
		return fmt.Errorf("forgetting the record of a path whose kubelet directory is gone: %s", status.Convert(err).Message())
	}
	return restore.ErrKubeletDone
}
