package registration

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/command"
)

// fakeIdentity is the CSI Identity service of another driver.
type fakeIdentity struct {
	csi.UnimplementedIdentityServer
	name string
}

func (f fakeIdentity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: f.name, VendorVersion: "v0.0.1"}, nil
}

// serveIdentity serves a fake driver named name on socket until the test ends.
func serveIdentity(t *testing.T, socket, name string) {
	t.Helper()
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	csi.RegisterIdentityServer(srv, fakeIdentity{name: name})
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
}

// shortDir is a temp dir whose sockets fit a unix socket address (t.TempDir can be too long for 108 bytes).
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "reg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// runRegister starts `csi-plugin register` with args; the returned channel yields its result.
func runRegister(ctx context.Context, args ...string) (<-chan error, *bytes.Buffer) {
	var stderr bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- Command(ctx, args, command.Streams{Out: &bytes.Buffer{}, Err: &stderr}) }()
	return done, &stderr
}

// waitSocket waits up to 10s for path to exist, failing early if the command has ended.
func waitSocket(t *testing.T, path string, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("register ended before serving %s: %v", path, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no registration socket %s after 10s", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitDone waits up to 10s for the command's result.
func waitDone(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("register did not return within 10s")
		return nil
	}
}

// kubelet is the plugin watcher's side: a registration client on the socket.
func kubelet(t *testing.T, socket string) registerapi.RegistrationClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return registerapi.NewRegistrationClient(conn)
}

func TestRegisterAsksDriverName(t *testing.T) {
	dir := shortDir(t)
	csiSock, regDir := filepath.Join(dir, "csi.sock"), filepath.Join(dir, "registry")
	if err := os.Mkdir(regDir, 0o755); err != nil {
		t.Fatal(err)
	}
	const hostPath = "/var/lib/kubelet/plugins/fake.csi.example/csi.sock"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done, _ := runRegister(ctx, "--csi-address=unix://"+csiSock, "--kubelet-registration-path="+hostPath, "--registration-dir="+regDir)
	// The driver starts after the registrar, as containers of one pod may.
	time.Sleep(1500 * time.Millisecond)
	serveIdentity(t, csiSock, "fake.csi.example")

	regSock := filepath.Join(regDir, "fake.csi.example-reg.sock")
	waitSocket(t, regSock, done)
	client := kubelet(t, regSock)
	callCtx, callCancel := context.WithTimeout(ctx, 5*time.Second)
	defer callCancel()
	info, err := client.GetInfo(callCtx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("GetInfo: %v", err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != "fake.csi.example" || info.Endpoint != hostPath || len(info.SupportedVersions) == 0 {
		t.Errorf("GetInfo = %+v; want a CSIPlugin named fake.csi.example at %s with versions", info, hostPath)
	}
	if _, err := client.NotifyRegistrationStatus(callCtx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatalf("NotifyRegistrationStatus: %v", err)
	}

	cancel() // SIGTERM
	if err := waitDone(t, done); err != nil {
		t.Errorf("register after SIGTERM: %v, want nil", err)
	}
	if _, err := os.Stat(regSock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("registration socket after SIGTERM: %v, want it removed (kubelet then deregisters the driver)", err)
	}
}

func TestRegisterRejected(t *testing.T) {
	regDir := shortDir(t)
	done, _ := runRegister(context.Background(), "--driver-name=given.example", "--kubelet-registration-path=/k/plugins/given.example/csi.sock", "--registration-dir="+regDir)
	regSock := filepath.Join(regDir, "given.example-reg.sock")
	waitSocket(t, regSock, done)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	client := kubelet(t, regSock)
	if info, err := client.GetInfo(ctx, &registerapi.InfoRequest{}); err != nil || info.Name != "given.example" {
		t.Fatalf("GetInfo = %+v, %v; want --driver-name given.example without asking any driver", info, err)
	}
	if _, err := client.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{Error: "version mismatch"}); err != nil {
		t.Fatalf("NotifyRegistrationStatus: %v", err)
	}
	err := waitDone(t, done)
	if err == nil || !strings.Contains(err.Error(), "version mismatch") {
		t.Errorf("register after kubelet's rejection: %v, want an error naming kubelet's reason", err)
	}
	if _, err := os.Stat(regSock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("registration socket after the rejection: %v, want it removed", err)
	}
}

func TestRegisterNoDriver(t *testing.T) {
	dir := shortDir(t)
	start := time.Now()
	done, _ := runRegister(context.Background(), "--csi-address="+filepath.Join(dir, "csi.sock"), "--kubelet-registration-path=/k/csi.sock",
		"--registration-dir="+dir, "--driver-wait=1500ms")
	err := waitDone(t, done)
	if err == nil || !strings.Contains(err.Error(), "did not answer GetPluginInfo within 1.5s") {
		t.Errorf("register without a driver: %v, want the bounded wait's error", err)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("register gave up after %s, want about --driver-wait (1.5s)", d)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("register without a driver left %v in the registration dir", entries)
	}
}

func TestRegisterUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--kubelet-registration-path=/k/csi.sock"},                            // no --csi-address nor --driver-name
		{"--csi-address=/c.sock", "--kubelet-registration-path=relative.sock"}, // kubelet dials an absolute path
		{"--driver-name=a/b", "--kubelet-registration-path=/k/csi.sock"},       // would put the socket elsewhere
		{"--csi-address=/c.sock", "--kubelet-registration-path=/k/csi.sock", "extra"},
	} {
		err := Command(context.Background(), args, command.Streams{Out: &bytes.Buffer{}, Err: &bytes.Buffer{}})
		var usage *command.UsageError
		if !errors.As(err, &usage) {
			t.Errorf("register %q: %v, want a usage error", args, err)
		}
	}
}
