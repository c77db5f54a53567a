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
	"text/tabwriter"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/command"
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
Exit code: 0 when every expected outcome of every scenario held, 1 otherwise, 2 on a usage error.

Flags:
`

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
	// everyRelease: only those to run on every kubelet release (scenarios.Scenario.OnEveryRelease).
	versionDependent, everyRelease bool
	// kubeletVersion is the kubelet the local backend models.
	kubeletVersion string
	// sidecarDelays: run the scenarios that hold their sidecar back once per delay.
	sidecarDelays string
	scenarios     []scenarios.Scenario
	// leftOut says, per scenario of "all" that the backend cannot run, why it is left out.
	leftOut []string
	// readIntervalSet: --read-interval was given (the kube backend has its own default).
	readIntervalSet bool
	kube            kube.Options
}

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// Run is the dfc-scenario command: it runs the named scenarios one after the other and returns an error when
// any failed (exit 1), a *command.UsageError for bad arguments (exit 2).
func Run(ctx context.Context, args []string, streams command.Streams) error {
	cfg, err := parse(args, streams.Err)
	if err != nil {
		return err
	}
	if cfg.list {
		return list(streams.Out, cfg.versionDependent, cfg.everyRelease)
	}
	// The first Ctrl-C lets the run clean up; a second one kills at once.
	stop := context.AfterFunc(ctx, func() { signal.Reset(syscall.SIGINT, syscall.SIGTERM) })
	defer stop()
	return runAll(ctx, cfg, streams.Out)
}

// parse reads the command line; --help gives flag.ErrHelp, bad input a *command.UsageError.
func parse(args []string, stderr io.Writer) (config, error) {
	var cfg config
	fl := flag.NewFlagSet("dfc-scenario", flag.ContinueOnError)
	fl.SetOutput(stderr)
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
	fl.StringVar(&cfg.kubeletVersion, "kubelet-version", local.KubeletVersions[0], "local: the kubelet version to model ("+strings.Join(local.KubeletVersions, ", ")+", or its minor); the kube backend judges by the node's kubelet")
	fl.StringVar(&cfg.sidecarDelays, "sidecar-delay", "", "run sidecar-late once per sidecar delay in this list (e.g. 0s,1s,3s; runs are named sidecar-late-<delay>), to see how long the first access waits as the delay varies")
	fl.StringVar(&cfg.kube.Kubeconfig, "kubeconfig", "", "kube: kubeconfig file (default $KUBECONFIG, else ~/.kube/config)")
	fl.StringVar(&cfg.kube.Context, "context", "", "kube: kubeconfig context (default: the current one)")
	fl.StringVar(&cfg.kube.Image, "image", "", "kube: dummy-fuse-csi image already on the node (default: the tag of the last make image)")
	fl.Var((*stringList)(&cfg.kube.ChartValues), "kube-set", "kube: extra chart value in --set form (repeatable)")
	fl.StringVar(&cfg.kube.KubeletDir, "kubelet-dir", kube.DefaultKubeletDir, "kube: kubelet's root dir on the node (the chart's kubeletDir)")
	fl.StringVar(&cfg.kube.KubeletLog, "kubelet-log", "", "kube: file with kubelet's log, for causes kubelet only logs (default: the from-source cluster's; on kind: journalctl in the node; - for none)")
	fl.StringVar(&cfg.kube.Probe, "probe", "auto", "kube: how the volume paths are stat'ed: host (this machine is the node), pod (a probe pod), auto")
	fl.Usage = func() {
		fmt.Fprintf(fl.Output(), usage, strings.Join(catalog.Names(), ", "))
		fl.PrintDefaults()
	}
	if err := command.Parse(fl, args); err != nil {
		return cfg, err
	}
	if cfg.list {
		return cfg, nil
	}
	if cfg.versionDependent || cfg.everyRelease {
		return cfg, command.Usagef("--version-dependent and --every-release go with --list")
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
	if cfg.scenarios, cfg.leftOut, err = selectFor(cfg.backend, fl.Args()); err != nil {
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
	return cfg, nil
}

// selectFor returns the scenarios names selects (see catalog.Select) that backend can run. A scenario named
// explicitly that it cannot run is an error; "all" leaves such scenarios out, saying why in leftOut.
func selectFor(backend string, names []string) (run []scenarios.Scenario, leftOut []string, err error) {
	for _, n := range names {
		sel, err := catalog.Select([]string{n})
		if err != nil {
			return nil, nil, err
		}
		r, l, err := runnable(backend, sel, n == "all")
		if err != nil {
			return nil, nil, err
		}
		run, leftOut = append(run, r...), append(leftOut, l...)
	}
	return run, leftOut, nil
}

// runnable returns the scenarios of scs that backend can run; the others are an error, or, when scs is the
// whole catalog (all), left out with the reason.
func runnable(backend string, scs []scenarios.Scenario, all bool) (run []scenarios.Scenario, leftOut []string, err error) {
	for _, s := range scs {
		switch err := s.RunsOn(backend); {
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

// list prints the catalog: name, title and, for a scenario whose outcome depends on the kubelet version, the
// kubelet ranges it distinguishes; with versionDependent or everyRelease only the names of those scenarios
// (or of those to run on every release), one per line.
func list(w io.Writer, versionDependent, everyRelease bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, s := range catalog.All() {
		switch {
		case versionDependent || everyRelease:
			if (versionDependent && s.VersionDependent()) || (everyRelease && s.OnEveryRelease()) {
				fmt.Fprintln(tw, s.Name)
			}
		case s.VersionDependent():
			fmt.Fprintf(tw, "%s\t%s\t(outcome depends on the kubelet version: %s)\n", s.Name, s.Title, strings.Join(kubeletRanges(&s), ", "))
		case s.EveryRelease != "":
			fmt.Fprintf(tw, "%s\t%s\t(run on every kubelet release: %s)\n", s.Name, s.Title, s.EveryRelease)
		default:
			fmt.Fprintf(tw, "%s\t%s\n", s.Name, s.Title)
		}
	}
	return tw.Flush()
}

// kubeletRanges lists the distinct kubelet ranges of a scenario's expectations.
func kubeletRanges(s *scenarios.Scenario) []string {
	var out []string
	for _, e := range s.Expect {
		if r := e.Kubelet.String(); !e.Kubelet.All() && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// runAll runs the configured scenarios one after the other; it returns an error when any failed.
func runAll(ctx context.Context, cfg config, out io.Writer) error {
	if cfg.backend == "local" && os.Geteuid() != 0 {
		return errors.New("the local backend needs root (it mounts FUSE filesystems and creates mount namespaces)")
	}
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
	failed := 0
	for _, o := range results {
		if !o.Passed() {
			failed++
		}
	}
	if ctx.Err() != nil {
		return errors.New("interrupted")
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d scenarios failed", failed, len(results))
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
	fmt.Fprintf(out, "RESULT %s on kubelet %s: %s\n", sc.Name, o.Kubelet, passFail(o.Passed()))
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
		opts.Progress = func(s string) { fmt.Fprintf(out, "    [kube] %s\n", s) }
		return kube.New(opts)
	}
	opts := local.Options{ReadInterval: cfg.readInterval, BackoffBase: cfg.backoffBase, BackoffMax: cfg.backoffMax,
		Keep: cfg.keep, KubeletVersion: cfg.kubeletVersion}
	opts.BinariesIn(cfg.binDir)
	return local.New(opts)
}

func passFail(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}
