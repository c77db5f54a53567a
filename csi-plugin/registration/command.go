package registration

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/command"
)

const usage = `Usage: csi-plugin register --csi-address PATH --kubelet-registration-path PATH [flags]

Registers another CSI driver's node plugin with kubelet, as the node-driver-registrar sidecar does: it serves
<registration-dir>/<driver>-reg.sock, where kubelet's plugin watcher learns the driver's name and the path of its
CSI socket on the node, until SIGTERM, then removes that socket. Without --driver-name the name is asked from
the driver itself (CSI Identity GetPluginInfo over --csi-address), waiting up to --driver-wait for it to serve.

Flags:
`

// DefaultDriverWait bounds how long register waits for the driver's socket to answer GetPluginInfo: a node
// plugin that has not served in that time is broken, and exiting lets the pod's restart policy show it.
const DefaultDriverWait = 2 * time.Minute

// callTimeout bounds one GetPluginInfo call, so that a driver that accepts the connection but never answers
// is asked again instead of holding the whole wait.
const callTimeout = 5 * time.Second

// Command is `csi-plugin register`.
func Command(ctx context.Context, args []string, streams command.Streams) error {
	var (
		csiAddress, kubeletPath, driverName, regDir string
		driverWait                                  time.Duration
	)
	fl := flag.NewFlagSet("csi-plugin register", flag.ContinueOnError)
	fl.SetOutput(streams.Err)
	fl.StringVar(&csiAddress, "csi-address", "", "the driver's CSI socket as mounted in this container: a path or unix:///path (required)")
	fl.StringVar(&kubeletPath, "kubelet-registration-path", "", "the same socket's absolute path on the node, which kubelet dials (required)")
	fl.StringVar(&driverName, "driver-name", "", "the CSI driver name to register (default: the driver's answer to GetPluginInfo over --csi-address)")
	fl.StringVar(&regDir, "registration-dir", "/registration", "kubelet's plugin registration directory (its plugins_registry) as mounted in this container")
	fl.DurationVar(&driverWait, "driver-wait", DefaultDriverWait, "how long to wait for the driver to answer GetPluginInfo before failing (without --driver-name)")
	klog.InitFlags(fl)
	fl.Usage = func() {
		fmt.Fprint(fl.Output(), usage)
		fl.PrintDefaults()
	}
	if err := command.Parse(fl, args); err != nil {
		return err
	}
	switch {
	case fl.NArg() != 0:
		return command.Usagef("unexpected arguments: %q", fl.Args())
	case csiAddress == "" && driverName == "":
		return command.Usagef("--csi-address is required (or --driver-name)")
	case kubeletPath == "" || !filepath.IsAbs(kubeletPath):
		return command.Usagef("--kubelet-registration-path %q: want the socket's absolute path on the node", kubeletPath)
	case regDir == "":
		return command.Usagef("--registration-dir is required")
	case driverWait <= 0:
		return command.Usagef("--driver-wait %s: want a positive duration", driverWait)
	}
	defer klog.Flush()
	if driverName == "" {
		name, err := AskDriverName(ctx, csiAddress, driverWait)
		if err != nil {
			return err
		}
		driverName = name
	}
	if err := validName(driverName); err != nil {
		return command.Usagef("driver name: %v", err)
	}
	return New(driverName, kubeletPath).Serve(ctx, SocketPath(regDir, driverName))
}

// SocketPath is where kubelet's plugin watcher looks for a driver's registration socket, node-driver-registrar's
// name for it.
func SocketPath(regDir, driverName string) string {
	return filepath.Join(regDir, driverName+"-reg.sock")
}

// validName refuses a name that cannot be a file name in the registration dir (the CSI spec allows dots, dashes
// and alphanumerics only, up to 63 characters; a slash would put the socket elsewhere).
func validName(name string) error {
	if name == "" || len(name) > 63 || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return fmt.Errorf("%q is not a CSI driver name", name)
	}
	return nil
}

// AskDriverName asks the CSI Identity service at address (a path or unix:///path) for the driver's name,
// retrying until it answers or wait has passed: the driver's container may start after this one.
func AskDriverName(ctx context.Context, address string, wait time.Duration) (string, error) {
	socket := strings.TrimPrefix(strings.TrimPrefix(address, "unix://"), "unix:")
	if socket == "" || strings.Contains(socket, "://") {
		return "", fmt.Errorf("--csi-address %q: want a unix socket path", address)
	}
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", fmt.Errorf("CSI client for %s: %w", socket, err)
	}
	defer conn.Close()
	id := csi.NewIdentityClient(conn)
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for attempt := 1; ; attempt++ {
		name, err := pluginName(ctx, id)
		if err == nil {
			klog.InfoS("Driver answered GetPluginInfo", "driver", name, "csiAddress", socket, "attempt", attempt)
			return name, nil
		}
		klog.V(2).InfoS("Driver not answering GetPluginInfo yet", "csiAddress", socket, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return "", fmt.Errorf("driver at %s did not answer GetPluginInfo within %s (%d attempts; last: %w)", socket, wait, attempt, err)
			}
			return "", fmt.Errorf("asking the driver at %s for its name: %w", socket, ctx.Err())
		case <-tick.C:
		}
	}
}

// pluginName makes one bounded GetPluginInfo call.
func pluginName(ctx context.Context, id csi.IdentityClient) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := id.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil {
		return "", err
	}
	if resp.GetName() == "" {
		return "", errors.New("GetPluginInfo answered an empty name")
	}
	return resp.GetName(), nil
}
