// Package podcgroup tells which pod a process belongs to from the cgroups the kernel reports for it, and makes
// such cgroups for the local model of kubelet. kubelet puts every container of a pod below the pod's cgroup,
// named pod<UID> by its cgroupfs driver and kubepods[-<QoS>]-pod<UID with "_" for "-">.slice by its systemd
// driver (GetPodCgroupNameSuffix in pkg/kubelet/cm/pod_container_manager_linux.go, the conversion in
// cgroup_manager_linux.go). A container cannot move itself into another pod's cgroup: the runtime mounts the
// cgroup file system read-only in it.
package podcgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// In says whether the cgroup membership cgroups (the text of /proc/<pid>/cgroup) puts the process in the pod
// with UID podUID, in any hierarchy.
func In(cgroups []byte, podUID string) bool {
	if podUID == "" || strings.ContainsAny(podUID, "/\n") {
		return false
	}
	cgroupfs := "pod" + podUID
	systemd := "-pod" + strings.ReplaceAll(podUID, "-", "_") + ".slice"
	sc := bufio.NewScanner(bytes.NewReader(cgroups))
	for sc.Scan() {
		// hierarchy-ID:controllers:path; the path may itself hold ':'.
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) != 3 {
			continue
		}
		for _, c := range strings.Split(f[2], "/") {
			if c == cgroupfs || strings.HasSuffix(c, systemd) && strings.HasPrefix(c, "kubepods") {
				return true
			}
		}
	}
	return false
}

// Cgroup is a container's cgroup made as kubelet's cgroupfs driver names it, below dfc-kubepods/ of the
// unified (v2) hierarchy, for the local model: a process started into it (FD, clone3's CLONE_INTO_CGROUP)
// belongs to the pod for In.
type Cgroup struct {
	dir, pod string
	fd       int
}

// PodDir is the directory of the pod's cgroup, the parent of its containers' (Create).
func PodDir(podUID string) (string, error) {
	root, err := unified()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "dfc-kubepods", "pod"+podUID), nil
}

// Create makes the cgroup of container (a name of the caller's) in the pod with UID podUID.
func Create(podUID, container string) (*Cgroup, error) {
	pod, err := PodDir(podUID)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(pod, container)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("making the container's cgroup: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("opening the container's cgroup: %w", err)
	}
	return &Cgroup{dir: dir, pod: pod, fd: fd}, nil
}

// FD is the cgroup's directory descriptor for syscall.SysProcAttr.CgroupFD.
func (c *Cgroup) FD() int { return c.fd }

// Remove closes the descriptor and removes the cgroup, and the pod's when it is empty, once every process in
// it has exited (waiting at most wait).
func (c *Cgroup) Remove(wait time.Duration) error {
	_ = unix.Close(c.fd)
	deadline := time.Now().Add(wait)
	for {
		err := unix.Rmdir(c.dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			break
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("removing cgroup %s: %w", c.dir, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := unix.Rmdir(c.pod); err != nil && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("removing cgroup %s: %w", c.pod, err)
	}
	return nil
}

// unified is where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified on hybrid hosts).
func unified() (string, error) {
	ms, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup2"))
	if err != nil {
		return "", fmt.Errorf("reading the mount table: %w", err)
	}
	if len(ms) == 0 {
		return "", errors.New("no cgroup v2 hierarchy is mounted: the local model puts each container in its pod's cgroup there")
	}
	return ms[0].Mountpoint, nil
}
