// Command dummy-fuse-workload keeps reading a file and logs every open, read and error, to show what an
// application sees when the FUSE mount under it is lost. See package workload.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse-workload/workload"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := workload.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, workload.Env{})
	stop()
	os.Exit(code)
}
