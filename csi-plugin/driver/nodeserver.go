package driver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/fusemode"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/restore"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/state"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
)

// stopTimeout bounds a graceful stop of a FUSE server before it is killed.
const stopTimeout = 10 * time.Second

// nodeServer implements the CSI Node service.
type nodeServer struct {
	csi.UnimplementedNodeServer
	d *Driver
}

var _ csi.NodeServer = nodeServer{}

func (n nodeServer) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: n.d.cfg.NodeID}, nil
}

func (n nodeServer) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	var caps []*csi.NodeServiceCapability
	for _, t := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_VOLUME_CONDITION,
	} {
		caps = append(caps, &csi.NodeServiceCapability{
			Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}},
		})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// begin checks that start-up has finished and takes the volume's lock; the caller defers the returned release.
func (d *Driver) begin(volumeID string) (func(), error) {
	if !d.Ready() {
		return nil, status.Error(codes.Unavailable, "the plugin is still restoring its mounts; retry later")
	}
	if !d.locks.tryAcquire(volumeID) {
		return nil, status.Errorf(codes.Aborted, "an operation on volume %q is already in progress", volumeID)
	}
	return func() { d.locks.release(volumeID) }, nil
}

func (n nodeServer) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	if err := validateVolumeID(req.GetVolumeId()); err != nil {
		return nil, err
	}
	if err := validatePath("staging_target_path", req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	if err := validateCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	release, err := n.d.begin(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	defer release()
	if _, err := n.d.stage(ctx, req.GetVolumeId(), req.GetStagingTargetPath(), readOnlyMode(req.GetVolumeCapability()), false, mounts.CountMounts); err != nil {
		return nil, err
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

// mountCounter says how many mounts are stacked on a path: mounts.CountMounts reads the mount table, a restore
// looks the path up in one snapshot of it.
type mountCounter func(path string) (int, error)

// stage makes a FUSE mount of volume id answer at path: an answering mount is kept (idempotency), a dead one is
// lazily unmounted and replaced, a missing one is started. It returns what it did, or a status error. The caller
// holds the volume's lock. NodeStageVolume, NodePublishVolume (the repair of a dead staging mount, and the
// staging of an inline ephemeral volume) and the restore all come here.
func (d *Driver) stage(ctx context.Context, id, path string, readOnly, ephemeral bool, count mountCounter) (string, error) {
	if other := d.stagedAt(path, id); other != "" {
		return "", status.Errorf(codes.AlreadyExists, "staging_target_path %q is in use by volume %q", path, other)
	}
	known, isKnown := d.lookup(id)
	if isKnown && known.stagingPath != path {
		return "", status.Errorf(codes.AlreadyExists, "volume %q is already staged at %q", id, known.stagingPath)
	}
	if isKnown && known.ephemeral != ephemeral {
		return "", status.Errorf(codes.AlreadyExists, "volume %q is already staged as %s volume", id, lifecycle(known.ephemeral))
	}
	createdDir := known.createdDir
	exists, err := mounts.Exists(path)
	if err != nil {
		return "", status.Errorf(codes.Internal, "checking staging_target_path: %v", err)
	}
	if !exists {
		if err := os.MkdirAll(path, 0o750); err != nil {
			return "", status.Errorf(codes.Internal, "creating staging_target_path: %v", err)
		}
		createdDir = true
	}
	action := "mounted"
	layers, err := count(path)
	if err != nil {
		return "", status.Errorf(codes.Internal, "%v", err)
	}
	if layers > 0 {
		probe := mounts.Answers(path, fusemode.ServedFile, d.cfg.ProbeTimeout)
		switch {
		case probe == nil:
			if isKnown {
				return "healthy", nil
			}
			// A live dummy-fuse mount this process did not start (another plugin instance left it): adopt it;
			// unstaging unmounts it, which ends its server.
			klog.InfoS("Adopting an answering staging mount", "volumeID", id, "stagingPath", path)
			action = "adopted"
		case mounts.IsDead(probe):
			// The idempotency trap: the mount is in the table (IsLikelyNotMountPoint says "mounted") but its
			// server is gone. Answering OK here would hand kubelet a dead volume.
			klog.InfoS("Staging mount is dead, mounting it again", "volumeID", id, "stagingPath", path, "err", probe)
			if known.server != nil {
				sctx, cancel := context.WithTimeout(ctx, stopTimeout)
				_ = known.server.Stop(sctx) // normally gone already; make sure before starting another
				cancel()
			}
			for i := 0; i < layers; i++ {
				if err := mounts.UnmountLazy(path); err != nil && !errors.Is(err, unix.EINVAL) {
					return "", status.Errorf(codes.Internal, "unmounting dead staging mount: %v", err)
				}
			}
			action = "remounted"
		case errors.Is(probe, mounts.ErrTimeout):
			return "", status.Errorf(codes.Unavailable, "staging mount does not answer: %v", probe)
		default:
			return "", status.Errorf(codes.FailedPrecondition, "staging_target_path %q holds a mount that is not a dummy-fuse filesystem: %v", path, probe)
		}
	}
	var srv fusemode.Server
	if action != "adopted" {
		srv, err = d.mode.Start(ctx, fusemode.Request{VolumeID: id, Mountpoint: path})
		if err != nil {
			if createdDir && !isKnown {
				_ = os.Remove(path)
			}
			return "", status.Errorf(codes.Internal, "starting the FUSE server: %v", err)
		}
	}
	v := &volume{id: id, stagingPath: path, readOnly: readOnly, createdDir: createdDir, ephemeral: ephemeral, server: srv}
	if d.store != nil && (!isKnown || known.createdDir != createdDir || known.readOnly != readOnly) {
		rec := state.Stage{VolumeID: id, StagingPath: path, ReadOnly: readOnly, FuseMode: d.mode.Name(), CreatedDir: createdDir, Ephemeral: ephemeral, Time: time.Now().UTC()}
		if err := d.store.PutStage(rec); err != nil {
			_ = d.stopAndUnmount(ctx, id, srv, path)
			return "", status.Errorf(codes.Internal, "recording the stage: %v", err)
		}
	}
	d.setStaged(v)
	klog.V(2).InfoS("Staged volume", "volumeID", id, "stagingPath", path, "ephemeral", ephemeral, "action", action, "pid", pidOf(srv))
	return action, nil
}

// lifecycle names a volume's CSI lifecycle mode for messages.
func lifecycle(ephemeral bool) string {
	if ephemeral {
		return "an inline ephemeral"
	}
	return "a persistent"
}

func pidOf(s fusemode.Server) int {
	if s == nil {
		return 0
	}
	return s.PID()
}

// stopAndUnmount unmounts everything stacked on path, then stops srv (when known) by its PID. Unmounting first
// lets dummy-fuse end on its own (the kernel closes the connection); a SIGTERM first would make it unmount and
// then wait for a connection that bind mounts elsewhere may keep open.
func (d *Driver) stopAndUnmount(ctx context.Context, id string, srv fusemode.Server, path string) error {
	_, uerr := mounts.UnmountAll(path)
	if srv != nil {
		select {
		case <-srv.Done():
		case <-time.After(time.Second):
		}
		sctx, cancel := context.WithTimeout(ctx, stopTimeout)
		err := srv.Stop(sctx)
		cancel()
		if err != nil {
			klog.ErrorS(err, "Stopping the FUSE server", "volumeID", id)
		}
	}
	return uerr
}

func (n nodeServer) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	id, path := req.GetVolumeId(), req.GetStagingTargetPath()
	if err := validateVolumeID(id); err != nil {
		return nil, err
	}
	if err := validatePath("staging_target_path", path); err != nil {
		return nil, err
	}
	release, err := n.d.begin(id)
	if err != nil {
		return nil, err
	}
	defer release()

	v, known := n.d.lookup(id)
	if known && v.stagingPath != path {
		// Not where this volume lives: touching path could unmount another volume.
		return nil, status.Errorf(codes.InvalidArgument, "volume %q is staged at %q, not at staging_target_path %q", id, v.stagingPath, path)
	}
	if !known {
		if other := n.d.stagedAt(path, id); other != "" {
			return nil, status.Errorf(codes.InvalidArgument, "staging_target_path %q belongs to volume %q, not %q", path, other, id)
		}
	}
	if err := n.d.unstage(ctx, id, path); err != nil {
		return nil, err
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// unstage unmounts the staging mount of volume id at path, stops its FUSE server, removes the directory when the
// plugin created it (or owns it: the ephemeral directory), deletes the record and forgets the volume. It returns
// a status error. The caller holds the volume's lock and has checked that path is not another volume's.
// NodeUnstageVolume and the unpublish of an inline ephemeral volume's last target both come here.
func (d *Driver) unstage(ctx context.Context, id, path string) error {
	v, known := d.lookup(id)
	if err := d.stopAndUnmount(ctx, id, v.server, path); err != nil {
		return status.Errorf(codes.Internal, "unmounting staging_target_path: %v", err)
	}
	if (known && v.createdDir) || path == d.ephemeralStagingPath(id) {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return status.Errorf(codes.Internal, "removing staging_target_path: %v", err)
		}
	}
	if d.store != nil {
		if err := d.store.DeleteStage(id); err != nil {
			return status.Errorf(codes.Internal, "%v", err)
		}
	}
	d.forgetStaged(id)
	klog.V(2).InfoS("Unstaged volume", "volumeID", id, "stagingPath", path, "ephemeral", v.ephemeral)
	return nil
}

// ephemeralContextKey is set to "true" in the volume context by kubelet for an inline ephemeral volume (CSIDriver
// volumeLifecycleModes: Ephemeral), which it publishes without staging it first.
const ephemeralContextKey = "csi.storage.k8s.io/ephemeral"

func (n nodeServer) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	id, staging, target := req.GetVolumeId(), req.GetStagingTargetPath(), req.GetTargetPath()
	if err := validateVolumeID(id); err != nil {
		return nil, err
	}
	if err := validatePath("target_path", target); err != nil {
		return nil, err
	}
	// An inline ephemeral volume comes without a staging path: the plugin stages it itself, in a directory it
	// owns, named after the (validated) volume ID.
	ephemeral := staging == "" && req.GetVolumeContext()[ephemeralContextKey] == "true"
	if ephemeral {
		staging = n.d.ephemeralStagingPath(id)
	}
	if err := validatePath("staging_target_path", staging); err != nil {
		return nil, err
	}
	if err := validateCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	if staging == target {
		return nil, status.Error(codes.InvalidArgument, "target_path must differ from staging_target_path")
	}
	release, err := n.d.begin(id)
	if err != nil {
		return nil, err
	}
	defer release()

	readOnly := req.GetReadonly() || readOnlyMode(req.GetVolumeCapability())
	v, known := n.d.lookup(id)
	if ephemeral && known && v.ephemeral {
		// Where its record says (the ephemeral directory may have been another one when it was staged).
		staging = v.stagingPath
	}
	if known && v.ephemeral != ephemeral {
		return nil, status.Errorf(codes.InvalidArgument, "volume %q is staged as %s volume at %q", id, lifecycle(v.ephemeral), v.stagingPath)
	}
	if known && v.stagingPath != staging {
		return nil, status.Errorf(codes.InvalidArgument, "volume %q is staged at %q, not at staging_target_path %q", id, v.stagingPath, staging)
	}
	if ephemeral {
		// The NodeStageVolume that kubelet skips, with all its idempotency and dead-mount repair.
		if _, err := n.d.stage(ctx, id, staging, readOnlyMode(req.GetVolumeCapability()), true, mounts.CountMounts); err != nil {
			return nil, err
		}
	} else if err := n.d.ensureStagingAnswers(ctx, id, staging, known); err != nil {
		return nil, err
	}
	if ro, ok := v.targets[target]; ok && ro != readOnly {
		return nil, status.Errorf(codes.AlreadyExists, "volume %q is already published at %q with readonly=%v", id, target, ro)
	}
	action, err := n.d.publish(id, staging, target, readOnly, mounts.CountMounts)
	if err != nil {
		if ephemeral {
			n.d.dropUnusedEphemeral(ctx, id)
		}
		return nil, err
	}
	klog.V(2).InfoS("Published volume", "volumeID", id, "targetPath", target, "readOnly", readOnly, "ephemeral", ephemeral, "action", action)
	return &csi.NodePublishVolumeResponse{}, nil
}

// dropUnusedEphemeral unstages inline ephemeral volume id when no target uses it: after a publish that failed
// for good, kubelet considers the volume not mounted and will not unpublish it, so nothing else would stop its
// FUSE server. The caller holds the volume's lock.
func (d *Driver) dropUnusedEphemeral(ctx context.Context, id string) {
	v, ok := d.lookup(id)
	if !ok || !v.ephemeral || len(v.targets) > 0 {
		return
	}
	if err := d.unstage(ctx, id, v.stagingPath); err != nil {
		klog.ErrorS(err, "Unstaging unused ephemeral volume", "volumeID", id, "stagingPath", v.stagingPath)
	}
}

// ensureStagingAnswers checks the staging mount before binding it; a dead one is repaired from what the plugin
// knows about the volume (ceph-csi does the same from its saved record).
func (d *Driver) ensureStagingAnswers(ctx context.Context, id, staging string, known bool) error {
	probe := mounts.Answers(staging, fusemode.ServedFile, d.cfg.ProbeTimeout)
	switch {
	case probe == nil:
		return nil
	case mounts.IsDead(probe) && known:
		klog.InfoS("Staging mount is dead, repairing it before publishing", "volumeID", id, "stagingPath", staging, "err", probe)
		v, _ := d.lookup(id)
		_, err := d.stage(ctx, id, staging, v.readOnly, v.ephemeral, mounts.CountMounts)
		return err
	case mounts.IsDead(probe):
		return status.Errorf(codes.FailedPrecondition, "the staging mount of volume %q is dead (%v) and the plugin has no record of it: stage it again", id, probe)
	case errors.Is(probe, mounts.ErrTimeout):
		return status.Errorf(codes.Unavailable, "staging mount does not answer: %v", probe)
	}
	return status.Errorf(codes.FailedPrecondition, "volume %q is not staged at %q: %v", id, staging, probe)
}

// publish makes target a bind mount of the (answering) staging mount: an answering target is kept, a dead one is
// repaired by the restore strategy, a missing one is created. The caller holds the volume's lock.
// NodePublishVolume and the restore both come here.
func (d *Driver) publish(id, staging, target string, readOnly bool, count mountCounter) (string, error) {
	strategy := d.cfg.RestoreStrategy
	exists, err := mounts.Exists(target)
	if err != nil {
		return "", status.Errorf(codes.Internal, "checking target_path: %v", err)
	}
	if !exists {
		if err := os.MkdirAll(target, 0o750); err != nil {
			return "", status.Errorf(codes.Internal, "creating target_path: %v", err)
		}
	}
	action := "bound"
	layers, err := count(target)
	if err != nil {
		return "", status.Errorf(codes.Internal, "%v", err)
	}
	if layers > 0 {
		probe := mounts.Answers(target, fusemode.ServedFile, d.cfg.ProbeTimeout)
		switch {
		case probe == nil:
			same, err := sameFilesystem(staging, target)
			if err != nil {
				return "", status.Errorf(codes.Internal, "%v", err)
			}
			if !same {
				return "", status.Errorf(codes.AlreadyExists, "target_path %q holds another mount", target)
			}
			action = "healthy"
		case mounts.IsDead(probe):
			klog.InfoS("Target mount is dead, repairing it", "volumeID", id, "targetPath", target, "strategy", strategy, "err", probe)
			if strategy == restore.Stack {
				action = "stacked"
			} else {
				if _, err := mounts.UnmountAll(target); err != nil {
					return "", status.Errorf(codes.Internal, "unmounting dead target: %v", err)
				}
				action = "rebound"
			}
		case errors.Is(probe, mounts.ErrTimeout):
			return "", status.Errorf(codes.Unavailable, "target mount does not answer: %v", probe)
		default:
			return "", status.Errorf(codes.AlreadyExists, "target_path %q holds a mount that is not this volume: %v", target, probe)
		}
	}
	if action != "healthy" {
		if err := mounts.Bind(staging, target, readOnly); err != nil {
			return "", status.Errorf(codes.Internal, "%v", err)
		}
		if err := mounts.Answers(target, fusemode.ServedFile, d.cfg.ProbeTimeout); err != nil {
			_ = mounts.UnmountLazy(target)
			return "", status.Errorf(codes.Internal, "the new bind mount does not answer: %v", err)
		}
	}
	known, _ := d.lookup(id)
	if ro, ok := known.targets[target]; d.store != nil && (!ok || ro != readOnly) {
		rec := state.Publish{VolumeID: id, StagingPath: staging, TargetPath: target, ReadOnly: readOnly, FuseMode: d.mode.Name(), Time: time.Now().UTC()}
		if err := d.store.PutPublish(rec); err != nil {
			if action != "healthy" {
				_ = mounts.UnmountLazy(target)
			}
			return "", status.Errorf(codes.Internal, "recording the publish: %v", err)
		}
	}
	d.setPublished(id, target, readOnly)
	return action, nil
}

// sameFilesystem reports whether a and b are mounts of one filesystem (a bind mount shares the device number).
func sameFilesystem(a, b string) (bool, error) {
	var sa, sb unix.Stat_t
	if err := unix.Stat(a, &sa); err != nil {
		return false, &os.PathError{Op: "stat", Path: a, Err: err}
	}
	if err := unix.Stat(b, &sb); err != nil {
		return false, &os.PathError{Op: "stat", Path: b, Err: err}
	}
	return sa.Dev == sb.Dev, nil
}

func (n nodeServer) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	if err := validateVolumeID(id); err != nil {
		return nil, err
	}
	if err := validatePath("target_path", target); err != nil {
		return nil, err
	}
	release, err := n.d.begin(id)
	if err != nil {
		return nil, err
	}
	defer release()

	// Every layer: the "stack" strategy leaves dead mounts under the live one.
	layers, err := mounts.UnmountAll(target)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "unmounting target_path: %v", err)
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "removing target_path: %v", err)
	}
	if n.d.store != nil {
		if err := n.d.store.DeletePublish(target); err != nil {
			return nil, status.Errorf(codes.Internal, "%v", err)
		}
	}
	n.d.forgetPublished(id, target)
	klog.V(2).InfoS("Unpublished volume", "volumeID", id, "targetPath", target, "unmounted", layers)
	if layers > 1 {
		n.d.repairSiblings(id)
	}
	// kubelet sends no NodeUnstageVolume for an inline ephemeral volume: its last target takes it along.
	if err := n.d.unstageEphemeral(ctx, id); err != nil {
		return nil, err
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// unstageEphemeral unstages volume id if it is an inline ephemeral volume that no target uses any more. A volume
// the plugin has no record of (no --state-dir, and restarted) is recognised by its directory in the ephemeral
// directory, which only the plugin writes to. The caller holds the volume's lock.
func (d *Driver) unstageEphemeral(ctx context.Context, id string) error {
	v, known := d.lookup(id)
	path := v.stagingPath
	switch {
	case known && (!v.ephemeral || len(v.targets) > 0):
		return nil
	case !known:
		path = d.ephemeralStagingPath(id)
		exists, err := mounts.Exists(path)
		if err != nil {
			return status.Errorf(codes.Internal, "checking the ephemeral staging path: %v", err)
		}
		if !exists || d.stagedAt(path, id) != "" {
			return nil
		}
	}
	return d.unstage(ctx, id, path)
}

// repairSiblings re-binds the other targets of volume id that stopped answering. Under shared mount propagation
// (kubelet's directories on a real node) the targets of one volume are peers: the mount that the "stack"
// strategy put on top of one target was propagated to all of them, and unmounting it from one target (above)
// propagated that unmount to the others, leaving them on their dead mount again.
func (d *Driver) repairSiblings(id string) {
	v, ok := d.lookup(id)
	if !ok || mounts.Answers(v.stagingPath, fusemode.ServedFile, d.cfg.ProbeTimeout) != nil {
		return
	}
	for target, ro := range v.targets {
		if err := mounts.Answers(target, fusemode.ServedFile, d.cfg.ProbeTimeout); !mounts.IsDead(err) {
			continue
		}
		klog.InfoS("Target lost its mount through mount propagation, repairing it", "volumeID", id, "targetPath", target)
		if _, err := d.publish(id, v.stagingPath, target, ro, mounts.CountMounts); err != nil {
			klog.ErrorS(err, "Repairing target", "volumeID", id, "targetPath", target)
		}
	}
}

func (n nodeServer) NodeGetVolumeStats(_ context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	id, path := req.GetVolumeId(), req.GetVolumePath()
	if err := validateVolumeID(id); err != nil {
		return nil, err
	}
	if path == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_path is required")
	}
	// Any other unusable path (relative, missing, not a mount) is a volume that is not there: NotFound.
	if !filepath.IsAbs(path) {
		return nil, status.Errorf(codes.NotFound, "volume_path %q is not an absolute path, so no volume is there", path)
	}
	exists, err := mounts.Exists(path)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "checking volume_path: %v", err)
	}
	if !exists {
		return nil, status.Errorf(codes.NotFound, "volume_path %q does not exist", path)
	}
	layers, err := mounts.CountMounts(path)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "%v", err)
	}
	if layers == 0 {
		return nil, status.Errorf(codes.NotFound, "volume %q is not mounted at %q", id, path)
	}
	if v, ok := n.d.lookup(id); ok {
		if _, published := v.targets[path]; !published && v.stagingPath != path {
			return nil, status.Errorf(codes.NotFound, "volume %q is neither staged nor published at %q", id, path)
		}
	} else if other := n.d.volumeOfPath(path); other != "" {
		return nil, status.Errorf(codes.NotFound, "volume_path %q belongs to volume %q, not %q", path, other, id)
	}

	st, err := mounts.Statfs(path, n.d.cfg.ProbeTimeout)
	if err != nil {
		if mounts.IsDead(err) || errors.Is(err, mounts.ErrTimeout) {
			// What kubelet turns into an event on the pod: the mount is there, its server is gone.
			return &csi.NodeGetVolumeStatsResponse{
				Usage: []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES}, {Unit: csi.VolumeUsage_INODES}},
				VolumeCondition: &csi.VolumeCondition{
					Abnormal: true,
					Message:  fmt.Sprintf("FUSE mount of volume %s is not answering: %v", id, err),
				},
			}, nil
		}
		return nil, status.Errorf(codes.Internal, "%v", err)
	}
	cond := &csi.VolumeCondition{Message: "FUSE mount answers"}
	if st.Type != mounts.FUSESuperMagic {
		cond = &csi.VolumeCondition{Abnormal: true, Message: fmt.Sprintf("%s is not a FUSE mount (f_type %#x)", path, st.Type)}
	}
	bs := int64(st.Bsize)
	return &csi.NodeGetVolumeStatsResponse{
		Usage: []*csi.VolumeUsage{
			{Unit: csi.VolumeUsage_BYTES, Total: int64(st.Blocks) * bs, Available: int64(st.Bavail) * bs, Used: int64(st.Blocks-st.Bfree) * bs},
			{Unit: csi.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: int64(st.Files - st.Ffree)},
		},
		VolumeCondition: cond,
	}, nil
}

// volumeOfPath returns the volume staged or published at path, if any.
func (d *Driver) volumeOfPath(path string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, v := range d.volumes {
		if _, ok := v.targets[path]; ok || v.stagingPath == path {
			return id
		}
	}
	return ""
}
