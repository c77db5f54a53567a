// Package cli is the dfc-scenario command: run scenarios of the catalog on a backend, print a live timeline
// and the verdicts, and write a report per run.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/command"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/catalog"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/kube"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/local"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/report"
)

const usage = `Usage: dfc-scenario [flags] SCENARIO... | all

Runs FUSE mount-loss scenarios: kills a component of the FUSE storage stack under a running workload (the
CSI plugin container, a FUSE server, the keeper, the pod's FUSE sidecar) and checks, from the workload's log,
the container runtime and stat of the volume paths, what happens.
Scenarios: %s
Exit code: 0 when every expected outcome of every scenario held, 1 otherwise, 2 on a usage error or when the
backend lacks what it needs (local: root, /dev/fuse and the binaries; kube: a cluster that answers), checked
before any scenario runs, 3 when none failed but some could not run on this cluster (NOT RUNNABLE: it lacks
what they need; the run says how to get it); 1 then too under DFC_REQUIRE_PRIVILEGED=1 (CI).

Flags:
`

// requireEnv makes a scenario that is not runnable a failure (CI), as it makes a privileged test's skip one
// (internal/testenv.RequireEnv; not imported here: that package links package testing).
const requireEnv = "DFC_REQUIRE_PRIVILEGED"

// config is the command line.
type config struct {
	backend      string
	binDir       string
	outDir       string
	readInterval time.Duration
	backoffBase  time.Duration
	backoffMax   time.Duration
	keep         bool
	list         bool
	// versionDependent: --list shows only the scenarios whose expected outcome depends on the kubelet version;
	// everyRelease: only those to run on every kubelet release (scenarios.Scenario.OnEveryRelease);
	// everyServer: only those CI runs with every real FUSE server (scenarios.Scenario.OnEveryServer); writes:
	// only the rows that write (make kube-writes).
	versionDependent, everyRelease, everyServer, writes bool
	// kubeletVersion is the kubelet the local backend models.
	kubeletVersion string
	// fuseServer is the FUSE server every scenario runs with (those that hold for it).
	fuseServer string
	// serverOpts are the settings of a server given as a spec file (--fuse-server-opt).
	serverOpts map[string]string
	// sidecarDelays: run the scenarios that hold their sidecar back once per delay.
	sidecarDelays string
	scenarios     []scenarios.Scenario
	// leftOut says, per scenario of "all" that the backend cannot run, why it is left out.
	leftOut []string
	// readIntervalSet: --read-interval was given (the kube backend has its own default).
	readIntervalSet bool
	// check: only check the flags and the scenario names (hack/scenario.sh, before it builds the binaries).
	check bool
	kube  kube.Options
	// driver: the foreign CSI driver of a driver-agnostic run (--driver and the flags that go with it).
	driver kube.DriverTarget
	// volumeAttributes is --volume-attributes as given.
	volumeAttributes string
}

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// Run is the dfc-scenario command: it runs the named scenarios one after the other and returns an error when
// any failed (exit 1), a *command.UsageError for bad arguments (exit 2), an exit 2 when the backend lacks what
// it needs.
func Run(ctx context.Context, args []string, streams command.Streams) error {
	return run(ctx, args, streams, thisMachine())
}

// run is Run on machine m.
func run(ctx context.Context, args []string, streams command.Streams, m machine) error {
	cfg, err := parse(args, streams.Out)
	if err != nil {
		return err
	}
	if cfg.list {
		return list(streams.Out, cfg.listFilter())
	}
	if err := preflight(ctx, cfg, m, args); err != nil {
		return err
	}
	if cfg.check {
		return nil
	}
	// The first Ctrl-C lets the run clean up; a second one kills at once.
	stop := context.AfterFunc(ctx, func() { signal.Reset(syscall.SIGINT, syscall.SIGTERM) })
	defer stop()
	return runAll(ctx, cfg, streams.Out)
}

// parse reads the command line; --help prints the usage to stdout and gives flag.ErrHelp, bad input a
// *command.UsageError, which command.Code prints as one line and a pointer to --help.
func parse(args []string, stdout io.Writer) (config, error) {
	var cfg config
	fl := flag.NewFlagSet("dfc-scenario", flag.ContinueOnError)
	fl.SetOutput(io.Discard) // the flag package would print a bad flag's error, then the whole usage
	fl.StringVar(&cfg.backend, "backend", "local", "where to run: local (this machine, no cluster) or kube (the cluster of the kubeconfig)")
	fl.StringVar(&cfg.binDir, "bin-dir", "", "directory with csi-plugin, dummy-fuse and dummy-fuse-workload (default: beside this executable)")
	fl.StringVar(&cfg.outDir, "out", "_output/runs", "parent of the run directories (<out>/<time>-<scenario>)")
	fl.DurationVar(&cfg.readInterval, "read-interval", 200*time.Millisecond, "workload read interval (scenarios may set their own)")
	fl.DurationVar(&cfg.backoffBase, "backoff-base", 500*time.Millisecond, "container restart back-off base (kubelet: 10s)")
	fl.DurationVar(&cfg.backoffMax, "backoff-max", 0, "container restart back-off cap (default 30 × base; kubelet: 5m)")
	fl.BoolVar(&cfg.keep, "keep", false, "leave the plugin, the workload and the mounts up after the run, and print how to clean up")
	fl.BoolVar(&cfg.list, "list", false, "list the scenarios and exit")
	fl.BoolVar(&cfg.versionDependent, "version-dependent", false, "with --list: only the names of the scenarios whose expected outcome depends on the kubelet version, one per line")
	fl.BoolVar(&cfg.everyRelease, "every-release", false, "with --list: only the names of the scenarios to run on every kubelet release, one per line (for CI): the version-dependent ones and those whose kubelet code changed between releases")
	fl.BoolVar(&cfg.writes, "writes", false, "with --list: only the names of the rows that write (a writable volume and a writer) that --backend can run, one per line: make kube-writes runs them on a cluster with --backend=kube")
	fl.BoolVar(&cfg.everyServer, "every-server", false, "with --list: only the names of the scenarios CI runs on the kube backend with each real FUSE server too, one per line: those whose outcome is about what the server does")
	fl.StringVar(&cfg.kubeletVersion, "kubelet-version", local.KubeletVersions[0], "local: the kubelet version to model ("+strings.Join(local.KubeletVersions, ", ")+", or its minor); the kube backend judges by the node's kubelet")
	fl.StringVar(&cfg.sidecarDelays, "sidecar-delay", "", "run sidecar-late once per sidecar delay in this list (e.g. 0s,1s,3s; runs are named sidecar-late-<delay>), to see how long the first access waits as the delay varies")
	fl.StringVar(&cfg.kube.Kubeconfig, "kubeconfig", "", "kube: kubeconfig file (default $KUBECONFIG, else ~/.kube/config)")
	fl.StringVar(&cfg.kube.Context, "context", "", "kube: kubeconfig context (default: the current one)")
	fl.StringVar(&cfg.kube.Image, "image", "", "kube: dummy-fuse-csi image already on the node (default: the tag of the last make image)")
	fl.Var((*stringList)(&cfg.kube.ChartValues), "kube-set", "kube: extra chart value in --set form (repeatable)")
	fl.StringVar(&cfg.kube.KubeletDir, "kubelet-dir", kube.DefaultKubeletDir, "kube: kubelet's root dir on the node (the chart's kubeletDir)")
	fl.StringVar(&cfg.kube.KubeletLog, "kubelet-log", "", "kube: file with kubelet's log, for causes kubelet only logs (default: the from-source cluster's; on kind: journalctl in the node; - for none)")
	fl.StringVar(&cfg.kube.Probe, "probe", "auto", "kube: how the volume paths are stat'ed: host (this machine is the node), pod (a probe pod), auto")
	fl.StringVar(&cfg.fuseServer, "fuse-server", fuseserver.DummyFuse, "the FUSE server the plugin runs: "+strings.Join(fuseserver.Names(), ", ")+", or the path of a server spec file (docs/server-spec.md) (the real ones need make servers; scenarios whose outcome depends on the server run with dummy-fuse only)")
	opts := fuseserver.Spec{}
	fl.Func("fuse-server-opt", "a setting of the server given as a spec file, key=value (repeatable)", opts.SetOpt)
	fl.StringVar(&cfg.driver.Name, "driver", "", "kube: run the driver-agnostic scenarios ("+strings.Join(catalog.DriverNames(), ", ")+") against the installed CSI driver of this name, instead of this project's chart")
	fl.StringVar(&cfg.driver.StorageClass, "storage-class", "", "with --driver: the volume is a claim of this StorageClass")
	fl.StringVar(&cfg.driver.PVFile, "pv", "", "with --driver: the volume is a copy of the static PersistentVolume in this YAML file")
	fl.StringVar(&cfg.volumeAttributes, "volume-attributes", "", "with --driver: the volume is an inline CSI volume with these attributes (k=v,...)")
	fl.StringVar(&cfg.driver.ReadPath, "read-path", "", "with --driver: the file the workload reads, relative to the volume's root (default: the first regular file of the volume, found on the node)")
	fl.StringVar(&cfg.driver.PluginSelector, "plugin-selector", "", "with --driver: label selector of the node plugin pod (default: the DaemonSet pod on the node whose containers name the driver)")
	fl.StringVar(&cfg.driver.FuseProcess, "fuse-process", "", "with --driver: the process in the node plugin pod that driver-process-kill kills (its /proc comm, e.g. gcsfuse)")
	fl.StringVar(&cfg.driver.Placement, "placement", "", "with --driver: where the driver keeps its FUSE servers (e.g. child, sidecar, keeper, mount-pod), as you know it: recorded, so that the matrix tells the runs apart (default unknown)")
	fl.StringVar(&cfg.driver.MountPodSelector, "mount-pod-selector", "", "with --driver: label selector of the mount pod on the node that driver-mount-pod-delete deletes")
	fl.BoolVar(&cfg.check, "check", false, "only check the flags, the scenario names and what the backend needs (local: root and /dev/fuse; kube: a cluster that answers), then exit (hack/scenario.sh does, before it builds the binaries)")
	fl.Usage = func() {}
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, usage, strings.Join(catalog.Names(), ", "))
			fl.SetOutput(stdout)
			fl.PrintDefaults()
			return cfg, flag.ErrHelp
		}
		return cfg, &command.UsageError{Err: err}
	}
	cfg.serverOpts = opts.Opts
	if cfg.list {
		return cfg, nil
	}
	if cfg.versionDependent || cfg.everyRelease || cfg.everyServer || cfg.writes {
		return cfg, command.Usagef("--version-dependent, --every-release, --every-server and --writes go with --list")
	}
	if _, err := local.ModelledKubelet(cfg.kubeletVersion); err != nil {
		return cfg, command.Usagef("--kubelet-version: %v", err)
	}
	if fl.NArg() == 0 {
		return cfg, command.Usagef("name at least one scenario (or all)")
	}
	fl.Visit(func(f *flag.Flag) { cfg.readIntervalSet = cfg.readIntervalSet || f.Name == "read-interval" })
	switch cfg.backend {
	case scenarios.BackendLocal, scenarios.BackendKube:
	default:
		return cfg, command.Usagef("unknown backend %q (%s, %s)", cfg.backend, scenarios.BackendLocal, scenarios.BackendKube)
	}
	var err error
	if _, err := fuseserver.Lookup(cfg.fuseServer); err != nil {
		return cfg, command.Usagef("--fuse-server: %v", err)
	}
	if fuseserver.IsSpecFile(cfg.fuseServer) {
		// The plugin, the keeper and the sidecars read it from directories of their own.
		if cfg.fuseServer, err = filepath.Abs(cfg.fuseServer); err != nil {
			return cfg, fmt.Errorf("--fuse-server: %w", err)
		}
	}
	switch {
	case fuseserver.IsSpecFile(cfg.fuseServer) && cfg.backend == scenarios.BackendKube && !slices.ContainsFunc(cfg.kube.ChartValues, func(s string) bool {
		return strings.HasPrefix(s, "fuseServer.image=")
	}):
		return cfg, command.Usagef("--fuse-server=%s on a cluster: the chart runs it from your image; name it and what to copy out of it with --kube-set fuseServer.image=IMAGE --kube-set 'fuseServer.files={/path/to/executable,...}' (chart/README.md)", cfg.fuseServer)
	case len(cfg.serverOpts) > 0 && !fuseserver.IsSpecFile(cfg.fuseServer):
		return cfg, command.Usagef("--fuse-server-opt goes with a server spec file (--fuse-server=FILE); the built-in servers get their settings from the backend")
	}
	if err := parseDriver(&cfg, fl); err != nil {
		return cfg, err
	}
	if cfg.kube.Driver != nil {
		if cfg.scenarios, cfg.leftOut, err = selectDrivers(cfg.driver, fl.Args()); err != nil {
			return cfg, &command.UsageError{Err: err}
		}
	} else if cfg.scenarios, cfg.leftOut, err = selectFor(cfg.backend, cfg.fuseServer, fl.Args()); err != nil {
		return cfg, &command.UsageError{Err: err}
	}
	if cfg.sidecarDelays != "" {
		delays, err := catalog.ParseDelays(cfg.sidecarDelays)
		if err == nil {
			cfg.scenarios, err = catalog.VarySidecarDelay(cfg.scenarios, delays)
		}
		if err != nil {
			return cfg, command.Usagef("--sidecar-delay: %v", err)
		}
	}
	if cfg.binDir == "" {
		exe, err := os.Executable()
		if err != nil {
			return cfg, fmt.Errorf("find own directory: %w", err) // not a usage error
		}
		cfg.binDir = filepath.Dir(exe)
	}
	// The containers start in directories of their own: a relative path would name nothing there.
	if cfg.binDir, err = filepath.Abs(cfg.binDir); err != nil {
		return cfg, fmt.Errorf("--bin-dir: %w", err)
	}
	if err := checkSpecServer(cfg); err != nil {
		return cfg, command.Usagef("--fuse-server: %v", err)
	}
	return cfg, nil
}

// checkSpecServer checks a server given as a spec file as the local backend will run it (local.Options'
// ServersDir: make servers' builds first, then $PATH), so that a missing executable or setting stops the run
// before it starts.
func checkSpecServer(cfg config) error {
	if !fuseserver.IsSpecFile(cfg.fuseServer) || cfg.backend == scenarios.BackendKube {
		return nil // on a cluster the executable is in the operator's image: the plugin checks it there
	}
	_, err := fuseserver.New(fuseserver.Spec{Name: cfg.fuseServer, Opts: cfg.serverOpts, Dirs: []string{filepath.Join(cfg.binDir, "servers")}})
	return err
}

// selectFor returns the scenarios names selects (see catalog.Select) that backend can run with the FUSE server
// called server. A scenario named explicitly that it cannot run is an error; "all" leaves such scenarios out,
// saying why in leftOut.
func selectFor(backend, server string, names []string) (run []scenarios.Scenario, leftOut []string, err error) {
	for _, n := range names {
		sel, err := catalog.Select([]string{n})
		if err != nil {
			if err := flagOnlyRow(n); err != nil {
				return nil, nil, err
			}
			return nil, nil, unknownName(n)
		}
		r, l, err := runnable(backend, server, sel, n == "all")
		if err != nil {
			return nil, nil, err
		}
		run, leftOut = append(run, r...), append(leftOut, l...)
	}
	return run, leftOut, nil
}

// runnable returns the scenarios of scs that backend can run; the others are an error, or, when scs is the
// whole catalog (all), left out with the reason.
func runnable(backend, server string, scs []scenarios.Scenario, all bool) (run []scenarios.Scenario, leftOut []string, err error) {
	for _, s := range scs {
		err := s.RunsOn(backend)
		if err == nil {
			s, err = s.ForServer(server)
		}
		switch {
		case err == nil:
			run = append(run, s)
		case all:
			leftOut = append(leftOut, err.Error())
		default:
			return nil, nil, err
		}
	}
	return run, leftOut, nil
}

// runAll runs the configured scenarios one after the other; it returns an error when any failed.
func runAll(ctx context.Context, cfg config, out io.Writer) error {
	for _, why := range cfg.leftOut {
		fmt.Fprintf(out, "left out: %s\n", why)
	}
	var results []*scenarios.Outcome
	for _, sc := range cfg.scenarios {
		results = append(results, runOne(ctx, cfg, sc, out))
		if ctx.Err() != nil {
			break
		}
	}
	if len(results) > 1 {
		fmt.Fprintln(out, "\nsummary:")
		report.PrintSummary(out, results)
	}
	if ctx.Err() != nil {
		return errors.New("interrupted")
	}
	return judge(results)
}

// judge is the command's result for the outcomes: nil when all passed, an error for exit 1 when any failed,
// exit 3 when none failed but some were not runnable (exit 1 too under DFC_REQUIRE_PRIVILEGED=1).
func judge(results []*scenarios.Outcome) error {
	failed, notRunnable, unexpected := 0, 0, 0
	for _, o := range results {
		switch o.Result() {
		case "PASS", "MEASURED":
		case "NOT RUNNABLE":
			notRunnable++
			if !o.NotRunnableExpected() {
				unexpected++
			}
		default:
			failed++
		}
	}
	switch {
	case failed > 0:
		return fmt.Errorf("%d of %d scenarios failed", failed, len(results))
	case unexpected > 0 && os.Getenv(requireEnv) == "1":
		// A row whose needs the kubelet's release foretells it lacks was not expected to run: no failure.
		return fmt.Errorf("%d of %d scenarios not runnable on this cluster although its kubelet release has what they need (a failure with %s=1)", unexpected, len(results), requireEnv)
	case notRunnable > 0:
		return &command.ExitError{Code: 3, Err: fmt.Errorf("%d of %d scenarios not runnable on this cluster (see NOT RUNNABLE above for how to make them runnable)", notRunnable, len(results))}
	}
	return nil
}

func runOne(ctx context.Context, cfg config, sc scenarios.Scenario, out io.Writer) *scenarios.Outcome {
	dir := filepath.Join(cfg.outDir, time.Now().Format("20060102-150405")+"-"+sc.Name)
	b := newBackend(cfg, out)
	fmt.Fprintf(out, "\n=== %s: %s\n", sc.Name, sc.Title)
	fmt.Fprintf(out, "    %s\n", b.Describe())
	fmt.Fprintf(out, "    run dir %s\n", dir)
	o := scenarios.Run(ctx, b, sc, scenarios.RunOptions{Dir: dir, Out: out})
	report.PrintVerdicts(out, o)
	if err := report.WriteReport(o); err != nil {
		fmt.Fprintf(out, "    report: %v\n", err)
	} else {
		fmt.Fprintf(out, "    report %s (timeline %s)\n    logs   %s\n", filepath.Join(o.Dir, "report.md"), filepath.Join(o.Dir, "timeline.svg"),
			strings.Join(append(o.Artifacts, "events.log"), " "))
	}
	fmt.Fprint(out, o.KeepNote)
	fmt.Fprintf(out, "RESULT %s on kubelet %s: %s\n", sc.Name, o.Kubelet, o.Result())
	return o
}

// newBackend returns the configured backend.
func newBackend(cfg config, out io.Writer) scenarios.Backend {
	if cfg.backend == "kube" {
		opts := cfg.kube
		if cfg.readIntervalSet {
			opts.ReadInterval = cfg.readInterval
		}
		opts.Keep = cfg.keep
		opts.ServerOpts = cfg.serverOpts
		opts.Progress = func(s string) { fmt.Fprintf(out, "    [kube] %s\n", s) }
		return kube.New(opts)
	}
	opts := local.Options{ReadInterval: cfg.readInterval, BackoffBase: cfg.backoffBase, BackoffMax: cfg.backoffMax,
		Keep: cfg.keep, KubeletVersion: cfg.kubeletVersion, ServerOpts: cfg.serverOpts}
	opts.BinariesIn(cfg.binDir)
	return local.New(opts)
}

// unknownName is the error for a name that is not in the catalog: the closest names, else where to find them.
func unknownName(n string) error {
	var best []string
	bestDist := len(n)/3 + 2 // a typo or two, not another word
	for _, c := range slices.Concat(catalog.Names(), catalog.DriverNames(), []string{"all"}) {
		d := distance(n, c)
		if strings.Contains(c, n) && len(n) >= 3 {
			d = min(d, 1)
		}
		switch {
		case d < bestDist:
			best, bestDist = []string{c}, d
		case d == bestDist:
			best = append(best, c)
		}
	}
	if len(best) == 0 || len(best) > 4 {
		return fmt.Errorf("no scenario %q (dfc-scenario --list shows them)", n)
	}
	return fmt.Errorf("no scenario %q; did you mean %s?", n, strings.Join(best, " or "))
}

// distance is the Levenshtein distance of a and b, in bytes (scenario names are ASCII).
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
