package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/catalog"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/kube"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/report"
)

// optInEnv turns the cluster tests on; selectEnv names the scenarios to run (space-separated; empty: all);
// delaysEnv runs sidecar-late once per sidecar delay it lists ("0s 1s 3s").
const (
	optInEnv  = "DFC_KUBE_E2E"
	selectEnv = "DFC_SCENARIOS"
	delaysEnv = "DFC_SIDECAR_DELAYS"
	serverEnv = "DFC_FUSE_SERVER"
)

// testEnv is e2e-framework's environment: TestMain's Setup and Finish and every feature run in it. It is the
// only package-level variable; the suite's state travels in the context.
var testEnv env.Environment

// suite is what the environment's setup found and what the features add: stored in the context.
type suite struct {
	// problem says why the scenarios cannot run; the tests then skip, or fail in CI.
	problem   string
	opts      kube.Options
	artifacts string

	mu       sync.Mutex
	outcomes []*scenarios.Outcome
	// dirty names the scenario whose teardown failed: what it left on the node (mounts a dead FUSE server
	// holds, pods kubelet cannot remove) would be measured by every later scenario, and each would wait out
	// its own teardown's timeouts, so the later ones fail at once instead.
	dirty string
}

func (s *suite) dirtied() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dirty
}

type suiteKey struct{}

func suiteOf(ctx context.Context) *suite {
	s, _ := ctx.Value(suiteKey{}).(*suite)
	if s == nil {
		return &suite{problem: "the environment's setup did not run"}
	}
	return s
}

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
	s := &suite{artifacts: os.Getenv("DFC_KUBE_ARTIFACTS")}
	ctx = context.WithValue(ctx, suiteKey{}, s)
	if s.artifacts == "" {
		s.artifacts = filepath.Join(repo, "_output", "kube-e2e", time.Now().Format("20060102-150405"))
	}
	if err := os.MkdirAll(s.artifacts, 0o755); err != nil {
		return ctx, err
	}
	s.opts = kube.Options{Kubeconfig: cfg.KubeconfigFile(), Context: cfg.KubeContext(), Repo: repo, Image: os.Getenv("DFC_KUBE_IMAGE")}
	if v := os.Getenv("DFC_KUBE_SET"); v != "" {
		s.opts.ChartValues = strings.Split(v, ",")
	}
	if v := os.Getenv("DFC_FUSE_SERVER_OPTS"); v != "" {
		var spec fuseserver.Spec
		for _, kv := range strings.Split(v, ",") {
			if err := spec.SetOpt(kv); err != nil {
				return ctx, fmt.Errorf("DFC_FUSE_SERVER_OPTS: %w", err)
			}
		}
		s.opts.ServerOpts = spec.Opts
	}
	if s.opts.Image == "" {
		if s.opts.Image, err = kube.ImageRef(repo); err != nil {
			s.problem = err.Error()
			return ctx, nil
		}
	}
	rc, err := kube.RESTConfig(s.opts)
	if err != nil {
		s.problem = "no cluster: " + err.Error()
		return ctx, nil
	}
	rc.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return ctx, err
	}
	ver, err := cs.Discovery().ServerVersion()
	if err != nil {
		s.problem = fmt.Sprintf("no cluster reachable at %s: %v (make cluster-up or make kind-up, then KUBECONFIG)", rc.Host, err)
		return ctx, nil
	}
	fmt.Printf("e2e: cluster %s (Kubernetes %s), image %s, run dirs in %s\n", rc.Host, ver.GitVersion, s.opts.Image, s.artifacts)
	return ctx, nil
}

// loadImage loads the image tarball of `make image` into a kind cluster when DFC_KIND_CLUSTER names one
// (the from-source cluster imports it itself: make cluster-up / cluster-load-images).
func loadImage(ctx context.Context, _ *envconf.Config) (context.Context, error) {
	cluster := os.Getenv("DFC_KIND_CLUSTER")
	s := suiteOf(ctx)
	if cluster == "" || s.problem != "" {
		return ctx, nil
	}
	_, tag, _ := strings.Cut(s.opts.Image, ":")
	archive := filepath.Join(s.opts.Repo, "_output", "images", "dummy-fuse-csi-"+tag+".tar")
	out, err := exec.CommandContext(ctx, "kind", "load", "image-archive", archive, "--name", cluster).CombinedOutput()
	if err != nil {
		return ctx, fmt.Errorf("kind load image-archive %s --name %s: %w\n%s", archive, cluster, err, out)
	}
	return ctx, nil
}

// summarize prints each scenario's result and timings and writes them to summary.txt in the artifacts dir.
func summarize(ctx context.Context, _ *envconf.Config) (context.Context, error) {
	s := suiteOf(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.outcomes) == 0 {
		return ctx, nil
	}
	var b strings.Builder
	report.PrintSummary(&b, s.outcomes)
	fmt.Print("\n" + b.String())
	return ctx, os.WriteFile(filepath.Join(s.artifacts, "summary.txt"), []byte(b.String()), 0o644)
}

// exportKindLogs exports the kind cluster's logs (kubelet, containerd) next to the run dirs.
func exportKindLogs(ctx context.Context, _ *envconf.Config) (context.Context, error) {
	cluster := os.Getenv("DFC_KIND_CLUSTER")
	s := suiteOf(ctx)
	if cluster == "" || s.artifacts == "" {
		return ctx, nil
	}
	out, err := exec.CommandContext(ctx, "kind", "export", "logs", filepath.Join(s.artifacts, "kind-logs"), "--name", cluster).CombinedOutput()
	if err != nil {
		return ctx, fmt.Errorf("kind export logs: %w\n%s", err, out)
	}
	return ctx, nil
}

// TestScenarios runs the scenarios of the catalog that DFC_SCENARIOS names (all when empty) on the cluster,
// one feature each: Setup deploys it, the first assessment performs its steps, one assessment per expected
// outcome judges the evidence, Teardown removes everything and writes the report.
func TestScenarios(t *testing.T) {
	if os.Getenv(optInEnv) != "1" {
		// Not requested: never a failure, not even in CI's make test.
		t.Skip(optInEnv + "=1 not set: the catalog runs against a cluster only on request (make test-kube)")
	}
	if os.Getenv(driverEnv) != "" {
		t.Skip(driverEnv + " is set: a pass of the driver-agnostic rows against that driver (TestDriver), not of this project's catalog")
	}
	selected, err := catalog.Select(strings.Fields(os.Getenv(selectEnv)))
	if err != nil {
		t.Fatalf("%s: %v", selectEnv, err)
	}
	if v := os.Getenv(delaysEnv); v != "" {
		delays, err := catalog.ParseDelays(v)
		if err == nil {
			selected, err = catalog.VarySidecarDelay(selected, delays)
		}
		if err != nil {
			t.Fatalf("%s: %v", delaysEnv, err)
		}
	}
	server := os.Getenv(serverEnv)
	if _, err := fuseserver.Lookup(server); err != nil {
		t.Fatalf("%s: %v", serverEnv, err)
	}
	var feats []features.Feature
	for _, sc := range selected {
		// Left out, not skipped: the catalog says this backend cannot deploy it, which is no failure of the
		// cluster (and a skip would fail CI's run).
		if err := sc.RunsOn(scenarios.BackendKube); err != nil {
			t.Logf("left out: %v", err)
			continue
		}
		// The same for a scenario whose outcome depends on the FUSE server, in a run with another server:
		// left out of the whole catalog, an error when named.
		run, err := sc.ForServer(server)
		if err != nil && os.Getenv(selectEnv) == "" {
			t.Logf("left out: %v", err)
			continue
		} else if err != nil {
			t.Fatalf("%s, %s: %v", selectEnv, serverEnv, err)
		}
		feats = append(feats, scenarioFeature(run, nil))
	}
	testEnv.Test(t, feats...)
}

type runnerKey struct{}

// scenarioFeature runs sc; driver, when not nil, is the foreign driver of a driver-agnostic row.
func scenarioFeature(sc scenarios.Scenario, driver *kube.DriverTarget) features.Feature {
	f := features.New(sc.Name).WithLabel("scenario", sc.Name).
		Setup(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := suiteOf(ctx)
			if s.problem != "" {
				testenv.SkipOrFail(t, s.problem)
			}
			if why := s.dirtied(); why != "" {
				t.Fatal(why) // a failure, not a skip: the cluster was there, the catalog did not run
			}
			o := s.opts
			o.Driver = driver
			o.Progress = func(msg string) { t.Log(msg) }
			// The live timeline streams with -v (a scenario takes a minute or more), else it is logged at the end.
			var out io.Writer = &strings.Builder{}
			if testing.Verbose() {
				out = os.Stdout
			}
			r := scenarios.NewRunner(kube.New(o), sc, scenarios.RunOptions{Dir: filepath.Join(s.artifacts, sc.Name), Out: out,
				Poll: 200 * time.Millisecond})
			// Not t.Fatal: the feature's Teardown must still run to remove what the failed setup created.
			// A NOT RUNNABLE row fails a required pass only if the pass expected it to run: its needs do not
			// foretell the refusal on this kubelet's release.
			if err := r.Setup(ctx); err != nil && (r.Outcome().NotRunnable() == nil || (testenv.Required() && !r.Outcome().NotRunnableExpected())) {
				t.Errorf("%v", err)
			}
			return context.WithValue(ctx, runnerKey{}, &run{r: r, live: out})
		}).
		Assess("the steps run: "+stepList(sc), func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			r := runOf(ctx, t)
			if nr := r.r.Outcome().NotRunnable(); nr != nil {
				t.Skipf("%v", nr) // DFC_REQUIRE_PRIVILEGED=1 made it a failure in Setup
			}
			if err := r.r.Outcome().Err; err != nil {
				t.Fatalf("setup failed: %v", err)
			}
			if err := r.r.Steps(ctx); err != nil {
				t.Fatalf("the steps: %v", err)
			}
			return ctx
		})
	for i, e := range sc.Expect {
		f = f.Assess(e.Describe(), func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			o := runOf(ctx, t).r.Outcome()
			if nr := o.NotRunnable(); nr != nil {
				t.Skipf("%v", nr)
			}
			if len(o.Verdicts) == 0 {
				t.Fatal("the scenario's steps did not run")
			}
			k := slices.IndexFunc(o.Verdicts, func(v scenarios.Verdict) bool { return v.Index == i })
			if k < 0 {
				if o.Kubelet.Known() && !e.Kubelet.Contains(o.Kubelet) {
					t.Skipf("expected on %s only; the node runs kubelet %s", e.Kubelet, o.Kubelet)
				}
				t.Fatal("no verdict for this expectation")
			}
			if v := o.Verdicts[k]; !v.Result.OK {
				t.Errorf("FAIL: %s", v.Result.Why)
			} else {
				t.Logf("PASS: %s", v.Result.Why)
			}
			return ctx
		})
	}
	return f.Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
		r := runOf(ctx, t)
		o := r.r.Teardown(ctx)
		if b, ok := r.live.(*strings.Builder); ok && b.Len() > 0 {
			t.Logf("timeline:\n%s", b.String())
		}
		var verdicts strings.Builder
		report.PrintVerdicts(&verdicts, o)
		t.Logf("%s", verdicts.String())
		if err := report.WriteReport(o); err != nil {
			t.Errorf("report: %v", err)
		}
		t.Logf("report %s", filepath.Join(o.Dir, "report.md"))
		s := suiteOf(ctx)
		s.mu.Lock()
		defer s.mu.Unlock()
		if o.CleanupErr != nil {
			t.Errorf("cleanup: %v", o.CleanupErr)
			if s.dirty == "" {
				s.dirty = fmt.Sprintf("not run: the teardown of scenario %s failed and left the node unclean (see its report); "+
					"make cluster-down, then run the scenarios again", sc.Name)
			}
		}
		s.outcomes = append(s.outcomes, o)
		return ctx
	}).Feature()
}

// run is one scenario's runner and where its live timeline goes.
type run struct {
	r    *scenarios.Runner
	live io.Writer
}

func runOf(ctx context.Context, t *testing.T) *run {
	t.Helper()
	r, _ := ctx.Value(runnerKey{}).(*run)
	if r == nil {
		t.Fatal("the feature's setup did not run")
	}
	return r
}

// stepList names the scenario's steps in a few words each.
func stepList(sc scenarios.Scenario) string {
	var ls []string
	for _, st := range sc.Steps {
		ls = append(ls, st.Label())
	}
	return strings.Join(ls, ", ")
}
