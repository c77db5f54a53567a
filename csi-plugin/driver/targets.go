package driver

import (
	"context"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/fusemode"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/state"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
)

// targetMounts is the placement of a mode that mounts every target itself (fusemode.OnTargets, the sidecar
// mode): staging only records the volume, and each target gets a FUSE mount of its own, which the mode has
// served. The plugin cannot repair such a mount once it is served, nor touch it unbounded before: until its
// server answers the kernel's INIT, any access blocks.
type targetMounts struct{ d *Driver }

func (targetMounts) stagingMounted() bool { return false }

// publish mounts the target through the mode. A target recorded as this volume's and still mounted is kept
// without being probed.
func (p targetMounts) publish(ctx context.Context, r publishRequest) (action, error) {
	d := p.d
	rec, mine, capability, err := d.claimTarget(r.id, r.target, r.capability)
	if err != nil {
		return "", err
	}
	mp, err := d.prepare("target_path", r.target, mine, rec.createdDir, codes.AlreadyExists, mounts.MountsAt)
	if err != nil {
		return "", err
	}
	if mp.layers > 0 && !rec.pending {
		return actionKept, nil
	}
	if mp.layers > 0 {
		// An interrupted publish's mount: nobody was told it exists, so it is replaced.
		d.mode.Release(r.target)
		if _, err := mounts.UnmountAll(r.target); err != nil {
			return "", status.Errorf(codes.Internal, "unmounting what an interrupted publish mounted: %v", err)
		}
	}
	pub := state.Publish{VolumeID: r.id, StagingPath: r.staging, TargetPath: r.target, ReadOnly: r.readOnly, FuseMode: d.mode.Name(), CreatedDir: mp.createdDir, Capability: capability}
	if !mine {
		if err := d.recordIntent(pub); err != nil {
			d.undoDir(r.target, mp.createdDir && !mine)
			return "", err
		}
	}
	t := fusemode.Target{VolumeID: r.id, Path: r.target, ReadOnly: r.readOnly, VolumeContext: r.volumeContext}
	if err := d.mode.Publish(ctx, t); err != nil {
		d.undoDir(r.target, mp.createdDir && !mine)
		d.dropIntent(pub, !mine)
		return "", modeStatus("mounting target_path", err)
	}
	d.hookMounted(r.target)
	pub.Time = time.Now().UTC()
	if err := d.putPublish(pub); err != nil {
		d.mode.Release(r.target)
		_ = mounts.UnmountLazy(r.target)
		return "", err
	}
	d.setPublished(r.id, r.target, target{readOnly: r.readOnly, createdDir: mp.createdDir, cap: capability})
	return actionMounted, nil
}

// restore keeps the recorded target as it is: its mount is the mode's server's (the plugin's restart did not
// touch it), and the plugin has nothing to repair it with. Its record (loaded already) is all the plugin needs to
// unpublish it.
func (targetMounts) restore(context.Context, *mounts.Table, state.Publish) (string, error) {
	return "kept (its own FUSE mount, served by the mode's server)", nil
}

// undoDir removes path when the plugin has just created it for a mount that failed.
func (d *Driver) undoDir(path string, created bool) {
	if created {
		_ = unix.Rmdir(path)
	}
}
