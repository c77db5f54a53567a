package scenarios_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/catalog"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/report"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/scenariotest"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// reader is the restart scenario's container.
const reader = "reader"

// restartScenario is the catalog's restart scenario, whose evidence scenariotest.Backend scripts.
func restartScenario(t *testing.T) scenarios.Scenario {
	t.Helper()
	sc, err := catalog.Lookup("restart")
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func TestRunPasses(t *testing.T) {
	f := &scenariotest.Backend{RestartRecovers: true}
	var out bytes.Buffer
	o := scenarios.Run(context.Background(), f, restartScenario(t), scenarios.RunOptions{Dir: t.TempDir(), Out: &out, Poll: time.Millisecond})
	if !o.Passed() {
		var b bytes.Buffer
		report.PrintVerdicts(&b, o)
		t.Fatalf("want PASS:\n%s", b.String())
	}
	if got := strings.Join(f.Calls, ","); got != "start,kill,start-plugin,stop" {
		t.Errorf("backend calls = %s", got)
	}
	if got := strings.Join(o.Artifacts, ","); got != "fake.log" {
		t.Errorf("artifacts = %s, want the backend's fake.log", got)
	}
	var sum bytes.Buffer
	report.PrintSummary(&sum, []*scenarios.Outcome{o})
	for _, want := range []string{"kill→ENOTCONN", "restart", "PASS", filepath.Join(o.Dir, "report.md")} {
		if !strings.Contains(sum.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, sum.String())
		}
	}
	if len(o.Steps) != len(o.Scenario.Steps) {
		t.Errorf("%d steps recorded, scenario has %d", len(o.Steps), len(o.Scenario.Steps))
	}
	for _, want := range []string{"plugin container killed", "read_error ENOTCONN", "start failed", "good read again", "step 2/7: kill"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("live timeline lacks %q:\n%s", want, out.String())
		}
	}
	if o.Measures.KillToError <= 0 || o.Measures.KillToRecovery < o.Measures.KillToError || o.Measures.Wall <= 0 {
		t.Errorf("measures = %+v", o.Measures)
	}
}

// TestWrongExpectationFails shows that the verdicts can fail: the same run judged by a wrong expectation.
func TestWrongExpectationFails(t *testing.T) {
	sc := restartScenario(t)
	sc.Expect = append(sc.Expect, scenarios.Expectation{Check: scenarios.NeverRecovers{C: reader, After: scenarios.AfterPluginBack}})
	o := scenarios.Run(context.Background(), &scenariotest.Backend{RestartRecovers: true}, sc, scenarios.RunOptions{Dir: t.TempDir(), Poll: time.Millisecond})
	if o.Passed() {
		t.Fatal("a run with a wrong expectation passed")
	}
	last := o.Verdicts[len(o.Verdicts)-1]
	if last.Result.OK || !strings.Contains(last.Result.Why, "recovered") {
		t.Errorf("the wrong expectation's verdict: %+v", last.Result)
	}
	for _, v := range o.Verdicts[:len(o.Verdicts)-1] {
		if !v.Result.OK {
			t.Errorf("the right expectations still hold: %s: %s", v.Expectation.Check.Describe(), v.Result.Why)
		}
	}
}

func TestRunWaitTimesOutAndFails(t *testing.T) {
	sc := restartScenario(t)
	// The container never comes back: the wait for recovery times out, the run goes on and fails its verdict.
	wait := -1
	for i, st := range sc.Steps {
		if _, ok := st.Until.(scenarios.Recovers); ok {
			wait = i
		}
	}
	if wait < 0 {
		t.Fatal("the restart scenario waits for recovery")
	}
	sc.Steps[wait].Timeout = scenarios.Dur{Fixed: 50 * time.Millisecond}
	o := scenarios.Run(context.Background(), &scenariotest.Backend{}, sc, scenarios.RunOptions{Dir: t.TempDir(), Poll: time.Millisecond})
	if o.Passed() || o.Err != nil {
		t.Fatalf("want a failed verdict and no run error; passed=%v err=%v", o.Passed(), o.Err)
	}
	for i, r := range o.Steps {
		if r.TimedOut != (i == wait) {
			t.Errorf("step %d timed out: %v; only step %d must", i+1, r.TimedOut, wait+1)
		}
	}
	if len(o.Steps) != len(sc.Steps) {
		t.Errorf("the steps after a timeout still run: %d of %d", len(o.Steps), len(sc.Steps))
	}
}

func TestRunStopsAfterFailedStart(t *testing.T) {
	f := &scenariotest.Backend{StartErr: errors.New("no plugin binary")}
	o := scenarios.Run(context.Background(), f, restartScenario(t), scenarios.RunOptions{Dir: t.TempDir(), Poll: time.Millisecond})
	if o.Passed() || o.Err == nil || !strings.Contains(o.Err.Error(), "no plugin binary") {
		t.Fatalf("passed=%v err=%v", o.Passed(), o.Err)
	}
	if got := strings.Join(f.Calls, ","); got != "start,stop" {
		t.Errorf("Stop must follow a failed Start: calls %s", got)
	}
	for _, v := range o.Verdicts {
		if v.Result.OK && v.Expectation.Check.Containers() != nil {
			t.Errorf("nothing ran, yet %q held", v.Expectation.Check.Describe())
		}
	}
}

// TestNotRunnableJudgesNothing: a run the backend refuses as not runnable (a kubelet without a feature the row
// needs) is NOT RUNNABLE, and no expected outcome is judged: a report of it lists no FAIL for steps that never
// ran, only why and what makes it runnable.
func TestNotRunnableJudgesNothing(t *testing.T) {
	f := &scenariotest.Backend{StartErr: &scenarios.NotRunnableError{Why: "kubelet v1.34.4 does not declare the feature", Fix: "a newer cluster"}}
	o := scenarios.Run(context.Background(), f, restartScenario(t), scenarios.RunOptions{Dir: t.TempDir(), Poll: time.Millisecond})
	if got := o.Result(); got != "NOT RUNNABLE" {
		t.Fatalf("Result = %s, want NOT RUNNABLE (err %v)", got, o.Err)
	}
	if len(o.Verdicts) != 0 {
		t.Errorf("%d expected outcomes judged for a run that never started", len(o.Verdicts))
	}
	var b bytes.Buffer
	report.PrintVerdicts(&b, o)
	md := report.Markdown(o, report.RecordOf(o))
	for _, r := range []string{b.String(), md[strings.Index(md, "## Verdicts"):strings.Index(md, "## Measured")]} {
		if strings.Contains(r, "FAIL") || !strings.Contains(r, "NOT RUNNABLE") {
			t.Errorf("the report of a not runnable run:\n%s", r)
		}
	}
}

func TestRunCleanupErrorFails(t *testing.T) {
	f := &scenariotest.Backend{RestartRecovers: true, StopErr: errors.New("1 mount left")}
	o := scenarios.Run(context.Background(), f, restartScenario(t), scenarios.RunOptions{Dir: t.TempDir(), Poll: time.Millisecond})
	if o.Passed() || o.CleanupErr == nil {
		t.Fatalf("a run that leaves mounts behind must fail: passed=%v cleanup=%v", o.Passed(), o.CleanupErr)
	}
}

func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f := &scenariotest.Backend{RestartRecovers: true}
	o := scenarios.Run(ctx, f, restartScenario(t), scenarios.RunOptions{Dir: t.TempDir(), Poll: time.Millisecond})
	if o.Passed() || !o.ErrCancelled() {
		t.Fatalf("passed=%v err=%v", o.Passed(), o.Err)
	}
	if f.Calls[len(f.Calls)-1] != "stop" {
		t.Errorf("a cancelled run is still torn down: %v", f.Calls)
	}
}

func TestValidateRejects(t *testing.T) {
	base := restartScenario(t)
	cases := map[string]func(s *scenarios.Scenario){
		"unknown container in check": func(s *scenarios.Scenario) { s.Expect[0].Check = scenarios.Exits{C: "ghost"} },
		"no steps":                   func(s *scenarios.Scenario) { s.Steps = nil },
		"sidecar without the mode":   func(s *scenarios.Scenario) { s.Pod.Sidecar = &scenarios.Sidecar{} },
		"mode without the sidecar":   func(s *scenarios.Scenario) { s.Plugin.Mode = topology.Sidecar },
		"a keeper step, no keeper": func(s *scenarios.Scenario) {
			s.Steps = append([]scenarios.Step{scenarios.Kill(topology.KeeperContainer)}, s.Steps...)
		},
		"an upgrade the plugin cannot take": func(s *scenarios.Scenario) {
			s.Steps = append([]scenarios.Step{scenarios.Upgrade(topology.PluginContainer)}, s.Steps...)
		},
		"a driver's component in a mode": func(s *scenarios.Scenario) {
			s.Steps = append([]scenarios.Step{scenarios.Kill(topology.DriverPod)}, s.Steps...)
		},
		"measured without a foreign driver": func(s *scenarios.Scenario) { s.Measured = true },
		"sidecar step, no sidecar": func(s *scenarios.Scenario) {
			s.Steps = append([]scenarios.Step{scenarios.Kill(topology.SidecarContainer)}, s.Steps...)
		},
		"backends without why": func(s *scenarios.Scenario) { s.Backends = []string{scenarios.BackendLocal} },
		"bad policy":           func(s *scenarios.Scenario) { s.Pod.RestartPolicy = "Sometimes" },
		"absolute subPath":     func(s *scenarios.Scenario) { s.Pod.Containers[0].SubPath = "/etc" },
		"escaping subPath":     func(s *scenarios.Scenario) { s.Pod.Containers[0].SubPath = "../x" },
		"bad strategy":         func(s *scenarios.Scenario) { s.Plugin.RestoreStrategy = "glue" },
		"no expectations":      func(s *scenarios.Scenario) { s.Expect = nil },
	}
	for name, mutate := range cases {
		s := base
		s.Pod.Containers = append([]scenarios.Container(nil), base.Pod.Containers...)
		s.Expect = append([]scenarios.Expectation(nil), base.Expect...)
		mutate(&s)
		if err := s.Validate(); err == nil {
			t.Errorf("%s: Validate accepted it", name)
		}
	}
}

// TestRunsOn: a scenario names the backends that can run it, and the runner refuses the others before
// deploying anything.
func TestRunsOn(t *testing.T) {
	sc, err := catalog.Lookup("sidecar-killed")
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.RunsOn(scenarios.BackendKube); err != nil {
		t.Errorf("%s on kube: %v", sc.Name, err)
	}
	sc.Backends, sc.BackendsWhy = []string{scenarios.BackendLocal}, "the kube backend cannot deploy it"
	if err := sc.RunsOn(scenarios.BackendLocal); err != nil {
		t.Errorf("local: %v", err)
	}
	if err := sc.RunsOn(scenarios.BackendKube); err == nil || !strings.Contains(err.Error(), "cannot run on the kube backend (it runs on: local): the kube backend cannot deploy") {
		t.Errorf("kube: %v, want a refusal that says why", err)
	}
	if r, _ := catalog.Lookup("restart"); r.RunsOn(scenarios.BackendKube) != nil {
		t.Error("restart runs everywhere")
	}
	b := &scenariotest.Backend{BackendName: scenarios.BackendKube}
	o := scenarios.Run(context.Background(), b, sc, scenarios.RunOptions{Dir: t.TempDir(), Out: io.Discard})
	if o.Err == nil || !strings.Contains(o.Err.Error(), "cannot run on the kube backend") || len(b.Calls) > 1 {
		t.Errorf("run on kube: err %v, calls %v; want a refusal before Setup", o.Err, b.Calls)
	}
}

func TestContainerArgs(t *testing.T) {
	c := scenarios.Container{Name: "r", ExitOnError: true, KeepOpen: false}
	got := strings.Join(c.WorkloadArgs(200*time.Millisecond), " ")
	if got != "--file=/mnt/dummy-file.txt --log-format=json --read-interval=200ms --keep-open=false --exit-on-error" {
		t.Errorf("args = %s", got)
	}
	sub := scenarios.Container{SubPath: scenarios.FileName, MountPath: "/mnt/" + scenarios.FileName}
	if sub.File() != "/mnt/dummy-file.txt" {
		t.Errorf("a file subPath is read at its mount path, got %s", sub.File())
	}
	if scenarios.RestartNever.Restarts(1) || !scenarios.RestartOnFailure.Restarts(1) || scenarios.RestartOnFailure.Restarts(0) || !scenarios.RestartAlways.Restarts(0) {
		t.Error("restart policy semantics")
	}
}

func TestEvaluateKeepsOrder(t *testing.T) {
	sc := restartScenario(t)
	o := scenarios.Run(context.Background(), &scenariotest.Backend{RestartRecovers: true}, sc, scenarios.RunOptions{Dir: t.TempDir(), Poll: time.Millisecond})
	vs := scenarios.Evaluate(&sc, o.Evidence, o.Timing)
	if len(vs) != len(sc.Expect) {
		t.Fatalf("%d verdicts for %d expectations", len(vs), len(sc.Expect))
	}
	for i, v := range vs {
		if v.Expectation.Check.Describe() != sc.Expect[i].Check.Describe() {
			t.Errorf("verdict %d is for %q, want %q", i, v.Expectation.Check.Describe(), sc.Expect[i].Check.Describe())
		}
		if !v.Result.OK {
			t.Errorf("the restart run satisfies %q, got %q", v.Expectation.Check.Describe(), v.Result.Why)
		}
	}
}

func TestValidateRejectsUnknownComponent(t *testing.T) {
	sc := restartScenario(t)
	for step, want := range map[string]scenarios.Step{
		`unknown component "kernel"`:                                              scenarios.Kill("kernel"),
		"the child mode's FUSE server cannot be started":                          scenarios.Start(topology.FuseServer),
		"the child mode has no keeper container (it is in: keeper, relay-keeper)": scenarios.Start(topology.KeeperContainer),
		"the child mode's plugin container cannot be upgraded":                    scenarios.Upgrade(topology.PluginContainer),
	} {
		sc := sc
		sc.Steps = append(slices.Clone(sc.Steps), want)
		if err := sc.Validate(); err == nil || !strings.Contains(err.Error(), step) {
			t.Errorf("Validate with %s = %v, want %q", want.Label(), err, step)
		}
	}
}
