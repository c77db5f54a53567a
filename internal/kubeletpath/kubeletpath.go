// Package kubeletpath is kubelet's on-disk layout of CSI volumes, defined once for the scenario backends and
// the plugin's tests. The layout is kubelet's, not ours: pkg/volume/csi/csi_attacher.go (makeDeviceMountPath),
// pkg/volume/csi/csi_mounter.go (GetPath) and pkg/volume/util/subpath/subpath_linux.go (getSubpathBindTarget)
// in k8s.io/kubernetes.
package kubeletpath

import (
	"crypto/sha256"
	"encoding/hex"
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

// Target is the publish target kubelet passes to NodePublishVolume for a pod's CSI volume: <pod dir>/volumes/
// kubernetes.io~csi/<pv name, or the pod's volume name for an inline volume>/mount.
func Target(root, podUID, specName string) string {
	return filepath.Join(PodDir(root, podUID), "volumes", "kubernetes.io~csi", specName, "mount")
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
