// Command csi-plugin is the dummy-fuse CSI node plugin: it stages volumes by starting dummy-fuse on the staging
// path, publishes them with bind mounts, records its mounts and can restore them after a restart.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/driver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/fusemode"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/restore"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/version"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is the whole command; it returns the exit code: 0 after SIGTERM/SIGINT, 1 on failure, 2 on a usage error.
func run(args []string, stdout, stderr io.Writer) int {
	var (
		cfg         driver.Config
		strategy    string
		showVersion bool
	)
	fl := flag.NewFlagSet("csi-plugin", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.StringVar(&cfg.Endpoint, "endpoint", "unix:///csi/csi.sock", "CSI endpoint: unix:///path, unix:/path or a path")
	fl.StringVar(&cfg.NodeID, "nodeid", "", "node ID reported by NodeGetInfo (required)")
	fl.StringVar(&cfg.DriverName, "drivername", driver.DefaultDriverName, "CSI driver name")
	fl.StringVar(&cfg.StateDir, "state-dir", "", "directory for mount records (empty: keep none)")
	fl.StringVar(&cfg.EphemeralDir, "ephemeral-dir", "", "directory where inline ephemeral volumes are staged, one subdirectory per volume ID (default: \"ephemeral\" beside the CSI socket)")
	fl.BoolVar(&cfg.RestoreMounts, "restore-mounts", false, "at start-up, before Probe is ready, remount recorded volumes whose mounts are dead")
	fl.StringVar(&strategy, "restore-strategy", string(restore.Rebind), "how a dead published target is repaired: rebind (unmount it, bind again) or stack (bind on top of it, reaching running containers with HostToContainer propagation)")
	fl.StringVar(&cfg.FuseMode, "fuse-mode", fusemode.ChildName, "where FUSE servers run: "+strings.Join(fusemode.Names(), ", "))
	fl.StringVar(&cfg.FuseOptions.DummyFusePath, "dummy-fuse-path", "", "dummy-fuse executable (default: beside this executable, else in $PATH)")
	fl.BoolVar(&cfg.FuseOptions.DirectIO, "fuse-direct-io", false, "pass --direct-io to dummy-fuse")
	fl.IntVar(&cfg.HealthPort, "health-port", 0, "serve HTTP /healthz (200 once Probe is ready) on this port; 0 disables it")
	fl.StringVar(&cfg.KubeletRegistrationPath, "kubelet-registration-path", "", "CSI socket path on the host, announced to kubelet by the built-in plugin registration (needs --registration-dir)")
	fl.StringVar(&cfg.RegistrationDir, "registration-dir", "", "kubelet plugin registration directory (as mounted in this container) where <drivername>-reg.sock is served")
	fl.BoolVar(&showVersion, "version", false, "print the version and exit")
	klog.InitFlags(fl)
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if showVersion {
		fmt.Fprintln(stdout, version.Version)
		return 0
	}
	if fl.NArg() != 0 {
		fmt.Fprintf(stderr, "csi-plugin: unexpected arguments: %q\n", fl.Args())
		return 2
	}
	defer klog.Flush()
	cfg.RestoreStrategy = restore.Strategy(strategy)
	if cfg.FuseOptions.DummyFusePath == "" {
		cfg.FuseOptions.DummyFusePath = fusemode.FindDummyFuse()
	}

	d, err := driver.New(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "csi-plugin: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := d.Run(ctx); err != nil {
		klog.ErrorS(err, "csi-plugin failed")
		return 1
	}
	return 0
}
