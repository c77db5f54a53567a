package driver

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/fusemode"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/internal/plugintest"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/restore"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

func TestParseEndpoint(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"unix:///csi/csi.sock", "/csi/csi.sock", true},
		{"UNIX:///csi/csi.sock", "/csi/csi.sock", true},
		{"unix:/csi/csi.sock", "/csi/csi.sock", true},
		{"unix://csi.sock", "csi.sock", true},
		{"/csi/csi.sock", "/csi/csi.sock", true},
		{"tcp://127.0.0.1:10000", "", false},
		{"unix://", "", false},
		{"", "", false},
		{"/" + strings.Repeat("x", 107), "", false},
	} {
		got, err := ParseEndpoint(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseEndpoint(%q) = %q, %v; want %q (ok=%v)", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	good := Config{Endpoint: "/tmp/x.sock", NodeID: "n", Mode: stubMode{}}
	for name, edit := range map[string]func(*Config){
		"no node ID":                 func(c *Config) { c.NodeID = "" },
		"bad driver name":            func(c *Config) { c.DriverName = "-bad/name" },
		"tcp endpoint":               func(c *Config) { c.Endpoint = "tcp://1.2.3.4:5" },
		"unknown strategy":           func(c *Config) { c.RestoreStrategy = "glue" },
		"restore without state":      func(c *Config) { c.RestoreMounts = true },
		"registration path only":     func(c *Config) { c.KubeletRegistrationPath = "/var/lib/kubelet/plugins/x/csi.sock" },
		"relative registration path": func(c *Config) { c.KubeletRegistrationPath, c.RegistrationDir = "csi.sock", "/reg" },
		"health port out of range":   func(c *Config) { c.HealthPort = 70000 },
		"unknown FUSE mode":          func(c *Config) { c.Mode, c.FuseMode = nil, "daemon" },
		"missing dummy-fuse":         func(c *Config) { c.Mode, c.FuseOptions.Server.Path = nil, "/nonexistent/dummy-fuse" },
		"writable child volumes":     func(c *Config) { c.Mode, c.FuseMode, c.FuseOptions.Writable = nil, "child", true },
	} {
		c := good
		edit(&c)
		if _, err := New(c); err == nil {
			t.Errorf("%s: New accepted %+v", name, c)
		}
	}
	if _, err := New(good); err != nil {
		t.Fatalf("New(good) = %v", err)
	}
}

// TestInterceptor checks the log lines of a call and that a bare Go error (which gRPC would send as Unknown)
// becomes Internal.
func TestInterceptor(t *testing.T) {
	var buf bytes.Buffer
	klog.SetOutput(&buf)
	klog.LogToStderr(false)
	defer func() { klog.LogToStderr(true); klog.SetOutput(os.Stderr) }()
	setV(t, "5")

	d := &Driver{}
	info := &grpc.UnaryServerInfo{FullMethod: "/csi.v1.Node/NodeStageVolume"}
	req := &csi.NodeStageVolumeRequest{VolumeId: "v", Secrets: map[string]string{"password": "hunter2"}}
	_, err := d.logGRPC(context.Background(), req, info, func(context.Context, any) (any, error) {
		return nil, errors.New("bare error")
	})
	if status.Code(err) != codes.Internal {
		t.Fatalf("bare error became %v, want Internal", status.Code(err))
	}
	_, err = d.logGRPC(context.Background(), req, info, func(context.Context, any) (any, error) {
		return &csi.NodeStageVolumeResponse{}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	klog.Flush()
	out := buf.String()
	for _, want := range []string{"[ID:1] GRPC call: /csi.v1.Node/NodeStageVolume", "[ID:1] GRPC error:", "[ID:2] GRPC request:", "[ID:2] GRPC response:", "***stripped***"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hunter2") {
		t.Errorf("secret logged:\n%s", out)
	}
}

// setV sets klog's verbosity (registered on the command line by TestMain) for one test.
func setV(t *testing.T, level string) {
	t.Helper()
	v := flag.CommandLine.Lookup("v").Value
	old := v.String()
	if err := v.Set(level); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Set(old) })
}

// TestProbeWaitsForRestore: while recorded mounts are being restored, Probe and /healthz say not ready and node
// calls are answered Unavailable; once restored, all is ready and the volume answers again.
func TestProbeWaitsForRestore(t *testing.T) {
	testenv.RequireFUSE(t)
	h := newHarness(t, true, nil)
	const vol = "vol-r"
	if err := h.stage(vol); err != nil {
		t.Fatal(err)
	}
	if err := h.publish(vol, "pod", false); err != nil {
		t.Fatal(err)
	}
	// The plugin "dies": its server stops; in this process the FUSE server must be killed by hand.
	h.shutdown()
	crash(t, h.mode.started()[0])
	plugintest.WaitDead(t, h.targetPath(vol, "pod"))

	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h.mode.before = func(fusemode.Request) { once.Do(func() { close(entered); <-release }) }
	h.cfg.RestoreMounts = true
	d, err := New(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.d = d
	ctx, cancel := context.WithCancel(context.Background())
	h.stop, h.errc = cancel, make(chan error, 1)
	go func() { h.errc <- d.Run(ctx) }()
	t.Cleanup(h.shutdown)
	waitClosed(t, entered, "the restore to start a FUSE server")

	conn, err := grpc.NewClient("unix://"+d.Socket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	h.conn, h.node, h.ident = conn, csi.NewNodeClient(conn), csi.NewIdentityClient(conn)
	resp, err := h.ident.Probe(context.Background(), &csi.ProbeRequest{})
	if err != nil || resp.GetReady().GetValue() {
		t.Fatalf("Probe during restore = %v, %v; want not ready", resp, err)
	}
	wantCode(t, h.stage("vol-other"), codes.Unavailable)
	// Volume health is not reported on mounts the restore is about to repair; storage health says why.
	_, err = h.node.NodeGetVolumeHealth(context.Background(), &csi.NodeGetVolumeHealthRequest{VolumeId: vol, VolumePublishPath: h.targetPath(vol, "pod")})
	wantCode(t, err, codes.Unavailable)
	sh, err := h.node.NodeGetStorageHealth(context.Background(), &csi.NodeGetStorageHealthRequest{})
	if b := sh.GetBackendHealth(); err != nil || len(b) != 1 || b[0].GetReason() != "RestoringMounts" || b[0].GetStatus() != csi.StorageHealthErrorType_STORAGE_DEGRADED {
		t.Fatalf("NodeGetStorageHealth during restore = %v, %v; want STORAGE_DEGRADED RestoringMounts", sh, err)
	}
	rec := httptest.NewRecorder()
	d.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("/healthz during restore = %d", rec.Code)
	}

	close(release)
	h.waitReady(30 * time.Second)
	rec = httptest.NewRecorder()
	d.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/healthz after restore = %d", rec.Code)
	}
	plugintest.MustRead(t, h.stagingPath(vol))
	plugintest.MustRead(t, h.targetPath(vol, "pod"))
	if n, _ := mounts.CountMounts(h.targetPath(vol, "pod")); n != 1 {
		t.Fatalf("%d mounts on the target after a %s restore, want 1", n, restore.Rebind)
	}
	hr, err := h.node.NodeGetVolumeHealth(context.Background(), &csi.NodeGetVolumeHealthRequest{VolumeId: vol, VolumePublishPath: h.targetPath(vol, "pod")})
	if err != nil || len(hr.GetVolumeHealth().GetHealthStatuses()) != 0 {
		t.Fatalf("NodeGetVolumeHealth after the restore = %v, %v; want healthy", hr, err)
	}
	// The restored server belongs to the new plugin: unstaging stops it.
	if err := h.unpublish(vol, "pod"); err != nil {
		t.Fatal(err)
	}
	if err := h.unstage(vol); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, h.mode.started()[1].Done(), "NodeUnstageVolume to stop the restored server")
}

// TestRegistration plays kubelet's plugin watcher against the built-in registration server.
func TestRegistration(t *testing.T) {
	regDir := filepath.Join(plugintest.ShortDir(t), "registry")
	const hostSocket = "/var/lib/kubelet/plugins/dummy-fuse-csi/csi.sock"
	h := newHarness(t, false, func(c *Config) {
		c.DriverName = "dummy.example.com"
		c.KubeletRegistrationPath = hostSocket
		c.RegistrationDir = regDir
	})
	sock := filepath.Join(regDir, "dummy.example.com-reg.sock")
	var conn *grpc.ClientConn
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("registration socket %s not created", sock)
		}
		time.Sleep(10 * time.Millisecond)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	reg := registerapi.NewRegistrationClient(conn)
	// The socket file appears at bind(2), a moment before listen(2): a connect in between is refused. Wait for
	// the server to be ready rather than fail on that (kubelet's plugin watcher retries as well).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	if info.GetType() != registerapi.CSIPlugin || info.GetName() != "dummy.example.com" || info.GetEndpoint() != hostSocket ||
		len(info.GetSupportedVersions()) != 1 || info.GetSupportedVersions()[0] != "1.0.0" {
		t.Fatalf("GetInfo = %v", info)
	}
	if _, err := reg.NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-h.errc:
		t.Fatalf("plugin stopped after a successful registration: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	// A rejection ends Run with an error (main then exits non-zero, like node-driver-registrar).
	if _, err := reg.NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{Error: "version mismatch"}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-h.errc:
		if err == nil {
			t.Fatal("Run returned nil after kubelet rejected the registration")
		}
		h.stop, h.errc = nil, nil
		_ = h.conn.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not end after kubelet rejected the registration")
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("registration socket left behind: %v", err)
	}
}
