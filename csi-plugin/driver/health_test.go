package driver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"k8s.io/mount-utils"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/fusemode"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/internal/plugintest"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/restore"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/state"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/volumecondition"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// TestVolumeHealthForEveryKubelet asks the plugin what each kubelet generation asks, over its socket, before and
// after its FUSE server dies: kubelet ≤ v1.36 (NodeGetCapabilities and NodeGetVolumeStats decoded with CSI spec
// v1.12's schema, where VolumeCondition still exists) and kubelet v1.37 (NodeGetVolumeHealth with the paths
// kubelet sends, NodeGetStorageHealth).
func TestVolumeHealthForEveryKubelet(t *testing.T) {
	testenv.RequireFUSE(t)
	h := newHarness(t, true, nil)
	ctx := context.Background()
	const vol = "vol-health"
	if err := h.stage(vol); err != nil {
		t.Fatal(err)
	}
	if err := h.publish(vol, "pod-a", false); err != nil {
		t.Fatal(err)
	}
	staging, target := h.stagingPath(vol), h.targetPath(vol, "pod-a")

	legacy := func() (bool, string) {
		t.Helper()
		supported, abnormal, msg, err := plugintest.LegacyVolumeHealth(ctx, h.conn, &csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: target})
		if err != nil || !supported {
			t.Fatalf("kubelet ≤ v1.36 view: supported %v, err %v; want VOLUME_CONDITION advertised and an answer", supported, err)
		}
		return abnormal, msg
	}
	health := func(publishPath string) []*csi.VolumeHealth_VolumeHealthEntry {
		t.Helper()
		resp, err := h.node.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: vol, StagingTargetPath: staging, VolumePublishPath: publishPath})
		if err != nil {
			t.Fatalf("NodeGetVolumeHealth(%s): %v", publishPath, err)
		}
		if got := resp.GetVolumeHealth().GetVolumeId(); got != vol {
			t.Fatalf("NodeGetVolumeHealth answered for volume %q, want %q", got, vol)
		}
		return resp.GetVolumeHealth().GetHealthStatuses()
	}

	caps, err := h.node.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	has := map[csi.NodeServiceCapability_RPC_Type]bool{}
	for _, c := range caps.GetCapabilities() {
		has[c.GetRpc().GetType()] = true
	}
	if !has[csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH] || !has[csi.NodeServiceCapability_RPC_GET_STORAGE_HEALTH] {
		t.Fatalf("capabilities %v lack GET_VOLUME_HEALTH or GET_STORAGE_HEALTH (kubelet v1.37 would never probe)", caps)
	}

	if abnormal, msg := legacy(); abnormal || msg != "FUSE mount answers" {
		t.Fatalf("kubelet ≤ v1.36 view of a live volume: abnormal %v, %q", abnormal, msg)
	}
	if e := health(target); len(e) != 0 {
		t.Fatalf("NodeGetVolumeHealth of a live volume: %v, want no condition", e)
	}
	if resp, err := h.node.NodeGetStorageHealth(ctx, &csi.NodeGetStorageHealthRequest{}); err != nil || len(resp.GetBackendHealth()) != 0 {
		t.Fatalf("NodeGetStorageHealth on a ready plugin with /dev/fuse: %v, %v; want no condition", resp, err)
	}

	crash(t, h.mode.started()[0])
	plugintest.WaitDead(t, target)
	if abnormal, msg := legacy(); !abnormal || !strings.Contains(msg, syscall.ENOTCONN.Error()) {
		t.Fatalf("kubelet ≤ v1.36 view of a dead volume: abnormal %v, %q; want abnormal with %q", abnormal, msg, syscall.ENOTCONN.Error())
	}
	e := health(target)
	if len(e) != 1 || e[0].GetStatus() != csi.VolumeHealthErrorType_INACCESSIBLE || e[0].GetReason() != ReasonServerGone ||
		!strings.Contains(e[0].GetMessage(), syscall.ENOTCONN.Error()) || !strings.Contains(e[0].GetMessage(), "1 more of the volume's mounts") {
		t.Fatalf("NodeGetVolumeHealth of a dead volume: %v; want one INACCESSIBLE %s for the staging mount and 1 more", e, ReasonServerGone)
	}
	// A publish path the records do not give this volume is not looked at; the staging mount still is.
	if e := health(h.targetPath(vol, "pod-other")); len(e) != 1 || strings.Contains(e[0].GetMessage(), "more") {
		t.Fatalf("NodeGetVolumeHealth with a foreign publish path: %v; want the staging mount's condition only", e)
	}
	// No paths (csi-sanity): every mount of the volume.
	if e := health(""); len(e) != 1 || !strings.Contains(e[0].GetMessage(), "1 more of the volume's mounts") {
		t.Fatalf("NodeGetVolumeHealth without paths: %v", e)
	}

	// The target's mount gone altogether (unmounted behind the plugin's back) is NotMounted, beside the dead staging.
	if err := syscall.Unmount(target, syscall.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if e := health(target); len(e) != 2 || e[0].GetReason() != ReasonServerGone || e[1].GetReason() != ReasonNotMounted {
		t.Fatalf("NodeGetVolumeHealth with the target unmounted: %v; want %s then %s", e, ReasonServerGone, ReasonNotMounted)
	}

	_, err = h.node.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: "vol-unknown"})
	wantCode(t, err, codes.NotFound)
	_, err = h.node.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{})
	wantCode(t, err, codes.InvalidArgument)
	_, err = h.node.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: vol, VolumePublishPath: "relative/path"})
	wantCode(t, err, codes.InvalidArgument)
}

func TestHealthEntriesOnePerReason(t *testing.T) {
	got := healthEntries([]*problem{
		nil,
		{ReasonServerGone, "staging gone"},
		{ReasonServerGone, "target gone"},
		{ReasonNotMounted, "nothing at x\xff"},
		{ReasonServerGone, "other target gone"},
	})
	if len(got) != 2 {
		t.Fatalf("%d entries, want 2: %v", len(got), got)
	}
	if got[0].GetReason() != ReasonServerGone || got[0].GetMessage() != "staging gone (same for 2 more of the volume's mounts)" {
		t.Errorf("first entry %v", got[0])
	}
	if got[1].GetReason() != ReasonNotMounted || got[1].GetMessage() != "nothing at x\uFFFD" {
		t.Errorf("second entry %v: want the message made valid UTF-8", got[1])
	}
	if healthEntries([]*problem{nil, nil}) != nil {
		t.Error("entries for healthy mounts")
	}
}

// TestRepairRenewsPublishTime: the publish record's time is when the target's current mount was made, so a
// repair renews it (the remediator compares it with container start times) and an idempotent publish does not.
func TestRepairRenewsPublishTime(t *testing.T) {
	testenv.RequireFUSE(t)
	h := newHarness(t, true, nil)
	const vol = "vol-time"
	if err := h.stage(vol); err != nil {
		t.Fatal(err)
	}
	if err := h.publish(vol, "pod-a", false); err != nil {
		t.Fatal(err)
	}
	publishTime := func() time.Time {
		t.Helper()
		store, err := state.Open(h.cfg.StateDir)
		if err != nil {
			t.Fatal(err)
		}
		_, pubs, errs := store.Load()
		if len(pubs) != 1 || len(errs) != 0 {
			t.Fatalf("publish records %v, errors %v", pubs, errs)
		}
		return pubs[0].Time
	}
	first := publishTime()
	if err := h.publish(vol, "pod-a", false); err != nil {
		t.Fatal(err)
	}
	if again := publishTime(); !again.Equal(first) {
		t.Errorf("an idempotent publish changed the record's time from %v to %v", first, again)
	}
	crash(t, h.mode.started()[0])
	plugintest.WaitDead(t, h.targetPath(vol, "pod-a"))
	if err := h.stage(vol); err != nil {
		t.Fatal(err)
	}
	if err := h.publish(vol, "pod-a", false); err != nil {
		t.Fatal(err)
	}
	if repaired := publishTime(); !repaired.After(first) {
		t.Errorf("the repair left the record's time at %v (first publish %v)", repaired, first)
	}
}

// TestSetnsRepairRecordsItsPass: under the setns strategy a repair keeps the outcome of its pass over the
// pod's running containers in the publish record (the remediator's evidence); none runs under rebind.
func TestSetnsRepairRecordsItsPass(t *testing.T) {
	testenv.RequireFUSE(t)
	for _, strategy := range []restore.Strategy{restore.Setns, restore.Rebind} {
		t.Run(string(strategy), func(t *testing.T) {
			h := newHarness(t, true, func(c *Config) { c.RestoreStrategy = strategy })
			const vol = "vol-setns"
			if err := h.stage(vol); err != nil {
				t.Fatal(err)
			}
			if err := h.publish(vol, "pod-a", false); err != nil {
				t.Fatal(err)
			}
			crash(t, h.mode.started()[0])
			plugintest.WaitDead(t, h.targetPath(vol, "pod-a"))
			if err := h.stage(vol); err != nil {
				t.Fatal(err)
			}
			if err := h.publish(vol, "pod-a", false); err != nil {
				t.Fatal(err)
			}
			store, err := state.Open(h.cfg.StateDir)
			if err != nil {
				t.Fatal(err)
			}
			_, pubs, errs := store.Load()
			if len(pubs) != 1 || len(errs) != 0 {
				t.Fatalf("publish records %v, errors %v", pubs, errs)
			}
			got := pubs[0].Reattached
			switch {
			case strategy == restore.Rebind && got != nil:
				t.Errorf("rebind recorded a setns pass: %+v", got)
			case strategy == restore.Setns && !got.Complete():
				// No process of pod-a holds the dead mount: the pass finds nothing to re-bind, and completes.
				t.Errorf("setns recorded %+v, want a complete pass", got)
			}
		})
	}
}

// TestHealthSeesThroughCaches kills the FUSE server of a volume whose server caches attributes and names for an
// hour, right after a read and a stat of the target: stat of the target and mount-utils' IsLikelyNotMountPoint still call it a healthy
// mount (answered from the kernel's caches, the trap of Mountpoint-S3 CSI's empty-mask statx check, their PR
// #921), while both kubelet generations' health calls report it gone at once.
func TestHealthSeesThroughCaches(t *testing.T) {
	testenv.RequireFUSE(t)
	wrapper := filepath.Join(t.TempDir(), "dummy-fuse-cached")
	script := fmt.Sprintf("#!/bin/sh\nexec %s --attr-timeout=1h --entry-timeout=1h \"$@\"\n", bins.Path(t, "dummy-fuse"))
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	const probeTimeout = 2 * time.Second
	h := newHarness(t, true, func(c *Config) {
		child, err := fusemode.NewChild(fusemode.Options{Server: fuseserver.Spec{Path: wrapper}})
		if err != nil {
			t.Fatal(err)
		}
		c.Mode.(*trackingMode).Mode = child
		c.ProbeTimeout = probeTimeout
	})
	ctx := context.Background()
	const vol = "vol-cached"
	if err := h.stage(vol); err != nil {
		t.Fatal(err)
	}
	if err := h.publish(vol, "pod-a", false); err != nil {
		t.Fatal(err)
	}
	target := h.targetPath(vol, "pod-a")
	plugintest.MustRead(t, target)
	// The root's attributes are cached once something stats it (kubelet does before it starts a container);
	// until then the kernel asks the server, and a stat would fail honestly.
	if _, err := os.Stat(target); err != nil {
		t.Fatal(err)
	}

	crash(t, h.mode.started()[0])
	if _, err := os.Stat(target); err != nil {
		t.Errorf("stat of the dead target: %v; expected the attribute cache to answer (the naive probe's lie)", err)
	}
	if notMnt, err := mount.New("").IsLikelyNotMountPoint(target); err != nil || notMnt {
		t.Errorf("IsLikelyNotMountPoint of the dead target: %v, %v; expected \"a mount point, no error\" (the naive probe's lie)", notMnt, err)
	}

	start := time.Now()
	resp, err := h.node.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: vol, VolumePublishPath: target})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	e := resp.GetVolumeHealth().GetHealthStatuses()
	if len(e) != 1 || e[0].GetReason() != ReasonServerGone || !strings.Contains(e[0].GetMessage(), syscall.ENOTCONN.Error()) {
		t.Fatalf("NodeGetVolumeHealth right after the kill: %v; want one %s with ENOTCONN", e, ReasonServerGone)
	}
	t.Logf("NodeGetVolumeHealth reported %s %v after the call started (probe timeout %v)", e[0].GetReason(), took, probeTimeout)
	supported, abnormal, msg, err := plugintest.LegacyVolumeHealth(ctx, h.conn, &csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: target})
	if err != nil || !supported || !abnormal || !strings.Contains(msg, syscall.ENOTCONN.Error()) {
		t.Fatalf("kubelet ≤ v1.36 view right after the kill: supported %v, abnormal %v, %q, %v; want abnormal with ENOTCONN", supported, abnormal, msg, err)
	}
}

// storable fails t unless conditions (status, reason, message triples) are what kubelet v1.37 can store: no two
// with the same status and reason, at most volumecondition.MaxEntries, valid UTF-8 (kubernetes#142280).
func storable(t *testing.T, conditions [][3]string) {
	t.Helper()
	if len(conditions) > volumecondition.MaxEntries {
		t.Fatalf("%d conditions, at most %d fit", len(conditions), volumecondition.MaxEntries)
	}
	seen := map[[2]string]bool{}
	for _, c := range conditions {
		k := [2]string{c[0], c[1]}
		if seen[k] {
			t.Fatalf("duplicate condition (status, reason) %v in %v", k, conditions)
		}
		seen[k] = true
		if !utf8.ValidString(c[2]) {
			t.Fatalf("condition %v: message is not valid UTF-8", k)
		}
	}
}

// FuzzHealthEntries: whatever the checks of a volume's mounts find (any number of mounts, any mix of problems,
// reasons the plugin does not have yet, bad UTF-8 in paths), NodeGetVolumeHealth's entries are storable.
func FuzzHealthEntries(f *testing.F) {
	f.Add([]byte{0, 1, 1, 2, 3, 4})
	f.Add([]byte("many mounts, many problems: 0123456789abcdefghijklmnopqrstuvwxyz"))
	f.Add([]byte{0xff, 0xfe, 1, 1, 1})
	var forty []byte // 40 reasons: more than fit
	for c := byte(5); c < 45; c++ {
		forty = append(forty, c, c)
	}
	f.Add(forty)
	reasons := []string{"", ReasonServerGone, ReasonServerNotResponding, ReasonNotFUSE, ReasonNotMounted}
	f.Fuzz(func(t *testing.T, b []byte) {
		var problems []*problem
		for i, c := range b { // each byte one mount: healthy, a known reason, or one of 40 others
			switch r := int(c) % 45; {
			case r == 0:
				problems = append(problems, nil)
			case r < len(reasons):
				problems = append(problems, &problem{reasons[r], "at " + string(b[i:min(len(b), i+2)])})
			default:
				problems = append(problems, &problem{fmt.Sprintf("Other%d", r), "x"})
			}
		}
		var got [][3]string
		for _, e := range healthEntries(problems) {
			got = append(got, [3]string{e.GetStatus().String(), e.GetReason(), e.GetMessage()})
		}
		storable(t, got)
		if want := slices.ContainsFunc(problems, func(p *problem) bool { return p != nil }); want != (len(got) > 0) {
			t.Fatalf("problems %v gave %d conditions", problems, len(got))
		}
	})
}

// TestStorageEntries covers every combination of the node's conditions.
func TestStorageEntries(t *testing.T) {
	dev, devErr := os.Stat("/dev/null") // a character device like /dev/fuse
	dir, dirErr := os.Stat(t.TempDir())
	if devErr != nil || dirErr != nil {
		t.Fatal(devErr, dirErr)
	}
	for _, fuse := range []struct {
		name string
		fi   os.FileInfo
		err  error
		want string
	}{
		{"device", dev, nil, ""},
		{"missing", nil, &os.PathError{Op: "stat", Path: fuseDevice, Err: os.ErrNotExist}, "NoFuseDevice"},
		{"not a device", dir, nil, "NoFuseDevice"},
	} {
		for _, ready := range []bool{true, false} {
			got := storageEntries(fuse.fi, fuse.err, ready)
			var conds [][3]string
			var reasons []string
			for _, e := range got {
				conds = append(conds, [3]string{e.GetStatus().String(), e.GetReason(), e.GetMessage()})
				reasons = append(reasons, e.GetReason())
			}
			storable(t, conds)
			var want []string
			if fuse.want != "" {
				want = append(want, fuse.want)
			}
			if !ready {
				want = append(want, "RestoringMounts")
			}
			if !slices.Equal(reasons, want) {
				t.Errorf("/dev/fuse %s, ready %v: reasons %v, want %v", fuse.name, ready, reasons, want)
			}
		}
	}
}
