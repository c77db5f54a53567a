package driver

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/internal/plugintest"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// threads returns the number of OS threads of this process (the driver runs in it).
func threads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
	return 0
}

// waitStopped waits until every thread of process pid is stopped (SIGSTOP takes effect asynchronously).
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			t.Fatal(err)
		}
		stopped := 0
		for _, task := range tasks {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
			// The state follows the command name in parentheses: "pid (comm) T ...".
			if i := strings.LastIndexByte(string(b), ')'); i > 0 && strings.HasPrefix(string(b[i:]), ") T") {
				stopped++
			}
		}
		if stopped == len(tasks) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d threads of %d stopped", stopped, len(tasks), pid)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestStuckServerDoesNotHangThePlugin stops one volume's dummy-fuse with SIGSTOP, as a deadlocked FUSE server
// would be: every call on that volume answers within its probe timeout (stats say abnormal, "not responding";
// stage and publish say Unavailable), other volumes keep working, and repeated calls do not pile up OS threads
// blocked in the kernel. When the server resumes, the volume is healthy again.
func TestStuckServerDoesNotHangThePlugin(t *testing.T) {
	testenv.RequireFUSE(t)
	const timeout = 200 * time.Millisecond
	h := newHarness(t, true, func(c *Config) { c.ProbeTimeout = timeout })
	const vol = "vol-stuck"
	if err := h.stage(vol); err != nil {
		t.Fatal(err)
	}
	if err := h.publish(vol, "pod", false); err != nil {
		t.Fatal(err)
	}
	staging, target := h.stagingPath(vol), h.targetPath(vol, "pod")
	srv := h.mode.started()[0]
	t.Cleanup(func() { _ = syscall.Kill(srv.PID(), syscall.SIGCONT) }) // before the harness unmounts
	if err := syscall.Kill(srv.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, srv.PID())
	before := threads(t)

	bounded := func(what string, call func(ctx context.Context) error) error {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		err := call(ctx)
		if d := time.Since(start); d > timeout+3*time.Second {
			t.Errorf("%s took %v with a probe timeout of %v", what, d, timeout)
		}
		return err
	}
	const calls = 30
	for i := 0; i < calls; i++ {
		path := []string{target, staging}[i%2]
		var resp *csi.NodeGetVolumeStatsResponse
		err := bounded("NodeGetVolumeStats", func(ctx context.Context) (err error) {
			resp, err = h.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: path})
			return err
		})
		if err != nil {
			t.Fatalf("NodeGetVolumeStats #%d on a stuck mount: %v", i, err)
		}
		if c := condition(resp); !c.Abnormal || !strings.Contains(c.Message, "not responding") {
			t.Fatalf("NodeGetVolumeStats #%d on a stuck mount: condition %v; want abnormal, not responding", i, c)
		}
	}
	// kubelet v1.37 asks NodeGetVolumeHealth with both paths: one bounded answer, the stuck server named once.
	for i := 0; i < 5; i++ {
		var resp *csi.NodeGetVolumeHealthResponse
		err := bounded("NodeGetVolumeHealth", func(ctx context.Context) (err error) {
			resp, err = h.node.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: vol, StagingTargetPath: staging, VolumePublishPath: target})
			return err
		})
		if err != nil {
			t.Fatalf("NodeGetVolumeHealth #%d on a stuck mount: %v", i, err)
		}
		if e := resp.GetVolumeHealth().GetHealthStatuses(); len(e) != 1 || e[0].GetReason() != ReasonServerNotResponding || e[0].GetStatus() != csi.VolumeHealthErrorType_INACCESSIBLE {
			t.Fatalf("NodeGetVolumeHealth #%d on a stuck mount: %v; want one INACCESSIBLE %s", i, e, ReasonServerNotResponding)
		}
	}
	for i := 0; i < 5; i++ {
		wantCode(t, bounded("NodeStageVolume", func(ctx context.Context) error {
			_, err := h.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: vol, StagingTargetPath: staging, VolumeCapability: mountCap()})
			return err
		}), codes.Unavailable)
		wantCode(t, bounded("NodePublishVolume", func(ctx context.Context) error {
			_, err := h.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: vol, StagingTargetPath: staging, TargetPath: target, VolumeCapability: mountCap()})
			return err
		}), codes.Unavailable)
	}
	// The volume's lock was released every time, and other volumes never waited.
	if err := h.stage("vol-ok"); err != nil {
		t.Fatal(err)
	}
	if err := h.publish("vol-ok", "pod", false); err != nil {
		t.Fatal(err)
	}
	plugintest.MustRead(t, h.targetPath("vol-ok", "pod"))

	// Each stuck call holds a thread until the server answers: the calls above may leave a few (at most
	// probesPerMount per mount), never one per call.
	after := threads(t)
	t.Logf("threads: %d before %d calls on the stuck mounts, %d after; %d probes outstanding", before, calls+15, after, h.d.prober.Outstanding())
	if out := h.d.prober.Outstanding(); out > 2*probesPerMount {
		t.Errorf("%d probes outstanding on two stuck mounts, want at most %d", out, 2*probesPerMount)
	}
	if after-before > 2*probesPerMount+4 {
		t.Errorf("threads grew from %d to %d over %d calls", before, after, calls+15)
	}

	if err := syscall.Kill(srv.PID(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := h.stats(vol, target)
		if err == nil && !condition(resp).Abnormal {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats after SIGCONT: %v, %v", resp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for h.d.prober.Outstanding() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := h.d.prober.Outstanding(); n != 0 {
		t.Errorf("%d probes still outstanding after the server resumed", n)
	}
	plugintest.MustRead(t, target)
	for _, v := range []string{vol, "vol-ok"} {
		if err := h.unpublish(v, "pod"); err != nil {
			t.Fatal(err)
		}
		if err := h.unstage(v); err != nil {
			t.Fatal(err)
		}
	}
}
