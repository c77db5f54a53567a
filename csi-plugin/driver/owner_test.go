package driver

// Tests of what the plugin refuses: paths it does not own, paths it must not mount on, and repeated calls that
// do not match what it recorded.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/internal/plugintest"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// snapshot says what a path is (type, permissions, device number, size, mounts on it), so that a test can tell
// that it was not touched.
func snapshot(t *testing.T, p string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return "missing: " + err.Error()
	}
	n, _ := mounts.CountMounts(p)
	return fmt.Sprintf("mode %o, dev %d, size %d, %d mounts", st.Mode, st.Rdev, st.Size, n)
}

func wantOneOf(t *testing.T, what string, err error, codes ...codes.Code) {
	t.Helper()
	for _, c := range codes {
		if status.Code(err) == c {
			return
		}
	}
	t.Errorf("%s: %v; want one of %v", what, err, codes)
}

// TestOwnership: undoing calls act only on what the records give the volume, and doing calls never adopt
// another volume's mount. Whatever the request, a file, an empty directory, a device node and a foreign tmpfs
// stay as they were, and the volume that is there keeps answering.
func TestOwnership(t *testing.T) {
	testenv.RequireFUSE(t)
	h := newHarness(t, true, nil)
	const base = "base"
	if err := h.stage(base); err != nil {
		t.Fatal(err)
	}
	if err := h.publish(base, "pod", false); err != nil {
		t.Fatal(err)
	}
	staging, target := h.stagingPath(base), h.targetPath(base, "pod")

	foreign := filepath.Join(h.root, "foreign")
	file, empty, tmpfs, null := filepath.Join(foreign, "file"), filepath.Join(foreign, "empty"), filepath.Join(foreign, "tmpfs"), filepath.Join(foreign, "null")
	for _, d := range []string{empty, tmpfs} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(file, []byte("host data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(null, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil { // like /dev/null
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", tmpfs, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mounts.UnmountLazy(tmpfs) })
	before := map[string]string{}
	for _, p := range []string{file, empty, tmpfs, null, staging, target} {
		before[p] = snapshot(t, p)
	}
	records := func() string {
		stages, pubs, errs := mustStore(t, h).Load()
		b, _ := json.Marshal([]any{stages, pubs, errs})
		return string(b)
	}
	recordsBefore := records()

	ctx := context.Background()
	for _, p := range []string{file, empty, tmpfs, null, staging, target} {
		for _, vol := range []string{base, "other"} {
			if vol == base && p == target {
				continue // the one call that is the volume's own
			}
			_, err := h.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: p})
			wantOneOf(t, "NodeUnpublishVolume("+vol+", "+p+")", err, codes.OK, codes.NotFound)
			if vol == base && p == staging {
				continue
			}
			_, err = h.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: vol, StagingTargetPath: p})
			wantOneOf(t, "NodeUnstageVolume("+vol+", "+p+")", err, codes.OK, codes.NotFound)
		}
	}
	// A mount that is there and is not the volume's is reported, not silently accepted.
	_, err := h.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "other", TargetPath: target})
	wantCode(t, err, codes.NotFound)
	_, err = h.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "other", StagingTargetPath: tmpfs})
	wantCode(t, err, codes.NotFound)

	// No adoption: staging an unknown volume on another volume's live mount or on a foreign mount is refused.
	_, err = h.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "intruder", StagingTargetPath: staging, VolumeCapability: mountCap()})
	wantCode(t, err, codes.AlreadyExists)
	_, err = h.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "intruder", StagingTargetPath: tmpfs, VolumeCapability: mountCap()})
	wantCode(t, err, codes.FailedPrecondition)
	// No publish of a volume that was never staged, even from a staging path that answers.
	newTarget := filepath.Join(h.root, "pods", "intruder", "mount")
	_, err = h.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "intruder", StagingTargetPath: staging, TargetPath: newTarget, VolumeCapability: mountCap()})
	wantCode(t, err, codes.FailedPrecondition)
	// Nor of a known volume onto another volume's target.
	if err := h.stage("second"); err != nil {
		t.Fatal(err)
	}
	_, err = h.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "second", StagingTargetPath: h.stagingPath("second"), TargetPath: target, VolumeCapability: mountCap()})
	wantCode(t, err, codes.AlreadyExists)
	if err := h.unstage("second"); err != nil {
		t.Fatal(err)
	}

	for p, was := range before {
		if now := snapshot(t, p); now != was {
			t.Errorf("%s changed: %s, was %s", p, now, was)
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "host data" {
		t.Errorf("file: %q, %v", b, err)
	}
	if _, err := os.Lstat(newTarget); !os.IsNotExist(err) {
		t.Errorf("refused publish created %s: %v", newTarget, err)
	}
	if n := len(h.mode.started()); n != 2 {
		t.Errorf("%d FUSE servers started, want 2 (base and second)", n)
	}
	plugintest.MustRead(t, staging)
	plugintest.MustRead(t, target)
	if now := records(); now != recordsBefore {
		t.Errorf("records changed:\n%s\nwas\n%s", now, recordsBefore)
	}

	// The volume's own calls still work, and remove only what the plugin created: the target directory (kubelet
	// creates only its parent), not the staging directory (the test created it, as kubelet does).
	if err := h.unpublish(base, "pod"); err != nil {
		t.Fatal(err)
	}
	if err := h.unstage(base); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("target directory the plugin created is left: %v", err)
	}
	if _, err := os.Lstat(staging); err != nil {
		t.Errorf("staging directory the plugin did not create was removed: %v", err)
	}
}

// TestSpecIdempotency: repeated calls are OK only when they ask for what was done; undefined access modes,
// over-long paths and NUL are invalid; a publish without stage is a failed precondition; stats of a path the
// plugin does not know are NotFound, whatever is mounted there.
func TestSpecIdempotency(t *testing.T) {
	testenv.RequireFUSE(t)
	h := newHarness(t, true, nil)
	ctx := context.Background()
	const vol = "vol-spec"
	capWith := func(mode csi.VolumeCapability_AccessMode_Mode, fsType string, flags ...string) *csi.VolumeCapability {
		return &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fsType, MountFlags: flags}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
		}
	}
	stage := func(c *csi.VolumeCapability) error {
		_, err := h.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: vol, StagingTargetPath: h.stagingPath(vol), VolumeCapability: c})
		return err
	}
	publish := func(c *csi.VolumeCapability, readOnly bool) error {
		_, err := h.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: vol, StagingTargetPath: h.stagingPath(vol), TargetPath: h.targetPath(vol, "pod"), VolumeCapability: c, Readonly: readOnly})
		return err
	}
	if err := os.MkdirAll(h.stagingPath(vol), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(h.targetPath(vol, "pod")), 0o750); err != nil {
		t.Fatal(err)
	}
	// Publish before stage.
	wantCode(t, publish(mountCap(), false), codes.FailedPrecondition)
	for _, mode := range []csi.VolumeCapability_AccessMode_Mode{99, -1} {
		wantCode(t, stage(capWith(mode, "")), codes.InvalidArgument)
	}
	good := capWith(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "", "noatime")
	if err := stage(good); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*csi.VolumeCapability{
		"access mode": capWith(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, "", "noatime"),
		"fs type":     capWith(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "ext4", "noatime"),
		"mount flags": capWith(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, ""),
	} {
		if err := stage(c); status.Code(err) != codes.AlreadyExists {
			t.Errorf("re-stage with another %s: %v, want AlreadyExists", name, err)
		}
	}
	if err := stage(good); err != nil {
		t.Fatalf("re-stage with the same capability: %v", err)
	}
	for _, mode := range []csi.VolumeCapability_AccessMode_Mode{99, -1} {
		wantCode(t, publish(capWith(mode, ""), false), codes.InvalidArgument)
	}
	if err := publish(good, false); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*csi.VolumeCapability{
		"access mode": capWith(csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, "", "noatime"),
		"mount flags": capWith(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "", "noatime", "nodev"),
	} {
		if err := publish(c, false); status.Code(err) != codes.AlreadyExists {
			t.Errorf("re-publish with another %s: %v, want AlreadyExists", name, err)
		}
	}
	wantCode(t, publish(good, true), codes.AlreadyExists)
	// A restarted plugin remembers the capabilities from its records.
	h.shutdown()
	h.start()
	wantCode(t, stage(capWith(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, "", "noatime")), codes.AlreadyExists)
	wantCode(t, publish(capWith(csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, "", "noatime"), false), codes.AlreadyExists)
	if err := stage(good); err != nil {
		t.Fatal(err)
	}
	if err := publish(good, false); err != nil {
		t.Fatal(err)
	}
	if n := len(h.mode.started()); n != 1 {
		t.Errorf("%d FUSE servers started, want 1", n)
	}

	// Stats: only the volume's own paths; "/" and /proc are mount points, but not this volume.
	for _, p := range []string{"/", "/proc", h.root, h.targetPath(vol, "other-pod")} {
		_, err := h.stats(vol, p)
		wantCode(t, err, codes.NotFound)
		_, err = h.stats("unknown", p)
		wantCode(t, err, codes.NotFound)
	}
	_, err := h.stats("unknown", h.targetPath(vol, "pod"))
	wantCode(t, err, codes.NotFound)

	long := "/" + strings.Repeat("a/", 2100)
	long = long[:len(long)-1]
	for _, bad := range []string{long, "/" + strings.Repeat("n", 256), "/with\x00nul"} {
		for _, req := range []any{
			&csi.NodeStageVolumeRequest{VolumeId: vol, StagingTargetPath: bad, VolumeCapability: mountCap()},
			&csi.NodePublishVolumeRequest{VolumeId: vol, StagingTargetPath: h.stagingPath(vol), TargetPath: bad, VolumeCapability: mountCap()},
			&csi.NodePublishVolumeRequest{VolumeId: vol, StagingTargetPath: bad, TargetPath: h.targetPath(vol, "x"), VolumeCapability: mountCap()},
			&csi.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: bad},
			&csi.NodeUnstageVolumeRequest{VolumeId: vol, StagingTargetPath: bad},
			&csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: bad},
		} {
			if err := h.call(req); status.Code(err) != codes.InvalidArgument || len(status.Convert(err).Message()) > 1024 {
				t.Errorf("%T with a path of %d bytes: %.200v; want a short InvalidArgument", req, len(bad), err)
			}
		}
	}
	plugintest.MustRead(t, h.targetPath(vol, "pod"))
}

// TestUnsafePathsAreRefused: a symlink as target or staging path (even one to "/"), a non-empty target
// directory, paths in or above the plugin's own directories and paths nested in another volume's mount are
// refused, and nothing is mounted anywhere; a symlink among the parent directories is resolved, and the mount
// lands (and is recorded) where it points.
func TestUnsafePathsAreRefused(t *testing.T) {
	testenv.RequireFUSE(t)
	h := newHarness(t, true, nil)
	const vol = "vol-paths"
	if err := h.stage(vol); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	publishTo := func(target string) error {
		_, err := h.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: vol, StagingTargetPath: h.stagingPath(vol), TargetPath: target, VolumeCapability: mountCap()})
		return err
	}
	rootMounts, _ := mounts.CountMounts("/")

	links := filepath.Join(h.root, "links")
	if err := os.MkdirAll(links, 0o750); err != nil {
		t.Fatal(err)
	}
	toRoot, toDir := filepath.Join(links, "to-root"), filepath.Join(links, "to-dir")
	realDir := filepath.Join(h.root, "real")
	if err := os.MkdirAll(realDir, 0o750); err != nil {
		t.Fatal(err)
	}
	for link, dest := range map[string]string{toRoot: "/", toDir: realDir} {
		if err := os.Symlink(dest, link); err != nil {
			t.Fatal(err)
		}
	}
	for _, link := range []string{toRoot, toDir} {
		for i := 0; i < 2; i++ { // repeated: nothing may stack
			wantCode(t, publishTo(link), codes.InvalidArgument)
			_, err := h.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "vol-link", StagingTargetPath: link, VolumeCapability: mountCap()})
			wantCode(t, err, codes.InvalidArgument)
		}
	}
	if n, _ := mounts.CountMounts("/"); n != rootMounts {
		t.Errorf("%d mounts on / after refused publishes, want %d", n, rootMounts)
	}
	if n, _ := mounts.CountMounts(realDir); n != 0 {
		t.Errorf("%d mounts on the symlink's destination, want 0", n)
	}

	full := filepath.Join(h.root, "full")
	if err := os.MkdirAll(full, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "keep"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantCode(t, publishTo(full), codes.FailedPrecondition)
	regular := filepath.Join(h.root, "regular-file")
	if err := os.WriteFile(regular, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wantCode(t, publishTo(regular), codes.FailedPrecondition)

	for _, p := range []string{
		filepath.Join(h.cfg.StateDir, "staged", "t"), h.cfg.StateDir, h.root, // in or above the records
		filepath.Join(h.d.cfg.EphemeralDir, "t"),    // the plugin's own ephemeral directory
		filepath.Join(h.stagingPath(vol), "inside"), // inside a FUSE mount of a volume
		filepath.Dir(h.stagingPath(vol)),            // above one: would hide it
	} {
		wantCode(t, publishTo(p), codes.InvalidArgument)
	}
	for _, p := range []string{full, regular} {
		if n, _ := mounts.CountMounts(p); n != 0 {
			t.Errorf("%s mounted after a refused publish", p)
		}
	}
	if _, err := os.Stat(filepath.Join(full, "keep")); err != nil {
		t.Errorf("content of the non-empty directory: %v", err)
	}

	// A symlink above the target is resolved: the mount and the record are at the real place.
	viaLink := filepath.Join(toDir, "pod", "mount")
	real := filepath.Join(realDir, "pod", "mount")
	if err := publishTo(viaLink); err != nil {
		t.Fatal(err)
	}
	plugintest.MustRead(t, real)
	if n, _ := mounts.CountMounts(real); n != 1 {
		t.Errorf("%d mounts at %s, want 1", n, real)
	}
	if _, pubs, _ := mustStore(t, h).Load(); len(pubs) != 1 || pubs[0].TargetPath != real {
		t.Errorf("publish records %+v, want one for %s", pubs, real)
	}
	if resp, err := h.stats(vol, viaLink); err != nil || condition(resp).Abnormal {
		t.Errorf("stats through the link: %v, %v", resp, err)
	}
	if _, err := h.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: viaLink}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(real); !os.IsNotExist(err) {
		t.Errorf("%s left after unpublish: %v", real, err)
	}
	if err := h.unstage(vol); err != nil {
		t.Fatal(err)
	}
}
