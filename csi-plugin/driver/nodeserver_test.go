package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/fusemode"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/internal/plugintest"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/state"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

func blockCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

// call runs one node RPC given as a request message.
func (h *harness) call(req any) error {
	ctx := context.Background()
	var err error
	switch r := req.(type) {
	case *csi.NodeStageVolumeRequest:
		_, err = h.node.NodeStageVolume(ctx, r)
	case *csi.NodeUnstageVolumeRequest:
		_, err = h.node.NodeUnstageVolume(ctx, r)
	case *csi.NodePublishVolumeRequest:
		_, err = h.node.NodePublishVolume(ctx, r)
	case *csi.NodeUnpublishVolumeRequest:
		_, err = h.node.NodeUnpublishVolume(ctx, r)
	case *csi.NodeGetVolumeStatsRequest:
		_, err = h.node.NodeGetVolumeStats(ctx, r)
	default:
		h.t.Fatalf("unknown request %T", req)
	}
	return err
}

// TestValidation checks that every bad request is refused with InvalidArgument naming the field, before the
// plugin touches anything (the mode in this harness cannot mount).
func TestValidation(t *testing.T) {
	h := newHarness(t, false, nil)
	const vol, stg, tgt = "vol-1", "/var/lib/kubelet/staging/vol-1", "/var/lib/kubelet/pods/p/mount"
	noMode := &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}
	for _, tc := range []struct {
		name  string
		req   any
		code  codes.Code
		field string
	}{
		{"stage without volume id", &csi.NodeStageVolumeRequest{StagingTargetPath: stg, VolumeCapability: mountCap()}, codes.InvalidArgument, "volume_id"},
		{"stage without staging path", &csi.NodeStageVolumeRequest{VolumeId: vol, VolumeCapability: mountCap()}, codes.InvalidArgument, "staging_target_path"},
		{"stage with relative staging path", &csi.NodeStageVolumeRequest{VolumeId: vol, StagingTargetPath: "staging/vol-1", VolumeCapability: mountCap()}, codes.InvalidArgument, "staging_target_path"},
		{"stage with unclean staging path", &csi.NodeStageVolumeRequest{VolumeId: vol, StagingTargetPath: "/var/lib/../etc", VolumeCapability: mountCap()}, codes.InvalidArgument, "staging_target_path"},
		{"stage without capability", &csi.NodeStageVolumeRequest{VolumeId: vol, StagingTargetPath: stg}, codes.InvalidArgument, "volume_capability"},
		{"stage with block access", &csi.NodeStageVolumeRequest{VolumeId: vol, StagingTargetPath: stg, VolumeCapability: blockCap()}, codes.InvalidArgument, "block"},
		{"stage without access mode", &csi.NodeStageVolumeRequest{VolumeId: vol, StagingTargetPath: stg, VolumeCapability: noMode}, codes.InvalidArgument, "access_mode"},
		{"publish without volume id", &csi.NodePublishVolumeRequest{StagingTargetPath: stg, TargetPath: tgt, VolumeCapability: mountCap()}, codes.InvalidArgument, "volume_id"},
		{"publish without target", &csi.NodePublishVolumeRequest{VolumeId: vol, StagingTargetPath: stg, VolumeCapability: mountCap()}, codes.InvalidArgument, "target_path"},
		{"publish with relative target", &csi.NodePublishVolumeRequest{VolumeId: vol, StagingTargetPath: stg, TargetPath: "pods/p/mount", VolumeCapability: mountCap()}, codes.InvalidArgument, "target_path"},
		// The plugin stages volumes: a publish without a staging path means NodeStageVolume did not happen.
		{"publish without staging path", &csi.NodePublishVolumeRequest{VolumeId: vol, TargetPath: tgt, VolumeCapability: mountCap()}, codes.FailedPrecondition, "staging_target_path"},
		// Only kubelet's ephemeral flag makes an empty staging path acceptable.
		{"publish without staging path, not ephemeral", &csi.NodePublishVolumeRequest{VolumeId: vol, TargetPath: tgt, VolumeCapability: mountCap(), VolumeContext: map[string]string{"csi.storage.k8s.io/ephemeral": "false"}}, codes.FailedPrecondition, "staging_target_path"},
		{"ephemeral publish without target", &csi.NodePublishVolumeRequest{VolumeId: vol, VolumeCapability: mountCap(), VolumeContext: plugintest.EphemeralContext("p")}, codes.InvalidArgument, "target_path"},
		{"ephemeral publish without capability", &csi.NodePublishVolumeRequest{VolumeId: vol, TargetPath: tgt, VolumeContext: plugintest.EphemeralContext("p")}, codes.InvalidArgument, "volume_capability"},
		{"ephemeral publish with block access", &csi.NodePublishVolumeRequest{VolumeId: vol, TargetPath: tgt, VolumeCapability: blockCap(), VolumeContext: plugintest.EphemeralContext("p")}, codes.InvalidArgument, "block"},
		{"publish without capability", &csi.NodePublishVolumeRequest{VolumeId: vol, StagingTargetPath: stg, TargetPath: tgt}, codes.InvalidArgument, "volume_capability"},
		{"publish with block access", &csi.NodePublishVolumeRequest{VolumeId: vol, StagingTargetPath: stg, TargetPath: tgt, VolumeCapability: blockCap()}, codes.InvalidArgument, "block"},
		{"publish on the staging path", &csi.NodePublishVolumeRequest{VolumeId: vol, StagingTargetPath: stg, TargetPath: stg, VolumeCapability: mountCap()}, codes.InvalidArgument, "target_path"},
		{"unpublish without volume id", &csi.NodeUnpublishVolumeRequest{TargetPath: tgt}, codes.InvalidArgument, "volume_id"},
		{"unpublish without target", &csi.NodeUnpublishVolumeRequest{VolumeId: vol}, codes.InvalidArgument, "target_path"},
		{"unpublish with relative target", &csi.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: "mount"}, codes.InvalidArgument, "target_path"},
		{"unstage without volume id", &csi.NodeUnstageVolumeRequest{StagingTargetPath: stg}, codes.InvalidArgument, "volume_id"},
		{"unstage without staging path", &csi.NodeUnstageVolumeRequest{VolumeId: vol}, codes.InvalidArgument, "staging_target_path"},
		{"stats without volume id", &csi.NodeGetVolumeStatsRequest{VolumePath: tgt}, codes.InvalidArgument, "volume_id"},
		{"stats without path", &csi.NodeGetVolumeStatsRequest{VolumeId: vol}, codes.InvalidArgument, "volume_path"},
		// The spec (and csi-sanity) want NotFound for a path where the volume is not.
		{"stats on a relative path", &csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: "some/path"}, codes.NotFound, ""},
		{"stats on a missing path", &csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: filepath.Join(h.root, "missing")}, codes.NotFound, ""},
		{"stats on a plain directory", &csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: h.root}, codes.NotFound, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := h.call(tc.req)
			wantCode(t, err, tc.code)
			if msg := status.Convert(err).Message(); !strings.Contains(msg, tc.field) {
				t.Fatalf("message %q does not name %q", msg, tc.field)
			}
		})
	}
}

// TestPathTraversalVolumeIDs checks that volume IDs which would escape a directory when used as a file name (the
// stage record is named after the ID) are refused by every call, and that nothing was written anywhere.
func TestPathTraversalVolumeIDs(t *testing.T) {
	h := newHarness(t, false, nil)
	stg, tgt := filepath.Join(h.root, "stg"), filepath.Join(h.root, "tgt")
	for _, id := range []string{"..", ".", "../escape", "a/b", "/abs", "../../../../etc/passwd", "nul\x00byte", strings.Repeat("x", 129)} {
		for _, req := range []any{
			&csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: stg, VolumeCapability: mountCap()},
			&csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: stg, TargetPath: tgt, VolumeCapability: mountCap()},
			// Ephemeral: the ID would name the plugin's own staging directory.
			&csi.NodePublishVolumeRequest{VolumeId: id, TargetPath: tgt, VolumeCapability: mountCap(), VolumeContext: plugintest.EphemeralContext("p")},
			&csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: tgt},
			&csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: stg},
			&csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: tgt},
		} {
			err := h.call(req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "volume_id") {
				t.Errorf("%T with volume ID %q: %v; want InvalidArgument naming volume_id", req, id, err)
			}
		}
	}
	// Nothing was created: no staging or target directory, no record, nothing beside the state directory.
	var found []string
	_ = filepath.WalkDir(h.root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasSuffix(p, ".sock") {
			found = append(found, p)
		}
		return nil
	})
	if len(found) > 0 {
		t.Fatalf("files created by refused calls: %v", found)
	}
	for _, p := range []string{stg, tgt, h.d.cfg.EphemeralDir} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists after refused calls", p)
		}
	}
}

// TestDeadMountIsRepaired is the idempotency trap: after the FUSE server dies, the staging and target mounts are
// still in the mount table (mount-utils calls them mounted) but answer ENOTCONN. A repeated NodeStageVolume or
// NodePublishVolume must repair them, not answer OK on a dead mount; NodeGetVolumeStats must report it.
func TestDeadMountIsRepaired(t *testing.T) {
	testenv.RequireFUSE(t)
	h := newHarness(t, true, nil)
	const vol = "vol-dead"
	if err := h.stage(vol); err != nil {
		t.Fatal(err)
	}
	if err := h.publish(vol, "pod-a", false); err != nil {
		t.Fatal(err)
	}
	target := h.targetPath(vol, "pod-a")
	plugintest.MustRead(t, target)
	resp, err := h.stats(vol, target)
	if err != nil || condition(resp).Abnormal || len(resp.GetUsage()) == 0 {
		t.Fatalf("stats on a live mount: %v, %v", resp, err)
	}

	crash(t, h.mode.started()[0])
	plugintest.WaitDead(t, target)
	plugintest.WaitDead(t, h.stagingPath(vol))
	for _, p := range []string{target, h.stagingPath(vol)} {
		resp, err := h.stats(vol, p)
		if err != nil {
			t.Fatalf("stats on dead %s: %v", p, err)
		}
		cond := condition(resp)
		if !cond.Abnormal || !strings.Contains(cond.Message, syscall.ENOTCONN.Error()) {
			t.Fatalf("stats on dead %s: condition %v; want abnormal with %q", p, cond, syscall.ENOTCONN.Error())
		}
	}

	// Repeat NodeStageVolume: the staging mount is remounted with a new server.
	if err := h.stage(vol); err != nil {
		t.Fatalf("repeated NodeStageVolume on a dead mount: %v", err)
	}
	if n := len(h.mode.started()); n != 2 {
		t.Fatalf("%d FUSE servers started, want 2 (the dead one and its replacement)", n)
	}
	plugintest.MustRead(t, h.stagingPath(vol))
	if n, _ := mounts.CountMounts(h.stagingPath(vol)); n != 1 {
		t.Fatalf("%d mounts on the staging path, want 1 (the dead one lazily unmounted)", n)
	}
	// The target is a bind of the dead mount and stays dead until NodePublishVolume repairs it.
	plugintest.WaitDead(t, target)
	if err := h.publish(vol, "pod-a", false); err != nil {
		t.Fatalf("repeated NodePublishVolume on a dead target: %v", err)
	}
	plugintest.MustRead(t, target)
	if n, _ := mounts.CountMounts(target); n != 1 {
		t.Fatalf("%d mounts on the target, want 1 (rebind strategy)", n)
	}

	// NodePublishVolume alone repairs a dead staging mount too (from what the plugin knows of the volume).
	crash(t, h.mode.started()[1])
	plugintest.WaitDead(t, target)
	if err := h.publish(vol, "pod-a", false); err != nil {
		t.Fatalf("NodePublishVolume with a dead staging mount: %v", err)
	}
	plugintest.MustRead(t, h.stagingPath(vol))
	plugintest.MustRead(t, target)
	if n := len(h.mode.started()); n != 3 {
		t.Fatalf("%d FUSE servers started, want 3", n)
	}
	resp, err = h.stats(vol, target)
	if err != nil || condition(resp).Abnormal {
		t.Fatalf("stats after repair: %v, %v", resp, err)
	}

	if err := h.unpublish(vol, "pod-a"); err != nil {
		t.Fatal(err)
	}
	if err := h.unstage(vol); err != nil {
		t.Fatal(err)
	}
	if ok, _ := mounts.IsMountPoint(h.stagingPath(vol)); ok {
		t.Fatal("staging path still mounted after NodeUnstageVolume")
	}
}

// TestRepeatedCallsAreIdempotent checks that repeating a call on a live mount starts nothing new and stacks
// nothing, and that undoing twice is fine.
func TestRepeatedCallsAreIdempotent(t *testing.T) {
	testenv.RequireFUSE(t)
	h := newHarness(t, true, nil)
	const vol = "vol-idem"
	for i := 0; i < 3; i++ {
		if err := h.stage(vol); err != nil {
			t.Fatal(err)
		}
		if err := h.publish(vol, "pod", true); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(h.mode.started()); n != 1 {
		t.Fatalf("%d FUSE servers started, want 1", n)
	}
	target := h.targetPath(vol, "pod")
	if n, _ := mounts.CountMounts(target); n != 1 {
		t.Fatalf("%d mounts on the target, want 1", n)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err != nil || st.Flags&unix.ST_RDONLY == 0 {
		t.Fatalf("read-only publish: flags %#x, %v", st.Flags, err)
	}
	// Same target, other readonly flag: incompatible.
	wantCode(t, h.publish(vol, "pod", false), codes.AlreadyExists)
	// Another volume on the same staging path: refused.
	_, err := h.node.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{
		VolumeId: "vol-other", StagingTargetPath: h.stagingPath(vol), VolumeCapability: mountCap(),
	})
	wantCode(t, err, codes.AlreadyExists)

	srv := h.mode.started()[0]
	for i := 0; i < 2; i++ {
		if err := h.unpublish(vol, "pod"); err != nil {
			t.Fatal(err)
		}
		if err := h.unstage(vol); err != nil {
			t.Fatal(err)
		}
	}
	waitClosed(t, srv.Done(), "NodeUnstageVolume to stop the server")
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("target not removed: %v", err)
	}
	// The staging directory existed before NodeStageVolume: it is left for the CO to remove.
	if _, err := os.Stat(h.stagingPath(vol)); err != nil {
		t.Fatalf("staging directory the plugin did not create was removed: %v", err)
	}
	stages, pubs, errs := mustStore(t, h).Load()
	if len(stages)+len(pubs)+len(errs) != 0 {
		t.Fatalf("records left: %v %v %v", stages, pubs, errs)
	}
}

func mustStore(t *testing.T, h *harness) *state.Store {
	t.Helper()
	s, err := state.Open(h.cfg.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestStageCreatesAndRemovesItsDirectory: a missing staging directory is created, and removed on unstage.
func TestStageCreatesAndRemovesItsDirectory(t *testing.T) {
	testenv.RequireFUSE(t)
	h := newHarness(t, true, nil)
	path := filepath.Join(h.root, "new", "globalmount")
	_, err := h.node.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: path, VolumeCapability: mountCap()})
	if err != nil {
		t.Fatal(err)
	}
	plugintest.MustRead(t, path)
	if _, err := h.node.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: "v", StagingTargetPath: path}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("staging directory created by the plugin not removed: %v", err)
	}
}

// TestConcurrentCallsOnOneVolume: while one operation on a volume runs, another on the same volume is answered
// Aborted (the CO retries), while other volumes proceed; retried concurrent publishes all end up mounted.
func TestConcurrentCallsOnOneVolume(t *testing.T) {
	testenv.RequireFUSE(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h := newHarness(t, true, func(c *Config) {
		c.Mode.(*trackingMode).before = func(req fusemode.Request) {
			if req.VolumeID == "vol-slow" {
				once.Do(func() { close(entered); <-release })
			}
		}
	})
	first := make(chan error, 1)
	go func() { first <- h.stage("vol-slow") }()
	waitClosed(t, entered, "the first NodeStageVolume to reach Start") // it now holds the volume

	wantCode(t, h.stage("vol-slow"), codes.Aborted)
	wantCode(t, h.unstage("vol-slow"), codes.Aborted)
	wantCode(t, h.publish("vol-slow", "p", false), codes.Aborted)
	if err := h.stage("vol-fast"); err != nil {
		t.Fatalf("another volume must not wait: %v", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	plugintest.MustRead(t, h.stagingPath("vol-slow"))

	// Eight pods publish the volume at once; Aborted answers are retried like kubelet does.
	const pods = 8
	var wg sync.WaitGroup
	aborted := make([]int, pods)
	errs := make([]error, pods)
	for i := 0; i < pods; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			pod := "pod-" + string(rune('a'+i))
			for {
				err := h.publish("vol-slow", pod, false)
				if status.Code(err) == codes.Aborted {
					aborted[i]++
					time.Sleep(time.Millisecond) // kubelet backs off too
					continue
				}
				errs[i] = err
				return
			}
		}(i)
	}
	wg.Wait()
	for i := 0; i < pods; i++ {
		if errs[i] != nil {
			t.Fatalf("pod %d: %v", i, errs[i])
		}
		plugintest.MustRead(t, h.targetPath("vol-slow", "pod-"+string(rune('a'+i))))
	}
	_, pubs, _ := mustStore(t, h).Load()
	if len(pubs) != pods {
		t.Fatalf("%d publish records, want %d", len(pubs), pods)
	}
	t.Logf("Aborted answers per pod while publishing concurrently: %v", aborted)
}

// TestTwoTargetsKeepSeparateRecords: two pods using one volume get one record each; unpublishing one leaves the
// other's record and mount alone, and a restarted plugin knows both.
func TestTwoTargetsKeepSeparateRecords(t *testing.T) {
	testenv.RequireFUSE(t)
	h := newHarness(t, true, nil)
	const vol = "vol-shared"
	if err := h.stage(vol); err != nil {
		t.Fatal(err)
	}
	for _, pod := range []string{"pod-a", "pod-b"} {
		if err := h.publish(vol, pod, pod == "pod-b"); err != nil {
			t.Fatal(err)
		}
	}
	_, pubs, errs := mustStore(t, h).Load()
	if len(errs) != 0 || len(pubs) != 2 || pubs[0].TargetPath != h.targetPath(vol, "pod-a") || pubs[1].TargetPath != h.targetPath(vol, "pod-b") || !pubs[1].ReadOnly {
		t.Fatalf("publish records = %+v (%v)", pubs, errs)
	}
	if err := h.unpublish(vol, "pod-a"); err != nil {
		t.Fatal(err)
	}
	plugintest.MustRead(t, h.targetPath(vol, "pod-b"))
	_, pubs, _ = mustStore(t, h).Load()
	if len(pubs) != 1 || pubs[0].TargetPath != h.targetPath(vol, "pod-b") {
		t.Fatalf("after unpublishing pod-a: %+v", pubs)
	}

	// A restarted plugin (same state directory) knows pod-b's target: stats answer for it.
	h.shutdown()
	h.start()
	resp, err := h.stats(vol, h.targetPath(vol, "pod-b"))
	if err != nil || condition(resp).Abnormal {
		t.Fatalf("stats after restart: %v, %v", resp, err)
	}
	if err := h.unpublish(vol, "pod-b"); err != nil {
		t.Fatal(err)
	}
	if err := h.unstage(vol); err != nil {
		t.Fatal(err)
	}
	stages, pubs, _ := mustStore(t, h).Load()
	if len(stages)+len(pubs) != 0 {
		t.Fatalf("records left: %v %v", stages, pubs)
	}
}
