package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/kube"
)

// optInEnv turns the cluster tests on.
const optInEnv = "DFC_KUBE_E2E"

var (
	testEnv env.Environment
	// problem says why the scenarios cannot run (set by the setup); the tests then skip or fail.
	problem   = optInEnv + "=1 not set: the catalog runs against a cluster only on request (make test-kube)"
	opts      kube.Options
	artifacts string
	outcomes  []*scenarios.Outcome
)

func TestMain(m *testing.M) {
	if os.Getenv(optInEnv) != "1" {
		os.Exit(m.Run())
	}
	cfg, err := envconf.NewFromFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	testEnv = env.NewWithConfig(cfg)
	testEnv.Setup(useCluster, loadImage)
	testEnv.Finish(summarize, exportKindLogs)
	os.Exit(testEnv.Run(m))
}

// useCluster checks that the kubeconfig's cluster answers and prepares the backend's options. An unreachable
// cluster is not a setup error: the tests report it (skip, or fail in CI).
func useCluster(ctx context.Context, cfg *envconf.Config) (context.Context, error) {
	repo, err := kube.FindRepo(".")
	if err != nil {
		return ctx, err
	}
	artifacts = os.Getenv("DFC_KUBE_ARTIFACTS")
	if artifacts == "" {
		artifacts = filepath.Join(repo, "_output", "kube-e2e", time.Now().Format("20060102-150405"))
	}
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		return ctx, err
	}
	opts = kube.Options{Kubeconfig: cfg.KubeconfigFile(), Context: cfg.KubeContext(), Repo: repo, Image: os.Getenv("DFC_KUBE_IMAGE")}
	if s := os.Getenv("DFC_KUBE_SET"); s != "" {
		opts.ChartValues = strings.Split(s, ",")
	}
	if opts.Image == "" {
		if opts.Image, err = kube.ImageRef(repo); err != nil {
			problem = err.Error()
			return ctx, nil
		}
	}
	rc, err := kube.RESTConfig(opts)
	if err != nil {
		problem = "no cluster: " + err.Error()
		return ctx, nil
	}
	rc.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return ctx, err
	}
	ver, err := cs.Discovery().ServerVersion()
	if err != nil {
		problem = fmt.Sprintf("no cluster reachable at %s: %v (make cluster-up or make kind-up, then KUBECONFIG)", rc.Host, err)
		return ctx, nil
	}
	problem = ""
	fmt.Printf("e2e: cluster %s (Kubernetes %s), image %s, run dirs in %s\n", rc.Host, ver.GitVersion, opts.Image, artifacts)
	return ctx, nil
}

// loadImage loads the image tarball of `make image` into a kind cluster when DFC_KIND_CLUSTER names one
// (the from-source cluster imports it itself: make cluster-up / cluster-load-images).
func loadImage(ctx context.Context, _ *envconf.Config) (context.Context, error) {
	cluster := os.Getenv("DFC_KIND_CLUSTER")
	if cluster == "" || problem != "" {
		return ctx, nil
	}
	_, tag, _ := strings.Cut(opts.Image, ":")
	archive := filepath.Join(opts.Repo, "_output", "images", "dummy-fuse-csi-"+tag+".tar")
	out, err := exec.CommandContext(ctx, "kind", "load", "image-archive", archive, "--name", cluster).CombinedOutput()
	if err != nil {
		return ctx, fmt.Errorf("kind load image-archive %s --name %s: %w\n%s", archive, cluster, err, out)
	}
	return ctx, nil
}

// summarize prints each scenario's result and timings and writes them to summary.md in the artifacts dir.
func summarize(ctx context.Context, _ *envconf.Config) (context.Context, error) {
	if len(outcomes) == 0 {
		return ctx, nil
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tresult\tkill→ENOTCONN\tkill→volume restored\tkill→good read\twall\trun dir")
	for _, o := range outcomes {
		res := "PASS"
		if !o.Passed() {
			res = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", o.Scenario.Name, res, scenarios.FormatMeasure(o.Measures.KillToError),
			scenarios.FormatMeasure(o.Measures.KillToRestore), scenarios.FormatMeasure(o.Measures.KillToRecovery),
			o.Measures.Wall.Round(100*time.Millisecond), o.Dir)
	}
	tw.Flush()
	fmt.Print("\n" + b.String())
	return ctx, os.WriteFile(filepath.Join(artifacts, "summary.txt"), []byte(b.String()), 0o644)
}

// exportKindLogs exports the kind cluster's logs (kubelet, containerd) next to the run dirs.
func exportKindLogs(ctx context.Context, _ *envconf.Config) (context.Context, error) {
	cluster := os.Getenv("DFC_KIND_CLUSTER")
	if cluster == "" || artifacts == "" {
		return ctx, nil
	}
	out, err := exec.CommandContext(ctx, "kind", "export", "logs", filepath.Join(artifacts, "kind-logs"), "--name", cluster).CombinedOutput()
	if err != nil {
		return ctx, fmt.Errorf("kind export logs: %w\n%s", err, out)
	}
	return ctx, nil
}

type outcomeKey struct{}

// TestScenarios runs every scenario of the catalog on the cluster: one feature per scenario, whose first
// assessment runs it (setup, steps, teardown) and whose further assessments are its expected outcomes.
func TestScenarios(t *testing.T) {
	if problem != "" {
		if os.Getenv(optInEnv) != "1" {
			t.Skip(problem) // not requested: never a failure, not even in CI's make test
		}
		testenv.SkipOrFail(t, problem)
	}
	var feats []features.Feature
	for _, sc := range scenarios.Catalog() {
		feats = append(feats, scenarioFeature(sc))
	}
	testEnv.Test(t, feats...)
}

func scenarioFeature(sc scenarios.Scenario) features.Feature {
	f := features.New(sc.Name).WithLabel("scenario", sc.Name).
		Assess("runs on the cluster and cleans up", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			dir := filepath.Join(artifacts, sc.Name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			o := opts
			o.Progress = func(s string) { t.Log(s) }
			b := kube.New(o)
			// The live timeline streams with -v (a scenario takes a minute or more), else it is logged at the end.
			var live strings.Builder
			var out io.Writer = &live
			if testing.Verbose() {
				out = os.Stdout
			}
			run := scenarios.Run(ctx, b, sc, scenarios.RunOptions{Dir: dir, Out: out, Poll: 200 * time.Millisecond,
				StopTimeout: 10 * time.Minute})
			outcomes = append(outcomes, run)
			if live.Len() > 0 {
				t.Logf("timeline:\n%s", live.String())
			}
			var verdicts strings.Builder
			scenarios.PrintVerdicts(&verdicts, run)
			t.Logf("%s", verdicts.String())
			if err := scenarios.WriteReport(run); err != nil {
				t.Errorf("report: %v", err)
			}
			t.Logf("report %s", filepath.Join(dir, "report.md"))
			if run.Err != nil {
				t.Errorf("the run: %v", run.Err)
			}
			if run.CleanupErr != nil {
				t.Errorf("cleanup: %v", run.CleanupErr)
			}
			return context.WithValue(ctx, outcomeKey{}, run)
		})
	for i, e := range sc.Expect {
		name := e.Check.Describe()
		f = f.Assess(name, func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			run, _ := ctx.Value(outcomeKey{}).(*scenarios.Outcome)
			if run == nil || len(run.Verdicts) <= i {
				t.Fatal("the scenario did not run")
			}
			v := run.Verdicts[i]
			if !v.Result.OK {
				t.Errorf("FAIL: %s", v.Result.Why)
			} else {
				t.Logf("PASS: %s", v.Result.Why)
			}
			return ctx
		})
	}
	return f.Feature()
}
