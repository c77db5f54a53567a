// Command csi-plugin is the dummy-fuse CSI node plugin: it stages volumes by starting dummy-fuse on the staging
// path, publishes them with bind mounts, records its mounts and can restore them after a restart.
// `csi-plugin sidecar` is the unprivileged container of the workload pod in the sidecar FUSE mode (package
// sidecar), `csi-plugin server-crash` (or sidecar-crash), run in that container or the plugin's in the child
// mode, kills its FUSE servers as a crash would; `csi-plugin keeper` the unprivileged keeper of FUSE connections in the keeper mode (package keeper).
// `csi-plugin register` registers another driver's node plugin with kubelet, as node-driver-registrar does
// (package registration), for foreign drivers on a cluster that cannot fetch that sidecar.
// The remediator is a binary of its own, csi-remediate (cmd/csi-remediate). Run as fusermount (a link by that
// name, which the keeper makes for its real servers), it is the stand-in of fuseserver.Fusermount.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/driver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/fusemode"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/keeper"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/registration"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/restore"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/sidecar"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/command"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/version"
)

func main() {
	if fuseserver.IsFusermount(os.Args[0]) {
		os.Exit(fuseserver.Fusermount(os.Args[1:], os.Stderr))
	}
	os.Exit(command.Main("csi-plugin", run, os.Args[1:], command.OS()))
}

// run is the whole command: it serves until ctx ends (SIGTERM/SIGINT) and returns nil then. Bad flags or a
// configuration the driver refuses are a *command.UsageError (exit 2); a failure to start or serve is exit 1.
func run(ctx context.Context, args []string, streams command.Streams) error {
	if len(args) > 0 {
		switch args[0] {
		case "sidecar":
			return sidecar.Run(ctx, args[1:], streams)
		case "keeper":
			return keeper.Command(ctx, args[1:], streams)
		case "server-crash", "sidecar-crash":
			return sidecar.Crash(ctx, args[1:], streams)
		case "register":
			return registration.Command(ctx, args[1:], streams)
		}
	}
	var (
		cfg         driver.Config
		strategy    string
		showVersion bool
	)
	fl := flag.NewFlagSet("csi-plugin", flag.ContinueOnError)
	fl.SetOutput(streams.Err)
	fl.StringVar(&cfg.Endpoint, "endpoint", "unix:///csi/csi.sock", "CSI endpoint: unix:///path, unix:/path or a path")
	fl.StringVar(&cfg.NodeID, "nodeid", "", "node ID reported by NodeGetInfo (required)")
	fl.StringVar(&cfg.DriverName, "drivername", driver.DefaultDriverName, "CSI driver name")
	fl.StringVar(&cfg.StateDir, "state-dir", "", "directory for mount records (empty: keep none)")
	fl.StringVar(&cfg.EphemeralDir, "ephemeral-dir", "", "directory where inline ephemeral volumes are staged, one subdirectory per volume ID (default: \"ephemeral\" beside the CSI socket)")
	fl.BoolVar(&cfg.RestoreMounts, "restore-mounts", false, "at start-up, before Probe is ready, remount recorded volumes whose mounts are dead")
	fl.StringVar(&strategy, "restore-strategy", string(restore.Rebind), "how a dead published target is repaired: rebind (unmount it, bind again), stack (bind on top of it, reaching running containers with HostToContainer propagation) or setns (rebind, then re-bind inside running containers; needs hostPID)")
	fl.StringVar(&cfg.FuseMode, "fuse-mode", fusemode.ChildName, "where FUSE servers run: "+strings.Join(fusemode.Names(), ", "))
	cfg.FuseOptions.Server.Flags(fl)
	fl.BoolVar(&cfg.FuseOptions.Server.DirectIO, "fuse-direct-io", false, "pass --direct-io to dummy-fuse")
	fl.BoolVar(&cfg.FuseOptions.SidecarKeepFD, "sidecar-keep-fd", false, "sidecar mode: keep a copy of each target's FUSE descriptor, so that a restarted sidecar takes the live connection over instead of finding nothing")
	fl.StringVar(&cfg.FuseOptions.KeeperSocket, "keeper-socket", "", "keeper mode: where keepers (csi-plugin keeper) connect (default: "+driver.KeeperSocketName+" beside the CSI socket)")
	fl.IntVar(&cfg.FuseOptions.KeeperUID, "keeper-uid", fusemode.DefaultKeeperID, "keeper mode: the only user ID a keeper may connect as (the chart's keeper user; nothing else on the node should run as it)")
	fl.IntVar(&cfg.FuseOptions.KeeperGID, "keeper-gid", -1, "keeper mode: the only group ID a keeper may connect as (-1: any group of that user; the chart sets the keeper's)")
	fl.DurationVar(&cfg.FuseOptions.UnservedLimit, "unserved-abort-after", fusemode.DefaultUnservedLimit, "keeper mode and --sidecar-keep-fd: abort a FUSE connection the plugin keeps when requests wait on it this long while no server answers it, so that callers get an error instead of hanging (0: never)")
	fl.StringVar(&cfg.FuseOptions.RelayDir, "relay-dir", "", "relay mode: the plugin's directory for each volume's private backend mount and the relay's node table (default: "+driver.RelayDirName+" beside the CSI socket)")
	fl.StringVar(&cfg.FuseOptions.RelayPath, "relay-path", "", "relay mode: the relay's executable, dummy-fuse (default: beside this executable, else in $PATH)")
	fl.DurationVar(&cfg.FuseOptions.RelayBackendWait, "relay-backend-wait", fusemode.DefaultRelayBackendWait, "relay mode: how long the relay lets requests wait for a dead real server to serve again before they fail (its --backend-wait)")
	fl.IntVar(&cfg.FuseOptions.RelayServerUID, "relay-server-uid", fusemode.DefaultRelayServerUID, "relay mode: the user and group ID the real FUSE server runs as (-1: as the plugin); it serves the descriptor the plugin mounted and needs no privilege")
	fl.BoolVar(&cfg.FuseOptions.Writable, "relay-writable", false, "relay and relay-keeper modes: mount volumes read-write and have the relay forward writes, replaying what a dead real server had acknowledged but not made durable (the relay-keeper mode's keeper needs --relay-writable too)")
	fl.IntVar(&cfg.HealthPort, "health-port", 0, "serve HTTP /healthz (200 once Probe is ready) on this port; 0 disables it")
	fl.StringVar(&cfg.KubeletRegistrationPath, "kubelet-registration-path", "", "CSI socket path on the host, announced to kubelet by the built-in plugin registration (needs --registration-dir)")
	fl.StringVar(&cfg.RegistrationDir, "registration-dir", "", "kubelet plugin registration directory (as mounted in this container) where <drivername>-reg.sock is served")
	fl.BoolVar(&showVersion, "version", false, "print the version and exit")
	klog.InitFlags(fl)
	if err := command.Parse(fl, args); err != nil {
		return err
	}
	if showVersion {
		_, err := fmt.Fprintln(streams.Out, version.Version)
		return err
	}
	if fl.NArg() != 0 {
		return command.Usagef("unexpected arguments: %q", fl.Args())
	}
	defer klog.Flush()
	cfg.RestoreStrategy = restore.Strategy(strategy)

	d, err := driver.New(cfg)
	if err != nil {
		var invalid *driver.ConfigError
		if errors.As(err, &invalid) {
			return &command.UsageError{Err: err}
		}
		return err
	}
	return d.Run(ctx)
}
