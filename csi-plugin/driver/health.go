package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/volumecondition"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
)

// This file is volume health, for both generations of kubelet that read it (csi-plugin/README.md, "Volume
// health"):
//   - kubelet ≤ v1.36: the VolumeCondition of NodeGetVolumeStats (spec ≤ v1.12; see package volumecondition),
//     turned into a VolumeConditionAbnormal event on the pod;
//   - kubelet v1.37: NodeGetVolumeHealth per mounted volume and NodeGetStorageHealth per driver, every
//     volumeStatsAggPeriod (k8s.io/kubernetes pkg/kubelet/volumemanager/volumehealth/manager.go), written to
//     pod.status.volumeHealth and CSINode.status.storageHealth.
// Both come from one check of each mount, bounded by Config.ProbeTimeout.

// Reasons of an unhealthy volume (NodeGetVolumeHealth's CamelCase reason; VolumeCondition has only the message).
const (
	ReasonServerGone          = "FuseServerGone"          // statfs answers ENOTCONN: the FUSE server is gone
	ReasonServerNotResponding = "FuseServerNotResponding" // no answer within the probe timeout: alive but stuck
	ReasonNotFUSE             = "NotFuseMount"            // something other than a FUSE filesystem is mounted there
	ReasonNotMounted          = "NotMounted"              // nothing is mounted where the records say the volume is
)

// problem is why a mount of a volume is not usable.
type problem struct{ reason, message string }

// checkMount runs one bounded statfs on the mount of volume id at path. A mount that is dead, stuck or not FUSE is
// a problem, not an error; the error is for anything else.
func (d *Driver) checkMount(id, path string) (unix.Statfs_t, *problem, error) {
	st, err := d.prober.Statfs(path)
	switch {
	case err == nil && st.Type == mounts.FUSESuperMagic:
		return st, nil, nil
	case err == nil:
		return st, &problem{ReasonNotFUSE, fmt.Sprintf("%s is not a FUSE mount (f_type %#x)", path, st.Type)}, nil
	case errors.Is(err, mounts.ErrTimeout):
		return st, &problem{ReasonServerNotResponding, fmt.Sprintf("FUSE server of volume %s is not responding: %v", id, err)}, nil
	case mounts.IsDead(err):
		return st, &problem{ReasonServerGone, fmt.Sprintf("FUSE mount of volume %s is not answering: %v", id, err)}, nil
	}
	return st, nil, status.Errorf(codes.Internal, "%v", err)
}

// volumeStats reports the usage of the mount at path and its condition, written on the wire as spec ≤ v1.12's
// VolumeCondition for kubelet ≤ v1.36. A mount whose server is gone or stuck is an abnormal condition, not an
// error: kubelet turns it into an event on the pod.
func (d *Driver) volumeStats(id, path string) (*csi.NodeGetVolumeStatsResponse, error) {
	st, p, err := d.checkMount(id, path)
	if err != nil {
		return nil, err
	}
	resp := &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES}, {Unit: csi.VolumeUsage_INODES}}}
	cond := volumecondition.Condition{Message: "FUSE mount answers"}
	if p != nil {
		cond = volumecondition.Condition{Abnormal: true, Message: p.message}
	} else {
		bs := int64(st.Bsize)
		resp.Usage = []*csi.VolumeUsage{
			{Unit: csi.VolumeUsage_BYTES, Total: int64(st.Blocks) * bs, Available: int64(st.Bavail) * bs, Used: int64(st.Blocks-st.Bfree) * bs},
			{Unit: csi.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: int64(st.Files - st.Ffree)},
		}
	}
	volumecondition.Set(resp, cond)
	return resp, nil
}

// NodeGetVolumeHealth checks the volume's staging mount and its target: the one kubelet names in
// volume_publish_path if the records give it to this volume (another path is not touched), or all its targets
// when none is named (csi-sanity asks so). kubelet's staging_target_path is not needed: the records have it.
// Each problem reason is reported once (the spec forbids repeating a status and reason), with the first
// message and how many more paths have it. A volume the plugin has no record of is NotFound. During the restore
// at start-up the answer is Unavailable: the mounts are dead until it repairs them, and kubelet keeps the
// conditions it had on an error (volumehealth/manager.go) instead of reporting that passing state.
func (n nodeServer) NodeGetVolumeHealth(_ context.Context, req *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	id := req.GetVolumeId()
	if err := validateVolumeID(id); err != nil {
		return nil, err
	}
	if !n.d.Ready() {
		return nil, status.Error(codes.Unavailable, "the plugin is still restoring its mounts; retry later")
	}
	v, ok := n.d.lookup(id)
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %q is neither staged nor published on this node", id)
	}
	paths := []string{v.stagingPath}
	if !n.d.place.stagingMounted() {
		paths = nil // only the targets are FUSE mounts
	}
	if p := req.GetVolumePublishPath(); p != "" {
		if err := validatePath("volume_publish_path", p); err != nil {
			return nil, err
		}
		if !n.d.hasPath(id, p) {
			if r, err := n.d.resolveParent("volume_publish_path", p); err == nil && n.d.hasPath(id, r) {
				p = r
			} else {
				p = ""
			}
		}
		if p != "" && p != v.stagingPath {
			paths = append(paths, p)
		}
	} else {
		targets := make([]string, 0, len(v.targets))
		for t := range v.targets {
			targets = append(targets, t)
		}
		slices.Sort(targets)
		paths = append(paths, targets...)
	}
	problems, err := n.d.checkPaths(id, paths)
	if err != nil {
		return nil, err
	}
	return &csi.NodeGetVolumeHealthResponse{VolumeHealth: &csi.VolumeHealth{VolumeId: id, HealthStatuses: healthEntries(problems)}}, nil
}

// checkPaths checks the mounts of volume id at paths in parallel (a stuck server costs one probe timeout, not
// one per path) and returns their problems in the order of paths.
func (d *Driver) checkPaths(id string, paths []string) ([]*problem, error) {
	problems := make([]*problem, len(paths))
	errs := make([]error, len(paths))
	var wg sync.WaitGroup
	for i, p := range paths {
		wg.Go(func() {
			layers, err := mounts.CountMounts(p)
			switch {
			case err != nil:
				errs[i] = status.Errorf(codes.Internal, "%v", err)
			case layers == 0:
				problems[i] = &problem{ReasonNotMounted, fmt.Sprintf("nothing is mounted at %s, where volume %s should be", clip(p), id)}
			default:
				_, problems[i], errs[i] = d.checkMount(id, p)
			}
		})
	}
	wg.Wait()
	return problems, errors.Join(errs...)
}

// healthEntries turns problems into spec v1.13 health entries: INACCESSIBLE (the pod cannot read the volume
// through that mount), folded to one per reason and at most volumecondition.MaxEntries (what kubelet can store).
func healthEntries(problems []*problem) []*csi.VolumeHealth_VolumeHealthEntry {
	var entries []*csi.VolumeHealth_VolumeHealthEntry
	for _, p := range problems {
		if p != nil {
			entries = append(entries, &csi.VolumeHealth_VolumeHealthEntry{Status: csi.VolumeHealthErrorType_INACCESSIBLE, Reason: p.reason, Message: p.message})
		}
	}
	return volumecondition.Fold(entries, "of the volume's mounts",
		func(e *csi.VolumeHealth_VolumeHealthEntry) string { return e.Status.String() + "/" + e.Reason },
		func(e *csi.VolumeHealth_VolumeHealthEntry) *string { return &e.Message })
}

// fuseDevice is where FUSE servers get their connection to the kernel.
const fuseDevice = "/dev/fuse"

// NodeGetStorageHealth reports what affects every volume on this node: no /dev/fuse (no FUSE server can start:
// STORAGE_UNREACHABLE), and a restore of recorded mounts still running (STORAGE_DEGRADED: node calls answer
// Unavailable until it ends). None of this can reach a FUSE server.
func (n nodeServer) NodeGetStorageHealth(context.Context, *csi.NodeGetStorageHealthRequest) (*csi.NodeGetStorageHealthResponse, error) {
	fi, err := os.Stat(fuseDevice)
	return &csi.NodeGetStorageHealthResponse{BackendHealth: storageEntries(fi, err, n.d.Ready())}, nil
}

// storageEntries are the node's conditions given what stat of /dev/fuse returned and whether the plugin is
// ready, folded like a volume's.
func storageEntries(fuseDev os.FileInfo, statErr error, ready bool) []*csi.NodeGetStorageHealthResponse_StorageBackendHealth {
	var out []*csi.NodeGetStorageHealthResponse_StorageBackendHealth
	if statErr != nil || fuseDev.Mode()&os.ModeCharDevice == 0 {
		msg := fmt.Sprintf("%s is not a character device", fuseDevice)
		if statErr != nil {
			msg = statErr.Error()
		}
		out = append(out, &csi.NodeGetStorageHealthResponse_StorageBackendHealth{Status: csi.StorageHealthErrorType_STORAGE_UNREACHABLE, Reason: "NoFuseDevice", Message: "no FUSE server can start: " + msg})
	}
	if !ready {
		out = append(out, &csi.NodeGetStorageHealthResponse_StorageBackendHealth{Status: csi.StorageHealthErrorType_STORAGE_DEGRADED, Reason: "RestoringMounts", Message: "the plugin is restoring its recorded mounts; node calls answer Unavailable until it is done"})
	}
	return volumecondition.Fold(out, "of the node's checks",
		func(e *csi.NodeGetStorageHealthResponse_StorageBackendHealth) string {
			return e.Status.String() + "/" + e.Reason
		},
		func(e *csi.NodeGetStorageHealthResponse_StorageBackendHealth) *string { return &e.Message })
}
