package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	mount "k8s.io/mount-utils"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/kubeletpath"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// This file reproduces what kubelet does for a volumeMount with subPath before each container start
// (pkg/kubelet/kubelet_pods.go makeMounts → pkg/volume/util/subpath/subpath_linux.go PrepareSafeSubpath), in
// the version the backend models:
//
//  1. PathExists(<volume>/<subPath>) — an error (e.g. ENOTCONN) is only logged;
//  2. doBindSubPath: resolve symlinks of the volume dir and the subpath, open the subpath without following
//     symlinks (openat per component, O_PATH|O_NOFOLLOW), then prepareSubpathTarget on
//     <pod dir>/volume-subpaths/<volume>/<container>/<index>, with k8s.io/mount-utils — the same functions
//     kubelet calls (mount-utils' mount-point check is the same code in v0.36.3 and v0.37.2):
//     - up to v1.36 (read in v1.36.3): IsNotMountPoint; an error other than "not exist" fails the start, so a
//     dead FUSE bind (ENOTCONN) fails every start until the pod is deleted; a bind of another file is
//     unmounted (umount);
//     - since v1.37 (read in v1.37.2; kubernetes PRs #138856 and #139275): IsMountPoint; a corrupted mount
//     (IsCorruptedMnt: ENOTCONN, ESTALE, EIO, …) is unmounted (umount) and treated as absent, so the
//     subpath is bound again from the restored volume; a bind of another inode is lazily unmounted
//     (MNT_DETACH);
//     an existing bind of the same file (os.SameFile) is reused as is; else the target file/dir is created
//     and /proc/<kubelet pid>/fd/<fd> is bind-mounted onto it;
//  3. any error becomes the event `failed to prepare subPath for volumeMount "<name>" of container "<c>"`
//     (the cause only goes to kubelet's log).
//
// The bind is removed only when the volume is unmounted for the pod (CleanSubPaths), never on a container
// restart: after FUSE mount loss it stays bound to the dead connection until a start replaces it (v1.37+).

// subPath identifies one subPath mount of a container.
type subPath struct {
	root, podUID, volumeName, container string
	index                               int
	volumePath, subPath                 string
	mountName                           string // the pod's volume name, as in volumeMounts[].name
	// kubelet is the kubelet version whose prepareSubpathTarget is modelled.
	kubelet scenarios.KubeletVersion
}

func (s subPath) bindTarget() string {
	return kubeletpath.SubPath(s.root, s.podUID, s.volumeName, s.container, s.index)
}

// startError is a failed container start: Message is what kubelet's event says, Cause what its log says.
type startError struct {
	Message string
	Cause   error
}

func (e *startError) Error() string { return e.Message }
func (e *startError) Unwrap() error { return e.Cause }

// prepare returns the host path to bind into the container, or a *startError; logf receives what kubelet
// would log.
func (s subPath) prepare(logf func(string, ...any)) (string, error) {
	hostPath := filepath.Join(s.volumePath, s.subPath)
	if exists, err := mount.PathExists(hostPath); err != nil {
		logf("Could not determine if subPath exists, will not attempt to change its permissions: path=%s err=%v", hostPath, err)
	} else if !exists {
		// kubelet would create the directory (SafeMakeDir); the dummy-fuse volume is read-only and fixed.
		return "", &startError{
			Message: fmt.Sprintf("failed to create subPath directory for volumeMount %q of container %q", s.mountName, s.container),
			Cause:   fmt.Errorf("%s does not exist: %w", hostPath, fs.ErrNotExist),
		}
	}
	target, err := s.bind(hostPath, logf)
	if err != nil {
		logf("Failed to prepare subPath for volumeMount of the container: container=%s volumeMount=%s err=%v", s.container, s.mountName, err)
		return "", &startError{
			Message: fmt.Sprintf("failed to prepare subPath for volumeMount %q of container %q", s.mountName, s.container),
			Cause:   err,
		}
	}
	return target, nil
}

func (s subPath) bind(hostPath string, logf func(string, ...any)) (string, error) {
	volumePath, err := filepath.EvalSymlinks(s.volumePath)
	if err != nil {
		return "", fmt.Errorf("error resolving symlinks in %q: %w", s.volumePath, err)
	}
	path, err := filepath.EvalSymlinks(hostPath)
	if err != nil {
		return "", fmt.Errorf("error resolving symlinks in %q: %w", hostPath, err)
	}
	if !mount.PathWithinBase(path, volumePath) {
		return "", fmt.Errorf("subpath %q not within volume path %q", path, volumePath)
	}
	fd, err := openNoFollow(path, volumePath)
	if err != nil {
		return "", fmt.Errorf("error opening subpath %v: %w", path, err)
	}
	defer unix.Close(fd)

	prepare := prepareTargetV136
	if s.kubelet.AtLeast(subPathFixed) {
		prepare = prepareTargetV137
	}
	target := s.bindTarget()
	mounted, err := prepare(mount.New(""), path, target, logf)
	if err != nil {
		return "", err
	}
	if mounted {
		return target, nil // kubelet: "Skipping bind-mounting subpath: already mounted"
	}
	src := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), fd)
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return "", fmt.Errorf("error mounting %s: %w", path, err)
	}
	logf("Bound SubPath %s into %s", path, target)
	return target, nil
}

// subPathFixed is the first kubelet version whose prepareSubpathTarget recovers from a corrupted bind.
var subPathFixed = scenarios.MustKubeletVersion(scenarios.SubPathFixedIn)

// prepareTargetV136 is prepareSubpathTarget of kubelet v1.36 (v1.33.13, whose outcome was measured, behaves
// the same): it reports whether target already holds a bind of path, else creates target for the bind. The
// error texts are kubelet's, typo included.
func prepareTargetV136(mounter mount.Interface, path, target string, _ func(string, ...any)) (bool, error) {
	//lint:ignore SA1019 kubelet up to v1.36 calls exactly this function here; behaving like kubelet is the point
	notMount, err := mount.IsNotMountPoint(mounter, target)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("error checking path %s for mount: %w", target, err)
		}
		notMount = true
	}
	if !notMount {
		same, err := sameFile(path, target)
		if err != nil {
			return false, fmt.Errorf("error checking subpath mount info for %s: %w", target, err)
		}
		if same {
			return true, nil
		}
		if err := mounter.Unmount(target); err != nil {
			return false, fmt.Errorf("error ummounting %s: %w", target, err)
		}
	}
	return false, createTarget(path, target)
}

// prepareTargetV137 is prepareSubpathTarget of kubelet v1.37: a corrupted bind is unmounted and made again,
// a bind of another inode is lazily unmounted and made again.
func prepareTargetV137(mounter mount.Interface, path, target string, logf func(string, ...any)) (bool, error) {
	isMount, err := mounter.IsMountPoint(target)
	if err != nil {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			isMount = false
		case mount.IsCorruptedMnt(err):
			logf("Detected corrupted mount at %s (error: %v), unmounting", target, err)
			if uerr := mounter.Unmount(target); uerr != nil {
				return false, fmt.Errorf("error unmounting corrupted mount %s: %w", target, uerr)
			}
			isMount = false
		default:
			return false, fmt.Errorf("error checking path %s for mount: %w", target, err)
		}
	}
	if isMount {
		same, err := sameFile(path, target)
		if err != nil {
			return false, fmt.Errorf("error checking subpath mount info for %s: %w", target, err)
		}
		if same {
			return true, nil
		}
		logf("Subpath bind mount at %s points to a different inode/device than source, will lazy-unmount and recreate", target)
		if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
			return false, fmt.Errorf("error lazy-unmounting stale subpath mount %s: %w", target, err)
		}
	}
	return false, createTarget(path, target)
}

// createTarget creates the bind target as kubelet does: a directory for a directory, an empty file for anything
// else.
func createTarget(path, target string) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return fmt.Errorf("error creating directory %s: %w", filepath.Dir(target), err)
	}
	st, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("lstat %s failed: %w", path, err)
	}
	if st.IsDir() {
		if err := os.Mkdir(target, 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("error creating directory %s: %w", target, err)
		}
	} else if err := os.WriteFile(target, nil, 0o640); err != nil {
		return fmt.Errorf("error creating file %s: %w", target, err)
	}
	return nil
}

// openNoFollow opens path below base one component at a time without following symlinks and returns an
// O_PATH fd, so that the bind source cannot be redirected out of the volume.
func openNoFollow(path, base string) (int, error) {
	rel, err := filepath.Rel(base, path)
	if err != nil {
		return -1, err
	}
	fd, err := unix.Open(base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("cannot open directory %s: %w", base, err)
	}
	if rel == "." {
		return fd, nil
	}
	cur := base
	for _, seg := range strings.Split(rel, "/") {
		cur = filepath.Join(cur, seg)
		child, err := unix.Openat(fd, seg, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("cannot open %s: %w", cur, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(child, &st); err != nil {
			unix.Close(child)
			return -1, fmt.Errorf("error running fstat on %s: %w", cur, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			unix.Close(child)
			return -1, fmt.Errorf("unexpected symlink found %s", cur)
		}
		fd = child
	}
	return fd, nil
}

func sameFile(a, b string) (bool, error) {
	sa, err := os.Lstat(a)
	if err != nil {
		return false, fmt.Errorf("stat %s failed: %w", a, err)
	}
	sb, err := os.Lstat(b)
	if err != nil {
		return false, fmt.Errorf("lstat %s failed: %w", b, err)
	}
	return os.SameFile(sa, sb), nil
}
