package driver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/registration"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/volumecondition"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fdpass"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/grpcstop"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/version"
)

// maxSocketPath is the longest path a unix socket address can hold (sun_path is 108 bytes with the NUL).
const maxSocketPath = 107

// ParseEndpoint returns the socket path of a CSI endpoint: unix:///path, unix://path, unix:/path or a bare path.
func ParseEndpoint(ep string) (string, error) {
	p := ep
	switch {
	case strings.HasPrefix(strings.ToLower(ep), "unix://"):
		p = ep[len("unix://"):]
	case strings.HasPrefix(strings.ToLower(ep), "unix:"):
		p = ep[len("unix:"):]
	case strings.Contains(ep, "://"):
		return "", fmt.Errorf("endpoint %q: only unix sockets are supported", ep)
	}
	if p == "" {
		return "", fmt.Errorf("endpoint %q: empty socket path", ep)
	}
	if len(p) > maxSocketPath {
		return "", fmt.Errorf("endpoint %q: socket path longer than %d bytes", ep, maxSocketPath)
	}
	return p, nil
}

// logGRPC logs every call like csi-driver-host-path: the method at V(3) (Probe, which liveness probes call
// constantly, at V(5)), request and response without secrets at V(5), errors always. It also turns an error
// that is not a gRPC status into Internal, loudly: handlers are meant to return deliberate status errors only.
func (d *Driver) logGRPC(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	id := d.callID.Add(1)
	level := klog.Level(3)
	if info.FullMethod == "/csi.v1.Identity/Probe" {
		level = 5
	}
	klog.V(level).Infof("[ID:%d] GRPC call: %s", id, info.FullMethod)
	if klog.V(5).Enabled() {
		// Clipped: a request is untrusted, and a megabyte field would otherwise land in the log as it is.
		klog.V(5).Infof("[ID:%d] GRPC request: %s", id, clipLine(protosanitizer.StripSecrets(req).String()))
	}
	resp, err := handler(ctx, req)
	if err != nil {
		if _, ok := status.FromError(err); !ok {
			klog.Errorf("[ID:%d] BUG: handler returned a non-status error: %s", id, clipLine(err.Error()))
			err = status.Error(codes.Internal, err.Error())
		}
		klog.Errorf("[ID:%d] GRPC error: %s", id, clipLine(err.Error()))
		return resp, err
	}
	if klog.V(5).Enabled() {
		klog.V(5).Infof("[ID:%d] GRPC response: %s", id, clipLine(protosanitizer.StripSecrets(resp).String()))
		// The spec ≤ v1.12 condition travels as an unknown field, which the line above does not show.
		if stats, ok := resp.(*csi.NodeGetVolumeStatsResponse); ok {
			if c, ok := volumecondition.Get(stats); ok {
				klog.V(5).Infof("[ID:%d] GRPC response volume_condition (field 2, CSI spec <= v1.12): abnormal=%v message=%s", id, c.Abnormal, clipLine(strconv.Quote(c.Message)))
			}
		}
	}
	return resp, nil
}

// HealthHandler serves /healthz: 200 once Probe is ready, 503 before (while mounts are being restored).
func (d *Driver) HealthHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !d.Ready() {
			http.Error(w, "not ready: restoring mounts", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// Run serves until ctx ends or a server fails: the CSI socket at once (Probe says not ready), then the restore of
// recorded mounts, then readiness and the kubelet registration. A graceful stop leaves the FUSE servers to the
// mode's rules: in child mode they die with this process, which is the failure the testbed reproduces.
func (d *Driver) Run(ctx context.Context) error {
	if d.ownMode {
		defer d.mode.Close()
	}
	lis, err := fdpass.Listen("unix", d.socket, 0)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(d.logGRPC))
	csi.RegisterIdentityServer(srv, identityServer{d: d})
	csi.RegisterNodeServer(srv, nodeServer{d: d})
	if d.cfg.ControllerServer != nil {
		csi.RegisterControllerServer(srv, d.cfg.ControllerServer)
	}
	errs := make(chan error, 3)
	go func() {
		if err := srv.Serve(lis); err != nil {
			errs <- fmt.Errorf("serving CSI: %w", err)
		}
	}()
	defer func() {
		grpcstop.Stop(srv, grpcStopWait)
		_ = os.Remove(d.socket)
	}()
	klog.InfoS("Serving CSI", "endpoint", d.socket, "driver", d.cfg.DriverName, "nodeID", d.cfg.NodeID,
		"version", version.Version, "fuseMode", d.mode.Name(), "stateDir", d.cfg.StateDir)

	if d.cfg.HealthPort != 0 {
		hl, err := net.Listen("tcp", ":"+strconv.Itoa(d.cfg.HealthPort))
		if err != nil {
			return fmt.Errorf("health port: %w", err)
		}
		hs := &http.Server{Handler: d.HealthHandler(), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := hs.Serve(hl); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs <- fmt.Errorf("serving /healthz: %w", err)
			}
		}()
		defer hs.Close()
	}

	start := time.Now()
	if err := d.loadRecords(ctx); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	d.ready.Store(true)
	klog.InfoS("Ready", "startup", time.Since(start))

	if d.cfg.KubeletRegistrationPath != "" {
		reg := registration.New(d.cfg.DriverName, d.cfg.KubeletRegistrationPath)
		sock := filepath.Join(d.cfg.RegistrationDir, d.cfg.DriverName+"-reg.sock")
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := reg.Serve(rctx, sock); err != nil {
				errs <- err
			}
		}()
		defer func() { cancel(); <-done }()
	}

	select {
	case <-ctx.Done():
		klog.InfoS("Stopping", "reason", context.Cause(ctx))
		return nil
	case err := <-errs:
		return err
	}
}

// grpcStopWait bounds how long the plugin's exit lets running CSI calls finish: with the registration server's
// stop and the mode's Close (what peers sent: fusemode's drain), the plugin is gone within 10 s of SIGTERM. A
// call cut short is retried by kubelet.
const grpcStopWait = 4 * time.Second
