// Package registration registers the plugin with kubelet itself, as the node-driver-registrar sidecar would:
// kubelet's plugin watcher finds <registration dir>/<driver>-reg.sock, calls GetInfo to learn the driver name and
// where its CSI socket is, then reports the outcome with NotifyRegistrationStatus.
package registration

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fdpass"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/grpcstop"
)

// SupportedVersions are the CSI versions announced to kubelet.
var SupportedVersions = []string{"1.0.0"}

// Server is the kubelet plugin Registration service of one CSI driver.
type Server struct {
	registerapi.UnimplementedRegistrationServer
	driverName string
	endpoint   string
	failed     chan error
}

// New returns a Server announcing driverName, reachable by kubelet at endpoint (the CSI socket path on the host).
func New(driverName, endpoint string) *Server {
	return &Server{driverName: driverName, endpoint: endpoint, failed: make(chan error, 1)}
}

// GetInfo tells kubelet who the plugin is and where its CSI socket is.
func (s *Server) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              s.driverName,
		Endpoint:          s.endpoint,
		SupportedVersions: SupportedVersions,
	}, nil
}

// NotifyRegistrationStatus logs kubelet's verdict. A rejection ends Serve with an error: like
// node-driver-registrar, the plugin then exits non-zero and its restart retries the registration.
func (s *Server) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if st.GetPluginRegistered() {
		klog.InfoS("Registered with kubelet", "driver", s.driverName, "endpoint", s.endpoint)
		return &registerapi.RegistrationStatusResponse{}, nil
	}
	klog.ErrorS(nil, "Kubelet rejected the plugin registration", "driver", s.driverName, "error", st.GetError())
	select {
	case s.failed <- fmt.Errorf("kubelet rejected the plugin registration: %s", st.GetError()):
	default:
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// Serve listens on socketPath (replacing a stale socket) until ctx ends (then it removes the socket, which tells
// kubelet the plugin is gone) or kubelet rejects the registration (then it returns that error).
func (s *Server) Serve(ctx context.Context, socketPath string) error {
	l, err := fdpass.Listen("unix", socketPath, 0)
	if err != nil {
		return fmt.Errorf("registration socket: %w", err)
	}
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, s)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	klog.InfoS("Serving kubelet plugin registration", "socket", socketPath, "driver", s.driverName, "endpoint", s.endpoint)
	defer func() {
		// Graceful: the NotifyRegistrationStatus call that reported a rejection still gets its answer.
		grpcstop.Stop(srv, time.Second)
		if err := os.Remove(socketPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
			klog.ErrorS(err, "Removing the registration socket")
		}
	}()
	select {
	case <-ctx.Done():
		return nil
	case err := <-s.failed:
		return err
	case err := <-served:
		return fmt.Errorf("serving registration: %w", err)
	}
}
