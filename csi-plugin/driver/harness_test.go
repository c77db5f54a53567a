package driver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/fusemode"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/internal/plugintest"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/volumecondition"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/csiprobe"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
)

// trackingMode wraps a real mode and remembers every server it started, so that a test can kill one (a crash)
// and its cleanup can stop all of them, whatever failed. before, when set, runs before each Start.
type trackingMode struct {
	fusemode.Mode
	before func(fusemode.Request)

	mu      sync.Mutex
	servers []fusemode.Server
}

func (m *trackingMode) Start(ctx context.Context, req fusemode.Request) (fusemode.Server, error) {
	if m.before != nil {
		m.before(req)
	}
	s, err := m.Mode.Start(ctx, req)
	if err == nil {
		m.mu.Lock()
		m.servers = append(m.servers, s)
		m.mu.Unlock()
	}
	return s, err
}

func (m *trackingMode) started() []fusemode.Server {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]fusemode.Server(nil), m.servers...)
}

// crash kills s like the OOM killer would and waits until it is gone.
func crash(t testing.TB, s fusemode.Server) {
	t.Helper()
	if err := syscall.Kill(s.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, s.Done(), "the killed FUSE server to exit")
}

// waitClosed waits for ch to be closed, failing the test (instead of hanging it) after 30s.
func waitClosed[T any](t testing.TB, ch <-chan T, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func (m *trackingMode) stopAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range m.started() {
		_ = s.Stop(ctx)
	}
}

// stubMode is for tests that never reach a mount: it refuses to start anything.
type stubMode struct{}

func (stubMode) Name() string                  { return "stub" }
func (stubMode) Placement() fusemode.Placement { return fusemode.OnStagingPath }
func (stubMode) Recollect(fusemode.Records) (map[string]fusemode.Server, error) {
	return nil, nil
}
func (stubMode) Start(context.Context, fusemode.Request) (fusemode.Server, error) {
	return nil, errors.New("stub mode cannot mount")
}
func (stubMode) Publish(context.Context, fusemode.Target) error {
	return errors.New("stub mode cannot mount")
}
func (stubMode) Release(string) {}
func (stubMode) Close() error   { return nil }

// testController is the minimal controller that lets csi-sanity's node tests create and delete volumes. It is
// only ever registered by tests; the plugin itself is node-only.
type testController struct {
	csi.UnimplementedControllerServer
}

func (testController) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: []*csi.ControllerServiceCapability{{
		Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{
			Type: csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		}},
	}}}, nil
}

func (testController) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume_capabilities are required")
	}
	sum := sha256.Sum256([]byte(req.GetName()))
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:      "vol-" + hex.EncodeToString(sum[:8]),
		CapacityBytes: req.GetCapacityRange().GetRequiredBytes(),
	}}, nil
}

func (testController) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	return &csi.DeleteVolumeResponse{}, nil
}

// harness runs a Driver in this process and talks to it over its socket.
type harness struct {
	t       *testing.T
	root    string
	kubelet plugintest.Kubelet
	cfg     Config
	d       *Driver
	mode    *trackingMode // nil for unprivileged harnesses
	conn    *grpc.ClientConn
	node    csi.NodeClient
	ident   csi.IdentityClient
	errc    chan error
	stop    context.CancelFunc
}

// newHarness starts a driver. privileged harnesses run real dummy-fuse children (the test must have called
// testenv.RequireFUSE); others get a mode that cannot mount. edit adjusts the config before New.
func newHarness(t *testing.T, privileged bool, edit func(*Config)) *harness {
	t.Helper()
	h := &harness{t: t, root: plugintest.ShortDir(t)}
	h.kubelet = plugintest.Kubelet{Root: h.root, Driver: DefaultDriverName}
	h.cfg = Config{
		Endpoint: "unix://" + filepath.Join(h.root, "csi.sock"),
		NodeID:   "test-node",
		StateDir: filepath.Join(h.root, "state"),
	}
	if privileged {
		child, err := fusemode.NewChild(fusemode.Options{Server: fuseserver.Spec{Path: bins.Path(t, "dummy-fuse")}})
		if err != nil {
			t.Fatal(err)
		}
		h.mode = &trackingMode{Mode: child}
		h.cfg.Mode = h.mode
		// Whatever happens, no FUSE server and no mount outlives the test (cleanups run last-in first-out:
		// this one after the driver has stopped).
		t.Cleanup(func() {
			// Unmounting first lets every dummy-fuse end on its own.
			if n, err := mounts.UnmountUnder(h.root); err != nil || n > 0 {
				t.Logf("cleanup unmounted %d leftover mounts (err %v)", n, err)
			}
			h.mode.stopAll()
		})
	} else {
		h.cfg.Mode = stubMode{}
	}
	if edit != nil {
		edit(&h.cfg)
	}
	h.start()
	return h
}

// start creates and runs the driver with h.cfg, and waits until Probe is ready.
func (h *harness) start() {
	t := h.t
	t.Helper()
	d, err := New(h.cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.d = d
	ctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
	h.errc = make(chan error, 1)
	go func() { h.errc <- d.Run(ctx) }()
	t.Cleanup(h.shutdown)
	conn, err := grpc.NewClient("unix://"+d.Socket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	h.conn = conn
	h.node = csi.NewNodeClient(conn)
	h.ident = csi.NewIdentityClient(conn)
	h.waitReady(30 * time.Second)
}

func (h *harness) waitReady(timeout time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ready, err := csiprobe.Ready(context.Background(), h.ident)
		if ready {
			return
		}
		select {
		case err := <-h.errc:
			h.t.Fatalf("driver stopped before it was ready: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("driver not ready after %v (last probe error: %v)", timeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// shutdown stops the driver as SIGTERM would; idempotent.
func (h *harness) shutdown() {
	if h.stop == nil {
		return
	}
	h.stop()
	h.stop = nil
	if err := <-h.errc; err != nil {
		h.t.Errorf("Run: %v", err)
	}
	_ = h.conn.Close()
}

func (h *harness) stagingPath(vol string) string     { return h.kubelet.Staging(vol) }
func (h *harness) targetPath(vol, pod string) string { return h.kubelet.Target(vol, pod) }

// mountCap is the volume capability of these tests' requests.
func mountCap() *csi.VolumeCapability {
	return plugintest.MountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
}

func (h *harness) stage(vol string) error {
	// Like kubelet, create the directory only when it is missing: on a dead mount, MkdirAll fails.
	if _, err := os.Lstat(h.stagingPath(vol)); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(h.stagingPath(vol), 0o750); err != nil {
			h.t.Fatal(err)
		}
	}
	_, err := h.node.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{
		VolumeId: vol, StagingTargetPath: h.stagingPath(vol), VolumeCapability: mountCap(),
	})
	return err
}

func (h *harness) publish(vol, pod string, readOnly bool) error {
	if err := os.MkdirAll(filepath.Dir(h.targetPath(vol, pod)), 0o750); err != nil {
		h.t.Fatal(err)
	}
	_, err := h.node.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{
		VolumeId: vol, StagingTargetPath: h.stagingPath(vol), TargetPath: h.targetPath(vol, pod),
		VolumeCapability: mountCap(), Readonly: readOnly,
	})
	return err
}

// publishEphemeral does what kubelet does for an inline ephemeral volume: no NodeStageVolume, and a
// NodePublishVolume with an empty staging_target_path and the ephemeral flag in the volume context.
func (h *harness) publishEphemeral(vol, pod string, readOnly bool) error {
	if err := os.MkdirAll(filepath.Dir(h.targetPath(vol, pod)), 0o750); err != nil {
		h.t.Fatal(err)
	}
	_, err := h.node.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{
		VolumeId: vol, TargetPath: h.targetPath(vol, pod), VolumeCapability: mountCap(), Readonly: readOnly,
		VolumeContext: plugintest.EphemeralContext(pod),
	})
	return err
}

// ephemeralStagingPath is where the plugin stages an inline ephemeral volume by default: "ephemeral" beside the
// CSI socket.
func (h *harness) ephemeralStagingPath(vol string) string {
	return filepath.Join(h.root, "ephemeral", vol)
}

func (h *harness) unpublish(vol, pod string) error {
	_, err := h.node.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: h.targetPath(vol, pod)})
	return err
}

func (h *harness) unstage(vol string) error {
	_, err := h.node.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: vol, StagingTargetPath: h.stagingPath(vol)})
	return err
}

func (h *harness) stats(vol, path string) (*csi.NodeGetVolumeStatsResponse, error) {
	return h.node.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: path})
}

func wantCode(t testing.TB, err error, code codes.Code) {
	t.Helper()
	if got := status.Code(err); got != code {
		t.Fatalf("got %v (%v), want %v", got, err, code)
	}
}

// condition is the VolumeCondition that kubelet ≤ v1.36 reads from resp (zero when there is none).
func condition(resp *csi.NodeGetVolumeStatsResponse) volumecondition.Condition {
	if resp == nil {
		return volumecondition.Condition{}
	}
	c, _ := volumecondition.Get(resp)
	return c
}
