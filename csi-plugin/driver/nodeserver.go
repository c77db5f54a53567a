package driver

import (
	"context"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
)

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
	act, err := n.d.publish(id, staging, target, readOnly, mounts.CountMounts)
	if err != nil {
		if ephemeral {
			n.d.dropUnusedEphemeral(ctx, id)
		}
		return nil, err
	}
	klog.V(2).InfoS("Published volume", "volumeID", id, "targetPath", target, "readOnly", readOnly, "ephemeral", ephemeral, "action", act)
	return &csi.NodePublishVolumeResponse{}, nil
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

	layers, err := n.d.unpublish(id, target)
	if err != nil {
		return nil, err
	}
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

	return n.d.volumeStats(id, path)
}
