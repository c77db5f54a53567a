package driver

import (
	"context"
	"path/filepath"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/state"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/volumecondition"
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
		volumecondition.Capability,                       // kubelet ≤ v1.36 reads VolumeCondition only with it (package volumecondition)
		csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,  // kubelet v1.37 probes NodeGetVolumeHealth only with it
		csi.NodeServiceCapability_RPC_GET_STORAGE_HEALTH, // and NodeGetStorageHealth
	} {
		caps = append(caps, &csi.NodeServiceCapability{
			Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}},
		})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

func (n nodeServer) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := validateVolumeID(id); err != nil {
		return nil, err
	}
	if err := validatePath("staging_target_path", req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	if err := validateCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	path, err := n.d.resolve("staging_target_path", req.GetStagingTargetPath())
	if err != nil {
		return nil, err
	}
	if err := n.d.checkPlace("staging_target_path", path, id); err != nil {
		return nil, err
	}
	release, err := n.d.begin(id, path)
	if err != nil {
		return nil, err
	}
	defer release()
	if _, err := n.d.stage(ctx, id, path, readOnlyMode(req.GetVolumeCapability()), false, capabilityOf(req.GetVolumeCapability()), mounts.MountsAt); err != nil {
		return nil, err
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

func (n nodeServer) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := validateVolumeID(id); err != nil {
		return nil, err
	}
	if err := validatePath("staging_target_path", req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	path, err := n.d.resolveParent("staging_target_path", req.GetStagingTargetPath())
	if err != nil {
		return nil, err
	}
	release, err := n.d.begin(id, path)
	if err != nil {
		return nil, err
	}
	defer release()

	v, known := n.d.lookup(id)
	if known && v.stagingPath != path {
		// Not where this volume lives: touching path could unmount another volume.
		return nil, status.Errorf(codes.NotFound, "volume %q is staged at %q, not at staging_target_path %q", id, v.stagingPath, path)
	}
	if !known {
		if other := n.d.volumeOfPath(path); other != "" {
			return nil, status.Errorf(codes.NotFound, "staging_target_path %q belongs to volume %q, not %q", path, other, id)
		}
		// Nothing recorded: either already unstaged (idempotency: OK) or never this plugin's (left alone).
		if layers, err := mounts.CountMounts(path); err != nil || layers > 0 {
			return nil, status.Errorf(codes.NotFound, "volume %q is not staged at %q by this plugin; the mount there is left alone", id, path)
		}
		return &csi.NodeUnstageVolumeResponse{}, nil
	}
	if len(v.targets) > 0 {
		// The CO must unpublish first (CSI spec, "RPC Interactions"): unstaging now would leave every target a
		// dead mount, and the plugin's records of them gone, so that their NodeUnpublishVolume could no longer
		// tell them from anyone's mounts.
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q is still published at %d target(s), %q among them: NodeUnpublishVolume must come first", id, len(v.targets), anyTarget(v))
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
	if err := validateCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	if staging == "" {
		return nil, status.Error(codes.FailedPrecondition, "staging_target_path is empty: the plugin stages volumes (STAGE_UNSTAGE_VOLUME), so NodeStageVolume must come first")
	}
	if err := validatePath("staging_target_path", staging); err != nil {
		return nil, err
	}
	if staging == target {
		return nil, status.Error(codes.InvalidArgument, "target_path must differ from staging_target_path")
	}
	target, err := n.d.resolve("target_path", target)
	if err != nil {
		return nil, err
	}
	if err := n.d.checkPlace("target_path", target, id); err != nil {
		return nil, err
	}
	if !ephemeral {
		if staging, err = n.d.resolveParent("staging_target_path", staging); err != nil {
			return nil, err
		}
	}
	release, err := n.d.begin(id, staging, target)
	if err != nil {
		return nil, err
	}
	defer release()

	readOnly := req.GetReadonly() || readOnlyMode(req.GetVolumeCapability())
	capability := capabilityOf(req.GetVolumeCapability())
	v, known := n.d.lookup(id)
	if ephemeral && known && v.ephemeral {
		// Where its record says (the ephemeral directory may have been another one when it was staged).
		staging = v.stagingPath
	}
	if known && v.ephemeral != ephemeral {
		return nil, status.Errorf(codes.InvalidArgument, "volume %q is staged as %s volume at %q", id, lifecycle(v.ephemeral), v.stagingPath)
	}
	if !ephemeral && !known {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q is not staged by this plugin: NodeStageVolume must come first", id)
	}
	if known && v.stagingPath != staging {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q is staged at %q, not at staging_target_path %q", id, v.stagingPath, staging)
	}
	if t, ok := v.targets[target]; ok && (t.readOnly != readOnly || !compatible(t.cap, capability)) {
		return nil, status.Errorf(codes.AlreadyExists, "volume %q is already published at %q with readonly=%v and %s", id, target, t.readOnly, describe(t.cap))
	}
	if ephemeral {
		// The NodeStageVolume that kubelet skips, with all its idempotency and dead-mount repair.
		if _, err := n.d.stage(ctx, id, staging, readOnlyMode(req.GetVolumeCapability()), true, capability, mounts.MountsAt); err != nil {
			return nil, err
		}
	} else if err := n.d.ensureStagingAnswers(ctx, id, staging); err != nil {
		return nil, err
	}
	act, err := n.d.place.publish(ctx, publishRequest{id: id, staging: staging, target: target, readOnly: readOnly, capability: capability, volumeContext: req.GetVolumeContext()})
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
	id := req.GetVolumeId()
	if err := validateVolumeID(id); err != nil {
		return nil, err
	}
	if err := validatePath("target_path", req.GetTargetPath()); err != nil {
		return nil, err
	}
	targetPath, err := n.d.resolveParent("target_path", req.GetTargetPath())
	if err != nil {
		return nil, err
	}
	release, err := n.d.begin(id, targetPath)
	if err != nil {
		return nil, err
	}
	defer release()

	v, _ := n.d.lookup(id)
	rec, mine := v.targets[targetPath]
	if !mine {
		if other := n.d.volumeOfPath(targetPath); other != "" {
			return nil, status.Errorf(codes.NotFound, "target_path %q belongs to volume %q, not %q", targetPath, other, id)
		}
		if n.d.ephemeralLeftover(id, targetPath) {
			rec, mine = target{createdDir: true}, true // kubelet creates only the parent: the plugin made the target
		}
	}
	if !mine {
		// Nothing recorded: either already unpublished (idempotency: OK) or never this plugin's (left alone).
		if layers, err := mounts.CountMounts(targetPath); err != nil || layers > 0 {
			return nil, status.Errorf(codes.NotFound, "volume %q is not published at %q by this plugin; the mount there is left alone", id, targetPath)
		}
		if err := n.d.unstageEphemeral(ctx, id); err != nil {
			return nil, err
		}
		return &csi.NodeUnpublishVolumeResponse{}, nil
	}

	layers, err := n.d.unpublish(id, targetPath, rec)
	if err != nil {
		return nil, err
	}
	klog.V(2).InfoS("Unpublished volume", "volumeID", id, "targetPath", targetPath, "unmounted", layers)
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
	// A relative path or "/" is where no volume can be (the spec and csi-sanity want NotFound); other malformed
	// paths are invalid.
	if err := validatePath("volume_path", path); err != nil && path != "/" && (filepath.IsAbs(path) || strings.ContainsRune(path, 0) || len(path) > state.MaxPathLen) {
		return nil, err
	}
	// Only a path the plugin's records give this volume is answered for; anything else (relative, "/", /proc,
	// another volume's) is a volume that is not there: NotFound. The path itself is never touched before that:
	// it may be a mount whose server does not answer.
	if !n.d.hasPath(id, path) {
		resolved, err := n.d.resolveParent("volume_path", path)
		if err != nil || !n.d.hasPath(id, resolved) {
			return nil, status.Errorf(codes.NotFound, "volume %q is neither staged nor published at volume_path %q", id, clip(path))
		}
		path = resolved
	}
	layers, err := mounts.CountMounts(path)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "%v", err)
	}
	if layers == 0 {
		return nil, status.Errorf(codes.NotFound, "volume %q is not mounted at %q", id, path)
	}
	return n.d.volumeStats(id, path)
}

// anyTarget names one of v's targets (the first in order), for a message.
func anyTarget(v volume) string {
	first := ""
	for t := range v.targets {
		if first == "" || t < first {
			first = t
		}
	}
	return first
}
