// Package grpcstop stops a gRPC server within a bound: the plugin's CSI and registration servers both let
// running calls finish, but a caller (kubelet) that keeps a call open must not hold the plugin's exit.
package grpcstop

import (
	"time"

	"google.golang.org/grpc"
)

// Stop stops srv gracefully (running calls finish) and, past within, at once (they are cut short).
func Stop(srv *grpc.Server, within time.Duration) {
	done := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(within):
		srv.Stop()
	}
}
