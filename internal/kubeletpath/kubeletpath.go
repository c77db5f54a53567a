// Package kubeletpath is kubelet's on-disk layout of CSI volumes, defined once for the scenario backends and
// the plugin's tests. The layout is kubelet's, not ours: pkg/volume/csi/csi_attacher.go (makeDeviceMountPath),
// pkg/volume/csi/csi_mounter.go (GetPath) and pkg/volume/util/subpath/subpath_linux.go (getSubpathBindTarget)
// in k8s.io/kubernetes.
package kubeletpath

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// DefaultRoot is kubelet's --root-dir default.
const DefaultRoot = "/var/lib/kubelet"

// Staging is the staging dir kubelet passes to NodeStageVolume: <root>/plugins/kubernetes.io/csi/<driver>/
// <sha256 of the volume handle>/globalmount (the hashed form is used since Kubernetes 1.28).
func Staging(root, driver, volumeHandle string) string {
	sum := sha256.Sum256([]byte(volumeHandle))
	return filepath.Join(root, "plugins", "kubernetes.io", "csi", driver, hex.EncodeToString(sum[:]), "globalmount")
}

// PodDir is the directory kubelet keeps for a pod.
func PodDir(root, podUID string) string { return filepath.Join(root, "pods", podUID) }

// CSIVolumes is the directory of a pod's CSI volumes: one directory per volume, named after its spec name, holding
// the publish target (mount) and kubelet's record of the volume (VolumeDataFile).
func CSIVolumes(root, podUID string) string {
	return filepath.Join(PodDir(root, podUID), "volumes", "kubernetes.io~csi")
}

// VolumeDataFile is the name of kubelet's record of a CSI volume, beside its publish target.
const VolumeDataFile = "vol_data.json"

// VolumeData is kubelet's record of a pod's CSI volume, written before NodePublishVolume (csiMountMgr.SetUpAt in
// pkg/volume/csi/csi_mounter.go) and read back to reconstruct the volume after a kubelet restart
// (csiPlugin.ConstructVolumeSpec in csi_plugin.go): it names the driver that mounted the target.
type VolumeData struct {
	Driver       string `json:"driverName"`
	VolumeHandle string `json:"volumeHandle"`
	SpecName     string `json:"specVolID"`
	// LifecycleMode is "Persistent" or "Ephemeral" (an inline volume).
	LifecycleMode string `json:"volumeLifecycleMode"`
}

// maxVolumeData bounds what ReadVolumeData reads: kubelet's record is a few hundred bytes.
const maxVolumeData = 64 << 10

// ReadVolumeData reads kubelet's record of the CSI volume spec name of pod podUID.
func ReadVolumeData(root, podUID, specName string) (VolumeData, error) {
	var d VolumeData
	name := filepath.Join(CSIVolumes(root, podUID), specName, VolumeDataFile)
	f, err := os.Open(name)
	if err != nil {
		return d, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxVolumeData+1))
	switch {
	case err != nil:
		return d, fmt.Errorf("reading %s: %w", name, err)
	case len(b) > maxVolumeData:
		return d, fmt.Errorf("%s: larger than %d bytes, not kubelet's record of a volume", name, maxVolumeData)
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("%s: %w", name, err)
	}
	if d.Driver == "" {
		return d, fmt.Errorf("%s names no driver (driverName)", name)
	}
	return d, nil
}

// Target is the publish target kubelet passes to NodePublishVolume for a pod's CSI volume: <pod dir>/volumes/
// kubernetes.io~csi/<pv name, or the pod's volume name for an inline volume>/mount.
func Target(root, podUID, specName string) string {
	return filepath.Join(CSIVolumes(root, podUID), specName, "mount")
}

// SplitTarget splits a publish target made by Target into kubelet's root directory, the pod's UID and the
// volume's spec name, for a caller that does not know kubelet's root (the plugin); ok is false for any other
// path.
func SplitTarget(target string) (root, podUID, specName string, ok bool) {
	target = filepath.Clean(target)
	volDir, mount := filepath.Split(target)
	csiDir, specName := filepath.Split(filepath.Clean(volDir))
	volumesDir, plugin := filepath.Split(filepath.Clean(csiDir))
	podDir, volumes := filepath.Split(filepath.Clean(volumesDir))
	podsDir, podUID := filepath.Split(filepath.Clean(podDir))
	root, pods := filepath.Split(filepath.Clean(podsDir))
	if mount != "mount" || plugin != "kubernetes.io~csi" || volumes != "volumes" || pods != "pods" ||
		specName == "" || podUID == "" || root == "" || !filepath.IsAbs(target) {
		return "", "", "", false
	}
	return filepath.Clean(root), podUID, specName, true
}

// EmptyDirIn is where an emptyDir volume called name lives, relative to its pod's directory (PodDir):
// volumes/kubernetes.io~empty-dir/<name> (pkg/volume/emptydir/empty_dir.go, GetPath).
func EmptyDirIn(name string) string {
	return filepath.Join("volumes", "kubernetes.io~empty-dir", name)
}

// SubPaths is the directory of a pod's subPath binds, which kubelet removes (CleanSubPaths) when the pod's
// volumes are unmounted.
func SubPaths(root, podUID string) string {
	return filepath.Join(PodDir(root, podUID), "volume-subpaths")
}

// ParseTarget is the inverse of Target: the pod UID and spec name of a publish target under root, or ok false
// for any other path.
func ParseTarget(root, target string) (podUID, specName string, ok bool) {
	r, podUID, specName, ok := SplitTarget(target)
	if !ok || r != filepath.Clean(root) {
		return "", "", false
	}
	return podUID, specName, true
}

// SubPath is the bind target kubelet prepares for a container's subPath volume mount: <pod dir>/
// volume-subpaths/<pod volume name>/<container name>/<index of the volumeMount in the container>.
func SubPath(root, podUID, volumeName, container string, index int) string {
	return filepath.Join(SubPaths(root, podUID), volumeName, container, strconv.Itoa(index))
}
