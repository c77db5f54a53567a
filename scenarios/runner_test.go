package scenarios

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeBackend scripts the evidence of a successful "restart" run: the runner, the checks and the report can
// be tested without root. The privileged tests in scenarios/local run the real thing.
type fakeBackend struct {
	rec      *Recorder
	startErr error
	stopErr  error
	calls    []string
	// restartRecovers: whether the container reads again after the plugin is back.
	restartRecovers bool
	// name is the backend's name ("fake" when empty).
	name string
}

func (f *fakeBackend) Name() string {
	if f.name == "" {
		return "fake"
	}
	return f.name
}

func (f *fakeBackend) Describe() string { return "backend fake" }

func (f *fakeBackend) KeepNote() string { return "" }

func (f *fakeBackend) Timing() Timing {
	return Timing{ReadInterval: 10 * time.Millisecond, BackoffBase: 20 * time.Millisecond, BackoffMax: 600 * time.Millisecond}
}

func (f *fakeBackend) add(e Event) { f.rec.Add(e) }

func (f *fakeBackend) Setup(_ context.Context, _ *Scenario, env *Env) error {
	f.calls = append(f.calls, "start")
	if f.startErr != nil {
		return f.startErr
	}
	f.rec = env.Rec
	f.rec.SetPaths(map[string]string{PathVolume: "/k/v", PathRoot: "/k"})
	f.rec.SetKubelet(MustKubeletVersion("v1.37.2"))
	if _, err := env.Log("fake.log"); err != nil {
		return err
	}
	f.add(Event{Source: SrcComponent, Component: PluginContainer, Kind: KReady})
	f.add(Event{Source: SrcProbe, Kind: KProbe, Path: PathVolume})
	f.add(Event{Source: SrcKubelet, Kind: KContainerStarted, Container: reader})
	for range 3 {
		f.add(Event{Source: SrcWorkload, Kind: KRead, Container: reader, Content: Content})
	}
	return nil
}

func (f *fakeBackend) Kill(_ context.Context, c Component) error {
	if c != PluginContainer {
		return fmt.Errorf("no component %s", c)
	}
	f.calls = append(f.calls, "kill")
	f.add(Event{Source: SrcComponent, Component: PluginContainer, Kind: KKilled})
	f.add(Event{Source: SrcWorkload, Kind: KReadError, Container: reader, Errno: "ENOTCONN"})
	f.add(Event{Source: SrcKubelet, Kind: KContainerExited, Container: reader, ExitCode: IntPtr(1)})
	f.add(Event{Source: SrcProbe, Kind: KProbe, Path: PathVolume, Errno: "ENOTCONN"})
	f.add(Event{Source: SrcKubelet, Kind: KStartFailed, Container: reader, Instance: 1, Errno: "ENOTCONN",
		Message: `Error: failed to generate container "x" spec: failed to generate spec: failed to stat "/k/v": stat /k/v: transport endpoint is not connected`})
	return nil
}

func (f *fakeBackend) Upgrade(_ context.Context, c Component) error {
	return fmt.Errorf("no upgrade of %s", c)
}

func (f *fakeBackend) Start(_ context.Context, c Component) error {
	if c != PluginContainer {
		return fmt.Errorf("no component %s", c)
	}
	f.calls = append(f.calls, "start-plugin")
	f.add(Event{Source: SrcComponent, Component: PluginContainer, Kind: KReady})
	f.add(Event{Source: SrcProbe, Kind: KProbe, Path: PathVolume})
	if f.restartRecovers {
		f.add(Event{Source: SrcKubelet, Kind: KContainerStarted, Container: reader, Instance: 1})
		f.add(Event{Source: SrcWorkload, Kind: KRead, Container: reader, Instance: 1, Content: Content})
	}
	return nil
}

func (f *fakeBackend) Stop(context.Context) error {
	f.calls = append(f.calls, "stop")
	return f.stopErr
}

func restartScenario(t *testing.T) Scenario {
	t.Helper()
	sc, err := Lookup("restart")
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func TestRunPasses(t *testing.T) {
	f := &fakeBackend{restartRecovers: true}
	var out bytes.Buffer
	o := Run(context.Background(), f, restartScenario(t), RunOptions{Dir: t.TempDir(), Out: &out, Poll: time.Millisecond})
	if !o.Passed() {
		var b bytes.Buffer
		PrintVerdicts(&b, o)
		t.Fatalf("want PASS:\n%s", b.String())
	}
	if got := strings.Join(f.calls, ","); got != "start,kill,start-plugin,stop" {
		t.Errorf("backend calls = %s", got)
	}
	if got := strings.Join(o.Artifacts, ","); got != "fake.log" {
		t.Errorf("artifacts = %s, want the backend's fake.log", got)
	}
	var sum bytes.Buffer
	PrintSummary(&sum, []*Outcome{o})
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
	sc.Expect = append(sc.Expect, Expectation{Check: NeverRecovers{C: reader, After: AfterPluginBack}})
	o := Run(context.Background(), &fakeBackend{restartRecovers: true}, sc, RunOptions{Dir: t.TempDir(), Poll: time.Millisecond})
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
		if _, ok := st.Until.(Recovers); ok {
			wait = i
		}
	}
	if wait < 0 {
		t.Fatal("the restart scenario waits for recovery")
	}
	sc.Steps[wait].Timeout = Dur{Fixed: 50 * time.Millisecond}
	o := Run(context.Background(), &fakeBackend{}, sc, RunOptions{Dir: t.TempDir(), Poll: time.Millisecond})
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
	f := &fakeBackend{startErr: errors.New("no plugin binary")}
	o := Run(context.Background(), f, restartScenario(t), RunOptions{Dir: t.TempDir(), Poll: time.Millisecond})
	if o.Passed() || o.Err == nil || !strings.Contains(o.Err.Error(), "no plugin binary") {
		t.Fatalf("passed=%v err=%v", o.Passed(), o.Err)
	}
	if got := strings.Join(f.calls, ","); got != "start,stop" {
		t.Errorf("Stop must follow a failed Start: calls %s", got)
	}
	for _, v := range o.Verdicts {
		if v.Result.OK && v.Expectation.Check.Containers() != nil {
			t.Errorf("nothing ran, yet %q held", v.Expectation.Check.Describe())
		}
	}
}

func TestRunCleanupErrorFails(t *testing.T) {
	f := &fakeBackend{restartRecovers: true, stopErr: errors.New("1 mount left")}
	o := Run(context.Background(), f, restartScenario(t), RunOptions{Dir: t.TempDir(), Poll: time.Millisecond})
	if o.Passed() || o.CleanupErr == nil {
		t.Fatalf("a run that leaves mounts behind must fail: passed=%v cleanup=%v", o.Passed(), o.CleanupErr)
	}
}

func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f := &fakeBackend{restartRecovers: true}
	o := Run(ctx, f, restartScenario(t), RunOptions{Dir: t.TempDir(), Poll: time.Millisecond})
	if o.Passed() || !o.ErrCancelled() {
		t.Fatalf("passed=%v err=%v", o.Passed(), o.Err)
	}
	if f.calls[len(f.calls)-1] != "stop" {
		t.Errorf("a cancelled run is still torn down: %v", f.calls)
	}
}

func TestReport(t *testing.T) {
	dir := t.TempDir()
	o := Run(context.Background(), &fakeBackend{restartRecovers: true}, restartScenario(t), RunOptions{Dir: dir, Poll: time.Millisecond})
	if err := WriteReport(o); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"report.md", "timeline.svg", "events.log", "events.json"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	for _, want := range []string{"# Scenario `restart` on kubelet v1.37.2: PASS", "![timeline", "| PASS |", "kill → first ENOTCONN", "## Steps", "csi-plugin --restore-mounts"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	svg, _ := os.ReadFile(filepath.Join(dir, "timeline.svg"))
	checkSVG(t, svg, map[string]int{"circle": 4 + 1}) // 4 good reads + the legend's
	if !strings.Contains(string(svg), "kubelet v1.37.2") {
		t.Error("the timeline's title does not name the kubelet version")
	}
}

// checkSVG asserts that svg is well-formed XML with an <svg> root and at least the given element counts.
func checkSVG(t *testing.T, svg []byte, atLeast map[string]int) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(svg))
	counts := map[string]int{}
	root := ""
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("timeline.svg is not well-formed XML: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
				if se.Name.Space != "http://www.w3.org/2000/svg" {
					t.Errorf("root namespace %q", se.Name.Space)
				}
			}
			counts[se.Name.Local]++
		}
	}
	if root != "svg" {
		t.Errorf("root element %q, want svg", root)
	}
	for el, n := range atLeast {
		if counts[el] < n {
			t.Errorf("%d <%s> elements, want at least %d", counts[el], el, n)
		}
	}
}

func TestTimelineSVGEscapesAndCopesWithNothing(t *testing.T) {
	sc := restartScenario(t)
	sc.Title = `a <title> & "quotes"`
	start := time.Now()
	o := &Outcome{Scenario: sc, Backend: "fake", Start: start, End: start}
	checkSVG(t, TimelineSVG(o), map[string]int{"text": 1})

	ev := restartStory()
	ev.Events = append(ev.Events, Event{Time: ev.Start.Add(time.Second), Source: SrcKubelet, Kind: KStartFailed,
		Container: reader, Message: `failed <&> "x"`})
	o = &Outcome{Scenario: sc, Backend: "fake", Start: ev.Start, End: ev.Until, Evidence: ev,
		Steps: []StepRecord{{Step: KillPlugin(), Start: ev.Start.Add(time.Second), End: ev.Start.Add(time.Second)}}}
	o.Measures = ev.Measure(reader)
	checkSVG(t, TimelineSVG(o), map[string]int{"circle": 5, "line": 3})
}

func TestCatalog(t *testing.T) {
	want := []string{"restart", "restart-no-restore", "restore-without-exit", "exit-without-restore", "host-to-container", "subpath",
		"sidecar-plugin-restart", "sidecar-late", "sidecar-killed", "sidecar-new-pod"}
	have := map[string]bool{}
	for _, s := range Catalog() {
		if err := s.Validate(); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
		if have[s.Name] {
			t.Errorf("duplicate scenario %s", s.Name)
		}
		have[s.Name] = true
	}
	for _, n := range want {
		if !have[n] {
			t.Errorf("catalog lacks %s", n)
		}
	}
	if Names()[0] != "restart" {
		t.Errorf("the main scenario comes first: %v", Names())
	}
	if _, err := Lookup("nope"); err == nil {
		t.Error("Lookup of an unknown scenario must fail")
	}
}

// TestReadmeCatalog keeps the README's catalog table in step with the catalog.
func TestReadmeCatalog(t *testing.T) {
	rows := map[string]bool{}
	for _, cells := range readmeTable(t, "## The catalog") {
		rows[cells[0]] = true
	}
	for _, n := range Names() {
		if !rows[n] {
			t.Errorf("README.md's catalog table lacks %s", n)
		}
		delete(rows, n)
	}
	for n := range rows {
		t.Errorf("README.md's catalog table names %s, which is not in the catalog", n)
	}
}

// readmeTable returns the rows of README.md's tables under the heading section whose first cell names a
// scenario (`name`), as trimmed cells with the backquotes of the first one removed.
func readmeTable(t *testing.T, section string) [][]string {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows [][]string
	in := false
	for _, line := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(line, "## ") {
			in = line == section
		}
		if !in || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		cells[0] = strings.Trim(cells[0], "`")
		rows = append(rows, cells)
	}
	if len(rows) == 0 {
		t.Fatalf("README.md has no scenario table under %q", section)
	}
	return rows
}

func TestValidateRejects(t *testing.T) {
	base := restartScenario(t)
	cases := map[string]func(s *Scenario){
		"unknown container in check": func(s *Scenario) { s.Expect[0].Check = Exits{C: "ghost"} },
		"no steps":                   func(s *Scenario) { s.Steps = nil },
		"sidecar without the mode":   func(s *Scenario) { s.Pod.Sidecar = &Sidecar{} },
		"mode without the sidecar":   func(s *Scenario) { s.Plugin.FuseMode = FuseModeSidecar },
		"unknown FUSE mode":          func(s *Scenario) { s.Plugin.FuseMode = "remote" },
		"sidecar step, no sidecar":   func(s *Scenario) { s.Steps = append([]Step{Kill(SidecarContainer)}, s.Steps...) },
		"backends without why":       func(s *Scenario) { s.Backends = []string{BackendLocal} },
		"bad policy":                 func(s *Scenario) { s.Pod.RestartPolicy = "Sometimes" },
		"absolute subPath":           func(s *Scenario) { s.Pod.Containers[0].SubPath = "/etc" },
		"escaping subPath":           func(s *Scenario) { s.Pod.Containers[0].SubPath = "../x" },
		"bad strategy":               func(s *Scenario) { s.Plugin.RestoreStrategy = "glue" },
		"no expectations":            func(s *Scenario) { s.Expect = nil },
	}
	for name, mutate := range cases {
		s := base
		s.Pod.Containers = append([]Container(nil), base.Pod.Containers...)
		s.Expect = append([]Expectation(nil), base.Expect...)
		mutate(&s)
		if err := s.Validate(); err == nil {
			t.Errorf("%s: Validate accepted it", name)
		}
	}
}

// TestRunsOn: a scenario names the backends that can run it, and the runner refuses the others before
// deploying anything.
func TestRunsOn(t *testing.T) {
	sc, err := Lookup("sidecar-killed")
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.RunsOn(BackendKube); err != nil {
		t.Errorf("%s on kube: %v", sc.Name, err)
	}
	sc.Backends, sc.BackendsWhy = []string{BackendLocal}, "the kube backend cannot deploy it"
	if err := sc.RunsOn(BackendLocal); err != nil {
		t.Errorf("local: %v", err)
	}
	if err := sc.RunsOn(BackendKube); err == nil || !strings.Contains(err.Error(), "cannot run on the kube backend (it runs on: local): the kube backend cannot deploy") {
		t.Errorf("kube: %v, want a refusal that says why", err)
	}
	if r, _ := Lookup("restart"); r.RunsOn(BackendKube) != nil {
		t.Error("restart runs everywhere")
	}
	b := &fakeBackend{name: BackendKube}
	o := Run(context.Background(), b, sc, RunOptions{Dir: t.TempDir(), Out: io.Discard})
	if o.Err == nil || !strings.Contains(o.Err.Error(), "cannot run on the kube backend") || len(b.calls) > 1 {
		t.Errorf("run on kube: err %v, calls %v; want a refusal before Setup", o.Err, b.calls)
	}
}

func TestContainerArgs(t *testing.T) {
	c := Container{Name: "r", ExitOnError: true, KeepOpen: false}
	got := strings.Join(c.WorkloadArgs(200*time.Millisecond), " ")
	if got != "--file=/mnt/dummy-file.txt --log-format=json --read-interval=200ms --keep-open=false --exit-on-error" {
		t.Errorf("args = %s", got)
	}
	sub := Container{SubPath: FileName, MountPath: "/mnt/" + FileName}
	if sub.File() != "/mnt/dummy-file.txt" {
		t.Errorf("a file subPath is read at its mount path, got %s", sub.File())
	}
	if RestartNever.Restarts(1) || !RestartOnFailure.Restarts(1) || RestartOnFailure.Restarts(0) || !RestartAlways.Restarts(0) {
		t.Error("restart policy semantics")
	}
}
