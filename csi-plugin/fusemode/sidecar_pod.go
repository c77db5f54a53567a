package fusemode

import (
	"context"
	"fmt"
	"path/filepath"

	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/kubeletpath"
)

// The sidecar mode as the driver sees it (Mode): where a target's pod keeps its socket, found from kubelet's
// layout of the target path and the pod kubelet names in the volume context.

func init() { Register(SidecarName, func(o Options) (Mode, error) { return NewSidecar(o) }) }

// PodUIDContextKey is set by kubelet in the volume context of NodePublishVolume when the CSIDriver has
// podInfoOnMount: true (pkg/volume/csi/csi_mounter.go, SetUpAt).
const PodUIDContextKey = "csi.storage.k8s.io/pod.uid"

// Placement implements Mode: every target gets a connection of its own, served by the pod's sidecar.
func (s *Sidecar) Placement() Placement { return OnTargets }

// Publish implements Mode: it mounts t.Path and hands its connection to the sidecar of the pod that kubelet names
// in the volume context, which must be the target's pod. Request values are clipped in messages (%.256q).
func (s *Sidecar) Publish(ctx context.Context, t Target) error {
	uid := t.VolumeContext[PodUIDContextKey]
	if uid == "" {
		return Invalid(fmt.Errorf("volume_context has no %s: the sidecar mode needs podInfoOnMount: true in the CSIDriver", PodUIDContextKey))
	}
	req, podUID, err := socketOf(t)
	if err != nil {
		return err
	}
	if podUID != uid {
		return Invalid(fmt.Errorf("target_path %.256q belongs to pod %q, not to pod %.256q of the volume context", t.Path, podUID, uid))
	}
	// A handover still waiting for a target that is no longer mounted serves nothing: replace it.
	s.Release(t.Path)
	if err := s.MountTarget(ctx, req); err != nil {
		// The pod's socket volume may not be set up yet (kubelet sets up a pod's volumes independently).
		return Retryable(fmt.Errorf("for the pod's sidecar: %w", err))
	}
	klog.V(2).InfoS("Mounted target for the pod's sidecar", "volumeID", t.VolumeID, "targetPath", t.Path, "socket", filepath.Join(req.PodDir, req.SocketDir, SocketName))
	return nil
}

// Recollect implements Mode: with KeepFD it takes the recorded targets' connections back from their sidecars.
// There is never a staging mount to take back.
func (s *Sidecar) Recollect(recs Records) (map[string]Server, error) {
	var reqs []TargetRequest
	for _, t := range recs.Targets {
		req, _, err := socketOf(t)
		if err != nil {
			klog.ErrorS(err, "Cannot take back the connection of a target", "volumeID", t.VolumeID, "targetPath", t.Path)
			continue
		}
		reqs = append(reqs, req)
	}
	for target, err := range s.RecollectTargets(reqs) {
		klog.ErrorS(err, "Cannot take back the connection of a target from its sidecar", "targetPath", target)
	}
	return nil, nil
}

// socketOf returns the request that mounts t with its socket in <pod dir>/volumes/kubernetes.io~empty-dir/
// <SidecarVolume>/<volume spec name>, and the pod's UID, from kubelet's layout of the target path alone.
func socketOf(t Target) (TargetRequest, string, error) {
	root, podUID, spec, ok := kubeletpath.SplitTarget(t.Path)
	if !ok {
		return TargetRequest{}, "", Invalid(fmt.Errorf("target_path %.256q is not kubelet's <root>/pods/<uid>/volumes/kubernetes.io~csi/<name>/mount: the sidecar mode cannot find the pod's socket volume", t.Path))
	}
	return TargetRequest{VolumeID: t.VolumeID, Target: t.Path, ReadOnly: t.ReadOnly,
		PodDir: kubeletpath.PodDir(root, podUID), SocketDir: filepath.Join(kubeletpath.EmptyDirIn(SidecarVolume), spec)}, podUID, nil
}
