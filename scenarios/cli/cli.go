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
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/kube"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/local"
)

const usage = `Usage: dfc-scenario [flags] SCENARIO... | all

Runs FUSE mount-loss scenarios: kills the CSI plugin container under a running workload and checks, from
the workload's log, the container runtime and stat of the volume paths, what happens.
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
	names        []string
	// readIntervalSet: --read-interval was given (the kube backend has its own default).
	readIntervalSet bool
	kube            kube.Options
}

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// Main runs the command and returns its exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	cfg, code := parse(args, stdout, stderr)
	if code >= 0 {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C kills at once; the first one lets the run clean up
	}()
	if err := Run(ctx, cfg, stdout); err != nil {
		fmt.Fprintf(stderr, "dfc-scenario: %v\n", err)
		return 1
	}
	return 0
}

func parse(args []string, stdout, stderr io.Writer) (config, int) {
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
	fl.StringVar(&cfg.kube.Kubeconfig, "kubeconfig", "", "kube: kubeconfig file (default $KUBECONFIG, else ~/.kube/config)")
	fl.StringVar(&cfg.kube.Context, "context", "", "kube: kubeconfig context (default: the current one)")
	fl.StringVar(&cfg.kube.Image, "image", "", "kube: dummy-fuse-csi image already on the node (default: the tag of the last make image)")
	fl.Var((*stringList)(&cfg.kube.ChartValues), "kube-set", "kube: extra chart value in --set form (repeatable)")
	fl.StringVar(&cfg.kube.KubeletDir, "kubelet-dir", kube.DefaultKubeletDir, "kube: kubelet's root dir on the node (the chart's kubeletDir)")
	fl.StringVar(&cfg.kube.KubeletLog, "kubelet-log", "", "kube: file with kubelet's log, for causes kubelet only logs (default: the from-source cluster's; on kind: journalctl in the node; - for none)")
	fl.StringVar(&cfg.kube.Probe, "probe", "auto", "kube: how the volume paths are stat'ed: host (this machine is the node), pod (a probe pod), auto")
	fl.Usage = func() {
		fmt.Fprintf(fl.Output(), usage, strings.Join(scenarios.Names(), ", "))
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, 0
		}
		return cfg, 2
	}
	if cfg.list {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		for _, s := range scenarios.Catalog() {
			fmt.Fprintf(tw, "%s\t%s\n", s.Name, s.Title)
		}
		tw.Flush()
		return cfg, 0
	}
	for _, a := range fl.Args() {
		if a == "all" {
			cfg.names = append(cfg.names, scenarios.Names()...)
			continue
		}
		if _, err := scenarios.Lookup(a); err != nil {
			fmt.Fprintf(stderr, "dfc-scenario: %v\n", err)
			return cfg, 2
		}
		cfg.names = append(cfg.names, a)
	}
	if len(cfg.names) == 0 {
		fmt.Fprintln(stderr, "dfc-scenario: name at least one scenario (or all)")
		fl.Usage()
		return cfg, 2
	}
	fl.Visit(func(f *flag.Flag) { cfg.readIntervalSet = cfg.readIntervalSet || f.Name == "read-interval" })
	switch cfg.backend {
	case "local", "kube":
	default:
		fmt.Fprintf(stderr, "dfc-scenario: unknown backend %q (local, kube)\n", cfg.backend)
		return cfg, 2
	}
	if cfg.binDir == "" {
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintf(stderr, "dfc-scenario: find own directory: %v\n", err)
			return cfg, 1
		}
		cfg.binDir = filepath.Dir(exe)
	}
	return cfg, -1
}

// Run runs the configured scenarios one after the other; it returns an error when any failed.
func Run(ctx context.Context, cfg config, out io.Writer) error {
	if cfg.backend == "local" && os.Geteuid() != 0 {
		return errors.New("the local backend needs root (it mounts FUSE filesystems and creates mount namespaces)")
	}
	var results []*scenarios.Outcome
	for _, name := range cfg.names {
		sc, err := scenarios.Lookup(name)
		if err != nil {
			return err
		}
		o, err := runOne(ctx, cfg, sc, out)
		if err != nil {
			return err
		}
		results = append(results, o)
		if ctx.Err() != nil {
			break
		}
	}
	if len(results) > 1 {
		fmt.Fprintln(out, "\nsummary:")
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  scenario\tresult\tkill→ENOTCONN\tkill→good read\twall\treport")
		for _, o := range results {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", o.Scenario.Name, passFail(o.Passed()),
				scenarios.FormatMeasure(o.Measures.KillToError), scenarios.FormatMeasure(o.Measures.KillToRecovery),
				o.Measures.Wall.Round(10*time.Millisecond), filepath.Join(o.Dir, "report.md"))
		}
		tw.Flush()
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

func runOne(ctx context.Context, cfg config, sc scenarios.Scenario, out io.Writer) (*scenarios.Outcome, error) {
	dir := filepath.Join(cfg.outDir, time.Now().Format("20060102-150405")+"-"+sc.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	b, logs, stopTimeout := newBackend(cfg, out)
	t := b.Timing()
	fmt.Fprintf(out, "\n=== %s: %s\n", sc.Name, sc.Title)
	if kb, ok := b.(*kube.Backend); ok {
		fmt.Fprintf(out, "    backend kube: read interval %s, kubelet's own restart back-off (%s doubling to %s), image %s\n",
			t.ReadInterval, t.BackoffBase, t.BackoffMax, kb.Image())
	} else {
		fmt.Fprintf(out, "    backend %s: read interval %s, restart back-off %s doubling to %s — shortened for a fast run (kubelet: 10s doubling to 5m)\n",
			b.Name(), t.ReadInterval, t.BackoffBase, t.BackoffMax)
	}
	fmt.Fprintf(out, "    run dir %s\n", dir)
	o := scenarios.Run(ctx, b, sc, scenarios.RunOptions{Dir: dir, Out: out, StopTimeout: stopTimeout})
	scenarios.PrintVerdicts(out, o)
	if err := scenarios.WriteReport(o); err != nil {
		fmt.Fprintf(out, "    report: %v\n", err)
	} else {
		fmt.Fprintf(out, "    report %s (timeline %s)\n    logs   %s\n", filepath.Join(dir, "report.md"), filepath.Join(dir, "timeline.svg"),
			strings.Join(logs, " "))
	}
	if note := b.KeepNote(); note != "" {
		fmt.Fprint(out, note)
	}
	fmt.Fprintf(out, "RESULT %s: %s\n", sc.Name, passFail(o.Passed()))
	return o, nil
}

// backend is what runOne needs of a backend.
type backend interface {
	scenarios.Backend
	KeepNote() string
}

// newBackend returns the configured backend, the logs it writes into the run dir and its teardown bound.
func newBackend(cfg config, out io.Writer) (backend, []string, time.Duration) {
	if cfg.backend == "kube" {
		opts := cfg.kube
		if cfg.readIntervalSet {
			opts.ReadInterval = cfg.readInterval
		}
		opts.Keep = cfg.keep
		opts.Progress = func(s string) { fmt.Fprintf(out, "    [kube] %s\n", s) }
		// Teardown waits for kubelet to unpublish and unstage, for helm and for the namespace.
		return kube.New(opts), []string{"plugin.log", "workload.log", "kube.log", "kubelet.log", "events.log"}, 10 * time.Minute
	}
	opts := local.Options{ReadInterval: cfg.readInterval, BackoffBase: cfg.backoffBase, BackoffMax: cfg.backoffMax,
		Keep: cfg.keep}
	opts.BinariesIn(cfg.binDir)
	return local.New(opts), []string{"plugin.log", "workload.log", "kubelet.log", "events.log"}, 0
}

func passFail(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}
