// Package plugintest is what the CSI plugin's tests share: kubelet's directory layout under a test's root, the
// requests kubelet sends, and checks of a dummy-fuse mount. The in-process driver tests (csi-plugin/driver) and
// the process tests (csi-plugin) both use it.
package plugintest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/fusemode"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse/dummyfs"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/kubeletpath"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// ShortDir returns a new directory with a short path, removed after the test: a unix socket path is limited to
// 107 bytes, and t.TempDir paths carry the test's name. Cleanups registered later run before its removal.
func ShortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dfc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// Kubelet is kubelet's layout of CSI volumes (internal/kubeletpath) with Root as kubelet's root directory.
type Kubelet struct {
	Root, Driver string
}

// Staging is the staging path kubelet passes to NodeStageVolume for vol.
func (k Kubelet) Staging(vol string) string { return kubeletpath.Staging(k.Root, k.Driver, vol) }

// Target is the target path kubelet passes to NodePublishVolume for vol in the pod with UID pod; the pod's
// volume (the PV) is named "pv-<vol>".
func (k Kubelet) Target(vol, pod string) string { return kubeletpath.Target(k.Root, pod, "pv-"+vol) }

// MountCap is a filesystem volume capability with access mode m.
func MountCap(m csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: m},
	}
}

// EphemeralID returns a volume ID shaped like the ones kubelet makes for inline ephemeral volumes: "csi-" and a
// sha256 in hex (kubelet hashes the pod UID and the volume's name: makeVolumeHandle in pkg/volume/csi of
// k8s.io/kubernetes); here the sha256 of name.
func EphemeralID(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "csi-" + hex.EncodeToString(sum[:])
}

// EphemeralContext is the volume context kubelet sends for an inline ephemeral volume of pod (with
// podInfoOnMount), which kubelet publishes without staging it first.
func EphemeralContext(pod string) map[string]string {
	return map[string]string{"csi.storage.k8s.io/ephemeral": "true", "csi.storage.k8s.io/pod.name": pod}
}

// MustRead fails the test unless dir/dummy-file.txt reads what dummy-fuse serves.
func MustRead(t testing.TB, dir string) {
	t.Helper()
	b, err := testenv.ReadFile(t, filepath.Join(dir, fusemode.ServedFile), readWithin)
	if err != nil || string(b) != dummyfs.Content {
		t.Fatalf("reading %s: %q, %v; want %q", dir, b, err, dummyfs.Content)
	}
}

// WaitDead waits until reading dir/dummy-file.txt fails with ENOTCONN: the kernel may answer from its caches for
// up to the attribute timeout after the server died.
func WaitDead(t testing.TB, dir string) {
	t.Helper()
	var err error
	testenv.Eventually(t, 10*time.Second, "ENOTCONN reading "+dir, func() bool {
		_, err = testenv.ReadFile(t, filepath.Join(dir, fusemode.ServedFile), readWithin)
		return errors.Is(err, syscall.ENOTCONN)
	})
}

// readWithin bounds one read of a mount: a dead server answers ENOTCONN at once, a live one in milliseconds.
const readWithin = 30 * time.Second
