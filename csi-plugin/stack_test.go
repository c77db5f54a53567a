package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/fusemode"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/internal/plugintest"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse/dummyfs"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// container is a process in a mount namespace of its own that bind-mounts a pod's volume directory at a path of
// its own with HostToContainer propagation (rslave), as a container runtime does for a volumeMount with
// mountPropagation: HostToContainer. Reading below /proc/<pid>/root walks its mount table.
type container struct {
	*testenv.Proc
	path string // where the volume is, in the container's mount table
}

func (e *env) startContainer(volumeDir, path string) *container {
	t := e.t
	t.Helper()
	if _, err := exec.LookPath("unshare"); err != nil {
		testenv.SkipOrFail(t, "unshare(1) is needed to give the container a mount namespace: "+err.Error())
	}
	if err := os.MkdirAll(path, 0o750); err != nil {
		t.Fatal(err)
	}
	// --propagation slave: everything the new namespace copies is a slave of the host's mounts, so the bind below
	// is a slave of the volume directory's mount, receiving what the host mounts on it and sending nothing back.
	// Its mounts go with its namespace when the Lab kills it.
	c := &container{Proc: e.lab.Start("container", exec.Command("unshare", "--mount", "--propagation", "slave", "--", "sh", "-c",
		`mount --bind "$0" "$1" && exec sleep 600`, volumeDir, path)), path: path}
	testenv.Eventually(t, 10*time.Second, "the container to bind-mount the volume", func() bool { return c.layers(t) > 0 })
	return c
}

// layers counts the mounts stacked on the container's volume path, from its own mount table.
func (c *container) layers(t testing.TB) int {
	t.Helper()
	infos, err := mounts.MountsAtIn(c.PID(), c.path)
	if err != nil {
		t.Fatal(err)
	}
	return len(infos)
}

// read opens the volume's file anew inside the container.
func (c *container) read() (string, error) {
	b, err := os.ReadFile(filepath.Join(fmt.Sprintf("/proc/%d/root", c.PID()), c.path, fusemode.ServedFile))
	return string(b), err
}

// TestStackStaysBounded: with the "stack" strategy, repeated kill -9 and restores of the plugin keep a bounded
// number of mounts on a target (the original one and one live bind on top; the dead binds of earlier restores
// are detached), a running HostToContainer container reads the volume again after every restore, and the first
// unpublish then succeeds.
func TestStackStaysBounded(t *testing.T) {
	e := newEnv(t, unix.MS_SHARED) // kubelet's pods directory is shared on a real node
	const vol, pod, crashes = "vol-s", "pod-1", 4
	p := e.start("--restore-strategy=stack")
	e.stagePublish(p, vol, pod)
	target := e.targetPath(vol, pod)
	c := e.startContainer(target, filepath.Join(e.root, "container", "data"))
	if got, err := c.read(); err != nil || got != dummyfs.Content {
		t.Fatalf("container read before any crash: %q, %v", got, err)
	}
	for i := 1; i <= crashes; i++ {
		p.kill9(p.Children())
		plugintest.WaitDead(t, target)
		if _, err := c.read(); err == nil {
			t.Fatalf("crash %d: the container still reads a dead volume", i)
		}
		p = e.start("--restore-mounts", "--restore-strategy=stack")
		plugintest.MustRead(t, target)
		if n, _ := mounts.CountMounts(target); n != 2 {
			t.Errorf("crash %d: %d mounts on the target after the restore, want 2 (the dead original, the live bind)", i, n)
		}
		if got, err := c.read(); err != nil || got != dummyfs.Content {
			t.Errorf("crash %d: container read after the restore: %q, %v", i, got, err)
		}
		if n := c.layers(t); n > 2 {
			t.Errorf("crash %d: %d mounts on the container's volume path, want at most 2", i, n)
		}
	}
	e.teardown(p, vol, pod)
	if n, _ := mounts.CountMounts(target); n != 0 {
		t.Errorf("%d mounts left on the target after unpublish", n)
	}
}
