package report

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/catalog"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/scenariotest"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// restartScenario is the catalog's restart scenario, whose evidence scenariotest.Backend scripts.
func restartScenario(t *testing.T) scenarios.Scenario {
	t.Helper()
	sc, err := catalog.Lookup("restart")
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func TestReport(t *testing.T) {
	dir := t.TempDir()
	o := scenarios.Run(context.Background(), &scenariotest.Backend{RestartRecovers: true}, restartScenario(t), scenarios.RunOptions{Dir: dir, Poll: time.Millisecond})
	if err := WriteReport(o); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"report.md", "timeline.svg", "events.log", "events.json", ResultFile} {
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
	o := &scenarios.Outcome{Scenario: sc, Backend: "fake", Start: start, End: start}
	checkSVG(t, TimelineSVG(o, RecordOf(o)), map[string]int{"text": 1})

	o = scenarios.Run(context.Background(), &scenariotest.Backend{RestartRecovers: true}, sc, scenarios.RunOptions{Dir: t.TempDir(), Poll: time.Millisecond})
	ev := o.Evidence
	ev.Events = append(ev.Events, scenarios.Event{Time: ev.Until, Source: scenarios.SrcKubelet, Kind: scenarios.KStartFailed, Container: "reader",
		Message: `failed <&> "x"`})
	checkSVG(t, TimelineSVG(o, RecordOf(o)), map[string]int{"circle": 5, "line": 3})
}

// TestNoFailureIsNotNever: for a run in which nothing failed, the times to recover read "no failure", not
// "never" (which reads as a failure to recover); a refused run reads NOT RUNNABLE with its fix.
func TestNoFailureIsNotNever(t *testing.T) {
	sc := restartScenario(t)
	o := &scenarios.Outcome{Scenario: sc, Measures: scenarios.Measures{KillToError: 0}}
	line := measuredLine(o, measuredOf(o))
	for _, want := range []string{"kill → volume dir restored no failure", "kill → first good read again no failure", "kill → first ENOTCONN never"} {
		if !strings.Contains(line, want) {
			t.Errorf("measured line %q lacks %q", line, want)
		}
	}
	o.Measures = scenarios.Measures{KillToError: time.Second, Failed: true, VolumeDied: true}
	if line := measuredLine(o, measuredOf(o)); !strings.Contains(line, "volume dir restored never") || !strings.Contains(line, "good read again never") {
		t.Errorf("after a failure that did not heal: %q, want never", line)
	}

	o = &scenarios.Outcome{Scenario: sc, Err: &scenarios.NotRunnableError{Why: "no gate", Fix: "make cluster-up"}}
	var b bytes.Buffer
	PrintVerdicts(&b, o)
	if !strings.Contains(b.String(), "NOT RUNNABLE  no gate\n        to make it runnable: make cluster-up") || strings.Contains(b.String(), "FAIL") {
		t.Errorf("verdicts of a run that is not runnable:\n%s", b.String())
	}
	// Its steps never ran: it measured nothing, and says neither "no failure" nor "never".
	b.Reset()
	PrintSummary(&b, []*scenarios.Outcome{o})
	for _, text := range []string{b.String(), measuredLine(o, measuredOf(o))} {
		if strings.Contains(text, "no failure") || strings.Contains(text, "never") || strings.Contains(text, "0.0ms") {
			t.Errorf("a run that never started reports measures:\n%s", text)
		}
	}
}

// TestRecordNamesTheServer: a record names the FUSE server of the run: the plugin's, a spec's by the spec's
// name, and a foreign driver's by the process name the operator gave, else unknown (never this project's default).
func TestRecordNamesTheServer(t *testing.T) {
	spec := filepath.Join(t.TempDir(), "myfs.yaml")
	if err := os.WriteFile(spec, []byte("name: myfs\nexecutable: /bin/true\nargs: [\"{mountpoint}\"]\nwhyNot: EIO\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		sc   scenarios.Scenario
		want string
	}{
		{scenarios.Scenario{Plugin: scenarios.Plugin{FuseServer: "gcsfuse"}}, "gcsfuse"},
		{scenarios.Scenario{Plugin: scenarios.Plugin{FuseServer: spec}}, "myfs"},
		{scenarios.Scenario{Driver: "ru.yandex.s3.csi", DriverServer: "rclone"}, "rclone"},
		{scenarios.Scenario{Driver: "ru.yandex.s3.csi"}, UnknownServer},
	} {
		if got := RecordOf(&scenarios.Outcome{Scenario: tc.sc}).Server; got != tc.want {
			t.Errorf("%+v: server %q, want %q", tc.sc, got, tc.want)
		}
	}
}
