package driver

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/fusemode"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/state"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/kubeletpath"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
)

// This file is the publish of the sidecar mode (fusemode.TargetMounter): staging only records the volume, and
// each target gets a FUSE mount of its own whose descriptor goes to a sidecar container of the pod.

// podUIDContextKey is set by kubelet in the volume context of NodePublishVolume when the CSIDriver has
// podInfoOnMount: true (pkg/volume/csi/csi_mounter.go, SetUpAt).
const podUIDContextKey = "csi.storage.k8s.io/pod.uid"

// targetMounter returns the mode when it mounts publish targets itself (sidecar mode), else nil.
func (d *Driver) targetMounter() fusemode.TargetMounter {
	tm, _ := d.mode.(fusemode.TargetMounter)
	return tm
}

// sidecarSocketDir returns the pod directory of target and, relative to it, the directory of the volume's
// socket: <pod dir>/volumes/kubernetes.io~empty-dir/<fusemode.SidecarVolume>/<volume spec name>. The pod is
// the one kubelet names in the volume context, and the target must be that pod's.
func sidecarSocketDir(target string, volumeContext map[string]string) (string, string, error) {
	uid := volumeContext[podUIDContextKey]
	if uid == "" {
		return "", "", status.Errorf(codes.InvalidArgument, "volume_context has no %s: the sidecar mode needs podInfoOnMount: true in the CSIDriver", podUIDContextKey)
	}
	podDir, socketDir, podUID, err := socketDirOf(target)
	if err != nil {
		return "", "", err
	}
	if podUID != uid {
		return "", "", status.Errorf(codes.InvalidArgument, "target_path %q belongs to pod %q, not to pod %q of the volume context", clip(target), podUID, clip(uid))
	}
	return podDir, socketDir, nil
}

// socketDirOf returns the pod directory of target, the directory of its socket relative to it, and the pod's
// UID, from kubelet's layout of the target path alone.
func socketDirOf(target string) (podDir, socketDir, podUID string, err error) {
	root, podUID, spec, ok := kubeletpath.SplitTarget(target)
	if !ok {
		return "", "", "", status.Errorf(codes.InvalidArgument, "target_path %q is not kubelet's <root>/pods/<uid>/volumes/kubernetes.io~csi/<name>/mount: the sidecar mode cannot find the pod's socket volume", clip(target))
	}
	return kubeletpath.PodDir(root, podUID), filepath.Join(kubeletpath.EmptyDirIn(fusemode.SidecarVolume), spec), podUID, nil
}

// recollectTargets has a mode that keeps the sidecars' connections (fusemode.TargetHolder) take back those of
// the recorded publishes of that mode.
func (d *Driver) recollectTargets(publishes []state.Publish) {
	th, ok := d.mode.(fusemode.TargetHolder)
	if !ok {
		return
	}
	var reqs []fusemode.TargetRequest
	for _, p := range publishes {
		if p.FuseMode != th.Name() {
			continue
		}
		podDir, socketDir, _, err := socketDirOf(p.TargetPath)
		if err != nil {
			klog.ErrorS(err, "Cannot take back the connection of a target", "volumeID", p.VolumeID, "targetPath", p.TargetPath)
			continue
		}
		reqs = append(reqs, fusemode.TargetRequest{VolumeID: p.VolumeID, Target: p.TargetPath, ReadOnly: p.ReadOnly, PodDir: podDir, SocketDir: socketDir})
	}
	for target, err := range th.RecollectTargets(reqs) {
		klog.ErrorS(err, "Cannot take back the connection of a target from its sidecar", "targetPath", target)
	}
}

// publishSidecar mounts target with a new FUSE connection and hands the connection to the pod's sidecar. A
// target recorded as this volume's and still mounted is kept without being probed: until the sidecar serves,
// any access would block, and once it has, the mount is the sidecar's and the plugin could not repair it (its
// copy of the descriptor is closed). The caller holds the volume's and the paths' locks.
func (d *Driver) publishSidecar(ctx context.Context, tm fusemode.TargetMounter, id, staging, targetPath string, readOnly bool, capability *state.Capability, volumeContext map[string]string) (action, error) {
	rec, mine, capability, err := d.claimTarget(id, targetPath, capability)
	if err != nil {
		return "", err
	}
	layers, err := mounts.CountMounts(targetPath)
	if err != nil {
		return "", status.Errorf(codes.Internal, "%v", err)
	}
	switch {
	case layers > 0 && !mine:
		return "", status.Errorf(codes.AlreadyExists, "target_path %q holds a mount that this plugin has no record of", targetPath)
	case layers > 0:
		return actionKept, nil
	}
	podDir, socketDir, err := sidecarSocketDir(targetPath, volumeContext)
	if err != nil {
		return "", err
	}
	createdDir, err := d.prepareDir("target_path", targetPath, rec.createdDir)
	if err != nil {
		return "", err
	}
	// A handover still waiting for a target that is no longer mounted serves nothing: replace it.
	tm.Release(targetPath)
	req := fusemode.TargetRequest{VolumeID: id, Target: targetPath, ReadOnly: readOnly, PodDir: podDir, SocketDir: socketDir}
	if err := tm.MountTarget(ctx, req); err != nil {
		if createdDir && !mine {
			_ = unix.Rmdir(targetPath)
		}
		// The pod's socket volume may not be set up yet (kubelet sets up a pod's volumes independently): kubelet
		// retries.
		return "", status.Errorf(codes.Unavailable, "mounting target_path for the pod's sidecar: %v", err)
	}
	if d.store != nil {
		r := state.Publish{VolumeID: id, StagingPath: staging, TargetPath: targetPath, ReadOnly: readOnly, FuseMode: d.mode.Name(), CreatedDir: createdDir, Capability: capability, Time: time.Now().UTC()}
		if err := d.store.PutPublish(r); err != nil {
			tm.Release(targetPath)
			_ = mounts.UnmountLazy(targetPath)
			return "", status.Errorf(codes.Internal, "recording the publish: %v", err)
		}
	}
	d.setPublished(id, targetPath, target{readOnly: readOnly, createdDir: createdDir, cap: capability})
	klog.V(2).InfoS("Mounted target for the pod's sidecar", "volumeID", id, "targetPath", targetPath, "socket", filepath.Join(podDir, socketDir, fusemode.SocketName))
	return actionMounted, nil
}

// prepareDir makes sure path is an empty directory to mount on, creating it if missing; it returns whether the
// plugin created it (createdDir: what the record said so far).
func (d *Driver) prepareDir(field, path string, createdDir bool) (bool, error) {
	exists, err := d.prober.Exists(path)
	if err != nil {
		return false, probeStatus("checking "+field, err)
	}
	if !exists {
		if err := os.MkdirAll(path, 0o750); err != nil {
			return false, status.Errorf(codes.Internal, "creating %s: %v", field, err)
		}
		return true, nil
	}
	return createdDir, d.wantEmptyDir(field, path)
}
