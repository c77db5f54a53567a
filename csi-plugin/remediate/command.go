package remediate

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/restore"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/command"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/kubeletpath"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
)

// The API client's rate. client-go's default (5 requests a second, bursts of 10) stretched a pass that had to
// read many claims over tens of seconds. A pass reads each claim once, and none while every container is younger
// than its mounts; at this rate, one after a repair of every pod of a full node (110 pods with a claim each, 112
// requests) takes about 4 s, well within the interval.
const apiQPS, apiBurst = 20, 40

// Command is the csi-remediate command (cmd/csi-remediate): it runs the remediator until ctx ends.
func Command(ctx context.Context, args []string, streams command.Streams) error {
	var (
		cfg                 Config
		endpoint, strategy  string
		kubeconfig          string
		interval, healthDue time.Duration
	)
	fl := flag.NewFlagSet("csi-remediate", flag.ContinueOnError)
	fl.SetOutput(streams.Err)
	fl.StringVar(&cfg.NodeName, "node-name", "", "this node's name: only its pods are looked at (required)")
	fl.StringVar(&cfg.KubeletDir, "kubelet-dir", kubeletpath.DefaultRoot, "kubelet's root directory, as in the plugin's targets")
	fl.StringVar(&cfg.StateDir, "state-dir", "", "the plugin's --state-dir, read only: which targets are the plugin's and when it last mounted each (needed unless --driver is given)")
	fl.StringVar(&endpoint, "endpoint", "unix:///csi/csi.sock", "the plugin's CSI socket, asked NodeGetVolumeHealth per target (with --state-dir)")
	fl.Func("driver", "another CSI driver whose FUSE volumes on this node to look after too, told dead or live by a bounded statfs of each target (repeatable; needs kubelet's directory with its mounts)", func(s string) error {
		if s == "" || slices.Contains(cfg.Drivers, s) {
			return fmt.Errorf("%q: empty or given twice", s)
		}
		cfg.Drivers = append(cfg.Drivers, s)
		return nil
	})
	fl.StringVar(&strategy, "restore-strategy", string(restore.Rebind), "the plugin's --restore-strategy: with stack, containers whose volume mount propagates from the host see a repaired mount")
	fl.DurationVar(&cfg.Grace, "grace", defaultGrace, "how long a pod is given to heal on its own before the remediator acts")
	fl.DurationVar(&cfg.RateLimit, "rate-limit", defaultRateLimit, "least time between two actions on one pod")
	fl.DurationVar(&interval, "interval", 30*time.Second, "time between two passes")
	fl.DurationVar(&healthDue, "health-timeout", defaultHealthWait, "bound of one NodeGetVolumeHealth call, and of one statfs of another driver's target")
	fl.BoolVar(&cfg.DryRun, "dry-run", false, "log the decisions, delete nothing and record no event")
	fl.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: the in-cluster service account)")
	klog.InitFlags(fl)
	if err := command.Parse(fl, args); err != nil {
		return err
	}
	if fl.NArg() != 0 {
		return command.Usagef("unexpected arguments: %q", fl.Args())
	}
	if cfg.NodeName == "" {
		return command.Usagef("--node-name is required")
	}
	if cfg.StateDir == "" && len(cfg.Drivers) == 0 {
		return command.Usagef("nothing to look after: give --state-dir (dummy-fuse-csi's volumes) or --driver (another driver's), or both")
	}
	var err error
	if cfg.Strategy, err = restore.ParseStrategy(strategy); err != nil {
		return command.Usagef("--restore-strategy: %v", err)
	}
	if interval <= 0 || healthDue <= 0 {
		return command.Usagef("--interval and --health-timeout must be positive")
	}
	defer klog.Flush()

	restCfg, err := rest.InClusterConfig()
	if kubeconfig != "" || errors.Is(err, rest.ErrNotInCluster) {
		restCfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return fmt.Errorf("kubernetes client configuration: %w", err)
	}
	restCfg.UserAgent = "dummy-fuse-csi-remediator"
	restCfg.QPS, restCfg.Burst = apiQPS, apiBurst
	if cfg.Client, err = corev1client.NewForConfig(restCfg); err != nil {
		return err
	}
	if cfg.Owners, err = metadata.NewForConfig(restCfg); err != nil {
		return err
	}
	if cfg.StateDir != "" {
		conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return &command.UsageError{Err: fmt.Errorf("--endpoint: %w", err)}
		}
		defer conn.Close()
		cfg.Health = PluginHealth{Node: csi.NewNodeClient(conn), Timeout: healthDue}
	}
	if len(cfg.Drivers) > 0 {
		// Two calls per stuck mount at most: one pass's and, if it outlives the pass, the next one's.
		prober := mounts.NewProber(healthDue, 2)
		defer prober.Close()
		cfg.Mounts = MountHealth{Prober: prober}
	}
	r, err := New(cfg)
	if err != nil {
		return &command.UsageError{Err: err}
	}
	return r.Run(ctx, interval)
}
