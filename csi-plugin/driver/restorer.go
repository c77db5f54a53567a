package driver

import (
	"context"
	"errors"
	"fmt"

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
	act, err := r.d.stage(ctx, rec.VolumeID, rec.StagingPath, rec.ReadOnly, rec.Ephemeral, nil, tableLookup(table))
	if err != nil {
		return "", errors.New(status.Convert(err).Message())
	}
	v, _ := r.d.lookup(rec.VolumeID)
	return fmt.Sprintf("%s (pid %d)", act, pidOf(v.server)), nil
}

func (r restorer) RestorePublish(_ context.Context, table *mounts.Table, rec state.Publish) (string, error) {
	release, err := r.d.lock(rec.VolumeID, rec.StagingPath, rec.TargetPath)
	if err != nil {
		return "", errors.New(status.Convert(err).Message())
	}
	defer release()
	if r.d.targetMounter() != nil {
		// The target's mount is the pod's sidecar's: the plugin's restart did not touch it, and the plugin has
		// no descriptor to repair it with. Its record (loaded already) is all the plugin needs to unpublish it.
		return "kept (served by the pod's sidecar)", nil
	}
	if h, err := r.d.probe(rec.StagingPath); h != healthAnswers {
		return "", fmt.Errorf("staging mount does not answer: %w", err)
	}
	act, err := r.d.publish(rec.VolumeID, rec.StagingPath, rec.TargetPath, rec.ReadOnly, nil, tableLookup(table))
	if err != nil {
		return "", errors.New(status.Convert(err).Message())
	}
	return string(act), nil
}
